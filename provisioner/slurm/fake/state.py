"""The fake slurmrestd's cluster state: nodes, jobs and the job state machine.

Jobs are PENDING, then RUNNING ``start_delay`` seconds after submit (or after a requeue,
``requeue_delay``), TIMEOUT once ``time_limit`` minutes times ``time_scale`` have run, purged
``purge_after`` seconds after they end (None: never). :class:`JobState` is a mixin of
:class:`~provisioner.slurm.fake.slurmrestd.FakeSlurmrestd`, which sets every attribute it declares.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

TERMINAL = frozenset(
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


class JobState:
    """The jobs and nodes of the fake cluster, the test helpers that change them, and the
    state machine every request advances first."""

    tokens: dict[str, str]
    start_delay: float
    requeue_delay: float
    time_scale: float
    purge_after: float | None
    nodes: list[FakeNode]
    default_partition: str
    jobs: dict[int, FakeJob]
    _next_id: int
    _live: set[int]
    _lock: threading.RLock
    _rr: int

    # ---- test helpers --------------------------------------------------------------------

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
            if state in TERMINAL:
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
            if job.state in TERMINAL:
                self._live.discard(job_id)
        if self.purge_after is not None:
            for job_id in [
                j.job_id
                for j in self.jobs.values()
                if j.state in TERMINAL and j.end_time and now - j.end_time >= self.purge_after
            ]:
                del self.jobs[job_id]
