"""slurmrestd API v0.0.37 (Slurm 21.08 and 22.05): the v0.0.38 shapes.

From ``v0.0.36-38-slurm-22.05.json``: the job properties lack ``container``, ``prefer`` and
``oversubscribe`` (none of which obleth sends); answers and errors read like v0.0.38 (the lab
saw the same 500/2017 for an unknown job).
"""

from __future__ import annotations

from typing import ClassVar

from provisioner.slurm.adapters.v0_0_38 import V0038Adapter


class V0037Adapter(V0038Adapter):
    version: ClassVar[str] = "v0.0.37"
