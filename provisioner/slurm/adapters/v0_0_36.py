"""slurmrestd API v0.0.36 (Slurm 20.11 to 22.05, deprecated there).

From ``v0.0.36-38-slurm-22.05.json`` and the lab report: the job's stdout key is
``standard_out`` (not ``standard_output``); error objects are ``{error, errno}`` or
``{error, error_code}``; an unknown job is HTTP 500 ``{"errors": [{"error": "_handle_job_get:
unknown job 999999", "error_code": 0}], "jobs": []}`` -- no 2017, so that text is what marks it.
"""

from __future__ import annotations

from typing import ClassVar

from provisioner.slurm.adapters.v0_0_38 import V0038Adapter


class V0036Adapter(V0038Adapter):
    version: ClassVar[str] = "v0.0.36"
    stdout_key: ClassVar[str] = "standard_out"
    # v0.0.36 answers "_handle_job_get: unknown job N" (error_code 0) for ANY failed lookup, a bad
    # token or a stopped slurmctld included (seen on 22.05): that text cannot mean "gone".
    not_found_texts: ClassVar[tuple[str, ...]] = ("invalid job id",)
