"""slurmrestd API v0.0.45 (Slurm 26.05), from ``v0.0.45.json`` (Slurm 26.05.2).

Differences obleth cares about: pings report ``responding``/``primary``/``status`` and no
longer ``pinged``; partitions carry ``flags`` (``DEFAULT`` marks the default partition);
``environment`` is documented as required for submissions (obleth always sends PATH).
"""

from __future__ import annotations

from typing import ClassVar

from provisioner.slurm.adapters.v0_0_44 import V0044Adapter


class V0045Adapter(V0044Adapter):
    version: ClassVar[str] = "v0.0.45"
