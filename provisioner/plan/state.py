"""The planner's working state for one pass: the per-model ``_Group`` of decided actions (and
their output order), the ``_Pass`` indexes over the snapshot, and the ``_Alive`` record of a live
replica with its scale-down rank. Also the small time and job-id helpers they share.

Pure data and lookups: nothing here decides an action.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import uuid

from provisioner.domain import (
    Action,
    Adopt,
    Cancel,
    DeleteEndpoint,
    DeleteReplica,
    JobInfo,
    JobPhase,
    MarkLost,
    ModelSpec,
    Promote,
    ReplicaState,
    ReplicaView,
    Retire,
    SetAutoscale,
    SetGuard,
    SettleLoss,
    SetTransition,
    Snapshot,
    Submit,
    UpdateMessage,
)


def _submitted_after_listing(replica: ReplicaView, jobs_listed_at: dt.datetime) -> bool:
    return replica.submitted_at is not None and replica.submitted_at >= jobs_listed_at


def _age_secs(now: dt.datetime, then: dt.datetime) -> float:
    return (now - then).total_seconds()


def _job_sort_key(job_id: str) -> tuple[int, int, str]:
    return (0, int(job_id), "") if job_id.isdigit() else (1, 0, job_id)


class _Kind(enum.Enum):
    JOB = "job"  # has a job id; cancellable
    UNLISTED = "unlisted"  # submitted after the listing, no job id known yet: wait
    RESUBMIT = "resubmit"  # no job ever reached Slurm: submit again (or just delete)


_RANK_UNSUBMITTED = -1
_RANK_QUEUED = 0
_RANK_LOADING = 1
_RANK_SERVING = 2


@dataclasses.dataclass(slots=True)
class _Alive:
    replica: ReplicaView
    rank: int
    kind: _Kind
    job_id: str = ""
    endpoint_id: uuid.UUID | None = None


@dataclasses.dataclass(slots=True)
class _Update:
    message: str | None = None
    nodes: tuple[str, ...] | None = None
    probe_failures: int | None = None
    state: ReplicaState | None = None


@dataclasses.dataclass(slots=True)
class _Group:
    model_id: uuid.UUID
    spec: ModelSpec | None  # None: drain group
    replicas: list[ReplicaView] = dataclasses.field(default_factory=list)
    delete_endpoints: list[DeleteEndpoint] = dataclasses.field(default_factory=list)
    retires: list[Retire] = dataclasses.field(default_factory=list)
    cancels: list[Cancel] = dataclasses.field(default_factory=list)
    mark_losts: list[MarkLost] = dataclasses.field(default_factory=list)
    settles: list[SettleLoss] = dataclasses.field(default_factory=list)
    delete_replicas: list[DeleteReplica] = dataclasses.field(default_factory=list)
    adopts: list[Adopt] = dataclasses.field(default_factory=list)
    promotes: dict[uuid.UUID, Promote] = dataclasses.field(default_factory=dict)
    updates: dict[uuid.UUID, _Update] = dataclasses.field(default_factory=dict)
    submits: list[Submit] = dataclasses.field(default_factory=list)
    guard: SetGuard | None = None
    transition: SetTransition | None = None
    autoscale: SetAutoscale | None = None

    def actions(self) -> list[Action]:
        out: list[Action] = []
        out.extend(self.delete_endpoints)
        out.extend(self.retires)
        out.extend(self.cancels)
        out.extend(self.mark_losts)
        out.extend(self.settles)
        out.extend(self.delete_replicas)
        out.extend(self.adopts)
        out.extend(self.promotes.values())
        for replica_id, u in self.updates.items():
            if (u.message, u.nodes, u.probe_failures, u.state) == (None, None, None, None):
                continue
            out.append(
                UpdateMessage(
                    model_id=self.model_id,
                    replica_id=replica_id,
                    message=u.message,
                    nodes=u.nodes,
                    probe_failures=u.probe_failures,
                    state=u.state,
                )
            )
        if self.guard is not None:
            out.append(self.guard)
        if self.transition is not None:
            out.append(self.transition)
        if self.autoscale is not None:
            out.append(self.autoscale)
        out.extend(self.submits)
        return out


class _Pass:
    """Indexes over the snapshot plus what this pass has decided so far."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.s = snapshot
        self.k = snapshot.knobs
        self.endpoint_ids = {e.id for e in snapshot.endpoints}
        self.endpoints_by_id = {e.id: e for e in snapshot.endpoints}
        # Live jobs first, then ended; lowest id first: the job a row without a job id adopts.
        self.jobs_by_name: dict[str, JobInfo] = {}
        phase_order = {JobPhase.RUNNING: 0, JobPhase.PENDING: 1, JobPhase.GONE: 2}
        for job in sorted(
            snapshot.jobs.values(),
            key=lambda j: (phase_order[j.phase], _job_sort_key(j.job_id)),
        ):
            self.jobs_by_name.setdefault(job.name, job)
        # replica id -> job this pass reads for it (after adoption); None: none listed
        self.effective_job: dict[uuid.UUID, JobInfo | None] = {}
        self.effective_job_id: dict[uuid.UUID, str] = {}
        self.ended: set[uuid.UUID] = set()  # cancelled, marked lost or deleted this pass
        self.carried_endpoints: set[uuid.UUID] = set()  # deleted by a Cancel/MarkLost
        self.reused_endpoints: set[uuid.UUID] = set()  # kept by a Promote
        # Windows are bounded (next_free_window), so a replacement may share the window of the
        # replica it replaces while that one's server is still shutting down (KillWait): the
        # new server takes the next free port of the window and the probe tells the two apart
        # by the replica key. With a one-port span there is no room: a draining row's window
        # stays taken until its row is gone.
        free_states = (
            (ReplicaState.LOST, ReplicaState.DRAINING)
            if snapshot.knobs.port_span > 1
            else (ReplicaState.LOST,)
        )
        # Across models: two servers starting at once in one window of a shared node would race
        # for its first port. Models deployed from one recipe get distinct ranges when deployed
        # (obleth.core.ports.first_free_range); ranges an operator overlaps wait, with a message.
        self.taken_windows: list[int] = [
            r.port_base
            for r in snapshot.replicas
            if r.port_base is not None and r.state not in free_states
        ]

    # endpoint helpers ---------------------------------------------------------------------
    def endpoint_known(self, endpoint_id: uuid.UUID | None) -> uuid.UUID | None:
        """The row's endpoint id, or None when the trusted list says it does not exist."""
        if endpoint_id is None:
            return None
        if self.s.endpoints_trusted and endpoint_id not in self.endpoint_ids:
            return None
        return endpoint_id

    def is_dangling(self, replica: ReplicaView) -> bool:
        return (
            replica.endpoint_id is not None
            and self.s.endpoints_trusted
            and replica.endpoint_id not in self.endpoint_ids
        )

    def reusable_endpoint(
        self, model_id: uuid.UUID, name: str, replica_id: uuid.UUID
    ) -> uuid.UUID | None:
        for e in self.s.endpoints:
            if e.model_id == model_id and e.name == name:
                return e.id
        for e in self.s.endpoints:
            if e.model_id == model_id and e.replica_id == replica_id:
                return e.id
        return None
