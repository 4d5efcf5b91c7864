"""The provisioner's vocabulary: the snapshot a pass observes and the actions it plans.

Pure data. ``plan/`` turns a ``Snapshot`` into a list of actions; ``observe.py`` builds the
snapshot (database, slurmrestd, probes) and ``execute.py`` carries the actions out. Nothing in
this module or in ``plan/`` reads a clock, the database or the network.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import uuid

from provisioner.slurm.types import JobInfo, JobPhase

__all__ = [
    "Action",
    "Adopt",
    "Autoscale",
    "AutoscaleState",
    "Cancel",
    "CancelOrphan",
    "CancelReason",
    "DeleteEndpoint",
    "DeleteReplica",
    "EndpointView",
    "GuardState",
    "JobInfo",
    "JobPhase",
    "Knobs",
    "MarkLost",
    "ModelLoad",
    "ModelSpec",
    "Promote",
    "ReplicaState",
    "ReplicaView",
    "Retire",
    "ServingLoss",
    "SetAutoscale",
    "SetGuard",
    "SetTransition",
    "Snapshot",
    "Submit",
    "UpdateMessage",
]


class ReplicaState(enum.StrEnum):
    PENDING = "pending"  # job submitted (or about to be), waiting in the queue
    STARTING = "starting"  # job running, server not yet answering on its port window
    HEALTHY = "healthy"  # probe passed, endpoint registered
    DRAINING = "draining"  # removed on purpose; waits for its job to end
    LOST = "lost"  # job ended or vanished; kept for retention as a failed launch


class CancelReason(enum.StrEnum):
    SCALE_DOWN = "scale-down"
    OPERATOR_RESTART = "restart"
    PROBE_FAILED = "probe-failed"  # zombie: the provisioner's own probe kept failing
    GATEWAY_UNHEALTHY = "gateway-unhealthy"  # zombie: the gateway's inference check failed
    DRAIN = "drain"  # model disabled, spec removed or model deleted
    # handed over (walltime successor or rollout) and its drain bound passed
    HANDED_OVER = "handed-over"
    ROLLOUT = "rollout"  # a replica of the previous spec that did not serve yet


@dataclasses.dataclass(frozen=True, slots=True)
class Knobs:
    """Tunables, from OBLETH_PROVISIONER_* settings."""

    port_span: int = 8
    lost_retention_secs: int = 900
    restart_after_failures: int = 20  # <= 0 disables both zombie signals
    gateway_unhealthy_failures: int = 2
    gateway_verdict_max_age_secs: int = 3600
    failed_node_memory_secs: int = 3600  # how long a node where a replica failed is avoided
    job_prefix: str = "obleth-"
    # Replacement-storm guard: more than storm_losses losses of serving replicas of one model
    # within storm_window_secs slow its replacements down (backoff) and alert; never stop them.
    storm_losses: int = 10  # <= 0 disables the guard
    storm_window_secs: int = 600
    # A replica handed over (walltime) or rolled out (spec edit) leaves routing first; its job is
    # cancelled this long after, so in-flight streams can finish (OBLETH_PROVISIONER_DRAIN_SECS).
    drain_secs: int = 30


@dataclasses.dataclass(frozen=True, slots=True)
class GuardState:
    """The failed-launch breaker and the replacement-storm guard of one model.

    ``breaker``/``storm`` are the operator-facing sentences ("" = not tripped / no storm).
    """

    breaker: str = ""
    storm: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class Autoscale:
    """A model's autoscaling settings (ManagedSpec fields; only when max_replicas is set)."""

    min_replicas: int
    max_replicas: int
    target_in_flight: int = 16  # requests in flight per replica aimed at
    up_delay_secs: int = 60  # the load must stay above this long before a replica is added
    down_delay_secs: int = 300  # ... and below this long before one is removed
    zero_after_secs: int = 900  # min_replicas 0: no request for this long -> zero replicas


@dataclasses.dataclass(frozen=True, slots=True)
class AutoscaleState:
    """What autoscaling decided so far (ManagedSpec.autoscale_* fields, written by the pass).

    ``replicas`` is the decided count (None: not decided yet). ``since`` is when the load
    started asking for that count, ``changed_at`` when the count last changed. A pending change
    is ``pending_replicas`` wanted since ``pending_since``: the lowest count the load asked for
    in that window when scaling up, the highest when scaling down, so the load stayed above
    (below) it for the whole window. ``idle_since``: no request in flight since then.
    """

    replicas: int | None = None
    since: dt.datetime | None = None
    changed_at: dt.datetime | None = None
    pending_since: dt.datetime | None = None
    pending_replicas: int | None = None
    idle_since: dt.datetime | None = None
    message: str = ""
    message_at: dt.datetime | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class ModelLoad:
    """One model's load as the gateways report it (obleth/gateway/inflight.py), summed over
    the gateway processes alive now."""

    in_flight: int = 0  # requests being relayed or held (waiting for a replica) now
    last_request_at: dt.datetime | None = None  # the latest request's arrival, any process
    woken_at: dt.datetime | None = None  # the latest wake signal (a request found no replica)


@dataclasses.dataclass(frozen=True, slots=True)
class ModelSpec:
    """Desired state of one Slurm-hosted model (its managed spec), as the planner needs it.

    A model that has replicas but no enabled spec (disabled, spec deleted, model deleted) is
    given as ``enabled=False``: it is drained (target 0).
    """

    model_id: uuid.UUID
    model_name: str
    enabled: bool
    target_replicas: int
    max_job_failures: int = 0  # 0 = never stop submitting
    serving_port: int = 8000
    excluded_nodes: tuple[str, ...] = ()  # the operator's own exclude list
    node_count: int = 1
    # Slurm refused a submit for this model moments ago: no new submits this pass (backoff).
    hold_submits: bool = False
    # What the model's page/API/gateway show now (ManagedSpec fields): the plan emits SetGuard
    # only when what it decides differs, so an unchanged state writes nothing.
    guard: GuardState = dataclasses.field(default_factory=GuardState)
    # Fingerprint of the fields that change the job (provisioner/spec_fingerprint.py); a replica
    # whose spec_fingerprint differs is rolled out make-before-break. "" = unknown (no rollout).
    spec_fingerprint: str = ""
    # A serving replica whose job ends within this many seconds gets a successor (0 = never).
    handover_secs: int = 0
    # What the spec shows now (ManagedSpec.handover_message / rollout_message): the plan emits
    # SetTransition only when what it decides differs.
    handover_message: str = ""
    rollout_message: str = ""
    # Autoscaling settings (None: off, target_replicas is the count) and what it decided so far.
    autoscale: Autoscale | None = None
    autoscale_state: AutoscaleState = dataclasses.field(default_factory=AutoscaleState)


@dataclasses.dataclass(frozen=True, slots=True)
class ReplicaView:
    id: uuid.UUID
    model_id: uuid.UUID
    state: ReplicaState
    job_name: str  # set before submit; identifies the job if the submit answer was lost
    created_at: dt.datetime
    job_id: str = ""  # "" until the submit answered (crash safety: adopt by job_name)
    submitted_at: dt.datetime | None = None  # when the submit was sent (None: not yet)
    port_base: int | None = None
    endpoint_id: uuid.UUID | None = None
    cancel_requested: bool = False
    nodes: tuple[str, ...] = ()
    last_message: str = ""
    probe_failures: int = 0  # decaying zombie counter, persisted on the row
    excluded_nodes: tuple[str, ...] = ()  # nodes this replica's submit asked to avoid
    served: bool = False  # was ever healthy (promoted): its end is churn unless it failed
    # A lost row's end as recorded in its launch history ("" when unknown)
    end_state: str = ""
    exit_code: int | None = None
    # When it was marked lost (its job's end as the provisioner saw it); None on rows from before
    # the field (then the creation time stands in). Retention and the breaker count from here.
    lost_at: dt.datetime | None = None
    # Walltime handover: the serving replica this one was submitted to replace before its end.
    successor_of: uuid.UUID | None = None
    # The spec fingerprint this replica's job was submitted with ("" = from before fingerprints:
    # taken as current, so an upgrade does not roll every model out).
    spec_fingerprint: str = ""
    # Set on a draining row that left routing but whose job still runs for in-flight requests:
    # its job is cancelled at this time. None: the job was already cancelled (plain draining).
    drain_deadline: dt.datetime | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class EndpointView:
    """An endpoint of a Slurm-hosted model (only those the provisioner may own)."""

    id: uuid.UUID
    model_id: uuid.UUID
    name: str
    api_base: str
    replica_id: uuid.UUID | None  # the replica it was registered for (None: added by hand)
    health_status: str = "unknown"  # gateway verdict: healthy / degraded / unhealthy / unknown
    consecutive_failures: int = 0
    last_checked_at: dt.datetime | None = None
    # HTTP status of the last check's answer (None: no answer). An answer proves the engine is
    # up, so only unanswered checks are a zombie signal.
    last_http_status: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class FailedPlacement:
    """A recent replica failure on a node (from launch history), used to place away from it."""

    model_id: uuid.UUID
    node: str
    ended_at: dt.datetime


@dataclasses.dataclass(frozen=True, slots=True)
class ServingLoss:
    """A replica of the model that had served and then ended (from launch history)."""

    model_id: uuid.UUID
    ended_at: dt.datetime


@dataclasses.dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one pass knows. Built by observe; the only input of plan()."""

    now: dt.datetime
    knobs: Knobs
    specs: tuple[ModelSpec, ...]
    replicas: tuple[ReplicaView, ...]
    # Jobs from ONE listing of slurmrestd, filtered to our job-name prefix, keyed by job id.
    jobs: dict[str, JobInfo]
    # When that listing was taken; a replica submitted after it may be missing from it.
    jobs_listed_at: dt.datetime
    # replica id -> lowest port of its window that answered the health probe as ready.
    # A replica that was probed and had no ready port maps to None; one not probed is absent.
    probes: dict[uuid.UUID, int | None]
    # node hostname -> address to register (override, resolved IP, or the name itself)
    addresses: dict[str, str]
    endpoints: tuple[EndpointView, ...] = ()
    # False when the endpoint list could not be read: no dangling/orphan endpoint repairs then.
    endpoints_trusted: bool = True
    failed_placements: tuple[FailedPlacement, ...] = ()
    # Node names of the partitions' nodes that are up, per model (for placing away); empty = unknown
    candidate_nodes: dict[uuid.UUID, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    # Ends of serving replicas already recorded, within the storm window (for the storm guard)
    serving_losses: tuple[ServingLoss, ...] = ()
    # Replicas whose server announced it is draining (Slurm's warning signal before the job's end
    # or a preemption reached it): handed over at once, as if their end were near.
    drain_signals: frozenset[uuid.UUID] = frozenset()
    # In-flight requests per model from the gateways (one Redis read per pass). None: unknown
    # (Redis unreadable, or no gateway process reports): autoscaling keeps its count then, and
    # ``load_problem`` says why. A model no gateway has seen has no entry (no load).
    load: dict[uuid.UUID, ModelLoad] | None = None
    load_problem: str = "the gateways' in-flight counts were not read"


# ---------------------------------------------------------------------------------------- actions


@dataclasses.dataclass(frozen=True, slots=True)
class Submit:
    """Create a replica row (state pending, job name set) and then submit its job.

    ``replica_id`` is chosen by the planner so the job name is known before the submit;
    ``existing`` is True when the row already exists (its earlier submit never reached Slurm).
    """

    model_id: uuid.UUID
    replica_id: uuid.UUID
    job_name: str
    port_base: int
    excluded_nodes: tuple[str, ...] = ()
    existing: bool = False
    successor_of: uuid.UUID | None = None  # walltime handover: the replica it replaces


@dataclasses.dataclass(frozen=True, slots=True)
class Adopt:
    """A row whose submit answer was lost: its job was found by name in the listing."""

    model_id: uuid.UUID
    replica_id: uuid.UUID
    job_id: str


@dataclasses.dataclass(frozen=True, slots=True)
class Promote:
    """Register (or reuse) the endpoint and mark the replica healthy."""

    model_id: uuid.UUID
    replica_id: uuid.UUID
    node: str
    address: str
    port: int
    api_base: str  # http://<address>:<port>/v1
    endpoint_name: str
    endpoint_id: uuid.UUID | None = None  # an existing endpoint to reuse/fix, if any
    # Slurm's start time of the job (epoch seconds), recorded in the launch history when the
    # pass never saw the job starting: the measured job-start-to-serving time needs it.
    job_started_at: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class MarkLost:
    model_id: uuid.UUID
    replica_id: uuid.UUID
    message: str  # "job gone" or "job ended: TIMEOUT (TimeLimit)"
    endpoint_id: uuid.UUID | None = None
    end_state: str = "gone"  # Slurm terminal state, or "gone"
    end_reason: str = ""
    nodes: tuple[str, ...] = ()
    exit_code: int | None = None
    # False: churn (a replica that served, preempted/cancelled/timed out): replaced at once and
    # not counted toward the model's "Stop after failed launches".
    failed_launch: bool = True
    served: bool = False  # the replica had served (its loss counts toward the storm guard)


@dataclasses.dataclass(frozen=True, slots=True)
class SettleLoss:
    """A replica marked lost while its job was COMPLETING (Slurm 22.05 hides the end state
    under that flag) now lists its real end: record it on the launch and the row, and whether
    it was a failed launch after all (FAILED, OUT_OF_MEMORY, ...) or churn (CANCELLED, ...)."""

    model_id: uuid.UUID
    replica_id: uuid.UUID
    message: str
    end_state: str
    end_reason: str = ""
    exit_code: int | None = None
    failed_launch: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class Cancel:
    """Deregister the endpoint first, then cancel the job, then mark the row draining."""

    model_id: uuid.UUID
    replica_id: uuid.UUID
    job_id: str
    reason: CancelReason
    message: str
    endpoint_id: uuid.UUID | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Retire:
    """Take a serving replica out of routing (delete its endpoint) and mark it draining with a
    deadline; its job keeps running so in-flight requests finish, and is cancelled (``Cancel``)
    once ``drain_deadline`` has passed or as soon as the job ends by itself."""

    model_id: uuid.UUID
    replica_id: uuid.UUID
    drain_deadline: dt.datetime
    message: str
    endpoint_id: uuid.UUID | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class CancelOrphan:
    """A live job carrying our prefix that no replica row knows: cancel it."""

    job_id: str
    job_name: str


@dataclasses.dataclass(frozen=True, slots=True)
class DeleteReplica:
    model_id: uuid.UUID
    replica_id: uuid.UUID
    why: str


@dataclasses.dataclass(frozen=True, slots=True)
class DeleteEndpoint:
    """An endpoint the provisioner registered whose replica is not serving any more."""

    model_id: uuid.UUID
    endpoint_id: uuid.UUID
    why: str


@dataclasses.dataclass(frozen=True, slots=True)
class UpdateMessage:
    """Observational fields of a row: message, nodes, probe counter, state starting."""

    model_id: uuid.UUID
    replica_id: uuid.UUID
    message: str | None = None
    nodes: tuple[str, ...] | None = None
    probe_failures: int | None = None
    state: ReplicaState | None = None  # only PENDING -> STARTING transitions use this


@dataclasses.dataclass(frozen=True, slots=True)
class SetGuard:
    """The model's breaker or storm state changed: record it on the spec, alert, log."""

    model_id: uuid.UUID
    breaker: str  # "" = not tripped
    storm: str  # "" = no storm
    tripped: bool = False  # the breaker trips in this pass (alert + WARNING)
    storm_started: bool = False  # the storm guard engages in this pass (alert + WARNING)


@dataclasses.dataclass(frozen=True, slots=True)
class SetTransition:
    """The model's walltime-handover or rollout sentence changed: record it on the spec."""

    model_id: uuid.UUID
    handover: str  # "" = no handover needs attention
    rollout: str  # "" = no rollout in progress or stopped


@dataclasses.dataclass(frozen=True, slots=True)
class SetAutoscale:
    """Record what autoscaling decided on the spec (count, timing, reason); ``change`` says
    what changed in this pass ("" = only the timing or the sentence) for the log."""

    model_id: uuid.UUID
    replicas: int | None
    since: dt.datetime | None
    changed_at: dt.datetime | None
    pending_since: dt.datetime | None
    pending_replicas: int | None
    idle_since: dt.datetime | None
    message: str
    change: str = ""


Action = (
    Submit
    | Adopt
    | Promote
    | MarkLost
    | SettleLoss
    | Cancel
    | CancelOrphan
    | DeleteReplica
    | DeleteEndpoint
    | UpdateMessage
    | SetGuard
    | Retire
    | SetTransition
    | SetAutoscale
)
