"""The failed-launch breaker counts failed launches only; churn is replaced; the storm guard slows
replacements down and never stops them. Table tests of the pure planner (no database, no clock,
nothing faked: ``plan`` is a pure function); builders come from test_plan.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from provisioner.domain import (
    Action,
    GuardState,
    JobInfo,
    Knobs,
    ReplicaView,
    ServingLoss,
    Snapshot,
)
from provisioner.plan import breaker_message, is_failed_launch, plan, storm_backoff_secs
from tests.provisioner.test_plan import (
    GONE,
    KNOBS,
    M2,
    NOW,
    L,
    M,
    ago,
    eid,
    guard,
    job,
    lost,
    rep,
    served,
    snap,
    spec,
    sub,
)

r1, j1, e1 = served(1, "101")
r2, j2, e2 = served(2, "102", age=300)


def ended(state: str, *, exit_code: int | None = None, reason: str = "") -> JobInfo:
    """Replica 1's job, ended in ``state``."""
    return dataclasses.replace(job("101", 1, GONE, state=state, reason=reason), exit_code=exit_code)


def kept(n: int, end_state: str, *, was_serving: bool, exit_code: int | None = None) -> ReplicaView:
    """A lost row kept for retention, with its launch's end."""
    return dataclasses.replace(
        rep(n, L, f"9{n:02d}", age=60, message=f"job ended: {end_state}"),
        served=was_serving,
        end_state=end_state,
        exit_code=exit_code,
    )


def losses(count: int, *, secs_ago: float = 60, model: object = M) -> tuple[ServingLoss, ...]:
    return tuple(ServingLoss(model, ago(secs_ago + i)) for i in range(count))  # type: ignore[arg-type]


def with_losses(snapshot: Snapshot, found: tuple[ServingLoss, ...]) -> Snapshot:
    return dataclasses.replace(snapshot, serving_losses=found)


STORM_11 = (
    "Replacement storm: 11 serving replicas lost in the last 10 min (more than 10); "
    "replacements are slowed to one submit every 15 s, never stopped. Check the partition's "
    "preemption and the nodes."
)
STORM_12 = STORM_11.replace("11 serving", "12 serving").replace("every 15 s", "every 30 s")


def churn_of(state: str, exit_code: int | None = None) -> list[Action]:
    return [
        lost(
            1,
            f"job ended: {state}",
            endpoint=eid(1),
            end_state=state,
            served=True,
            exit_code=exit_code,
        ),
        sub(0, 8000),  # the freed window (replica windows are bounded)
    ]


CASES: list[tuple[str, Snapshot, list[Action]]] = [
    # --- what counts as a failed launch
    (
        "preempted after serving is churn: replaced at once, even with a limit of 1",
        snap(
            specs=[spec(max_job_failures=1)],
            replicas=[r1],
            endpoints=[e1],
            jobs=[ended("PREEMPTED")],
        ),
        churn_of("PREEMPTED"),
    ),
    (
        "cancelled by someone else after serving is churn",
        snap(
            specs=[spec(max_job_failures=1)],
            replicas=[r1],
            endpoints=[e1],
            jobs=[ended("CANCELLED", exit_code=15)],
        ),
        churn_of("CANCELLED", 15),
    ),
    (
        "time limit after serving is churn",
        snap(
            specs=[spec(max_job_failures=1)],
            replicas=[r1],
            endpoints=[e1],
            jobs=[ended("TIMEOUT", exit_code=15)],
        ),
        churn_of("TIMEOUT", 15),
    ),
    (
        "served then FAILED counts: the breaker trips at a limit of 1",
        snap(
            specs=[spec(max_job_failures=1)],
            replicas=[r1],
            endpoints=[e1],
            jobs=[ended("FAILED", exit_code=1)],
        ),
        [
            lost(
                1,
                "job ended: FAILED",
                endpoint=eid(1),
                end_state="FAILED",
                served=True,
                failed=True,
                exit_code=1,
            ),
            guard(breaker_message(1, 1, "job ended: FAILED"), tripped=True),
        ],
    ),
    (
        "served then OUT_OF_MEMORY counts",
        snap(
            specs=[spec(max_job_failures=1)],
            replicas=[r1],
            endpoints=[e1],
            jobs=[ended("OUT_OF_MEMORY")],
        ),
        [
            lost(
                1,
                "job ended: OUT_OF_MEMORY",
                endpoint=eid(1),
                end_state="OUT_OF_MEMORY",
                served=True,
                failed=True,
            ),
            guard(breaker_message(1, 1, "job ended: OUT_OF_MEMORY"), tripped=True),
        ],
    ),
    (
        "ended on its own before ever serving counts (the engine exited)",
        snap(
            specs=[spec(max_job_failures=1)],
            replicas=[rep(1, "starting", "101", message="RUNNING")],  # type: ignore[arg-type]
            jobs=[ended("COMPLETED", exit_code=0)],
        ),
        [
            lost(1, "job ended: COMPLETED", end_state="COMPLETED", nodes=("gpu1",), exit_code=0),
            guard(breaker_message(1, 1, "job ended: COMPLETED"), tripped=True),
        ],
    ),
    (
        "cancelled by someone else before serving is churn too: replaced at once",
        snap(
            specs=[spec(max_job_failures=1)],
            replicas=[rep(1, "starting", "101", message="RUNNING")],  # type: ignore[arg-type]
            jobs=[ended("CANCELLED")],
        ),
        [
            lost(1, "job ended: CANCELLED", end_state="CANCELLED", nodes=("gpu1",), failed=False),
            sub(0, 8000),
        ],
    ),
    (
        "kept churn rows do not count toward the limit",
        snap(
            specs=[spec(target=1, max_job_failures=2)],
            replicas=[
                kept(1, "PREEMPTED", was_serving=True),
                kept(2, "CANCELLED", was_serving=True, exit_code=15),
                kept(3, "TIMEOUT", was_serving=True),
            ],
        ),
        [sub(0, 8000)],
    ),
    (
        "kept failed launches count: never served, and served-then-NODE_FAIL",
        snap(
            specs=[spec(target=1, max_job_failures=2)],
            replicas=[
                kept(1, "FAILED", was_serving=False),
                kept(2, "NODE_FAIL", was_serving=True),
                kept(3, "PREEMPTED", was_serving=True),
            ],
        ),
        [guard(breaker_message(2, 2, "job ended: NODE_FAIL"), tripped=True)],
    ),
    # --- the storm guard
    (
        "ten serving losses in the window: no storm yet, replaced at once",
        with_losses(snap(specs=[spec(target=1)]), losses(10)),
        [sub(0, 8000)],
    ),
    (
        "eleventh loss (this pass): storm alert, replaced at once when no submit is recent",
        with_losses(snap(replicas=[r1], endpoints=[e1], jobs=[ended("PREEMPTED")]), losses(10)),
        [
            lost(1, "job ended: PREEMPTED", endpoint=eid(1), end_state="PREEMPTED", served=True),
            guard(storm=STORM_11, storm_started=True),
            sub(0, 8000),
        ],
    ),
    (
        "storm: a submit 5 s ago holds the next one (backoff 15 s), the breaker is not involved",
        with_losses(
            snap(
                specs=[spec(target=2, max_job_failures=3, guard=GuardState(storm=STORM_11))],
                replicas=[dataclasses.replace(r2, submitted_at=ago(5))],
                jobs=[j2],
                endpoints=[e2],
            ),
            losses(11),
        ),
        [],
    ),
    (
        "storm: backoff over, the replacement goes out (never stopped)",
        with_losses(
            snap(
                specs=[spec(target=2, guard=GuardState(storm=STORM_12))],
                replicas=[dataclasses.replace(r2, submitted_at=ago(31))],
                jobs=[j2],
                endpoints=[e2],
            ),
            losses(12),
        ),
        [sub(0, 8000)],
    ),
    (
        "losses older than the window and other models' losses do not count; storm cleared",
        with_losses(
            snap(specs=[spec(target=1, guard=GuardState(storm=STORM_11))]),
            losses(5, secs_ago=601) + losses(20, model=M2) + losses(3),
        ),
        [guard(), sub(0, 8000)],
    ),
    (
        "storm guard off (storm_losses 0): no storm whatever the losses",
        with_losses(
            snap(specs=[spec(target=1)], knobs=dataclasses.replace(KNOBS, storm_losses=0)),
            losses(50),
        ),
        [sub(0, 8000)],
    ),
]


@pytest.mark.parametrize(("snapshot", "expected"), [pytest.param(s, e, id=n) for n, s, e in CASES])
def test_breaker_and_storm(snapshot: Snapshot, expected: list[Action]) -> None:
    assert plan(snapshot) == expected


@pytest.mark.parametrize(
    ("end_state", "was_serving", "exit_code", "failed"),
    [
        pytest.param("PREEMPTED", True, 0, False, id="preempted after serving: churn"),
        pytest.param("REQUEUED", True, None, False, id="requeued after serving: churn"),
        pytest.param("CANCELLED", True, 15, False, id="cancelled by others after serving: churn"),
        pytest.param("CANCELLED by 0", True, 15, False, id="cancelled with Slurm's suffix: churn"),
        pytest.param("TIMEOUT", True, 15, False, id="time limit after serving: churn"),
        pytest.param("gone", True, None, False, id="vanished after serving: churn"),
        pytest.param("COMPLETED", True, 0, False, id="clean exit after serving: churn"),
        pytest.param("FAILED", True, 256, True, id="failed after serving: counts"),
        pytest.param("OUT_OF_MEMORY", True, None, True, id="out of memory: counts"),
        pytest.param("NODE_FAIL", True, None, True, id="node failure: counts"),
        pytest.param("BOOT_FAIL", True, None, True, id="boot failure: counts"),
        pytest.param("SPECIAL_EXIT", True, 1, True, id="non-zero exit, not preempted: counts"),
        pytest.param("SPECIAL_EXIT", True, 0, False, id="zero exit, unknown state: churn"),
        pytest.param("PREEMPTED", False, None, False, id="preempted before serving: churn"),
        pytest.param("CANCELLED", False, 15, False, id="cancelled before serving: churn"),
        pytest.param("TIMEOUT", False, None, True, id="time limit before serving: counts"),
        pytest.param("COMPLETED", False, 0, True, id="exited before serving: counts"),
        pytest.param("", False, None, True, id="unknown end before serving: counts"),
    ],
)
def test_is_failed_launch(
    end_state: str, was_serving: bool, exit_code: int | None, failed: bool
) -> None:
    assert is_failed_launch(end_state, was_serving, exit_code) is failed


@pytest.mark.parametrize(
    ("excess", "secs"), [(1, 15), (2, 30), (3, 60), (5, 240), (6, 300), (40, 300), (0, 15)]
)
def test_storm_backoff_doubles_to_five_minutes(excess: int, secs: int) -> None:
    assert storm_backoff_secs(excess) == secs


def test_a_storm_never_stops_replacement() -> None:
    """However many losses, a pass whose backoff is over submits: replacement slows, never stops."""
    for count in (11, 30, 500):
        snapshot = with_losses(
            snap(specs=[spec(target=1, guard=GuardState(storm="x"))]), losses(count)
        )
        actions = plan(dataclasses.replace(snapshot, now=NOW + dt.timedelta(seconds=1)))
        assert [type(a).__name__ for a in actions][-1] == "Submit"


def test_breaker_message_says_how_to_resume() -> None:
    text = breaker_message(3, 3, "job ended: FAILED")
    assert "after 3 failed launches" in text
    assert "Try once more" in text and "clear-lost" in text
    assert Knobs().storm_losses == 10 and Knobs().storm_window_secs == 600
