"""slurmrestd API v0.0.41 (Slurm 24.05 and 24.11), from ``v0.0.41.json`` (Slurm 24.05.8).

Same shapes as v0.0.40 (number structs are now named ``*_no_val_struct``, same fields); the
top-level ``script`` of a submit is deprecated, so the script goes in ``job.script``.
"""

from __future__ import annotations

from typing import ClassVar

from provisioner.slurm.adapters.v0_0_40 import V0040Adapter


class V0041Adapter(V0040Adapter):
    version: ClassVar[str] = "v0.0.41"
    script_in_job: ClassVar[bool] = True
