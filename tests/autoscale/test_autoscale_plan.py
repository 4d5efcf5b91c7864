"""Table tests of autoscaling in the pure planner: the whole action list of a pass for each
autoscale and zero/wake rule (scale up with submits, scale down by draining in the existing
order, zero, wake, unknown load, autoscaling turned off, nothing to record).

Same builders as tests/provisioner/test_plan.py; nothing is faked: ``plan`` is a pure function.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable

import pytest

from provisioner.domain import (
    Action,
    Autoscale,
    AutoscaleState,
    Cancel,
    CancelReason,
    EndpointView,
    JobInfo,
    ModelLoad,
    ModelSpec,
    ReplicaView,
    Retire,
    SetAutoscale,
    Snapshot,
)
from provisioner.plan import (
    CANCEL_MESSAGES,
    SCALED_DOWN_CANCELLED,
    SCALED_DOWN_DRAINING,
    plan,
)
from tests.provisioner.test_plan import (
    KNOBS,
    NOW,
    PEND,
    D,
    M,
    P,
    ago,
    eid,
    ep,
    job,
    rep,
    served,
    snap,
    spec,
    sub,
)

CFG = Autoscale(
    min_replicas=1,
    max_replicas=4,
    target_in_flight=16,
    up_delay_secs=60,
    down_delay_secs=300,
    zero_after_secs=900,
)
ZERO = dataclasses.replace(CFG, min_replicas=0)
HOUR = 3600.0
DRAINING = SCALED_DOWN_DRAINING.format(secs=KNOBS.drain_secs)


def state(
    replicas: int | None,
    *,
    since: float = HOUR,
    changed: float = HOUR,
    pending: tuple[float, int] | None = None,
    idle: float | None = None,
    message: str = "",
    message_age: float | None = None,
) -> AutoscaleState:
    return AutoscaleState(
        replicas=replicas,
        since=ago(since),
        changed_at=ago(changed),
        pending_since=None if pending is None else ago(pending[0]),
        pending_replicas=None if pending is None else pending[1],
        idle_since=None if idle is None else ago(idle),
        message=message,
        message_at=None if message_age is None else ago(message_age),
    )


def aspec(st: AutoscaleState, cfg: Autoscale | None = CFG, target: int = 1) -> ModelSpec:
    return spec(target=target, autoscale=cfg, autoscale_state=st)


def asnap(
    model_spec: ModelSpec,
    *,
    in_flight: int | None = 0,
    last: float | None = None,
    woken: float | None = None,
    serving: Iterable[int] = (),
    replicas: Iterable[ReplicaView] = (),
    jobs: Iterable[JobInfo] = (),
    endpoints: Iterable[EndpointView] = (),
) -> Snapshot:
    """A snapshot whose gateways report ``in_flight`` for the model (None: load unknown);
    replicas in ``serving`` are healthy with their job and endpoint."""
    rows, listed, eps = list(replicas), list(jobs), list(endpoints)
    for n in serving:
        r, j, e = served(n, str(100 + n))
        rows.append(r)
        listed.append(j)
        eps.append(e)
    s = snap(specs=[model_spec], replicas=rows, jobs=listed, endpoints=eps)
    if in_flight is None:
        return dataclasses.replace(s, load=None, load_problem="Redis unreadable: TimeoutError")
    reading = ModelLoad(
        in_flight=in_flight,
        last_request_at=None if last is None else ago(last),
        woken_at=None if woken is None else ago(woken),
    )
    return dataclasses.replace(s, load={M: reading})


def recorded(st: AutoscaleState, message: str, change: str = "") -> SetAutoscale:
    return SetAutoscale(
        model_id=M,
        replicas=st.replicas,
        since=st.since,
        changed_at=st.changed_at,
        pending_since=st.pending_since,
        pending_replicas=st.pending_replicas,
        idle_since=st.idle_since,
        message=message,
        change=change,
    )


def retire(n: int) -> Retire:
    return Retire(M, rid_of(n), NOW + dt.timedelta(seconds=KNOBS.drain_secs), DRAINING, eid(n))


def rid_of(n: int):  # type: ignore[no-untyped-def]
    return rep(n).id


STEADY_3 = "3 replicas: 41 requests in flight for 1 h, target 16 per replica"

CASES: list[tuple[str, Snapshot, list[Action]]] = [
    (
        "steady, its sentence already shown: nothing at all",
        asnap(
            aspec(state(3, message=STEADY_3, message_age=3)),
            in_flight=41,
            serving=[1, 2, 3],
        ),
        [],
    ),
    (
        "steady, a new figure shown 10 s ago: the sentence is refreshed, nothing else",
        asnap(
            aspec(
                state(
                    3,
                    message="3 replicas: 40 requests in flight for 1 h, target 16 per replica",
                    message_age=10,
                )
            ),
            in_flight=41,
            serving=[1, 2, 3],
        ),
        [recorded(state(3), STEADY_3)],
    ),
    (
        "more load: a pending scale-up is recorded, no submit yet",
        asnap(aspec(state(1)), in_flight=41, serving=[1]),
        [
            recorded(
                state(1, pending=(0, 3)),
                "1 replica: 41 requests in flight for 0 s, target 16 per replica; scaling up to "
                "3 once it lasts 1 min",
            )
        ],
    ),
    (
        "the load lasted the scale-up delay: up to 3, two replicas submitted in free windows",
        asnap(aspec(state(1, pending=(60, 3))), in_flight=41, serving=[1]),
        [
            recorded(
                state(3, since=60, changed=0),
                "3 replicas: 41 requests in flight for 1 min, target 16 per replica",
                "up",
            ),
            sub(0, 8008),
            sub(1, 8016),
        ],
    ),
    (
        "the load lasted the scale-down delay: the oldest serving replica drains, not cancelled",
        asnap(aspec(state(3, pending=(300, 2))), in_flight=20, serving=[1, 2, 3]),
        [
            retire(1),
            recorded(
                state(2, since=300, changed=0),
                "2 replicas: 20 requests in flight for 5 min, target 16 per replica",
                "down",
            ),
        ],
    ),
    (
        "scale-down takes queued replicas first (cancelled at once: they serve nothing)",
        asnap(
            aspec(state(2, pending=(300, 1))),
            in_flight=3,
            serving=[1],
            replicas=[rep(2, P, "202", submitted=20, age=20)],
            jobs=[job("202", 2, PEND)],
        ),
        [
            Cancel(
                M,
                rid_of(2),
                "202",
                CancelReason.SCALE_DOWN,
                CANCEL_MESSAGES[CancelReason.SCALE_DOWN],
            ),
            recorded(
                state(1, since=300, changed=0),
                "1 replica: 3 requests in flight for 5 min, target 16 per replica",
                "down",
            ),
        ],
    ),
    (
        "a drained scale-down past its bound: its job is cancelled as a scale-down",
        asnap(
            aspec(state(1, message="x", message_age=30), target=1),
            in_flight=3,
            serving=[1],
            replicas=[
                dataclasses.replace(rep(2, D, "102", message=DRAINING), drain_deadline=ago(1))
            ],
            jobs=[job("102", 2)],
        ),
        [
            Cancel(M, rid_of(2), "102", CancelReason.SCALE_DOWN, SCALED_DOWN_CANCELLED),
            recorded(
                state(1),
                "1 replica: 3 requests in flight for 1 h, target 16 per replica",
            ),
        ],
    ),
    (
        "a drained scale-down within its bound: waits (its in-flight requests finish)",
        asnap(
            aspec(
                state(
                    1,
                    message="1 replica: 3 requests in flight for 1 h, target 16 per replica",
                    message_age=1,
                )
            ),
            in_flight=3,
            serving=[1],
            replicas=[
                dataclasses.replace(
                    rep(2, D, "102", message=DRAINING),
                    drain_deadline=NOW + dt.timedelta(seconds=5),
                )
            ],
            jobs=[job("102", 2)],
        ),
        [],
    ),
    (
        "min_replicas 0, idle for scale_to_zero_after_secs: zero, the last replica drains",
        asnap(aspec(state(1, idle=900), ZERO), in_flight=0, serving=[1]),
        [
            retire(1),
            recorded(
                state(0, since=900, changed=0, idle=900),
                "0 replicas: idle for 15 min (scales to zero after 15 min without a request); "
                "the next request wakes it",
                "zero",
            ),
        ],
    ),
    (
        "min_replicas 0, idle but not long enough: keeps one replica, records the idle time",
        asnap(aspec(state(1), ZERO), in_flight=0, serving=[1]),
        [
            recorded(
                state(1, idle=0),
                "1 replica: idle for 0 s, target 16 per replica; scales to zero after 15 min "
                "without a request",
            )
        ],
    ),
    (
        "at zero, a held request: woken at once, one replica submitted",
        asnap(aspec(state(0, idle=1200), ZERO, target=0), in_flight=1, last=1, woken=1),
        [
            recorded(
                state(1, since=0, changed=0),
                "1 replica: woken by a request (1 request in flight), target 16 per replica",
                "wake",
            ),
            sub(0, 8000),
        ],
    ),
    (
        "at zero, a wake signal older than the change to zero: stays at zero",
        asnap(
            aspec(
                state(
                    0,
                    changed=600,
                    idle=600,
                    message="0 replicas: idle for 10 min (scales to zero after 15 min without a "
                    "request); the next request wakes it",
                    message_age=1,
                ),
                ZERO,
                target=0,
            ),
            in_flight=0,
            woken=700,
        ),
        [],
    ),
    (
        "load unknown (Redis down): the count is kept, the reason recorded, nothing scaled",
        asnap(aspec(state(3, pending=(200, 1))), in_flight=None, serving=[1, 2, 3]),
        [
            recorded(
                state(3),
                "3 replicas: load unknown (Redis unreadable: TimeoutError); the count is kept "
                "until the gateways' in-flight counts can be read again",
            )
        ],
    ),
    (
        "autoscaling turned off: its record is cleared once and target_replicas rules again",
        asnap(aspec(state(3, message="3 replicas: ..."), None, target=1), serving=[1]),
        [
            SetAutoscale(M, None, None, None, None, None, None, "", change="off"),
        ],
    ),
    (
        "first pass of an autoscaled model: target_replicas bounded, decided and recorded",
        asnap(aspec(AutoscaleState(), target=2), in_flight=20, serving=[1, 2]),
        [
            recorded(
                state(2, since=0, changed=0),
                "2 replicas: 20 requests in flight for 0 s, target 16 per replica",
                "start",
            )
        ],
    ),
]


@pytest.mark.parametrize(
    ("snapshot", "expected"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_autoscale_in_the_plan(snapshot: Snapshot, expected: list[Action]) -> None:
    assert plan(snapshot) == expected


def test_a_manual_scale_down_still_cancels_at_once() -> None:
    """Without autoscaling, lowering target_replicas cancels serving replicas as before (no
    drain): only autoscaling's own scale-downs drain first."""
    rows, jobs, eps = zip(*(served(n, str(100 + n)) for n in (1, 2)), strict=True)
    s = snap(specs=[spec(target=1)], replicas=rows, jobs=jobs, endpoints=eps)
    assert plan(s) == [
        Cancel(M, rid_of(1), "101", CancelReason.SCALE_DOWN, "scaled down", eid(1)),
    ]


def test_no_drain_bound_means_autoscaling_cancels_at_once() -> None:
    s = asnap(aspec(state(2, pending=(300, 1))), in_flight=0, serving=[1, 2])
    s = dataclasses.replace(s, knobs=dataclasses.replace(KNOBS, drain_secs=0))
    actions = plan(s)
    assert actions[0] == Cancel(M, rid_of(1), "101", CancelReason.SCALE_DOWN, "scaled down", eid(1))


def test_the_scale_down_record_and_a_handover_do_not_mix() -> None:
    """A handed-over row past its bound is still cancelled as handed over."""
    handed = dataclasses.replace(
        rep(2, D, "102", message="handed over to replica 1234"), drain_deadline=ago(1)
    )
    s = asnap(
        aspec(
            state(
                1,
                message="1 replica: 3 requests in flight for 1 h, target 16 per replica",
                message_age=1,
            )
        ),
        in_flight=3,
        serving=[1],
        replicas=[handed],
        jobs=[job("102", 2)],
    )
    assert plan(s) == [
        Cancel(
            M, rid_of(2), "102", CancelReason.HANDED_OVER, CANCEL_MESSAGES[CancelReason.HANDED_OVER]
        )
    ]
    assert ep(1).id == eid(1)
