"""slurmrestd API v0.0.38 (Slurm 22.05; the version the local lab cluster serves).

From ``v0.0.36-38-slurm-22.05.json`` and the lab report:

* submit body ``{"script": ..., "job": {...}}``; ``environment`` must be a non-empty OBJECT,
  ``nodes`` an array ``[min, max]``, ``time_limit``/``memory_per_node`` bare integers
  (minutes, MB); generic resources go in ``gres`` (``gpu:2``), there is no ``tres_per_node``.
  Unknown keys are refused with 400 ("Unknown key"), so nothing outside the document is sent.
* ``job_state`` is a string; ``exit_code`` the raw wait status; times are epoch integers with
  0 for "not yet".
* an unknown job is HTTP 500 with error 2017 "Invalid job id specified" (404 is accepted too,
  for later Slurm releases that still serve v0.0.38 with their 404 mapping).
* a bad or expired token is HTTP 500 with error -1 (reads) or 5005 (writes), not 401.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from provisioner.slurm.adapters.base import SlurmAdapter, split_hostlist
from provisioner.slurm.errors import SlurmConfigError
from provisioner.slurm.types import JobSubmission


class V0038Adapter(SlurmAdapter):
    version: ClassVar[str] = "v0.0.38"
    not_found_statuses: ClassVar[frozenset[int]] = frozenset({500, 404})
    meta_slurm_key: ClassVar[str] = "Slurm"
    # Key names of the job object that changed between v0.0.36 and v0.0.37.
    stdout_key: ClassVar[str] = "standard_output"
    stderr_key: ClassVar[str] = "standard_error"
    # sbatch --exclude is not among the v0.0.38 job properties.
    supports_exclude: ClassVar[bool] = False

    def build_submit_body(self, submission: JobSubmission) -> dict[str, Any]:
        self._validate_submission(submission)
        if submission.excluded_nodes.strip() and not self.supports_exclude:
            raise SlurmConfigError(
                f"excluded_nodes is not supported by slurmrestd {self.version} (Slurm 22.05 has "
                "no exclude field in its job properties); clear excluded_nodes or use a newer "
                "API version"
            )
        job: dict[str, Any] = {
            "name": submission.name,
            "current_working_directory": submission.current_working_directory,
            "environment": dict(self.environment(submission)),
        }
        if submission.partition:
            job["partition"] = submission.partition
        if submission.nodes > 1:
            job["nodes"] = [submission.nodes, submission.nodes]
            job["tasks"] = submission.nodes
            job["tasks_per_node"] = 1
        else:
            job["tasks"] = 1
        if submission.time_limit_minutes is not None:
            job["time_limit"] = submission.time_limit_minutes
        if submission.memory_per_node_mb is not None:
            job["memory_per_node"] = submission.memory_per_node_mb
        if submission.cpus_per_task:
            job["cpus_per_task"] = submission.cpus_per_task
        if submission.gres.strip():
            job["gres"] = ",".join(
                p[len("gres/") :] if p.startswith("gres/") else p
                for p in split_hostlist(submission.gres.strip())
            )
        if submission.account:
            job["account"] = submission.account
        if submission.qos:
            job["qos"] = submission.qos
        if submission.constraints:
            job["constraints"] = submission.constraints
        if submission.standard_output:
            job[self.stdout_key] = submission.standard_output
        if submission.standard_error:
            job[self.stderr_key] = submission.standard_error
        # No warning signal: Slurm 22.05's REST parser refuses the batch-shell form
        # "B:USR1@secs" ("Invalid SIGNAL specification", seen on the local cluster), and without
        # "B:" only srun steps are signalled, never the batch script that reports it. Walltime
        # handover still starts successors from the job's end time.
        return {"script": submission.script, "job": job}

    def partition_fields(self, record: Mapping[str, Any]) -> dict[str, Any]:
        flags = record.get("flags")
        return {
            "nodes_text": str(record.get("nodes") or ""),
            "state": str(record.get("state") or "").upper(),
            "default_time_minutes": self._minutes(record.get("default_time_limit")),
            "max_time_minutes": self._minutes(record.get("max_time_limit")),
            "allowed_accounts": self._accounts(record.get("allowed_accounts")),
            "denied_accounts": self._accounts(record.get("denied_accounts")),
            "is_default": isinstance(flags, list)
            and any(str(f).lower() == "default" for f in flags),
        }
