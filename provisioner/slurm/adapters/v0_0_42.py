"""slurmrestd API v0.0.42 (Slurm 24.11 and 25.05), from ``v0.0.42.json`` (Slurm 24.11.6).

Same job, node and partition shapes as v0.0.41; pings gain ``responding``/``primary``
booleans next to ``pinged``; slurmdbd gains ``/slurmdb/v0.0.42/ping/``.
"""

from __future__ import annotations

from typing import ClassVar

from provisioner.slurm.adapters.v0_0_41 import V0041Adapter


class V0042Adapter(V0041Adapter):
    version: ClassVar[str] = "v0.0.42"
