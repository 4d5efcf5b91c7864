"""slurmrestd API v0.0.44 (Slurm 25.11 and 26.05), from ``v0.0.44.json`` (Slurm 25.11.7).

Same shapes as v0.0.43 for everything obleth sends and reads.
"""

from __future__ import annotations

from typing import ClassVar

from provisioner.slurm.adapters.v0_0_43 import V0043Adapter


class V0044Adapter(V0043Adapter):
    version: ClassVar[str] = "v0.0.44"
