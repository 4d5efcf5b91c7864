"""Version-neutral Slurm types shared by the client, the adapters and the planner.

Nothing here does I/O or imports Django/httpx: the planner imports it.
"""

from __future__ import annotations

import dataclasses
import enum


class JobPhase(enum.StrEnum):
    """Coarse job state the provisioner acts on."""

    PENDING = "pending"  # PENDING, CONFIGURING, SUSPENDED, REQUEUED...
    RUNNING = "running"  # RUNNING, COMPLETING
    # any terminal state (COMPLETED, FAILED, CANCELLED, TIMEOUT, PREEMPTED, NODE_FAIL...)
    GONE = "gone"


@dataclasses.dataclass(frozen=True, slots=True)
class JobInfo:
    """One job as slurmrestd reported it, whatever the API version."""

    job_id: str
    name: str
    state: str  # raw Slurm state, upper case, e.g. "RUNNING", "TIMEOUT"
    phase: JobPhase
    reason: str = ""  # state_reason; "" when Slurm says None
    nodes: tuple[str, ...] = ()  # expanded hostnames, first is the batch host
    user: str = ""
    partition: str = ""
    submit_time: int | None = None  # epoch seconds
    start_time: int | None = None
    end_time: int | None = None  # epoch seconds; for a running job, when its time limit ends
    time_limit_minutes: int | None = None  # None: unknown or UNLIMITED
    time_unlimited: bool = False  # the job's time limit is UNLIMITED/INFINITE
    restart_count: int = 0
    exit_code: int | None = None  # raw wait status as Slurm reports it


@dataclasses.dataclass(frozen=True, slots=True)
class JobSubmission:
    """Everything a submit sends, in Slurm-neutral units. Adapters turn it into JSON."""

    name: str
    script: str
    partition: str = ""
    nodes: int = 1
    current_working_directory: str = "/tmp"
    environment: tuple[tuple[str, str], ...] = ()
    time_limit_minutes: int | None = None
    memory_per_node_mb: int | None = None
    cpus_per_task: int | None = None
    gres: str = ""  # sent as tres_per_node "gres/<gres>"
    account: str = ""
    qos: str = ""
    constraints: str = ""
    excluded_nodes: str = ""  # comma separated hostnames (a Slurm hostlist is fine too)
    standard_output: str = ""
    standard_error: str = ""
    # sbatch --signal=B:<warning_signal>@<warning_secs>: Slurm signals the batch shell this long
    # before the job's end (and at preemption where PreemptParameters=send_user_signal).
    warning_signal: str = ""
    warning_secs: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class PingResult:
    ok: bool
    latency_ms: float
    api_version: str
    slurm_release: str = ""
    detail: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    address: str = ""
    state: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()
    cpus: int | None = None
    alloc_cpus: int | None = None
    real_memory_mb: int | None = None
    alloc_memory_mb: int | None = None
    specialized_memory_mb: int | None = None  # MemSpecLimit, only when > 0
    gres: str = ""
    features: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionInfo:
    name: str
    nodes: tuple[str, ...] = ()
    state: str = ""
    default_time_minutes: int | None = None
    max_time_minutes: int | None = None  # None = unlimited
    allowed_accounts: tuple[str, ...] = ()
    denied_accounts: tuple[str, ...] = ()
    is_default: bool = False
