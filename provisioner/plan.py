"""The planner: one pass's ``Snapshot`` in, an ordered list of actions out.

Pure: no clock (``snapshot.now`` is the time), no database, no network, no Django. The same
snapshot always gives the same actions in the same order.

Output order. Models are planned one at a time: enabled specs in ``snapshot.specs`` order, then
the drain groups (models with replicas or provisioner-made endpoints but no enabled spec) in order
of first appearance. Each model's actions come in this order::

    DeleteEndpoint, Retire, Cancel, MarkLost, DeleteReplica, Adopt, Promote, UpdateMessage,
    SetGuard, SetTransition, SetAutoscale, Submit

so that routing stops before jobs are touched, ended jobs are recorded before their replacements
are submitted, and submits (the slowest and most likely to fail) come last. ``CancelOrphan``
actions for jobs no replica owns come after every model. Within one kind, actions follow the
replicas sorted by ``(created_at, id)``.

Replica rules per model (reference section 2.4, plus crash safety and repairs):

* ``lost``: ``DeleteReplica`` once its job ended (``lost_at``) ``lost_retention_secs`` ago; never
  alive. The kept ones
  that were failed launches (``is_failed_launch``) count toward the failed-launch breaker; churn
  (a replica that served, then was preempted, requeued, cancelled by someone else or reached its
  time limit) is replaced at once and never counted.
* Replacement storm: more than ``storm_losses`` losses of serving replicas of one model within
  ``storm_window_secs`` slow its new submits down (``storm_backoff_secs`` since its latest submit)
  and raise an alert (``SetGuard``); they never stop.
* ``draining``: ``DeleteReplica`` when its job is absent or ended; otherwise wait.
* ``job_id == ""`` (row written, submit answer lost or never sent): a job carrying the row's
  ``job_name`` in the listing is adopted; otherwise, if the submit was never sent or was sent
  before the listing was taken, the row is submitted again (``existing=True``, same id, name and
  port window). If it was sent after the listing, wait.
* A job missing from the listing is "gone" unless the submit happened after the listing was taken.
* Operator restart, zombie self-heal (at most one per model per pass), promotion, annotation,
  the failed-launch breaker, scale-up with distinct port windows and placement away from nodes
  where the model recently failed, scale-down by rank (queued, loading, serving) then age.
* Provisioner-made endpoints whose replica is not serving are deleted; hand-made ones never.
* Autoscaling (``provisioner/autoscale.py``): a spec with ``autoscale`` set gets its count from
  the gateways' in-flight requests (``snapshot.load``), which replaces ``target_replicas`` for
  the rest of the model's plan; what it decided is recorded with ``SetAutoscale``. Its
  scale-down retires serving replicas (out of routing, ``drain_secs`` for in-flight requests,
  then cancelled) instead of cancelling them at once.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import ipaddress
import re
import urllib.parse
import uuid
from collections.abc import Iterable, Mapping, Sequence

from obleth.core.ports import window_bases
from provisioner import autoscale
from provisioner.domain import (
    Action,
    Adopt,
    AutoscaleState,
    Cancel,
    CancelOrphan,
    CancelReason,
    DeleteEndpoint,
    DeleteReplica,
    EndpointView,
    JobInfo,
    JobPhase,
    MarkLost,
    ModelLoad,
    ModelSpec,
    Promote,
    ReplicaState,
    ReplicaView,
    Retire,
    SetAutoscale,
    SetGuard,
    SetTransition,
    Snapshot,
    Submit,
    UpdateMessage,
)
from provisioner.transitions import ROLLOUT_SURGE, Entry, decide

__all__ = [
    "FAILURE_STATES",
    "HEALTHY_MESSAGE",
    "RESUME_HINT",
    "breaker_message",
    "is_failed_launch",
    "storm_backoff_secs",
    "endpoint_name_for",
    "job_name_for",
    "lost_message",
    "lost_since",
    "mass_vanish",
    "new_replica_id",
    "next_free_window",
    "plan",
    "promotions_while_held",
    "status_message",
]

# Message kept on a healthy replica whose job is running. The executor writes "promoted" when it
# promotes; both are accepted as current so a serving row is not rewritten every pass.
HEALTHY_MESSAGE = "serving"
_HEALTHY_MESSAGES = frozenset({HEALTHY_MESSAGE, "promoted"})

CANCEL_MESSAGES: dict[CancelReason, str] = {
    CancelReason.SCALE_DOWN: "scaled down",  # a drained scale-down: SCALED_DOWN_CANCELLED
    CancelReason.OPERATOR_RESTART: "restart requested",
    CancelReason.PROBE_FAILED: "restarting: failed health probes while job running",
    CancelReason.DRAIN: "draining: the model is no longer provisioned",
    CancelReason.HANDED_OVER: "handed over: drain bound passed, job cancelled",
    CancelReason.ROLLOUT: "rolled out: replaced by the edited spec before it served",
}

# A serving replica removed by autoscaling leaves routing with this message (then drains); the
# pass that cancels its job after the drain bound tells it from a handover by the prefix.
SCALED_DOWN_PREFIX = "scaled down by autoscaling"
SCALED_DOWN_DRAINING = (
    SCALED_DOWN_PREFIX + ": draining in-flight requests for up to {secs} s, then its job is "
    "cancelled"
)
SCALED_DOWN_CANCELLED = SCALED_DOWN_PREFIX + ": drain bound passed, job cancelled"

# Slurm end states that are a failed launch even after the replica served.
FAILURE_STATES = frozenset({"FAILED", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL"})
# End states that are churn for a replica that served, whatever the exit code (signals).
CHURN_STATES = frozenset(
    {
        "PREEMPTED",
        "REQUEUED",
        "REQUEUE_FED",
        "REQUEUE_HOLD",
        "RESIZING",
        "SUSPENDED",
        "CANCELLED",
        "TIMEOUT",
        "DEADLINE",
        "GONE",
        "",
    }
)
# Ends that someone or something else chose (preemption, a requeue, a cancel by another user or
# an admin, suspension): never the spec's fault, so never a failed launch, served or not.
EXTERNAL_END_STATES = frozenset(
    {"PREEMPTED", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESIZING", "SUSPENDED", "CANCELLED"}
)
RESUME_HINT = (
    'Fix the cause (the job logs say why), then press "Try once more" on the model\'s page '
    '(or POST /api/v1/models/<id>/replicas/clear-lost/), or raise "Stop after failed '
    'launches" (0 never stops).'
)
_STORM_BACKOFF_BASE_SECS = 15
_STORM_BACKOFF_MAX_SECS = 300

_NO_LOAD = ModelLoad()  # a model no gateway has seen a request for

# Namespace of the replica ids the planner chooses (uuid5 of model id, pass time and index).
_REPLICA_NAMESPACE = uuid.UUID("6f1c2d3e-8b4a-5c6d-9e0f-0b1e7a2c4d5f")
_JOB_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


# ------------------------------------------------------------------------------ pure helpers


def next_free_window(
    serving_port: int, span: int, taken: Iterable[int], replicas: int
) -> int | None:
    """Base of the first of the model's windows ``serving_port + i*span`` (``0 <= i <
    replicas``, inside 1..65535) that overlaps no window starting at a base in ``taken``; None
    when every one is taken (the replacement waits: a window never lies above the model's range,
    where another user's server may listen). ``span`` is floored at 1.

    With one model every base is aligned, so this is the smallest base not in ``taken``; the
    overlap test also keeps models with different serving ports apart on a shared node.
    """
    span = max(span, 1)
    bases = sorted(set(taken))
    for base in window_bases(serving_port, replicas, span):
        if all(base + span <= t or t + span <= base for t in bases):
            return base
    return None


def window_wait_message(serving_port: int, span: int, replicas: int) -> str:
    """The row message of a replica waiting for a free window of its model's range."""
    span = max(span, 1)
    last = serving_port + max(replicas, 1) * span - 1
    return (
        f"waiting for a free port window in {serving_port}-{min(last, 65535)} "
        f"({replicas} window(s) of {span}); every one is still in use"
    )


def job_name_for(prefix: str, model_name: str, replica_id: uuid.UUID) -> str:
    """``<prefix><model_name>-<first 12 hex of the replica id>``.

    Characters other than letters, digits, ``.``, ``_`` and ``-`` in the model name become
    ``-``: the job name also names the job's output files, where ``/`` or spaces would break.
    """
    safe_name = _JOB_NAME_UNSAFE.sub("-", model_name)
    return f"{prefix}{safe_name}-{replica_id.hex[:12]}"


def endpoint_name_for(prefix: str, model_name: str, replica_id: uuid.UUID) -> str:
    """``<prefix><model_name>-<replica id>``: the endpoint a promoted replica is registered as."""
    return f"{prefix}{model_name}-{replica_id}"


def new_replica_id(model_id: uuid.UUID, now: dt.datetime, index: int) -> uuid.UUID:
    """The id of the ``index``-th replica submitted for ``model_id`` in the pass at ``now``."""
    return uuid.uuid5(_REPLICA_NAMESPACE, f"{model_id}/{now.isoformat()}/{index}")


def _clean_reason(reason: str | None) -> str:
    text = (reason or "").strip()
    return "" if text.lower() == "none" else text


def lost_message(state: str | None, reason: str | None = "") -> str:
    """``job gone`` (no state), ``job ended: STATE`` or ``job ended: STATE (reason)``."""
    state_text = (state or "").strip()
    if not state_text:
        return "job gone"
    why = _clean_reason(reason)
    return f"job ended: {state_text} ({why})" if why else f"job ended: {state_text}"


def status_message(job: JobInfo) -> str:
    """``STATE — reason`` for a queued or running job; the reason is left out when blank/None."""
    state_text = job.state.strip() or job.phase.value.upper()
    why = _clean_reason(job.reason)
    return f"{state_text} \u2014 {why}" if why else state_text


def is_failed_launch(end_state: str, served: bool, exit_code: int | None = None) -> bool:
    """Whether a replica's end counts toward "Stop after failed launches".

    A job preempted, requeued, suspended or cancelled by someone else is churn whether or not
    its replica had served yet (on a preemptible cluster a pending or starting job is preempted
    as often as a serving one). Any other end before the replica served is a failed launch (the
    engine never came up: it exited, crashed, ran out of memory or time, or its job vanished).
    After serving, only FAILED, OUT_OF_MEMORY, NODE_FAIL, BOOT_FAIL, or a non-zero exit in a
    state that is not preemption, cancellation or a time limit, is one. The rest is churn.
    """
    words = (end_state or "").strip().upper().split()
    state = words[0] if words else ""
    if state in EXTERNAL_END_STATES:
        return False
    if not served:
        return True
    if state in FAILURE_STATES:
        return True
    if state in CHURN_STATES:
        return False
    return bool(exit_code)  # COMPLETED (exit 0) is churn; an unknown state with an error is not


def storm_backoff_secs(excess: int) -> int:
    """Seconds between a storming model's submits: 15 s for the first loss past the limit,
    doubling with each further loss, at most 300 s."""
    steps = max(excess - 1, 0)
    return min(_STORM_BACKOFF_BASE_SECS * 2 ** min(steps, 10), _STORM_BACKOFF_MAX_SECS)


def breaker_message(failures: int, limit: int, last: str) -> str:
    """The sentence the model's page, the API, the alert and the gateway's 503 show."""
    tail = f" (last: {last})" if last else ""
    return (
        f"Stopped launching replicas after {failures} failed launches "
        f"(Stop after failed launches = {limit}){tail}. {RESUME_HINT}"
    )


def mass_vanish(
    replicas: Sequence[ReplicaView], jobs: Mapping[str, JobInfo], jobs_listed_at: dt.datetime
) -> str | None:
    """The reason to hold the whole pass, or None.

    Tracked jobs are the distinct job ids of replicas that are not lost or draining and whose
    submit went out before the listing was taken. When there are at least two and none of them
    is in the listing, the listing is not trusted (wrong cluster, URL or API version).
    """
    tracked = {
        r.job_id
        for r in replicas
        if r.job_id
        and r.state not in (ReplicaState.LOST, ReplicaState.DRAINING)
        and not _submitted_after_listing(r, jobs_listed_at)
    }
    if len(tracked) >= 2 and not any(job_id in jobs for job_id in tracked):
        return (
            f"all {len(tracked)} tracked slurm jobs are missing from the job listing; "
            "holding the pass (check the slurmrestd URL, API version and cluster)"
        )
    return None


def _submitted_after_listing(replica: ReplicaView, jobs_listed_at: dt.datetime) -> bool:
    return replica.submitted_at is not None and replica.submitted_at >= jobs_listed_at


def _age_secs(now: dt.datetime, then: dt.datetime) -> float:
    return (now - then).total_seconds()


def _url_host(address: str) -> str:
    bare = address.strip("[]")
    return f"[{bare}]" if ":" in bare else bare


def _api_base(address: str, port: int) -> str:
    return f"http://{_url_host(address)}:{port}/v1"


def _as_ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return None


def _job_sort_key(job_id: str) -> tuple[int, int, str]:
    return (0, int(job_id), "") if job_id.isdigit() else (1, 0, job_id)


# ------------------------------------------------------------------------------ pass state


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


# ------------------------------------------------------------------------------ plan


def plan(snapshot: Snapshot) -> list[Action]:
    """Every action of one pass, in execution order (see the module docstring)."""
    ps = _Pass(snapshot)
    groups = _groups(snapshot)
    for group in groups.values():
        _plan_replicas(ps, group)
    if snapshot.endpoints_trusted:
        _plan_endpoints(ps, groups)
    actions: list[Action] = []
    for group in groups.values():
        actions.extend(group.actions())
    actions.extend(_orphans(ps))
    return actions


def promotions_while_held(snapshot: Snapshot) -> list[Promote]:
    """The only actions of a pass whose job listing failed (slurmrestd down or erroring): promote
    replicas already seen running on a known node (state ``starting``, nodes recorded) whose
    server now answers the probe. Nothing else: no loss, submit, cancel or endpoint removal is
    decided without the listing. ``snapshot.jobs`` is not read (it is empty).

    A replica whose job started just before an outage would otherwise wait for slurmrestd to come
    back (up to the outage's length) although it serves. If its job ended meanwhile, the first pass
    with a listing marks it lost and removes the endpoint, as for any loss.
    """
    ps = _Pass(snapshot)
    enabled = {spec.model_id: spec for spec in snapshot.specs if spec.enabled}
    out: list[Promote] = []
    for r in sorted(snapshot.replicas, key=lambda r: (r.created_at, r.id.hex)):
        spec = enabled.get(r.model_id)
        port = snapshot.probes.get(r.id)
        if (
            spec is None
            or r.state is not ReplicaState.STARTING
            or not r.job_id
            or not r.nodes
            or r.cancel_requested
            or not isinstance(port, int)
        ):
            continue
        group = _Group(r.model_id, spec)
        _promote(ps, group, spec, r, r.nodes[0], port)
        out.extend(group.promotes.values())
    return out


def _groups(snapshot: Snapshot) -> dict[uuid.UUID, _Group]:
    groups: dict[uuid.UUID, _Group] = {}
    for spec in snapshot.specs:
        if spec.enabled and spec.model_id not in groups:
            groups[spec.model_id] = _Group(spec.model_id, spec)
    for r in snapshot.replicas:
        if r.model_id not in groups:
            groups[r.model_id] = _Group(r.model_id, None)
        groups[r.model_id].replicas.append(r)
    for e in snapshot.endpoints:
        if e.replica_id is not None and e.model_id not in groups:
            groups[e.model_id] = _Group(e.model_id, None)
    for group in groups.values():
        group.replicas.sort(key=lambda r: (r.created_at, r.id.hex))
    return groups


def lost_since(r: ReplicaView) -> dt.datetime:
    """When a lost replica's job ended (``lost_at``); the row's creation for rows from before
    that field. Lost retention and the failed-launch breaker's window count from here."""
    return r.lost_at if r.lost_at is not None else r.created_at


def _plan_replicas(ps: _Pass, g: _Group) -> None:
    s, k = ps.s, ps.k
    spec = g.spec
    if spec is not None:
        spec = g.spec = _plan_autoscale(ps, g, spec)
    alive: list[_Alive] = []
    kept_lost = 0
    last_failure = ""
    failed_nodes: list[str] = []
    restart_budget = 1

    for r in g.replicas:
        if r.state is ReplicaState.LOST:
            if _age_secs(s.now, lost_since(r)) >= k.lost_retention_secs:
                g.delete_replicas.append(
                    DeleteReplica(r.model_id, r.id, why="lost replica past its retention")
                )
                ps.ended.add(r.id)
            elif is_failed_launch(r.end_state, r.served, r.exit_code):
                kept_lost += 1
                last_failure = r.last_message
            ps.effective_job_id[r.id] = r.job_id
            ps.effective_job[r.id] = s.jobs.get(r.job_id) if r.job_id else None
            continue

        job_id = r.job_id
        job = s.jobs.get(job_id) if job_id else None

        if r.state is ReplicaState.DRAINING:
            # A draining row without a job id: any live job carrying its name is left to the
            # orphan sweep (CancelOrphan), so the row can go now.
            ps.effective_job_id[r.id] = job_id
            ps.effective_job[r.id] = job
            if job is None or job.phase is JobPhase.GONE:
                g.delete_replicas.append(DeleteReplica(r.model_id, r.id, why="drained: job ended"))
                ps.ended.add(r.id)
                _release_window(ps, r)
            elif r.drain_deadline is not None and s.now >= r.drain_deadline and job_id:
                # Handed over (or scaled down): out of routing since Retire; in-flight requests
                # had their bound.
                if r.last_message.startswith(SCALED_DOWN_PREFIX):
                    _cancel(ps, g, r, job_id, CancelReason.SCALE_DOWN, None, SCALED_DOWN_CANCELLED)
                else:
                    _cancel(ps, g, r, job_id, CancelReason.HANDED_OVER, None)
            continue

        if not job_id:
            named = ps.jobs_by_name.get(r.job_name) if r.job_name else None
            if named is not None:
                g.adopts.append(Adopt(r.model_id, r.id, named.job_id))
                job_id, job = named.job_id, named
            elif _submitted_after_listing(r, s.jobs_listed_at):
                ps.effective_job_id[r.id] = ""
                ps.effective_job[r.id] = None
                alive.append(_Alive(r, _RANK_QUEUED, _Kind.UNLISTED))
                continue
            else:
                ps.effective_job_id[r.id] = ""
                ps.effective_job[r.id] = None
                if r.cancel_requested and spec is not None:
                    g.delete_replicas.append(
                        DeleteReplica(
                            r.model_id, r.id, why="restart requested before its job was submitted"
                        )
                    )
                    ps.ended.add(r.id)
                    _release_window(ps, r)  # no job ever ran in it
                else:
                    alive.append(_Alive(r, _RANK_UNSUBMITTED, _Kind.RESUBMIT))
                continue

        ps.effective_job_id[r.id] = job_id
        ps.effective_job[r.id] = job
        endpoint_id = ps.endpoint_known(r.endpoint_id)

        if job is None:
            if _submitted_after_listing(r, s.jobs_listed_at):
                alive.append(_Alive(r, _RANK_QUEUED, _Kind.JOB, job_id, endpoint_id))
                continue
            _mark_lost(ps, g, r, None, endpoint_id)
            failed_nodes.extend(r.nodes)
            continue
        if job.phase is JobPhase.GONE or (r.state is ReplicaState.HEALTHY and _ending(job)):
            _mark_lost(ps, g, r, job, endpoint_id)
            failed_nodes.extend(job.nodes or r.nodes)
            continue

        # The job is queued or running.
        if spec is None:  # drain group: every live job is cancelled below (target 0)
            rank = _RANK_QUEUED if job.phase is JobPhase.PENDING else _RANK_LOADING
            alive.append(_Alive(r, rank, _Kind.JOB, job_id, endpoint_id))
            continue

        if r.cancel_requested:
            _cancel(ps, g, r, job_id, CancelReason.OPERATOR_RESTART, endpoint_id)
            continue

        if job.phase is JobPhase.PENDING:
            _annotate(g, r, status_message(job), job.nodes)
            alive.append(_Alive(r, _RANK_QUEUED, _Kind.JOB, job_id, endpoint_id))
            continue

        # Running.
        probed = r.id in s.probes
        port = s.probes.get(r.id)
        if r.state is ReplicaState.HEALTHY:
            counter, reason, message = _self_heal(ps, r, probed, port)
            if reason is not None and restart_budget > 0:
                restart_budget -= 1
                _cancel(ps, g, r, job_id, reason, endpoint_id, message)
                continue
            if counter != r.probe_failures:
                g.updates.setdefault(r.id, _Update()).probe_failures = counter

        node = job.nodes[0] if job.nodes else ""
        needs_promote = r.state in (ReplicaState.PENDING, ReplicaState.STARTING) or (
            r.state is ReplicaState.HEALTHY and (r.endpoint_id is None or ps.is_dangling(r))
        )
        if needs_promote:
            if isinstance(port, int) and node:
                _promote(ps, g, spec, r, node, port)
            elif probed and port is None and r.state is ReplicaState.PENDING:
                g.updates.setdefault(r.id, _Update()).state = ReplicaState.STARTING
            rank = _RANK_LOADING
        else:
            rank = _RANK_SERVING
            moved = bool(node) and bool(r.nodes) and node != r.nodes[0]
            if moved and isinstance(port, int):
                # Requeued onto another node (preemption with requeue): register it there.
                _promote(ps, g, spec, r, node, port)
            else:
                _maybe_migrate(ps, g, r, node)
        if r.id not in g.promotes:
            message = HEALTHY_MESSAGE if r.state is ReplicaState.HEALTHY else status_message(job)
            _annotate(g, r, message, job.nodes)
        alive.append(_Alive(r, rank, _Kind.JOB, job_id, endpoint_id))

    # ---- counts: breaker, storm, scale up, scale down
    target = max(spec.target_replicas, 0) if spec is not None else 0
    failed_now = [m for m in g.mark_losts if m.failed_launch]
    failures = kept_lost + len(failed_now)
    if failed_now:
        last_failure = failed_now[-1].message
    breaker = spec is not None and spec.max_job_failures > 0 and failures >= spec.max_job_failures
    storm_hold = False
    if spec is not None:
        storm_hold = _plan_guard(ps, g, spec, breaker, failures, last_failure)

    # ---- walltime handover and make-before-break rollout (provisioner/transitions.py)
    uncounted: list[_Alive] = []
    rollout_active = False
    successors_for: list[ReplicaView] = []
    rollout_submits = 0
    if spec is not None:
        block = _submit_block(spec, breaker, failures, storm_hold)
        alive, uncounted, rollout_active, successors_for, rollout_submits = _plan_transitions(
            ps, g, spec, alive, block, failed_now
        )

    surplus = len(alive) - target if not rollout_active else 0
    drains = spec is not None and spec.autoscale is not None and k.drain_secs > 0
    if surplus > 0:
        reason = CancelReason.SCALE_DOWN if spec is not None else CancelReason.DRAIN
        ordered = sorted(alive, key=lambda a: (a.rank, a.replica.created_at, a.replica.id.hex))
        for a in ordered[:surplus]:
            r = a.replica
            if a.kind is _Kind.RESUBMIT:
                why = "scaled down before its job was submitted"
                g.delete_replicas.append(DeleteReplica(r.model_id, r.id, why=why))
                ps.ended.add(r.id)
                _release_window(ps, r)
            elif a.kind is _Kind.JOB and drains and a.rank == _RANK_SERVING and a.endpoint_id:
                # Autoscaling: out of routing first, in-flight requests finish, then cancelled.
                message = SCALED_DOWN_DRAINING.format(secs=max(k.drain_secs, 0))
                _retire(ps, g, r, a.endpoint_id, message)
            elif a.kind is _Kind.JOB:
                _cancel(ps, g, r, a.job_id, reason, a.endpoint_id)
            # _Kind.UNLISTED: its job id is not known yet; the next pass cancels it.
        chosen = {a.replica.id for a in ordered[:surplus]}
        alive = [a for a in alive if a.replica.id not in chosen]

    if spec is None:
        return
    # A replica cancelled above (scale-down) needs no successor.
    successors_for = [r for r in successors_for if r.id not in ps.ended]

    for a in alive + uncounted:
        if a.kind is not _Kind.RESUBMIT:
            continue
        r = a.replica
        if spec.hold_submits:
            continue  # Slurm just refused a submit for this model: try again after the backoff
        if breaker:
            why = f"not submitted: stopped after {failures} failed launches"
            g.delete_replicas.append(DeleteReplica(r.model_id, r.id, why=why))
            ps.ended.add(r.id)
            continue
        port_base = r.port_base
        if port_base is None:
            taken = ps.taken_windows
            port_base = next_free_window(
                spec.serving_port, k.port_span, taken, spec.target_replicas
            )
            if port_base is None:
                wait = window_wait_message(spec.serving_port, k.port_span, spec.target_replicas)
                _annotate(g, r, wait, ())
                continue
            taken.append(port_base)
        g.submits.append(
            Submit(
                model_id=r.model_id,
                replica_id=r.id,
                job_name=r.job_name,
                port_base=port_base,
                excluded_nodes=r.excluded_nodes,
                existing=True,
            )
        )

    missing = rollout_submits if rollout_active else target - len(alive)
    if breaker or spec.hold_submits or storm_hold:
        return
    excluded = _excluded_nodes(ps, spec, failed_nodes)
    # Successors and a rollout's new replicas run beside the replicas they replace: the model's
    # port range grows by as many windows as there are replicas beyond the target.
    windows = spec.target_replicas + len(uncounted) + len(successors_for) + ROLLOUT_SURGE
    wanted: list[uuid.UUID | None] = [None] * max(missing, 0)
    wanted += [r.id for r in successors_for]
    taken = ps.taken_windows
    for index, successor_of in enumerate(wanted):
        replica_id = new_replica_id(spec.model_id, s.now, index)
        port_base = next_free_window(
            spec.serving_port,
            k.port_span,
            taken,
            spec.target_replicas if successor_of is None and not rollout_active else windows,
        )
        if port_base is None:
            continue  # every window of the model's range is in use: wait for one to free
        taken.append(port_base)
        g.submits.append(
            Submit(
                model_id=spec.model_id,
                replica_id=replica_id,
                job_name=job_name_for(k.job_prefix, spec.model_name, replica_id),
                port_base=port_base,
                excluded_nodes=excluded,
                successor_of=successor_of,
            )
        )


def _submit_block(spec: ModelSpec, breaker: bool, failures: int, storm_hold: bool) -> str:
    """Why no new replica may be submitted for the model in this pass ("" = they may)."""
    if breaker:
        return f"stopped after {failures} failed launches"
    if spec.hold_submits:
        return "Slurm refused a submit moments ago"
    if storm_hold:
        return "replacement storm backoff"
    return ""


def _plan_transitions(
    ps: _Pass,
    g: _Group,
    spec: ModelSpec,
    alive: list[_Alive],
    block: str,
    failed_now: Sequence[MarkLost],
) -> tuple[list[_Alive], list[_Alive], bool, list[ReplicaView], int]:
    """Apply ``transitions.decide``: retire, drop, annotate, record the spec's sentences.

    Returns (counted alive, uncounted successors, rollout active, successors to submit for,
    rollout submits)."""
    s = ps.s
    entries = [
        Entry(
            replica=a.replica,
            job=ps.effective_job.get(a.replica.id),
            serving=a.rank == _RANK_SERVING
            and a.endpoint_id is not None
            and a.replica.id not in g.promotes,
        )
        for a in alive
    ]
    lost_now = {m.replica_id: m for m in failed_now}
    failed = [
        r
        for r in g.replicas
        if r.state is ReplicaState.LOST
        and r.id not in ps.ended
        and is_failed_launch(r.end_state, r.served, r.exit_code)
    ]
    failed += [
        dataclasses.replace(r, state=ReplicaState.LOST, last_message=lost_now[r.id].message)
        for r in g.replicas
        if r.id in lost_now
    ]
    d = decide(
        spec,
        entries,
        now=s.now,
        drain_secs=ps.k.drain_secs,
        drain_signals=s.drain_signals,
        failed_launches=failed,
        submit_block=block,
    )
    by_id = {a.replica.id: a for a in alive}
    for r, message in d.retire:
        _retire(ps, g, r, by_id[r.id].endpoint_id, message)
    for r in d.drop:
        a = by_id[r.id]
        if a.kind is _Kind.RESUBMIT:
            why = "rolled out before its job was submitted"
            g.delete_replicas.append(DeleteReplica(r.model_id, r.id, why=why))
            ps.ended.add(r.id)
            _release_window(ps, r)
        elif a.kind is _Kind.JOB:
            _cancel(ps, g, r, a.job_id, CancelReason.ROLLOUT, a.endpoint_id)
        # _Kind.UNLISTED: its job id is not known yet; the next pass cancels it.
    for replica_id, message in d.messages.items():
        if replica_id in ps.ended:
            continue
        update = g.updates.setdefault(replica_id, _Update())
        update.message = None if by_id[replica_id].replica.last_message == message else message
    if (d.handover, d.rollout) != (spec.handover_message, spec.rollout_message):
        g.transition = SetTransition(spec.model_id, handover=d.handover, rollout=d.rollout)
    gone = {r.id for r, _ in d.retire} | {r.id for r in d.drop}
    counted = [a for a in alive if a.replica.id not in gone and a.replica.id not in d.uncounted]
    extra = [a for a in alive if a.replica.id in d.uncounted and a.replica.id not in gone]
    return counted, extra, d.rollout_active, d.successors_for, d.rollout_submits


def _retire(
    ps: _Pass, g: _Group, r: ReplicaView, endpoint_id: uuid.UUID | None, message: str
) -> None:
    """Out of routing now, its job cancelled once ``drain_secs`` have passed (a later pass)."""
    g.retires.append(
        Retire(
            model_id=r.model_id,
            replica_id=r.id,
            drain_deadline=ps.s.now + dt.timedelta(seconds=max(ps.k.drain_secs, 0)),
            message=message,
            endpoint_id=endpoint_id,
        )
    )
    if ps.k.port_span > 1:  # like a cancelled row's: its window can be shared (see _Pass)
        _release_window(ps, r)
    _ended(ps, g, r.id, endpoint_id)


def _plan_autoscale(ps: _Pass, g: _Group, spec: ModelSpec) -> ModelSpec:
    """The spec with autoscaling's count as its target (``provisioner/autoscale.py``), and
    ``SetAutoscale`` when what it decided must be recorded. A spec whose autoscaling was turned
    off gets its recorded decision cleared once."""
    s = ps.s
    before = spec.autoscale_state
    cfg = spec.autoscale
    if cfg is None:
        if before.replicas is not None or before.message:
            g.autoscale = _set_autoscale(spec, AutoscaleState(), "off")
        return spec
    load = None if s.load is None else s.load.get(spec.model_id, _NO_LOAD)
    d = autoscale.decide(
        cfg,
        before,
        load,
        now=s.now,
        start=spec.target_replicas,
        load_problem=s.load_problem,
    )
    if d.change or autoscale.record_due(before, d.state, s.now):
        g.autoscale = _set_autoscale(spec, d.state, d.change)
    return dataclasses.replace(spec, target_replicas=d.replicas)


def _set_autoscale(spec: ModelSpec, state: AutoscaleState, change: str) -> SetAutoscale:
    return SetAutoscale(
        model_id=spec.model_id,
        replicas=state.replicas,
        since=state.since,
        changed_at=state.changed_at,
        pending_since=state.pending_since,
        pending_replicas=state.pending_replicas,
        idle_since=state.idle_since,
        message=state.message,
        change=change,
    )


def _plan_guard(
    ps: _Pass, g: _Group, spec: ModelSpec, breaker: bool, failures: int, last_failure: str
) -> bool:
    """Decide the model's breaker and storm sentences (``SetGuard`` when they change) and
    whether the storm guard holds new submits this pass."""
    s, k = ps.s, ps.k
    breaker_text = breaker_message(failures, spec.max_job_failures, last_failure) if breaker else ""
    storm_text = ""
    hold = False
    if k.storm_losses > 0:
        since = s.now - dt.timedelta(seconds=max(k.storm_window_secs, 0))
        losses = sum(
            1 for x in s.serving_losses if x.model_id == spec.model_id and x.ended_at >= since
        )
        losses += sum(1 for m in g.mark_losts if m.served)
        if losses > k.storm_losses:
            backoff = storm_backoff_secs(losses - k.storm_losses)
            minutes = max(k.storm_window_secs // 60, 1)
            storm_text = (
                f"Replacement storm: {losses} serving replicas lost in the last {minutes} min "
                f"(more than {k.storm_losses}); replacements are slowed to one submit every "
                f"{backoff} s, never stopped. Check the partition's preemption and the nodes."
            )
            submits = [r.submitted_at for r in g.replicas if r.submitted_at is not None]
            latest = max(submits) if submits else None
            hold = latest is not None and _age_secs(s.now, latest) < backoff
    if (breaker_text, storm_text) != (spec.guard.breaker, spec.guard.storm):
        g.guard = SetGuard(
            model_id=spec.model_id,
            breaker=breaker_text,
            storm=storm_text,
            tripped=bool(breaker_text) and not spec.guard.breaker,
            storm_started=bool(storm_text) and not spec.guard.storm,
        )
    return hold


def _annotate(g: _Group, r: ReplicaView, message: str, nodes: tuple[str, ...]) -> None:
    update = g.updates.setdefault(r.id, _Update())
    if message == HEALTHY_MESSAGE:
        # the executor writes "serving on <node>:<port>" at promotion; keep that detail
        current = r.last_message in _HEALTHY_MESSAGES or r.last_message.startswith("serving on ")
    else:
        current = r.last_message == message
    if not current:
        update.message = message
    if nodes and nodes != r.nodes:
        update.nodes = nodes


def _ending(job: JobInfo) -> bool:
    """A job that has ended and is being torn down, as Slurm 22.05 (v0.0.38) prints it.

    That API gives only the COMPLETING flag, not the end state under it (later versions print
    ``["CANCELLED", "COMPLETING"]``, read as gone). Its server may still be draining the
    requests it has (``obleth_serve``), but it takes no new ones: a serving replica in that
    state leaves routing and is replaced at once. A replica that has not served yet is waited
    for until the end state is known, so that it is counted right."""
    return job.state.strip().upper() == "COMPLETING"


def _mark_lost(
    ps: _Pass, g: _Group, r: ReplicaView, job: JobInfo | None, endpoint_id: uuid.UUID | None
) -> None:
    state = job.state.strip() if job is not None else ""
    reason = _clean_reason(job.reason) if job is not None else ""
    exit_code = job.exit_code if job is not None else None
    served = r.served or r.state is ReplicaState.HEALTHY
    failed = is_failed_launch(state or "gone", served, exit_code)
    message = lost_message(state, reason)
    if not failed:
        message += " \u2014 churn after serving: replaced, not counted as a failed launch"
    g.mark_losts.append(
        MarkLost(
            model_id=r.model_id,
            replica_id=r.id,
            message=message,
            endpoint_id=endpoint_id,
            end_state=state or "gone",
            end_reason=reason if state else "",
            nodes=(job.nodes if job is not None and job.nodes else r.nodes),
            exit_code=exit_code,
            failed_launch=failed,
            served=served,
        )
    )
    _release_window(ps, r)
    _ended(ps, g, r.id, endpoint_id)


def _release_window(ps: _Pass, r: ReplicaView) -> None:
    """Its job has ended: nothing of it listens any more, so its window is free for a
    replacement in this same pass (windows are bounded: see ``next_free_window``)."""
    taken = ps.taken_windows
    if r.port_base is not None and r.port_base in taken:
        taken.remove(r.port_base)


def _cancel(
    ps: _Pass,
    g: _Group,
    r: ReplicaView,
    job_id: str,
    reason: CancelReason,
    endpoint_id: uuid.UUID | None,
    message: str | None = None,
) -> None:
    g.cancels.append(
        Cancel(
            model_id=r.model_id,
            replica_id=r.id,
            job_id=job_id,
            reason=reason,
            message=message or CANCEL_MESSAGES[reason],
            endpoint_id=endpoint_id,
        )
    )
    if ps.k.port_span > 1:  # see _Pass: a draining row's window can be shared
        _release_window(ps, r)
    _ended(ps, g, r.id, endpoint_id)


def _ended(ps: _Pass, g: _Group, replica_id: uuid.UUID, endpoint_id: uuid.UUID | None) -> None:
    ps.ended.add(replica_id)
    if endpoint_id is not None:
        ps.carried_endpoints.add(endpoint_id)
    # A row that ends this pass is neither promoted nor annotated.
    promote = g.promotes.pop(replica_id, None)
    if promote is not None and promote.endpoint_id is not None:
        ps.reused_endpoints.discard(promote.endpoint_id)
    g.updates.pop(replica_id, None)


def _self_heal(
    ps: _Pass, r: ReplicaView, probed: bool, port: int | None
) -> tuple[int, CancelReason | None, str]:
    """New probe counter and, for a zombie, the restart reason and message."""
    k = ps.k
    counter = r.probe_failures
    if probed:
        counter = max(counter - 1, 0) if port is not None else counter + 1
    if k.restart_after_failures <= 0:
        return counter, None, ""
    # Only a pass that probed it may act on the counter: fast passes (no probe of serving
    # replicas) must not turn one stale count into a restart per second.
    if probed and counter >= k.restart_after_failures:
        return counter, CancelReason.PROBE_FAILED, CANCEL_MESSAGES[CancelReason.PROBE_FAILED]
    endpoint = (
        ps.endpoints_by_id.get(r.endpoint_id)
        if r.endpoint_id is not None and ps.s.endpoints_trusted
        else None
    )
    if endpoint is not None and _gateway_says_unhealthy(ps, endpoint):
        n = endpoint.consecutive_failures
        return (
            counter,
            CancelReason.GATEWAY_UNHEALTHY,
            f"restarting: gateway inference check failed {n} times",
        )
    return counter, None, ""


def _gateway_says_unhealthy(ps: _Pass, e: EndpointView) -> bool:
    return (
        e.health_status == "unhealthy"
        and e.last_http_status is None  # the engine answered: it is up, a restart cannot help
        and e.consecutive_failures >= ps.k.gateway_unhealthy_failures
        and e.last_checked_at is not None
        and _age_secs(ps.s.now, e.last_checked_at) <= ps.k.gateway_verdict_max_age_secs
    )


def _promote(ps: _Pass, g: _Group, spec: ModelSpec, r: ReplicaView, node: str, port: int) -> None:
    address = ps.s.addresses.get(node) or node
    name = endpoint_name_for(ps.k.job_prefix, spec.model_name, r.id)
    reuse = ps.reusable_endpoint(r.model_id, name, r.id)
    if reuse is not None:
        ps.reused_endpoints.add(reuse)
    g.promotes[r.id] = Promote(
        model_id=r.model_id,
        replica_id=r.id,
        node=node,
        address=address,
        port=port,
        api_base=_api_base(address, port),
        endpoint_name=name,
        endpoint_id=reuse,
        job_started_at=job.start_time if (job := ps.effective_job.get(r.id)) else None,
    )


def _maybe_migrate(ps: _Pass, g: _Group, r: ReplicaView, node: str) -> None:
    """Re-point a serving endpoint registered by host name (or an old IP) at the node's IP."""
    if not ps.s.endpoints_trusted or r.endpoint_id is None or not node:
        return
    endpoint = ps.endpoints_by_id.get(r.endpoint_id)
    address = ps.s.addresses.get(node)
    if endpoint is None or not address:
        return
    new_ip = _as_ip(address)
    if new_ip is None:  # only a resolved IP is worth a rewrite
        return
    try:
        parts = urllib.parse.urlsplit(endpoint.api_base)
        port = parts.port
    except ValueError:
        return
    host = parts.hostname or ""
    if port is None or not host or _as_ip(host) == new_ip:
        return
    ps.reused_endpoints.add(endpoint.id)
    g.promotes[r.id] = Promote(
        model_id=r.model_id,
        replica_id=r.id,
        node=node,
        address=address,
        port=port,
        api_base=_api_base(address, port),
        endpoint_name=endpoint.name,
        endpoint_id=endpoint.id,
    )


def _excluded_nodes(ps: _Pass, spec: ModelSpec, failed_now: Sequence[str]) -> tuple[str, ...]:
    """The spec's exclude list, plus nodes where this model recently failed when enough
    candidate nodes remain outside that list; otherwise only the spec's own list."""
    s = ps.s
    base = tuple(dict.fromkeys(spec.excluded_nodes))
    candidates = s.candidate_nodes.get(spec.model_id, ())
    if not candidates or ps.k.failed_node_memory_secs <= 0:
        return base
    recent = {
        fp.node
        for fp in s.failed_placements
        if fp.model_id == spec.model_id
        and fp.node
        and _age_secs(s.now, fp.ended_at) <= ps.k.failed_node_memory_secs
    }
    recent.update(n for n in failed_now if n)
    extra = sorted(n for n in recent if n not in base)
    if not extra:
        return base
    combined = base + tuple(extra)
    remaining = set(candidates) - set(combined)
    if len(remaining) >= max(spec.node_count, 1):
        return combined
    return base


def _plan_endpoints(ps: _Pass, groups: dict[uuid.UUID, _Group]) -> None:
    rows = {r.id: r for r in ps.s.replicas}
    for e in ps.s.endpoints:
        if e.replica_id is None:  # added by hand: never touched
            continue
        if e.id in ps.reused_endpoints or e.id in ps.carried_endpoints:
            continue
        r = rows.get(e.replica_id)
        why = ""
        if r is None:
            why = "its replica no longer exists"
        elif r.state in (ReplicaState.LOST, ReplicaState.DRAINING) or r.id in ps.ended:
            why = "its replica is not serving any more"
        else:
            job = ps.effective_job.get(r.id)
            if job is None or job.phase is not JobPhase.RUNNING:
                why = "its replica's job is not running"
        if why:
            groups[e.model_id].delete_endpoints.append(DeleteEndpoint(e.model_id, e.id, why=why))


def _orphans(ps: _Pass) -> list[CancelOrphan]:
    """Live jobs with our prefix that no replica owns.

    A job is owned by the row whose job id (after this pass's adoptions) is its id, or, for a
    row still without a job id (not lost or draining), by that row's job name. A second job carrying
    the name of a row already bound to another job is a duplicate and is cancelled.
    """
    bound_ids = {r.job_id for r in ps.s.replicas if r.job_id}
    bound_ids.update(j for j in ps.effective_job_id.values() if j)
    unbound_names = {
        r.job_name
        for r in ps.s.replicas
        if not ps.effective_job_id.get(r.id, r.job_id)
        and r.state not in (ReplicaState.LOST, ReplicaState.DRAINING)
        and r.job_name
    }
    out: list[CancelOrphan] = []
    for job in sorted(ps.s.jobs.values(), key=lambda j: _job_sort_key(j.job_id)):
        if job.phase is JobPhase.GONE or not job.name.startswith(ps.k.job_prefix):
            continue
        if job.job_id in bound_ids or job.name in unbound_names:
            continue
        out.append(CancelOrphan(job_id=job.job_id, job_name=job.name))
    return out
