"""The fake slurmrestd's request handling: the fault switches, authentication, and the routes.

:meth:`Routes._handle` is what the HTTP handler calls for every request: it applies the fault
switches, checks the user and token headers, advances the job state machine and answers the route.
"""

from __future__ import annotations

import collections
import json
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from provisioner.slurm.fake import answers
from provisioner.slurm.fake.state import TERMINAL, FakeNode, JobState


class Routes(JobState):
    """The routes of the fake slurmrestd (a mixin of ``FakeSlurmrestd``, which sets every
    attribute declared here)."""

    # fault switches
    slow_seconds: float
    auth_failure: bool
    controller_down: bool
    controller_delay: float
    html_502: bool
    raw_answer: tuple[int, str, bytes] | None
    # bookkeeping
    request_count: int
    requests: collections.deque[tuple[str, str]]

    def _handle(
        self, method: str, raw_path: str, headers: Mapping[str, str], body: bytes
    ) -> tuple[int, str, bytes]:
        with self._lock:
            self.request_count += 1
        path = urlsplit(raw_path).path.rstrip("/") or "/"
        self.requests.append((method, path))
        if self.slow_seconds > 0:
            time.sleep(self.slow_seconds)
        if self.html_502:
            return 502, "text/html", answers.HTML_502.encode()
        if self.raw_answer is not None:
            return self.raw_answer
        lower = {k.lower(): v for k, v in headers.items()}
        user = lower.get("x-slurm-user-name", "")
        token = lower.get("x-slurm-user-token", "")
        if not user or not token:
            return 401, "text/plain", b"Authentication failure"
        if path in ("/openapi/v3", "/openapi", "/openapi.json"):
            return answers.json_answer(200, answers.openapi())
        if not path.startswith(answers.PREFIX + "/"):
            return (
                404,
                "text/plain",
                b"Unable find requested URL. Please view /openapi/v3 for API reference.",
            )
        route = path[len(answers.PREFIX) :]
        token_ok = self.tokens.get(token) == user and not answers.expired(token)
        if self.controller_down:
            if self.controller_delay > 0:
                time.sleep(self.controller_delay)
            return answers.json_answer(*answers.controller_down(method, route))
        if self.auth_failure or not token_ok:
            return answers.json_answer(*answers.bad_token(method, route))
        with self._lock:
            self._advance(time.time())
            return answers.json_answer(*self._route(method, route, user, body))

    def _route(self, method: str, route: str, user: str, body: bytes) -> tuple[int, dict[str, Any]]:
        if route == "/ping" and method == "GET":
            return 200, {
                "pings": [{"hostname": "fake", "ping": "UP", "status": 0, "mode": "primary"}]
            }
        if route == "/jobs" and method == "GET":
            return 200, {"jobs": [job.record() for job in self.jobs.values()]}
        if route == "/nodes" and method == "GET":
            return 200, {"nodes": [self._node_record(n) for n in self.nodes]}
        if route == "/partitions" and method == "GET":
            return 200, {"partitions": self._partitions()}
        if route == "/job/submit" and method == "POST":
            return self._submit(user, body)
        if route.startswith("/job/") and method in ("GET", "DELETE"):
            return self._job(method, route[len("/job/") :])
        return 404, {
            "errors": [{"error": "Unable find requested URL", "error_code": 9002}],
        }

    def _node_record(self, node: FakeNode) -> dict[str, Any]:
        busy = [
            j
            for j in self.jobs.values()
            if j.state in ("RUNNING", "COMPLETING") and node.name in j.nodes
        ]
        alloc_memory = sum(j.memory_per_node or 0 for j in busy)
        return {
            "name": node.name,
            "hostname": node.name,
            "address": node.address,
            "state": "allocated" if busy else "idle",
            "state_flags": [],
            "cpus": node.cpus,
            "alloc_cpus": min(node.cpus, len(busy)),
            "idle_cpus": max(0, node.cpus - len(busy)),
            "real_memory": node.real_memory,
            "alloc_memory": alloc_memory,
            "free_memory": max(0, node.real_memory - alloc_memory),
            "specialized_memory": node.specialized_memory,
            "partitions": list(node.partitions),
            "gres": node.gres,
            "features": node.features,
            "slurmd_version": "22.05.8",
            "reason": "",
        }

    def _partitions(self) -> list[dict[str, Any]]:
        names: dict[str, list[str]] = {}
        for node in self.nodes:
            for part in node.partitions:
                names.setdefault(part, []).append(node.name)
        return [
            {
                "flags": ["default"] if name == self.default_partition else [],
                "name": name,
                "nodes": ",".join(nodes),
                "state": "UP",
                "total_nodes": len(nodes),
                "max_time_limit": -1,
                "default_time_limit": None,
                "allowed_accounts": "ALL",
                "denied_accounts": "",
            }
            for name, nodes in names.items()
        ]

    def _submit(self, user: str, body: bytes) -> tuple[int, dict[str, Any]]:
        try:
            request = json.loads(body or b"null")
        except ValueError:
            request = None
        if not isinstance(request, dict):
            return 400, {"errors": [{"error_code": 9001, "error": "Unable to parse query."}]}
        script = request.get("script")
        job = request.get("job")
        if not isinstance(job, dict):
            return 400, {"errors": [answers.PARSE_FAILED]}
        for key in job:
            if key not in answers.V0038_JOB_KEYS:
                return 400, {
                    "errors": [
                        {"description": f'Unknown key "{key}"', "source": "hsearch_r"},
                        answers.PARSE_FAILED,
                    ]
                }
        environment = job.get("environment")
        if isinstance(environment, list):
            return 400, {
                "errors": [
                    {"error": "environment must be a dictionary", "error_code": -1},
                    {
                        "description": 'Unable to process key "environment"',
                        "error_number": -1,
                        "error": "Unspecified error",
                        "source": "slurm_process_option_data",
                    },
                    answers.PARSE_FAILED,
                ]
            }
        if not isinstance(environment, dict) or not environment:
            return 400, {
                "errors": [
                    {"error": "environment must be set", "error_code": 2127},
                    answers.PARSE_FAILED,
                ]
            }
        if not isinstance(script, str) or not script:
            return 500, {"errors": [{"error_code": 2009, "error": "Job script not specified"}]}
        partition = str(job.get("partition") or self.default_partition)
        part_nodes = [n for n in self.nodes if partition in n.partitions]
        if not part_nodes:
            return 500, {
                "errors": [{"error_code": 2000, "error": "Invalid partition name specified"}]
            }
        node_spec = job.get("nodes")
        node_count = int(node_spec[0]) if isinstance(node_spec, list) and node_spec else 1
        memory = job.get("memory_per_node")
        now = time.time()
        new = self._new_job(str(job.get("name") or "sbatch"), user, partition, now)
        new.script = script
        new.environment = {str(k): str(v) for k, v in environment.items()}
        new.node_count = node_count
        new.time_limit = int(job["time_limit"]) if job.get("time_limit") else None
        new.memory_per_node = int(memory) if isinstance(memory, int) else None
        new.cwd = str(job.get("current_working_directory") or "/")
        new.standard_output = str(job.get("standard_output") or "")
        new.standard_error = str(job.get("standard_error") or "")
        too_big = new.memory_per_node is not None and new.memory_per_node > max(
            n.real_memory - n.specialized_memory for n in part_nodes
        )
        if too_big or node_count > len(part_nodes):
            # Slurm 22.05 refuses the submit but still leaves a FAILED record behind.
            new.state, new.reason, new.end_time = "FAILED", "BadConstraints", now
            self._live.discard(new.job_id)
            return 500, {
                "errors": [
                    {"error_code": 2014, "error": "Requested node configuration is not available"}
                ]
            }
        return 200, {"job_id": new.job_id, "step_id": "BATCH", "job_submit_user_msg": ""}

    def _job(self, method: str, raw_id: str) -> tuple[int, dict[str, Any]]:
        if not raw_id.isdigit():
            return 400, {
                "errors": [
                    {
                        "description": f"Unable to find JobId={raw_id}",
                        "error_number": 9002,
                        "error": "Jobs description entry not found, empty or not dictionary or "
                        "list",
                        "source": "_handle_job_get",
                    }
                ]
            }
        job = self.jobs.get(int(raw_id))
        if method == "GET":
            if job is None:
                return 500, {
                    "errors": [
                        {
                            "description": f"Unable to find JobId={raw_id}",
                            "error_number": 2017,
                            "error": "Invalid job id specified",
                            "source": "slurm_load_job",
                        }
                    ],
                    "jobs": [],
                }
            return 200, {"jobs": [job.record()]}
        if job is None:
            return 500, {
                "errors": [
                    {
                        "description": f"unable to kill JobId={raw_id} with signal 9: "
                        "Invalid job id specified",
                        "error_number": 2017,
                        "error": "Invalid job id specified",
                        "source": "slurm_kill_job",
                    }
                ]
            }
        if job.state not in TERMINAL:
            job.state, job.reason, job.exit_code = "CANCELLED", "None", 15
            job.end_time = time.time()
            self._live.discard(job.job_id)
        return 200, {}
