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
    not_found_texts: ClassVar[tuple[str, ...]] = ("invalid job id", "_handle_job_get: unknown job")
