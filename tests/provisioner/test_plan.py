"""Table-driven tests of the pure planner (no database, no network, no clock).

Every case builds a ``Snapshot`` with the small builders below and compares the whole action
list, in order, with the expected one. Nothing is faked: ``plan`` is a pure function.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from collections.abc import Iterable, Sequence

import pytest

from provisioner.domain import (
    Action,
    Adopt,
    Cancel,
    CancelOrphan,
    CancelReason,
    DeleteEndpoint,
    DeleteReplica,
    EndpointView,
    GuardState,
    JobInfo,
    JobPhase,
    Knobs,
    MarkLost,
    ModelSpec,
    Promote,
    ReplicaState,
    ReplicaView,
    SetGuard,
    SettleLoss,
    Snapshot,
    Submit,
    UpdateMessage,
)
from provisioner.domain import FailedPlacement as Failed
from provisioner.plan import (
    breaker_message,
    endpoint_name_for,
    job_name_for,
    lost_message,
    mass_vanish,
    new_replica_id,
    next_free_window,
    plan,
    status_message,
)

NOW = dt.datetime(2025, 6, 1, 12, 0, 0, tzinfo=dt.UTC)
LISTED = NOW - dt.timedelta(seconds=3)
PREFIX = "obleth-"
M = uuid.UUID(int=0xA1)
M2 = uuid.UUID(int=0xA2)
KNOBS = Knobs()

H = ReplicaState.HEALTHY
P = ReplicaState.PENDING
S = ReplicaState.STARTING
D = ReplicaState.DRAINING
L = ReplicaState.LOST
RUN = JobPhase.RUNNING
PEND = JobPhase.PENDING
GONE = JobPhase.GONE

RESTART_MSG = "restart requested"
ZOMBIE_MSG = "restarting: failed health probes while job running"
DRAIN_MSG = "draining: the model is no longer provisioned"
CHURN_SUFFIX = " \u2014 churn after serving: replaced, not counted as a failed launch"


# ------------------------------------------------------------------------------ builders


def rid(n: int) -> uuid.UUID:
    # distinct in the first 12 hex digits, which job names carry
    return uuid.UUID(f"{n:08x}-{n:04x}-4000-8000-{n:012x}")


def eid(n: int) -> uuid.UUID:
    return uuid.UUID(int=0xE000 + n)


def ago(secs: float) -> dt.datetime:
    return NOW - dt.timedelta(seconds=secs)


def name_of(model: uuid.UUID) -> str:
    return "llama" if model == M else "qwen"


def jname(n: int, model: uuid.UUID = M) -> str:
    return job_name_for(PREFIX, name_of(model), rid(n))


def spec(model: uuid.UUID = M, target: int = 1, **kw: object) -> ModelSpec:
    return ModelSpec(model, name_of(model), True, target, **kw)  # type: ignore[arg-type]


def rep(
    n: int,
    state: ReplicaState = H,
    job: str = "",
    *,
    model: uuid.UUID = M,
    age: float = 600,
    submitted: float | None = 590,
    port: int | None = None,
    endpoint: uuid.UUID | None = None,
    message: str | None = None,
    nodes: tuple[str, ...] | None = None,
    cancel: bool = False,
    failures: int = 0,
) -> ReplicaView:
    """Replica n; healthy rows default to message "promoted" on gpu1, window 8000 + 8(n-1)."""
    return ReplicaView(
        id=rid(n),
        model_id=model,
        state=state,
        job_name=jname(n, model),
        created_at=ago(age),
        job_id=job,
        submitted_at=None if submitted is None else ago(submitted),
        port_base=8000 + 8 * (n - 1) if port is None else port,
        endpoint_id=endpoint,
        cancel_requested=cancel,
        nodes=(("gpu1",) if state is H else ()) if nodes is None else nodes,
        last_message=("promoted" if state is H else "") if message is None else message,
        probe_failures=failures,
    )


def job(
    job_id: str,
    n: int,
    phase: JobPhase = RUN,
    *,
    state: str | None = None,
    nodes: tuple[str, ...] = ("gpu1",),
    reason: str = "",
    model: uuid.UUID = M,
    name: str | None = None,
) -> JobInfo:
    default_state = {RUN: "RUNNING", PEND: "PENDING", GONE: "COMPLETED"}[phase]
    return JobInfo(
        job_id=job_id,
        name=jname(n, model) if name is None else name,
        state=default_state if state is None else state,
        phase=phase,
        reason=reason,
        nodes=nodes if phase is not PEND else (),
    )


def ep(
    n: int,
    *,
    replica: int | None = -1,
    model: uuid.UUID = M,
    name: str | None = None,
    api_base: str | None = None,
    status: str = "healthy",
    failures: int = 0,
    checked: float | None = None,
) -> EndpointView:
    """Endpoint n, registered for replica n by default (replica=None: added by hand)."""
    replica_id = rid(n) if replica == -1 else (None if replica is None else rid(replica))
    return EndpointView(
        id=eid(n),
        model_id=model,
        name=endpoint_name_for(PREFIX, name_of(model), rid(n)) if name is None else name,
        api_base=f"http://gpu1:{8000 + 8 * (n - 1)}/v1" if api_base is None else api_base,
        replica_id=replica_id,
        health_status=status,
        consecutive_failures=failures,
        last_checked_at=None if checked is None else ago(checked),
    )


def snap(
    *,
    specs: Sequence[ModelSpec] | None = None,
    replicas: Iterable[ReplicaView] = (),
    jobs: Iterable[JobInfo] = (),
    probes: dict[int, int | None] | None = None,
    addresses: dict[str, str] | None = None,
    endpoints: Iterable[EndpointView] = (),
    trusted: bool = True,
    failed: Iterable[Failed] = (),
    candidates: dict[uuid.UUID, tuple[str, ...]] | None = None,
    knobs: Knobs = KNOBS,
) -> Snapshot:
    return Snapshot(
        now=NOW,
        knobs=knobs,
        specs=tuple((spec(),) if specs is None else specs),
        replicas=tuple(replicas),
        jobs={j.job_id: j for j in jobs},
        jobs_listed_at=LISTED,
        probes={rid(n): port for n, port in (probes or {}).items()},
        addresses=dict(addresses or {}),
        endpoints=tuple(endpoints),
        endpoints_trusted=trusted,
        failed_placements=tuple(failed),
        candidate_nodes=dict(candidates or {}),
    )


def served(n: int, job_id: str, **kw: object) -> tuple[ReplicaView, JobInfo, EndpointView]:
    """A healthy replica serving through its endpoint, with its running job."""
    return rep(n, H, job_id, endpoint=eid(n), **kw), job(job_id, n), ep(n)  # type: ignore[arg-type]


# expected actions ---------------------------------------------------------------------


def sub(i: int, port: int, *, model: uuid.UUID = M, excluded: tuple[str, ...] = ()) -> Submit:
    replica_id = new_replica_id(model, NOW, i)
    return Submit(
        model, replica_id, job_name_for(PREFIX, name_of(model), replica_id), port, excluded
    )


def promote(
    n: int,
    *,
    node: str = "gpu1",
    port: int = 8000,
    address: str | None = None,
    api_base: str | None = None,
    endpoint: uuid.UUID | None = None,
    endpoint_name: str | None = None,
    model: uuid.UUID = M,
) -> Promote:
    addr = node if address is None else address
    return Promote(
        model_id=model,
        replica_id=rid(n),
        node=node,
        address=addr,
        port=port,
        api_base=f"http://{addr}:{port}/v1" if api_base is None else api_base,
        endpoint_name=endpoint_name or endpoint_name_for(PREFIX, name_of(model), rid(n)),
        endpoint_id=endpoint,
    )


def lost(
    n: int,
    message: str = "job gone",
    *,
    endpoint: uuid.UUID | None = None,
    end_state: str = "gone",
    reason: str = "",
    nodes: tuple[str, ...] = ("gpu1",),
    model: uuid.UUID = M,
    served: bool = False,
    failed: bool | None = None,
    exit_code: int | None = None,
) -> MarkLost:
    """A MarkLost; ``served`` replicas' churn ends get the churn sentence and do not count."""
    counted = (not served) if failed is None else failed
    text = message if counted else message + CHURN_SUFFIX
    return MarkLost(
        model, rid(n), text, endpoint, end_state, reason, nodes, exit_code, counted, served
    )


def cancel(
    n: int,
    job_id: str,
    reason: CancelReason = CancelReason.SCALE_DOWN,
    *,
    endpoint: uuid.UUID | None = None,
    message: str | None = None,
    model: uuid.UUID = M,
) -> Cancel:
    default = {
        CancelReason.SCALE_DOWN: "scaled down",
        CancelReason.OPERATOR_RESTART: RESTART_MSG,
        CancelReason.PROBE_FAILED: ZOMBIE_MSG,
        CancelReason.DRAIN: DRAIN_MSG,
    }.get(reason, "")
    return Cancel(model, rid(n), job_id, reason, message or default, endpoint)


def upd(n: int, *, model: uuid.UUID = M, **kw: object) -> UpdateMessage:
    return UpdateMessage(model, rid(n), **kw)  # type: ignore[arg-type]


def delete(n: int, why: str, *, model: uuid.UUID = M) -> DeleteReplica:
    return DeleteReplica(model, rid(n), why)


def guard(
    breaker: str = "", storm: str = "", *, tripped: bool = False, storm_started: bool = False
) -> SetGuard:
    return SetGuard(M, breaker, storm, tripped, storm_started)


def del_ep(n: int, why: str, *, model: uuid.UUID = M) -> DeleteEndpoint:
    return DeleteEndpoint(model, eid(n), why)


def completing_lost(n: int, job_id: str) -> ReplicaView:
    """Replica n, marked lost (as churn) while it served and its job read COMPLETING."""
    return dataclasses.replace(
        rep(n, L, job_id, age=60, message="job ended: COMPLETING" + CHURN_SUFFIX),
        served=True,
        end_state="COMPLETING",
        exit_code=143,
        lost_at=ago(30),
    )


# ------------------------------------------------------------------------------ cases

r1, j1, e1 = served(1, "101")
r2, j2, e2 = served(2, "102", age=300)
r3, j3, e3 = served(3, "103", age=100)

CASES: list[tuple[str, Snapshot, list[Action]]] = [
    # --- scale up / steady state
    ("empty state submits target", snap(specs=[spec(target=2)]), [sub(0, 8000), sub(1, 8008)]),
    (
        "healthy at target does nothing",
        snap(specs=[spec(target=2)], replicas=[r1, r2], jobs=[j1, j2], endpoints=[e1, e2]),
        [],
    ),
    (
        "windows distinct for several submits around a held window",
        snap(specs=[spec(target=4)], replicas=[r2], jobs=[j2], endpoints=[e2]),
        [sub(0, 8000), sub(1, 8016), sub(2, 8024)],
    ),
    (
        "negative target is zero",
        snap(specs=[spec(target=-3)]),
        [],
    ),
    # --- promotion
    (
        "starting + running + probe passes: promote with http://node:port/v1",
        snap(
            replicas=[rep(1, S, "101", message="RUNNING")],
            jobs=[job("101", 1, nodes=("gpu7",))],
            probes={1: 8003},
        ),
        [promote(1, node="gpu7", port=8003)],
    ),
    (
        "pending row + running job + probe passes: promote by resolved address",
        snap(
            replicas=[rep(1, P, "101")],
            jobs=[job("101", 1, nodes=("gpu7", "gpu8"))],
            probes={1: 8000},
            addresses={"gpu7": "10.1.2.7"},
        ),
        [promote(1, node="gpu7", address="10.1.2.7")],
    ),
    (
        "promote by IPv6 address puts it in brackets",
        snap(
            replicas=[rep(1, P, "101")],
            jobs=[job("101", 1, nodes=("gpu7",))],
            probes={1: 8000},
            addresses={"gpu7": "fd00::7"},
        ),
        [promote(1, node="gpu7", address="fd00::7", api_base="http://[fd00::7]:8000/v1")],
    ),
    (
        "pending row + running job + probe fails: starting once, no over-submit",
        snap(replicas=[rep(1, P, "101")], jobs=[job("101", 1)], probes={1: None}),
        [upd(1, message="RUNNING", nodes=("gpu1",), state=S)],
    ),
    (
        "starting + running, not ready: nothing, no over-submit",
        snap(
            replicas=[rep(1, S, "101", message="RUNNING", nodes=("gpu1",))],
            jobs=[job("101", 1)],
            probes={1: None},
        ),
        [],
    ),
    (
        "pending row + running job not probed: annotated only",
        snap(replicas=[rep(1, P, "101")], jobs=[job("101", 1)]),
        [upd(1, message="RUNNING", nodes=("gpu1",))],
    ),
    (
        "healthy without endpoint is re-promoted",
        snap(replicas=[rep(1, H, "101")], jobs=[j1], probes={1: 8000}),
        [promote(1)],
    ),
    (
        "healthy with endpoint never re-promoted despite a stale probe",
        snap(replicas=[r1], jobs=[j1], endpoints=[e1], probes={1: 8000}),
        [],
    ),
    (
        "dangling endpoint re-promoted",
        snap(replicas=[r1], jobs=[j1], endpoints=[], probes={1: 8000}),
        [promote(1)],
    ),
    (
        "dangling endpoint not repaired when the endpoint list is untrusted",
        snap(replicas=[r1], jobs=[j1], endpoints=[], trusted=False, probes={1: 8000}),
        [],
    ),
    (
        "promote reuses the endpoint left by a half-done promotion",
        snap(
            replicas=[rep(1, S, "101", message="RUNNING")],
            jobs=[j1],
            endpoints=[e1],
            probes={1: 8000},
        ),
        [promote(1, endpoint=eid(1))],
    ),
    (
        "promote reuses an endpoint linked to the replica under another name",
        snap(
            replicas=[rep(1, S, "101", message="RUNNING")],
            jobs=[j1],
            endpoints=[ep(1, name="renamed")],
            probes={1: 8000},
        ),
        [promote(1, endpoint=eid(1))],
    ),
    # --- endpoint migration
    (
        "endpoint registered by host name migrates to the node's IP",
        snap(replicas=[r1], jobs=[j1], endpoints=[e1], addresses={"gpu1": "10.0.0.5"}),
        [
            promote(
                1,
                address="10.0.0.5",
                port=8000,
                endpoint=eid(1),
                endpoint_name=e1.name,
            )
        ],
    ),
    (
        "endpoint already on the IP is left alone",
        snap(
            replicas=[r1],
            jobs=[j1],
            endpoints=[ep(1, api_base="http://10.0.0.5:8000/v1")],
            addresses={"gpu1": "10.0.0.5"},
        ),
        [],
    ),
    (
        "unresolved node (address is the name) does not rewrite",
        snap(
            replicas=[r1],
            jobs=[j1],
            endpoints=[ep(1, api_base="http://10.0.0.5:8000/v1")],
            addresses={"gpu1": "gpu1"},
        ),
        [],
    ),
    (
        "override to a new IPv6 keeps port and brackets the host",
        snap(
            replicas=[r1],
            jobs=[j1],
            endpoints=[ep(1, api_base="http://10.0.0.5:8123/v1")],
            addresses={"gpu1": "fd00::1"},
        ),
        [
            promote(
                1,
                address="fd00::1",
                port=8123,
                api_base="http://[fd00::1]:8123/v1",
                endpoint=eid(1),
                endpoint_name=e1.name,
            )
        ],
    ),
    # --- loss
    (
        "preempted (job gone from the listing): lost + replacement in the freed window",
        snap(replicas=[r1], jobs=[], endpoints=[e1]),
        [lost(1, endpoint=eid(1), served=True), sub(0, 8000)],
    ),
    (
        "terminal job still listed: lost carries state and reason",
        snap(
            replicas=[r1],
            jobs=[job("101", 1, GONE, state="TIMEOUT", reason="TimeLimit", nodes=("gpu4",))],
            endpoints=[e1],
        ),
        [
            lost(
                1,
                "job ended: TIMEOUT (TimeLimit)",
                endpoint=eid(1),
                end_state="TIMEOUT",
                reason="TimeLimit",
                nodes=("gpu4",),
                served=True,
            ),
            sub(0, 8000),
        ],
    ),
    (
        "only some jobs missing: the vanished one is lost",
        snap(specs=[spec(target=2)], replicas=[r1, r2], jobs=[j2], endpoints=[e1, e2]),
        [lost(1, endpoint=eid(1), served=True), sub(0, 8000)],
    ),
    (
        "lost row with a dangling endpoint id carries none",
        snap(replicas=[r1], jobs=[], endpoints=[]),
        [lost(1, served=True), sub(0, 8000)],
    ),
    (
        "listing predates the submit: not lost (job id known)",
        snap(replicas=[rep(1, P, "101", submitted=1)]),
        [],
    ),
    # --- crash safety: rows without a job id
    (
        "adoption by job name",
        snap(replicas=[rep(1, P, "", submitted=30)], jobs=[job("555", 1, PEND, reason="Priority")]),
        [Adopt(M, rid(1), "555"), upd(1, message="PENDING \u2014 Priority")],
    ),
    (
        "adoption prefers the live job and cancels the duplicate",
        snap(
            replicas=[rep(1, P, "", submitted=30)],
            jobs=[job("556", 1, PEND), job("555", 1, RUN), job("554", 1, GONE)],
        ),
        [
            Adopt(M, rid(1), "555"),
            upd(1, message="RUNNING", nodes=("gpu1",)),
            CancelOrphan("556", jname(1)),
        ],
    ),
    (
        "adopted job already ended: lost and replaced",
        snap(
            replicas=[rep(1, P, "", submitted=30)],
            jobs=[job("555", 1, GONE, state="FAILED", nodes=("gpu2",))],
        ),
        [
            lost(1, "job ended: FAILED", end_state="FAILED", nodes=("gpu2",)),
            Adopt(M, rid(1), "555"),
            sub(0, 8000),
        ],
    ),
    (
        "row never submitted is submitted again with the same id, name and window",
        snap(replicas=[rep(1, P, "", submitted=None, port=8008)]),
        [Submit(M, rid(1), jname(1), 8008, (), existing=True)],
    ),
    (
        "row submitted before the listing with no job found is submitted again",
        snap(specs=[spec(target=2)], replicas=[rep(1, P, "", submitted=30)]),
        [Submit(M, rid(1), jname(1), 8000, (), existing=True), sub(0, 8008)],
    ),
    (
        "row submitted after the listing: wait (no resubmit, no new submit)",
        snap(replicas=[rep(1, P, "", submitted=1)]),
        [],
    ),
    (
        "unsubmitted row is the first dropped on scale-down",
        snap(
            specs=[spec(target=1)],
            replicas=[r1, rep(2, P, "", submitted=None)],
            jobs=[j1],
            endpoints=[e1],
        ),
        [delete(2, "scaled down before its job was submitted")],
    ),
    (
        "unsubmitted row with a restart request is deleted and replaced",
        snap(replicas=[rep(1, P, "", submitted=None, cancel=True)]),
        [delete(1, "restart requested before its job was submitted"), sub(0, 8000)],
    ),
    # --- scale down
    (
        "excess cancelled pending first",
        snap(
            replicas=[rep(1, H, "101", endpoint=eid(1), age=1000), rep(2, P, "102", age=10)],
            jobs=[j1, job("102", 2, PEND)],
            endpoints=[e1],
        ),
        [cancel(2, "102")],
    ),
    (
        "scale-down by rank: queued, then loading, then serving",
        snap(
            specs=[spec(target=1)],
            replicas=[
                rep(1, H, "101", endpoint=eid(1), age=50),
                rep(2, S, "102", age=900, message="RUNNING", nodes=("gpu1",)),
                rep(3, P, "103", age=10),
            ],
            jobs=[j1, job("102", 2), job("103", 3, PEND)],
            endpoints=[e1],
        ),
        [cancel(3, "103"), cancel(2, "102")],
    ),
    (
        "cancel carries the endpoint, oldest first within a rank",
        snap(
            specs=[spec(target=1)], replicas=[r3, r1, r2], jobs=[j1, j2, j3], endpoints=[e1, e2, e3]
        ),
        [cancel(1, "101", endpoint=eid(1)), cancel(2, "102", endpoint=eid(2))],
    ),
    (
        "scale-down of a row being promoted drops the promotion",
        snap(
            specs=[spec(target=1)],
            replicas=[r1, rep(2, P, "102", age=10)],
            jobs=[j1, job("102", 2)],
            endpoints=[e1],
            probes={2: 8008},
        ),
        [cancel(2, "102")],
    ),
    # --- operator restart
    (
        "operator restart cancels with the endpoint and submits a replacement",
        snap(replicas=[rep(1, H, "101", endpoint=eid(1), cancel=True)], jobs=[j1], endpoints=[e1]),
        [cancel(1, "101", CancelReason.OPERATOR_RESTART, endpoint=eid(1)), sub(0, 8000)],
    ),
    (
        "operator restarts are unlimited and do not use the self-heal budget",
        snap(
            specs=[spec(target=3)],
            replicas=[
                rep(1, H, "101", endpoint=eid(1), cancel=True),
                rep(2, H, "102", endpoint=eid(2), cancel=True, age=300),
                rep(3, H, "103", endpoint=eid(3), age=100, failures=19),
            ],
            jobs=[j1, j2, j3],
            endpoints=[e1, e2, e3],
            probes={3: None},
        ),
        [
            cancel(1, "101", CancelReason.OPERATOR_RESTART, endpoint=eid(1)),
            cancel(2, "102", CancelReason.OPERATOR_RESTART, endpoint=eid(2)),
            cancel(3, "103", CancelReason.PROBE_FAILED, endpoint=eid(3)),
            sub(0, 8000),
            sub(1, 8008),
            sub(2, 8016),
        ],
    ),
    (
        "restart of a job already gone: lost instead",
        snap(replicas=[rep(1, H, "101", endpoint=eid(1), cancel=True)], jobs=[], endpoints=[e1]),
        [lost(1, endpoint=eid(1), served=True), sub(0, 8000)],
    ),
    # --- zombie self-heal
    (
        "zombie by probe counter: cancel + replacement",
        snap(
            replicas=[rep(1, H, "101", endpoint=eid(1), failures=19)],
            jobs=[j1],
            endpoints=[e1],
            probes={1: None},
        ),
        [cancel(1, "101", CancelReason.PROBE_FAILED, endpoint=eid(1)), sub(0, 8000)],
    ),
    (
        "self-heal capped at one per model per pass",
        snap(
            specs=[spec(target=2)],
            replicas=[
                rep(1, H, "101", endpoint=eid(1), failures=19),
                rep(2, H, "102", endpoint=eid(2), failures=25, age=300),
            ],
            jobs=[j1, j2],
            endpoints=[e1, e2],
            probes={1: None, 2: None},
        ),
        [
            cancel(1, "101", CancelReason.PROBE_FAILED, endpoint=eid(1)),
            upd(2, probe_failures=26),
            sub(0, 8000),
        ],
    ),
    (
        "two models each get one self-heal",
        snap(
            specs=[spec(M), spec(M2, serving_port=9000)],
            replicas=[
                rep(1, H, "101", endpoint=eid(1), failures=30),
                rep(2, H, "102", endpoint=eid(2), failures=30, model=M2),
            ],
            jobs=[j1, job("102", 2, model=M2)],
            endpoints=[e1, ep(2, model=M2)],
            probes={1: None, 2: None},
        ),
        [
            cancel(1, "101", CancelReason.PROBE_FAILED, endpoint=eid(1)),
            sub(0, 8000),
            cancel(2, "102", CancelReason.PROBE_FAILED, endpoint=eid(2), model=M2),
            sub(0, 9000, model=M2),
        ],
    ),
    (
        "counter high but job gone: lost, not restarted",
        snap(
            replicas=[rep(1, H, "101", endpoint=eid(1), failures=40)],
            jobs=[],
            endpoints=[e1],
            probes={1: None},
        ),
        [lost(1, endpoint=eid(1), served=True), sub(0, 8000)],
    ),
    (
        "healthy + job COMPLETING (v0.0.38 after scancel, server draining): lost now, replaced",
        snap(
            replicas=[rep(1, H, "101", endpoint=eid(1))],
            jobs=[job("101", 1, RUN, state="COMPLETING")],
            endpoints=[e1],
            probes={1: 8000},
        ),
        [
            lost(
                1,
                "job ended: COMPLETING",
                endpoint=eid(1),
                end_state="COMPLETING",
                served=True,
            ),
            sub(0, 8000),
        ],
    ),
    (
        "healthy + job COMPLETING with a non-zero exit (the signal): churn, not a failed launch",
        snap(
            specs=[spec(max_job_failures=1)],
            replicas=[rep(1, H, "101", endpoint=eid(1))],
            jobs=[dataclasses.replace(job("101", 1, RUN, state="COMPLETING"), exit_code=143)],
            endpoints=[e1],
        ),
        [
            lost(
                1,
                "job ended: COMPLETING",
                endpoint=eid(1),
                end_state="COMPLETING",
                served=True,
                exit_code=143,
            ),
            sub(0, 8000),
        ],
    ),
    (
        "lost while COMPLETING, now CANCELLED: the real end recorded, churn",
        snap(
            replicas=[completing_lost(1, "101"), r2],
            jobs=[dataclasses.replace(job("101", 1, GONE, state="CANCELLED"), exit_code=0), j2],
            endpoints=[e2],
        ),
        [SettleLoss(M, rid(1), "job ended: CANCELLED" + CHURN_SUFFIX, "CANCELLED", "", 0, False)],
    ),
    (
        "lost while COMPLETING, now FAILED: a failed launch after all, and the breaker trips",
        snap(
            specs=[spec(target=2, max_job_failures=1)],
            replicas=[completing_lost(1, "101"), r2],
            jobs=[
                dataclasses.replace(
                    job("101", 1, GONE, state="FAILED", reason="NonZeroExitCode"), exit_code=1
                ),
                j2,
            ],
            endpoints=[e2],
        ),
        [
            SettleLoss(
                M,
                rid(1),
                "job ended: FAILED (NonZeroExitCode)",
                "FAILED",
                "NonZeroExitCode",
                1,
                True,
            ),
            guard(breaker_message(1, 1, "job ended: FAILED (NonZeroExitCode)"), tripped=True),
        ],
    ),
    (
        "lost while COMPLETING, still COMPLETING (draining): nothing to settle yet",
        snap(
            specs=[spec(max_job_failures=1)],
            replicas=[completing_lost(1, "101"), r2],
            jobs=[job("101", 1, RUN, state="COMPLETING"), j2],
            endpoints=[e2],
        ),
        [],
    ),
    (
        "lost while COMPLETING, job no longer listed: stays churn",
        snap(
            specs=[spec(max_job_failures=1)],
            replicas=[completing_lost(1, "101"), r2],
            jobs=[j2],
            endpoints=[e2],
        ),
        [],
    ),
    (
        "starting + job COMPLETING: waited for until its end state is known",
        snap(replicas=[rep(1, S, "101")], jobs=[job("101", 1, RUN, state="COMPLETING")]),
        [upd(1, message="COMPLETING", nodes=("gpu1",))],
    ),
    (
        "gateway-unhealthy endpoint restarts even with a passing probe",
        snap(
            replicas=[r1],
            jobs=[j1],
            endpoints=[ep(1, status="unhealthy", failures=2, checked=60)],
            probes={1: 8000},
        ),
        [
            cancel(
                1,
                "101",
                CancelReason.GATEWAY_UNHEALTHY,
                endpoint=eid(1),
                message="restarting: gateway inference check failed 2 times",
            ),
            sub(0, 8000),
        ],
    ),
    (
        "gateway verdict with one failure ignored",
        snap(
            replicas=[r1], jobs=[j1], endpoints=[ep(1, status="unhealthy", failures=1, checked=60)]
        ),
        [],
    ),
    (
        "stale gateway verdict ignored",
        snap(
            replicas=[r1],
            jobs=[j1],
            endpoints=[ep(1, status="unhealthy", failures=5, checked=3601)],
        ),
        [],
    ),
    (
        "gateway endpoint never checked ignored",
        snap(replicas=[r1], jobs=[j1], endpoints=[ep(1, status="unhealthy", failures=5)]),
        [],
    ),
    (
        "gateway degraded is not unhealthy",
        snap(replicas=[r1], jobs=[j1], endpoints=[ep(1, status="degraded", failures=5, checked=5)]),
        [],
    ),
    (
        "gateway verdict ignored when the endpoint list is untrusted",
        snap(
            replicas=[r1],
            jobs=[j1],
            endpoints=[ep(1, status="unhealthy", failures=5, checked=5)],
            trusted=False,
        ),
        [],
    ),
    (
        "threshold 0 disables both signals, counter still kept",
        snap(
            replicas=[rep(1, H, "101", endpoint=eid(1), failures=50)],
            jobs=[j1],
            endpoints=[ep(1, status="unhealthy", failures=9, checked=5)],
            probes={1: None},
            knobs=Knobs(restart_after_failures=0),
        ),
        [upd(1, probe_failures=51)],
    ),
    (
        "probe miss increments the counter",
        snap(
            replicas=[rep(1, H, "101", endpoint=eid(1), failures=3)],
            jobs=[j1],
            endpoints=[e1],
            probes={1: None},
        ),
        [upd(1, probe_failures=4)],
    ),
    (
        "probe pass decays the counter by one",
        snap(
            replicas=[rep(1, H, "101", endpoint=eid(1), failures=3)],
            jobs=[j1],
            endpoints=[e1],
            probes={1: 8000},
        ),
        [upd(1, probe_failures=2)],
    ),
    (
        "probe pass at zero changes nothing; unprobed row untouched",
        snap(
            specs=[spec(target=2)],
            replicas=[r1, rep(2, H, "102", endpoint=eid(2), failures=7)],
            jobs=[j1, j2],
            endpoints=[e1, e2],
            probes={1: 8000},
        ),
        [],
    ),
    (
        "counters ignore starting rows and rows whose job is queued again",
        snap(
            specs=[spec(target=2)],
            replicas=[
                rep(1, S, "101", message="RUNNING", nodes=("gpu1",), failures=4),
                rep(2, H, "102", endpoint=eid(2), failures=4),
            ],
            jobs=[j1, job("102", 2, PEND, state="REQUEUED")],
            endpoints=[e2],
            probes={1: None, 2: None},
        ),
        [
            del_ep(2, "its replica's job is not running"),
            upd(2, message="REQUEUED"),
        ],
    ),
    # --- annotation
    (
        "queued job annotated STATE \u2014 reason",
        snap(replicas=[rep(1, P, "101")], jobs=[job("101", 1, PEND, reason="Resources")]),
        [upd(1, message="PENDING \u2014 Resources")],
    ),
    (
        "reason None is dropped and an unchanged message is not rewritten",
        snap(
            replicas=[rep(1, P, "101", message="PENDING")],
            jobs=[job("101", 1, PEND, reason="None")],
        ),
        [],
    ),
    (
        "healthy row gets a stable serving message and the job's nodes",
        snap(
            replicas=[rep(1, H, "101", endpoint=eid(1), message="RUNNING", nodes=())],
            jobs=[job("101", 1, nodes=("gpu1", "gpu2"))],
            endpoints=[e1],
        ),
        [upd(1, message="serving", nodes=("gpu1", "gpu2"))],
    ),
    # --- lost / draining GC and breaker
    (
        "old lost rows deleted, young ones kept",
        snap(
            specs=[spec(target=0)], replicas=[rep(1, L, "101", age=900), rep(2, L, "102", age=899)]
        ),
        [delete(1, "lost replica past its retention")],
    ),
    (
        "draining + job gone: deleted",
        snap(
            specs=[spec(target=0)],
            replicas=[rep(1, D, "101")],
            jobs=[job("101", 1, GONE, state="CANCELLED")],
        ),
        [delete(1, "drained: job ended")],
    ),
    (
        "draining + job absent: deleted",
        snap(specs=[spec(target=0)], replicas=[rep(1, D, "101")]),
        [delete(1, "drained: job ended")],
    ),
    (
        "draining + job running or queued: left alone",
        snap(
            specs=[spec(target=0)],
            replicas=[rep(1, D, "101"), rep(2, D, "102")],
            jobs=[j1, job("102", 2, PEND)],
        ),
        [],
    ),
    (
        "draining row without a job id: deleted, its named live job cancelled",
        snap(specs=[spec(target=0)], replicas=[rep(1, D, "")], jobs=[job("555", 1)]),
        [delete(1, "drained: job ended"), CancelOrphan("555", jname(1))],
    ),
    (
        "failure limit suppresses submits at the limit",
        snap(
            specs=[spec(target=2, max_job_failures=3)],
            replicas=[rep(n, L, f"10{n}", age=60) for n in (1, 2, 3)],
        ),
        [guard(breaker_message(3, 3, ""), tripped=True)],
    ),
    (
        "a tripped breaker already recorded writes nothing again",
        snap(
            specs=[spec(target=2, max_job_failures=3, guard=GuardState(breaker_message(3, 3, "")))],
            replicas=[rep(n, L, f"10{n}", age=60) for n in (1, 2, 3)],
        ),
        [],
    ),
    (
        "breaker recorded but the lost rows were cleared (Try once more): reset and submit",
        snap(specs=[spec(target=1, max_job_failures=3, guard=GuardState("stopped"))]),
        [guard(""), sub(0, 8000)],
    ),
    (
        "failure limit counts the job that ended this pass",
        snap(
            specs=[spec(target=1, max_job_failures=2)],
            replicas=[rep(1, L, "100", age=60), r2],
            jobs=[job("102", 2, GONE, state="FAILED", reason="NonZeroExitCode")],
            endpoints=[e2],
        ),
        [
            lost(
                2,
                "job ended: FAILED (NonZeroExitCode)",
                endpoint=eid(2),
                end_state="FAILED",
                reason="NonZeroExitCode",
                served=True,
                failed=True,
            ),
            guard(breaker_message(2, 2, "job ended: FAILED (NonZeroExitCode)"), tripped=True),
        ],
    ),
    (
        "below the failure limit still submits",
        snap(
            specs=[spec(target=2, max_job_failures=5)],
            replicas=[rep(n, L, f"10{n}", age=60) for n in (1, 2)],
        ),
        [sub(0, 8000), sub(1, 8008)],
    ),
    (
        "failure limit 0 never stops",
        snap(specs=[spec(target=1)], replicas=[rep(n, L, f"x{n}", age=60) for n in range(1, 101)]),
        [sub(0, 8000)],
    ),
    (
        "failure limit reached: an unsubmitted row is dropped, not submitted",
        snap(
            specs=[spec(target=2, max_job_failures=1)],
            replicas=[rep(1, L, "100", age=60), rep(2, P, "", submitted=None)],
        ),
        [
            delete(2, "not submitted: stopped after 1 failed launches"),
            guard(breaker_message(1, 1, ""), tripped=True),
        ],
    ),
    # --- drain groups
    (
        "drain group: every live job cancelled with DRAIN, vanished lost, old lost deleted",
        snap(
            specs=[],
            replicas=[
                rep(1, H, "101", endpoint=eid(1), failures=40),
                rep(2, P, "102", age=100),
                rep(3, S, "103", age=50),
                rep(4, L, "104", age=5000),
                rep(5, P, "", submitted=None),
            ],
            jobs=[j1, job("102", 2, PEND)],
            endpoints=[e1],
            probes={1: None, 3: 8016},
        ),
        [
            cancel(2, "102", CancelReason.DRAIN),
            cancel(1, "101", CancelReason.DRAIN, endpoint=eid(1)),
            lost(3, nodes=()),
            delete(4, "lost replica past its retention"),
            delete(5, "scaled down before its job was submitted"),
        ],
    ),
    (
        "disabled spec drains and never submits",
        snap(
            specs=[dataclasses.replace(spec(target=3), enabled=False)],
            replicas=[r1],
            jobs=[j1],
            endpoints=[e1],
        ),
        [cancel(1, "101", CancelReason.DRAIN, endpoint=eid(1))],
    ),
    (
        "drain group of another model does not touch the enabled one",
        snap(
            specs=[spec(M, target=1)],
            replicas=[r1, rep(2, H, "102", endpoint=eid(2), model=M2)],
            jobs=[j1, job("102", 2, model=M2)],
            endpoints=[e1, ep(2, model=M2)],
        ),
        [cancel(2, "102", CancelReason.DRAIN, endpoint=eid(2), model=M2)],
    ),
    # --- endpoints
    (
        "provisioner endpoint without a replica row is deleted",
        snap(replicas=[r1], jobs=[j1], endpoints=[e1, ep(9)]),
        [del_ep(9, "its replica no longer exists")],
    ),
    (
        "endpoint of a lost row is deleted",
        snap(
            specs=[spec(target=0)],
            replicas=[rep(1, L, "101", endpoint=eid(1), age=60)],
            endpoints=[e1],
        ),
        [del_ep(1, "its replica is not serving any more")],
    ),
    (
        "hand-made endpoint never touched",
        snap(replicas=[r1], jobs=[j1], endpoints=[e1, ep(9, replica=None, name="by-hand")]),
        [],
    ),
    (
        "no endpoint deletions when the endpoint list is untrusted",
        snap(replicas=[r1], jobs=[j1], endpoints=[e1, ep(9)], trusted=False),
        [],
    ),
    (
        "stale endpoint of a cancelled replica is deleted along with the cancel",
        snap(
            replicas=[rep(1, H, "101", endpoint=eid(1), cancel=True)],
            jobs=[j1],
            endpoints=[e1, ep(7, replica=1, name="older")],
        ),
        [
            del_ep(7, "its replica is not serving any more"),
            cancel(1, "101", CancelReason.OPERATOR_RESTART, endpoint=eid(1)),
            sub(0, 8000),
        ],
    ),
    # --- orphans
    (
        "orphan job cancelled; ended orphan and foreign job ignored",
        snap(
            replicas=[r1],
            jobs=[
                j1,
                job("900", 9, name="obleth-old-thing"),
                job("901", 9, PEND, name="obleth-queued"),
                job("902", 9, GONE, name="obleth-ended"),
                job("903", 9, name="someone-else"),
            ],
            endpoints=[e1],
        ),
        [CancelOrphan("900", "obleth-old-thing"), CancelOrphan("901", "obleth-queued")],
    ),
    (
        "job of a lost row is not an orphan",
        snap(specs=[spec(target=0)], replicas=[rep(1, L, "101", age=60)], jobs=[j1]),
        [],
    ),
    # --- placement away from failed nodes
    (
        "placement away from a node where the model just failed",
        snap(
            specs=[spec(excluded_nodes=("gpu9",))],
            failed=[
                Failed(M, "gpu1", ago(600)),
                Failed(M2, "gpu2", ago(10)),
                Failed(M, "gpu3", ago(3601)),
            ],
            candidates={M: ("gpu1", "gpu2", "gpu3")},
        ),
        [sub(0, 8000, excluded=("gpu9", "gpu1"))],
    ),
    (
        "placement: node of a job that ended this pass is avoided too",
        snap(
            replicas=[r1],
            jobs=[job("101", 1, GONE, state="NODE_FAIL", nodes=("gpu1",))],
            endpoints=[e1],
            candidates={M: ("gpu1", "gpu2")},
        ),
        [
            lost(
                1,
                "job ended: NODE_FAIL",
                endpoint=eid(1),
                end_state="NODE_FAIL",
                served=True,
                failed=True,
            ),
            sub(0, 8000, excluded=("gpu1",)),
        ],
    ),
    (
        "placement falls back to the spec's list when nothing else fits",
        snap(
            specs=[spec(excluded_nodes=("gpu2",))],
            failed=[Failed(M, "gpu1", ago(60))],
            candidates={M: ("gpu1", "gpu2")},
        ),
        [sub(0, 8000, excluded=("gpu2",))],
    ),
    (
        "placement needs node_count nodes left",
        snap(
            specs=[spec(node_count=2)],
            failed=[Failed(M, "gpu1", ago(60)), Failed(M, "gpu2", ago(60))],
            candidates={M: ("gpu1", "gpu2", "gpu3")},
        ),
        [sub(0, 8000)],
    ),
    (
        "placement unknown candidates: only the spec's list",
        snap(specs=[spec(excluded_nodes=("gpu2",))], failed=[Failed(M, "gpu1", ago(60))]),
        [sub(0, 8000, excluded=("gpu2",))],
    ),
]


@pytest.mark.parametrize(("snapshot", "expected"), [pytest.param(s, e, id=n) for n, s, e in CASES])
def test_plan(snapshot: Snapshot, expected: list[Action]) -> None:
    assert plan(snapshot) == expected


@pytest.mark.parametrize(("snapshot", "expected"), [pytest.param(s, e, id=n) for n, s, e in CASES])
def test_plan_ignores_input_order(snapshot: Snapshot, expected: list[Action]) -> None:
    shuffled = dataclasses.replace(
        snapshot,
        replicas=tuple(reversed(snapshot.replicas)),
        jobs=dict(reversed(list(snapshot.jobs.items()))),
    )
    assert plan(shuffled) == plan(snapshot)


def test_action_order_across_kinds() -> None:
    """One pass with every kind of action: per model DeleteEndpoint, Cancel, MarkLost,
    DeleteReplica, Adopt, Promote, UpdateMessage, Submit; orphans last."""
    snapshot = snap(
        specs=[spec(target=4)],
        replicas=[
            rep(1, H, "101", endpoint=eid(1), cancel=True),  # restart
            rep(2, H, "102", endpoint=eid(2)),  # vanished
            rep(3, L, "103", age=5000),  # GC
            rep(4, P, "", submitted=30),  # adopt
            rep(5, S, "105", message="RUNNING", nodes=("gpu1",)),  # promote
        ],
        jobs=[j1, job("555", 4, PEND), job("105", 5), job("999", 9, name="obleth-stray")],
        endpoints=[e1, e2, ep(8)],
        probes={5: 8032},
    )
    assert plan(snapshot) == [
        del_ep(8, "its replica no longer exists"),
        cancel(1, "101", CancelReason.OPERATOR_RESTART, endpoint=eid(1)),
        lost(2, endpoint=eid(2), served=True),
        delete(3, "lost replica past its retention"),
        Adopt(M, rid(4), "555"),
        promote(5, port=8032),
        upd(4, message="PENDING"),
        sub(0, 8000),  # the restarted and the lost rows' windows are free again
        sub(1, 8008),
        CancelOrphan("999", "obleth-stray"),
    ]


def test_plan_is_pure_and_repeatable() -> None:
    snapshot = snap(specs=[spec(target=3)], replicas=[r1], jobs=[j1], endpoints=[e1])
    first = plan(snapshot)
    assert plan(snapshot) == first
    assert len({a.replica_id for a in first if isinstance(a, Submit)}) == 2


# ------------------------------------------------------------------------------ multi-pass


def _apply_counter(replica: ReplicaView, actions: list[Action]) -> ReplicaView:
    for a in actions:
        if isinstance(a, UpdateMessage) and a.probe_failures is not None:
            replica = dataclasses.replace(replica, probe_failures=a.probe_failures)
    return replica


def test_flapping_replica_never_trips() -> None:
    replica = r1
    for tick in range(40):
        snapshot = snap(
            replicas=[replica],
            jobs=[j1],
            endpoints=[e1],
            probes={1: None if tick % 2 == 0 else 8000},
        )
        actions = plan(snapshot)
        assert not any(isinstance(a, Cancel) for a in actions)
        replica = _apply_counter(replica, actions)
        assert replica.probe_failures <= 1


def test_twenty_misses_restart_on_the_twentieth() -> None:
    replica = r1
    for tick in range(1, 21):
        actions = plan(snap(replicas=[replica], jobs=[j1], endpoints=[e1], probes={1: None}))
        cancels = [a for a in actions if isinstance(a, Cancel)]
        if tick < 20:
            assert cancels == []
            replica = _apply_counter(replica, actions)
            assert replica.probe_failures == tick
        else:
            assert cancels == [cancel(1, "101", CancelReason.PROBE_FAILED, endpoint=eid(1))]


# ------------------------------------------------------------------------------ helpers


@pytest.mark.parametrize(
    ("serving_port", "span", "taken", "expected"),
    [
        (8000, 8, [], 8000),
        (8000, 8, [8000], 8008),
        (8000, 8, [8000, 8016], 8008),
        (8000, 8, [8008, 8000, 8016], 8024),
        (8000, 0, [8000], 8001),  # span floored at 1
        (8000, 8, [8004], 8016),  # another model's window overlapping 8000 and 8008
        (9000, 8, [8000, 8008], 9000),
    ],
)
def test_next_free_window(serving_port: int, span: int, taken: list[int], expected: int) -> None:
    assert next_free_window(serving_port, span, taken, 10) == expected


@pytest.mark.parametrize(
    ("state", "reason", "expected"),
    [
        ("", "", "job gone"),
        ("  ", "whatever", "job gone"),
        (None, None, "job gone"),
        ("FAILED", "", "job ended: FAILED"),
        ("FAILED", "None", "job ended: FAILED"),
        ("OUT_OF_MEMORY", "OutOfMemory", "job ended: OUT_OF_MEMORY (OutOfMemory)"),
    ],
)
def test_lost_message(state: str | None, reason: str | None, expected: str) -> None:
    assert lost_message(state, reason) == expected


@pytest.mark.parametrize(
    ("state", "reason", "expected"),
    [
        ("PENDING", "Resources", "PENDING \u2014 Resources"),
        ("PENDING", "none", "PENDING"),
        ("RUNNING", "  ", "RUNNING"),
        ("", "", "RUNNING"),
    ],
)
def test_status_message(state: str, reason: str, expected: str) -> None:
    info = JobInfo(job_id="1", name="x", state=state, phase=RUN, reason=reason)
    assert status_message(info) == expected


def test_names() -> None:
    replica_id = uuid.UUID("12345678-9abc-def0-1234-56789abcdef0")
    assert job_name_for("obleth-", "llama", replica_id) == "obleth-llama-123456789abc"
    assert job_name_for("obleth-", "meta/Llama 3", replica_id) == "obleth-meta-Llama-3-123456789abc"
    assert endpoint_name_for("obleth-", "llama", replica_id) == f"obleth-llama-{replica_id}"


def test_new_replica_id_deterministic_and_distinct() -> None:
    assert new_replica_id(M, NOW, 0) == new_replica_id(M, NOW, 0)
    ids = {new_replica_id(m, t, i) for m in (M, M2) for t in (NOW, ago(15)) for i in range(3)}
    assert len(ids) == 12


@pytest.mark.parametrize(
    ("name", "replicas", "jobs", "expected_hold"),
    [
        ("two live jobs both missing: hold", [rep(1, H, "101"), rep(2, P, "102")], [], True),
        ("one of two missing: proceed", [rep(1, H, "101"), rep(2, P, "102")], [j1], False),
        (
            "listed as ended counts as answered",
            [rep(1, H, "101"), rep(2, P, "102")],
            [job("101", 1, GONE)],
            False,
        ),
        ("single missing job: proceed", [rep(1, H, "101")], [], False),
        (
            "lost and draining rows with purged jobs do not count",
            [rep(1, L, "101"), rep(2, D, "102"), rep(3, H, "103")],
            [],
            False,
        ),
        (
            "submits after the listing do not count",
            [rep(1, H, "101"), rep(2, P, "102", submitted=1)],
            [],
            False,
        ),
        ("same job id twice is one job", [rep(1, H, "101"), rep(2, H, "101")], [], False),
        ("rows without job id do not count", [rep(1, P, ""), rep(2, P, "")], [], False),
    ],
)
def test_mass_vanish(
    name: str, replicas: list[ReplicaView], jobs: list[JobInfo], expected_hold: bool
) -> None:
    reason = mass_vanish(replicas, {j.job_id: j for j in jobs}, LISTED)
    if expected_hold:
        assert reason is not None and "holding" in reason and "2 tracked" in reason
    else:
        assert reason is None


# ---- rules added after review ---------------------------------------------------------


def test_a_stale_probe_counter_does_not_restart_in_a_pass_that_did_not_probe() -> None:
    """Fast passes do not probe serving replicas: a counter at the threshold must wait for a
    full pass that probes (and misses) again, or it would restart one replica per second."""
    r, j, e = served(1, "11", failures=KNOBS.restart_after_failures)
    unprobed = plan(snap(replicas=[r], jobs=[j], endpoints=[e]))
    assert not [a for a in unprobed if isinstance(a, Cancel)]
    probed = plan(snap(replicas=[r], jobs=[j], endpoints=[e], probes={1: None}))
    assert [a.reason for a in probed if isinstance(a, Cancel)] == [CancelReason.PROBE_FAILED]


def test_a_draining_row_shares_its_window_with_its_replacement() -> None:
    """Windows are bounded, so the replacement takes the draining replica's window: its server
    listens on the next free port of it and the probe tells the two apart by the replica key."""
    draining = rep(1, D, "11", port=8000)
    actions = plan(snap(replicas=[draining], jobs=[job("11", 1)]))
    assert [a for a in actions if isinstance(a, Submit)] == [sub(0, 8000)]


def test_with_a_one_port_span_a_draining_row_keeps_its_window_and_the_replacement_waits() -> None:
    draining = rep(1, D, "11", port=8000)
    knobs = dataclasses.replace(KNOBS, port_span=1)
    actions = plan(snap(replicas=[draining], jobs=[job("11", 1)], knobs=knobs))
    assert [a for a in actions if isinstance(a, Submit)] == []
    # once its job has ended, the window is free in the same pass
    actions = plan(snap(replicas=[draining], jobs=[], knobs=knobs))
    assert [a for a in actions if isinstance(a, Submit)] == [sub(0, 8000)]


def test_a_replica_requeued_onto_another_node_is_registered_there() -> None:
    r, _, e = served(1, "11")
    moved = job("11", 1, nodes=("gpu2",))
    actions = plan(snap(replicas=[r], jobs=[moved], endpoints=[e], probes={1: 8000}))
    promotes = [a for a in actions if isinstance(a, Promote)]
    assert promotes == [promote(1, node="gpu2", endpoint=eid(1))]


def test_submits_wait_while_a_refused_submit_backs_off() -> None:
    held = plan(snap(specs=[spec(target=2, hold_submits=True)]))
    assert not [a for a in held if isinstance(a, Submit)]
    assert [a for a in plan(snap(specs=[spec(target=2)])) if isinstance(a, Submit)]
