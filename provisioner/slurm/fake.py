"""An in-process fake slurmrestd (API v0.0.38 shapes, as recorded from Slurm 22.05.8).

For fault injection and scale only -- never instead of the real server: every behaviour here
copies an answer seen from the real slurmrestd (see the lab report), and the live contract
tests run the same checks against both.

Routes: ``GET /openapi/v3`` (and ``/openapi``), ``GET /slurm/v0.0.38/ping``, ``POST
/slurm/v0.0.38/job/submit``, ``GET|DELETE /slurm/v0.0.38/job/{id}``, ``GET
/slurm/v0.0.38/jobs``, ``GET /slurm/v0.0.38/nodes``, ``GET /slurm/v0.0.38/partitions``.

Jobs live in memory: PENDING, then RUNNING ``start_delay`` seconds after submit (or after a
requeue, ``requeue_delay``), TIMEOUT once ``time_limit`` minutes times ``time_scale`` have run,
purged ``purge_after`` seconds after they end (None: never).

Fault switches (attributes, flip them any time): ``down`` (via :meth:`set_down`: connection
refused), ``slow_seconds`` (delay before every answer), ``auth_failure`` (answers as for a bad
or expired token: 500 with -1/5005), ``controller_down`` (slurmctld stopped: 500 with -1 and
1800, after ``controller_delay`` seconds), ``html_502`` (a proxy's HTML error page),
``raw_answer`` (status, content type, body: every request gets exactly that, e.g. a bare 500 or
a login portal's HTML with 200).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import socket
import threading
import time
from collections.abc import Iterable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar
from urllib.parse import urlsplit

import jwt

__all__ = ["FakeJob", "FakeNode", "FakeSlurmrestd"]

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

_META = {
    "plugin": {"type": "openapi/v0.0.38", "name": "Slurm OpenAPI v0.0.38"},
    "Slurm": {"version": {"major": 22, "micro": 8, "minor": 5}, "release": "22.05.8"},
}
_HTML_502 = (
    "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n"
    "<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n"
    "</body>\r\n</html>\r\n"
)
_PARSE_FAILED = {"error_code": 9001, "error": "Failure during parsing"}
_TERMINAL = frozenset(
    {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY"}
)


@dataclasses.dataclass
class FakeNode:
    name: str
    real_memory: int = 24105
    cpus: int = 2
    partitions: tuple[str, ...] = ("debug",)
    specialized_memory: int = 0
    gres: str = ""
    features: str = ""
    address: str = "127.0.0.1"


@dataclasses.dataclass
class FakeJob:
    job_id: int
    name: str
    user: str
    partition: str
    script: str = ""
    environment: dict[str, str] = dataclasses.field(default_factory=dict)
    node_count: int = 1
    time_limit: int | None = None  # minutes
    memory_per_node: int | None = None
    cwd: str = "/tmp"
    standard_output: str = ""
    standard_error: str = ""
    submit_time: float = 0.0
    eligible_time: float = 0.0
    start_time: float = 0.0
    end_time: float = 0.0
    state: str = "PENDING"
    reason: str = "None"
    nodes: tuple[str, ...] = ()
    restart_cnt: int = 0
    exit_code: int = 0

    def record(self) -> dict[str, Any]:
        running = self.state in ("RUNNING", "COMPLETING")
        nodes = ",".join(self.nodes)
        end = self.end_time
        if running and self.time_limit:
            end = self.start_time + self.time_limit * 60
        return {
            "account": "",
            "batch_host": self.nodes[0] if self.nodes else "",
            "current_working_directory": self.cwd,
            "eligible_time": int(self.eligible_time),
            "end_time": int(end),
            "exit_code": self.exit_code,
            "job_id": self.job_id,
            "job_resources": (
                {"nodes": nodes, "allocated_hosts": len(self.nodes)} if self.nodes else None
            ),
            "job_state": self.state,
            "memory_per_node": self.memory_per_node or 0,
            "name": self.name,
            "nodes": nodes,
            "partition": self.partition,
            "requeue": True,
            "restart_cnt": self.restart_cnt,
            "standard_error": self.standard_error,
            "standard_output": self.standard_output,
            "start_time": int(self.start_time),
            "state_description": "",
            "state_reason": self.reason,
            "submit_time": int(self.submit_time),
            "time_limit": self.time_limit,
            "user_name": self.user,
        }


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    fake: FakeSlurmrestd

    def process_request(self, request: Any, client_address: Any) -> None:
        self.fake._track(request)
        super().process_request(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        return

    def _dispatch(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        status, content_type, payload = self.server.fake._handle(
            method, self.path, dict(self.headers.items()), body
        )
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        self._dispatch("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch("POST")

    def do_DELETE(self) -> None:  # noqa: N802
        self._dispatch("DELETE")


class FakeSlurmrestd:
    """A threaded fake slurmrestd on 127.0.0.1 (``port=0`` picks a free port)."""

    api_version: ClassVar[str] = API

    def __init__(
        self,
        port: int = 0,
        *,
        token: str = "fake-slurm-token",  # noqa: S107 - a fake server's test token
        user: str = "obleth",
        start_delay: float = 0.2,
        requeue_delay: float = 0.2,
        time_scale: float = 1.0,
        purge_after: float | None = None,
        nodes: Iterable[FakeNode] | None = None,
        default_partition: str = "debug",
    ) -> None:
        self.port = port
        self.tokens: dict[str, str] = {token: user}
        self.start_delay = start_delay
        self.requeue_delay = requeue_delay
        self.time_scale = time_scale
        self.purge_after = purge_after
        self.nodes: list[FakeNode] = list(nodes) if nodes else [FakeNode("localhost")]
        self.default_partition = default_partition
        # fault switches
        self.down = False
        self.slow_seconds = 0.0
        self.auth_failure = False
        self.controller_down = False
        self.controller_delay = 0.0
        self.html_502 = False
        self.raw_answer: tuple[int, str, bytes] | None = None
        # bookkeeping
        self.jobs: dict[int, FakeJob] = {}
        self.request_count = 0
        self.requests: collections.deque[tuple[str, str]] = collections.deque(maxlen=10000)
        self._next_id = 1
        self._live: set[int] = set()
        self._lock = threading.RLock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._sockets: set[socket.socket] = set()
        self._rr = 0

    # ---- lifecycle -----------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeSlurmrestd:
        server = _Server(("127.0.0.1", self.port), _Handler)
        server.fake = self
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, name=f"fake-slurmrestd-{self.port}", daemon=True
        )
        self._thread.start()
        self.down = False
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        self._close_connections()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def set_down(self, down: bool) -> None:
        """``True``: stop listening and drop open connections (connection refused);
        ``False``: listen again on the same port."""
        if down and self._server is not None:
            self.stop()
            self.down = True
        elif not down and self._server is None:
            self.start()

    def __enter__(self) -> FakeSlurmrestd:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _track(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets = {s for s in self._sockets if s.fileno() != -1}
            self._sockets.add(sock)

    def _close_connections(self) -> None:
        with self._lock:
            sockets, self._sockets = self._sockets, set()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    # ---- test helpers --------------------------------------------------------------------

    def add_token(self, token: str, user: str) -> None:
        self.tokens[token] = user

    def job(self, job_id: int | str) -> FakeJob | None:
        with self._lock:
            self._advance(time.time())
            return self.jobs.get(int(job_id))

    def purge(self, job_id: int | str) -> None:
        """Forget a job, as slurmctld does MinJobAge after it ends (GET then says 2017)."""
        with self._lock:
            self.jobs.pop(int(job_id), None)
            self._live.discard(int(job_id))

    drop_job = purge

    def set_job_state(
        self, job_id: int | str, state: str, *, reason: str = "None", exit_code: int = 0
    ) -> None:
        """Force a state (``PREEMPTED``, ``NODE_FAIL``, ``COMPLETED``...)."""
        with self._lock:
            job = self.jobs[int(job_id)]
            job.state, job.reason, job.exit_code = state, reason, exit_code
            if state in _TERMINAL:
                job.end_time = time.time()
                self._live.discard(job.job_id)
            else:
                self._live.add(job.job_id)

    def requeue(self, job_id: int | str) -> None:
        """Like ``scontrol requeue``: PENDING/BeginTime, restart_cnt + 1, same id."""
        with self._lock:
            job = self.jobs[int(job_id)]
            now = time.time()
            job.state, job.reason, job.nodes = "PENDING", "BeginTime", ()
            job.restart_cnt += 1
            job.start_time = 0.0
            job.eligible_time = now + self.requeue_delay
            self._live.add(job.job_id)

    def bulk_add(
        self, count: int, *, name_prefix: str = "bulk-", state: str = "RUNNING", user: str = ""
    ) -> list[int]:
        """Create ``count`` jobs at once (for scale tests); returns their ids."""
        ids = []
        now = time.time()
        owner = user or next(iter(self.tokens.values()))
        with self._lock:
            for i in range(count):
                job = self._new_job(f"{name_prefix}{i}", owner, self.default_partition, now)
                job.state = state
                if state == "RUNNING":
                    job.start_time = now
                    job.nodes = self._place(job)
                ids.append(job.job_id)
        return ids

    # ---- state machine -------------------------------------------------------------------

    def _new_job(self, name: str, user: str, partition: str, now: float) -> FakeJob:
        job = FakeJob(
            job_id=self._next_id,
            name=name,
            user=user,
            partition=partition,
            submit_time=now,
            eligible_time=now + self.start_delay,
        )
        self._next_id += 1
        self.jobs[job.job_id] = job
        self._live.add(job.job_id)
        return job

    def _place(self, job: FakeJob) -> tuple[str, ...]:
        candidates = [n.name for n in self.nodes if job.partition in n.partitions]
        if not candidates:
            return ()
        start = self._rr % len(candidates)
        self._rr += 1
        ordered = candidates[start:] + candidates[:start]
        return tuple(ordered[: job.node_count])

    def _advance(self, now: float) -> None:
        for job_id in list(self._live):
            job = self.jobs.get(job_id)
            if job is None:
                self._live.discard(job_id)
                continue
            if job.state == "PENDING" and now >= job.eligible_time:
                job.state, job.reason = "RUNNING", "None"
                job.start_time = now
                job.nodes = self._place(job)
            if (
                job.state == "RUNNING"
                and job.time_limit
                and now >= job.start_time + job.time_limit * 60 * self.time_scale
            ):
                job.state, job.reason, job.exit_code = "TIMEOUT", "TimeLimit", 15
                job.end_time = now
            if job.state in _TERMINAL:
                self._live.discard(job_id)
        if self.purge_after is not None:
            for job_id in [
                j.job_id
                for j in self.jobs.values()
                if j.state in _TERMINAL and j.end_time and now - j.end_time >= self.purge_after
            ]:
                del self.jobs[job_id]

    # ---- HTTP ----------------------------------------------------------------------------

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
            return 502, "text/html", _HTML_502.encode()
        if self.raw_answer is not None:
            return self.raw_answer
        lower = {k.lower(): v for k, v in headers.items()}
        user = lower.get("x-slurm-user-name", "")
        token = lower.get("x-slurm-user-token", "")
        if not user or not token:
            return 401, "text/plain", b"Authentication failure"
        if path in ("/openapi/v3", "/openapi", "/openapi.json"):
            return self._json(200, self._openapi())
        if not path.startswith(PREFIX + "/"):
            return (
                404,
                "text/plain",
                b"Unable find requested URL. Please view /openapi/v3 for API reference.",
            )
        route = path[len(PREFIX) :]
        token_ok = self.tokens.get(token) == user and not self._expired(token)
        if self.controller_down:
            if self.controller_delay > 0:
                time.sleep(self.controller_delay)
            return self._json(*self._controller_down(method, route))
        if self.auth_failure or not token_ok:
            return self._json(*self._bad_token(method, route))
        with self._lock:
            self._advance(time.time())
            return self._json(*self._route(method, route, user, body))

    @staticmethod
    def _expired(token: str) -> bool:
        try:
            claims = jwt.decode(token, options={"verify_signature": False, "verify_exp": False})
        except jwt.PyJWTError:
            return False
        exp = claims.get("exp")
        return isinstance(exp, int | float) and exp <= time.time()

    @staticmethod
    def _json(status: int, payload: Mapping[str, Any]) -> tuple[int, str, bytes]:
        document = {"meta": _META, "errors": [], **payload}
        return status, "application/json", json.dumps(document).encode()

    def _openapi(self) -> dict[str, Any]:
        paths = ["ping", "jobs", "job/{job_id}", "job/submit", "nodes", "partitions"]
        return {
            "openapi": "3.0.2",
            "info": {"title": "Slurm Rest API (fake)", "version": "0.0.36"},
            "paths": {f"{PREFIX}/{p}": {} for p in paths},
        }

    @staticmethod
    def _bad_token(method: str, route: str) -> tuple[int, dict[str, Any]]:
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

    def _controller_down(self, method: str, route: str) -> tuple[int, dict[str, Any]]:
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
        return self._bad_token(method, route)

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
            return 400, {"errors": [_PARSE_FAILED]}
        for key in job:
            if key not in V0038_JOB_KEYS:
                return 400, {
                    "errors": [
                        {"description": f'Unknown key "{key}"', "source": "hsearch_r"},
                        _PARSE_FAILED,
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
                    _PARSE_FAILED,
                ]
            }
        if not isinstance(environment, dict) or not environment:
            return 400, {
                "errors": [{"error": "environment must be set", "error_code": 2127}, _PARSE_FAILED]
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
        if job.state not in _TERMINAL:
            job.state, job.reason, job.exit_code = "CANCELLED", "None", 15
            job.end_time = time.time()
            self._live.discard(job.job_id)
        return 200, {}
