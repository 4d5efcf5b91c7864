"""slurmrestd API v0.0.43 (Slurm 25.05 and 25.11), from ``v0.0.43.json`` (Slurm 25.05.8).

Same shapes as v0.0.42 for everything obleth sends and reads (descriptions reworded only).
"""

from __future__ import annotations

from typing import ClassVar

from provisioner.slurm.adapters.v0_0_42 import V0042Adapter


class V0043Adapter(V0042Adapter):
    version: ClassVar[str] = "v0.0.43"
