"""The fingerprint of the spec fields that shape a replica's job.

Stored on each replica at submit (``Replica.spec_fingerprint``) and compared by the planner with the
spec's current one: a difference means the job would be submitted differently now (image,
command, script, resources, recipe inputs), so the model rolls out make-before-break
(provisioner/transitions.py). Fields that change only routing or counting (target_replicas,
min_replicas, max_job_failures, health_path, handover_secs, enabled) are left out: editing
them never replaces a serving replica.

Pure: no Django import; ``spec_fingerprint`` reads attributes of any ManagedSpec-like object.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["JOB_FIELDS", "fingerprint_of", "spec_fingerprint"]

JOB_FIELDS = (
    "partition",
    "gres",
    "nodes",
    "constraints",
    "exclude",
    "account",
    "qos",
    "time_limit",
    "cpus_per_task",
    "mem",
    "image",
    "preamble",
    "launch_command",
    "script_body",
    "log_output_dir",
    "serving_port",
    "launcher_spec",
    "recipe_id",
)


def _normal(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("\r\n", "\n").strip()
    return value


def fingerprint_of(values: dict[str, Any]) -> str:
    """SHA-256 (hex) of the job fields in ``values``; a missing field counts as None."""
    canonical = {name: _normal(values.get(name)) for name in JOB_FIELDS}
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def spec_fingerprint(spec: Any) -> str:
    """The fingerprint of a ManagedSpec (or any object with its attributes)."""
    return fingerprint_of({name: getattr(spec, name, None) for name in JOB_FIELDS})
