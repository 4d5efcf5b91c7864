"""What the fake slurmrestd says on the wire: its API version, the job keys v0.0.38 accepts, and
the answers it gives for a bad token or a stopped controller, copied from the real slurmrestd.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

import jwt

API = "v0.0.38"
PREFIX = f"/slurm/{API}"

# The job properties slurmrestd 22.05 accepts for v0.0.38; any other key is a 400.
V0038_JOB_KEYS = frozenset(
    {
        "account",
        "account_gather_frequency",
        "argv",
        "array",
        "batch_features",
        "begin_time",
        "burst_buffer",
        "cluster_constraint",
        "comment",
        "constraints",
        "container",
        "core_specification",
        "cores_per_socket",
        "cpu_binding",
        "cpu_binding_hint",
        "cpu_frequency",
        "cpus_per_gpu",
        "cpus_per_task",
        "current_working_directory",
        "deadline",
        "delay_boot",
        "dependency",
        "distribution",
        "environment",
        "exclusive",
        "get_user_environment",
        "gres",
        "gres_flags",
        "gpu_binding",
        "gpu_frequency",
        "gpus",
        "gpus_per_node",
        "gpus_per_socket",
        "gpus_per_task",
        "hold",
        "kill_on_invalid_dependency",
        "licenses",
        "mail_type",
        "mail_user",
        "mcs_label",
        "memory_binding",
        "memory_per_cpu",
        "memory_per_gpu",
        "memory_per_node",
        "minimum_cpus_per_node",
        "minimum_nodes",
        "name",
        "nice",
        "no_kill",
        "nodes",
        "open_mode",
        "oversubscribe",
        "partition",
        "prefer",
        "priority",
        "qos",
        "requeue",
        "reservation",
        "signal",
        "sockets_per_node",
        "spread_job",
        "standard_error",
        "standard_input",
        "standard_output",
        "tasks",
        "tasks_per_core",
        "tasks_per_node",
        "tasks_per_socket",
        "thread_specification",
        "threads_per_core",
        "time_limit",
        "time_minimum",
        "wait_all_nodes",
        "wckey",
    }
)

META = {
    "plugin": {"type": "openapi/v0.0.38", "name": "Slurm OpenAPI v0.0.38"},
    "Slurm": {"version": {"major": 22, "micro": 8, "minor": 5}, "release": "22.05.8"},
}
HTML_502 = (
    "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n"
    "<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n"
    "</body>\r\n</html>\r\n"
)
PARSE_FAILED = {"error_code": 9001, "error": "Failure during parsing"}


def expired(token: str) -> bool:
    """True for a JWT whose ``exp`` has passed (a token that is not a JWT never expires)."""
    try:
        claims = jwt.decode(token, options={"verify_signature": False, "verify_exp": False})
    except jwt.PyJWTError:
        return False
    exp = claims.get("exp")
    return isinstance(exp, int | float) and exp <= time.time()


def json_answer(status: int, payload: Mapping[str, Any]) -> tuple[int, str, bytes]:
    """A JSON answer with slurmrestd's ``meta`` block and an empty ``errors`` by default."""
    document = {"meta": META, "errors": [], **payload}
    return status, "application/json", json.dumps(document).encode()


def openapi() -> dict[str, Any]:
    """The OpenAPI document (only the paths this fake serves)."""
    paths = ["ping", "jobs", "job/{job_id}", "job/submit", "nodes", "partitions"]
    return {
        "openapi": "3.0.2",
        "info": {"title": "Slurm Rest API (fake)", "version": "0.0.36"},
        "paths": {f"{PREFIX}/{p}": {} for p in paths},
    }


def bad_token(method: str, route: str) -> tuple[int, dict[str, Any]]:
    """The answer for a bad or expired token (or ``auth_failure``): 500 with -1/5005."""

    def unspecified(description: str, source: str) -> dict[str, Any]:
        return {
            "description": description,
            "error_number": -1,
            "error": "Unspecified error",
            "source": source,
        }

    if route == "/job/submit":
        return 500, {
            "errors": [{"error_code": 5005, "error": "Zero Bytes were transmitted or received"}]
        }
    if route.startswith("/job/"):
        job_id = route[len("/job/") :]
        if method == "DELETE":
            return 500, {
                "errors": [
                    {
                        "description": f"unable to kill JobId={job_id} with signal 9: "
                        "Zero Bytes were transmitted or received",
                        "error_number": 5005,
                        "error": "Zero Bytes were transmitted or received",
                        "source": "slurm_kill_job",
                    }
                ]
            }
        return 500, {
            "errors": [unspecified(f"Unable to find JobId={job_id}", "slurm_load_job")],
            "jobs": [],
        }
    if route == "/jobs":
        return 500, {
            "errors": [unspecified("Failed while looking for jobs", "slurm_load_jobs")],
            "jobs": [],
        }
    if route == "/ping":
        return 500, {
            "errors": [unspecified("slurmctld config is unable to load", "slurm_load_ctl_conf")]
        }
    return 500, {"errors": [{"error": "Unspecified error", "errno": -1}]}


def controller_down(method: str, route: str) -> tuple[int, dict[str, Any]]:
    """The answer while slurmctld is stopped: 500 with 1800 (submit, cancel) or -1."""
    if route == "/job/submit":
        return 500, {
            "errors": [
                {
                    "error_code": 1800,
                    "error": "Unable to contact slurm controller (connect failure)",
                }
            ]
        }
    if route.startswith("/job/") and method == "DELETE":
        job_id = route[len("/job/") :]
        return 500, {
            "errors": [
                {
                    "description": f"unable to kill JobId={job_id} with signal 9: "
                    "Unable to contact slurm controller (connect failure)",
                    "error_number": 1800,
                    "error": "Unable to contact slurm controller (connect failure)",
                    "source": "slurm_kill_job",
                }
            ]
        }
    return bad_token(method, route)
