"""slurmrestd API v0.0.40 (Slurm 23.11 and 24.05), from ``v0.0.40.json`` (Slurm 24.05.4).

* submit body ``{"script": ..., "job": {...}}``; ``environment`` is a LIST of ``NAME=value``
  (an object is silently dropped); ``nodes`` a string; ``time_limit`` and ``memory_per_node``
  ``{"set", "infinite", "number"}`` structs; generic resources in ``tres_per_node``
  (``gres/gpu:2``); ``excluded_nodes`` a list of names.
* ``job_state`` is a LIST (base state first, then flags); ``exit_code`` is
  ``{status, return_code, signal}``; times are number structs.
* collection paths end with ``/``; an unknown job is HTTP 404 with error 2017 (Slurm maps
  ESLURM_INVALID_JOB_ID to 404 from this release on), so a 500 is never read as not-found.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from provisioner.slurm.adapters.base import SlurmAdapter, number, split_hostlist
from provisioner.slurm.types import JobSubmission


def no_val(value: int) -> dict[str, Any]:
    """A ``{set, infinite, number}`` struct for a set, finite number."""
    return {"set": True, "infinite": False, "number": value}


class DataParserAdapter(SlurmAdapter):
    """Common ground of the data_parser based APIs (v0.0.39 and later)."""

    version: ClassVar[str] = ""
    # Put the script inside "job" (v0.0.41+ deprecate the top-level "script").
    script_in_job: ClassVar[bool] = False

    def build_submit_body(self, submission: JobSubmission) -> dict[str, Any]:
        self._validate_submission(submission)
        job: dict[str, Any] = {
            "name": submission.name,
            "current_working_directory": submission.current_working_directory,
            "environment": [f"{k}={v}" for k, v in self.environment(submission)],
            "nodes": str(submission.nodes),
        }
        if submission.partition:
            job["partition"] = submission.partition
        if submission.nodes > 1:
            job["tasks"] = submission.nodes
            job["tasks_per_node"] = 1
        else:
            job["tasks"] = 1
        if submission.time_limit_minutes is not None:
            job["time_limit"] = no_val(submission.time_limit_minutes)
        if submission.memory_per_node_mb is not None:
            job["memory_per_node"] = no_val(submission.memory_per_node_mb)
        if submission.cpus_per_task:
            job["cpus_per_task"] = submission.cpus_per_task
        if submission.gres.strip():
            job["tres_per_node"] = self.gres_tres(submission.gres.strip())
        if submission.account:
            job["account"] = submission.account
        if submission.qos:
            job["qos"] = submission.qos
        if submission.constraints:
            job["constraints"] = submission.constraints
        if submission.excluded_nodes.strip():
            job["excluded_nodes"] = split_hostlist(submission.excluded_nodes)
        if submission.standard_output:
            job["standard_output"] = submission.standard_output
        if submission.standard_error:
            job["standard_error"] = submission.standard_error
        if submission.warning_signal and submission.warning_secs > 0:
            job["kill_warning_signal"] = submission.warning_signal
            job["kill_warning_delay"] = no_val(submission.warning_secs)
            job["kill_warning_flags"] = ["BATCH_JOB"]
        if self.script_in_job:
            job["script"] = submission.script
            return {"job": job}
        return {"script": submission.script, "job": job}

    def partition_fields(self, record: Mapping[str, Any]) -> dict[str, Any]:
        def part(key: str) -> Mapping[str, Any]:
            value = record.get(key)
            return value if isinstance(value, Mapping) else {}

        state = part("partition").get("state")
        states = [str(s).upper() for s in state] if isinstance(state, list) else [str(state or "")]
        flags = record.get("flags")
        nodes = part("nodes").get("configured")
        if nodes is None and isinstance(record.get("nodes"), str):
            nodes = record.get("nodes")
        return {
            "nodes_text": str(nodes or ""),
            "state": ",".join(s for s in states if s),
            "default_time_minutes": self._minutes(part("defaults").get("time")),
            "max_time_minutes": self._minutes(part("maximums").get("time")),
            "allowed_accounts": self._accounts(part("accounts").get("allowed")),
            "denied_accounts": self._accounts(part("accounts").get("deny")),
            "is_default": isinstance(flags, list)
            and any(str(f).upper() == "DEFAULT" for f in flags),
        }


class V0040Adapter(DataParserAdapter):
    version: ClassVar[str] = "v0.0.40"
    not_found_statuses: ClassVar[frozenset[int]] = frozenset({404})
    collection_suffix: ClassVar[str] = "/"

    def exit_code(self, record: Mapping[str, Any]) -> int | None:
        """Rebuild the raw wait status (what v0.0.38 reports) from the verbose struct."""
        raw = record.get("exit_code")
        if not isinstance(raw, Mapping):
            return number(raw)
        return_code = number(raw.get("return_code"))
        signal_info = raw.get("signal")
        signal = number(signal_info.get("id")) if isinstance(signal_info, Mapping) else None
        if return_code is None and signal is None:
            return None
        return ((return_code or 0) & 0xFF) << 8 | ((signal or 0) & 0x7F)
