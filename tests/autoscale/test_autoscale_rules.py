"""Table tests of autoscaling's rules (provisioner/autoscale.py), one row per rule and edge.

Pure: ``decide`` is a function of the settings, the recorded state, the load and ``now``;
nothing is faked. The plan-level tests (actions the pass emits) are in test_autoscale_plan.py.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from provisioner.autoscale import Decision, decide, duration, needed, record_due
from provisioner.domain import Autoscale, AutoscaleState, ModelLoad

NOW = dt.datetime(2025, 6, 1, 12, 0, 0, tzinfo=dt.UTC)
CFG = Autoscale(
    min_replicas=1,
    max_replicas=4,
    target_in_flight=16,
    up_delay_secs=60,
    down_delay_secs=300,
    zero_after_secs=900,
)
ZERO = dataclasses.replace(CFG, min_replicas=0)  # scales to zero when idle
LONG_AGO = 3600.0


def ago(secs: float) -> dt.datetime:
    return NOW - dt.timedelta(seconds=secs)


def st(
    replicas: int | None,
    *,
    since: float | None = LONG_AGO,
    changed: float | None = LONG_AGO,
    pending: tuple[float, int] | None = None,
    idle: float | None = None,
) -> AutoscaleState:
    return AutoscaleState(
        replicas=replicas,
        since=None if since is None else ago(since),
        changed_at=None if changed is None else ago(changed),
        pending_since=None if pending is None else ago(pending[0]),
        pending_replicas=None if pending is None else pending[1],
        idle_since=None if idle is None else ago(idle),
    )


def load(in_flight: int = 0, *, last: float | None = None, woken: float | None = None) -> ModelLoad:
    return ModelLoad(
        in_flight=in_flight,
        last_request_at=None if last is None else ago(last),
        woken_at=None if woken is None else ago(woken),
    )


def want(replicas: int, state: AutoscaleState, message: str, change: str = "") -> Decision:
    return Decision(replicas, dataclasses.replace(state, message=message), change)


UP = "target 16 per replica; scaling up to {n} once it lasts 1 min"
DOWN = "target 16 per replica; scaling down to {n} once it lasts 5 min"
ZERO_MSG = (
    "0 replicas: idle for {idle} (scales to zero after 15 min without a request); the next "
    "request wakes it"
)
IDLE_MSG = (
    "1 replica: idle for {idle}, target 16 per replica; scales to zero after 15 min without "
    "a request"
)

# (rule, settings, state, load (None: unknown), start, expected decision)
CASES: list[tuple[str, Autoscale, AutoscaleState, ModelLoad | None, int, Decision]] = [
    # ---- rule 1: the first decision, and bounds the operator moved
    (
        "first decision: target_replicas, with the load judged at once",
        CFG,
        AutoscaleState(),
        load(40),
        3,
        want(
            3,
            st(3, since=0, changed=0),
            "3 replicas: 40 requests in flight for 0 s, target 16 per replica",
            "start",
        ),
    ),
    (
        "first decision above max_replicas: bounded",
        CFG,
        AutoscaleState(),
        load(100),
        9,
        want(
            4,
            st(4, since=0, changed=0),
            "4 replicas: 100 requests in flight for 0 s, target 16 per replica (at max_replicas 4)",
            "start",
        ),
    ),
    (
        "first decision below min_replicas with a light load: the minimum, no pending change",
        dataclasses.replace(CFG, min_replicas=2),
        AutoscaleState(),
        load(3),
        0,
        want(
            2,
            st(2, since=0, changed=0),
            "2 replicas: 3 requests in flight for 0 s, target 16 per replica (min_replicas 2)",
            "start",
        ),
    ),
    (
        "max_replicas lowered below the count: follows at once",
        CFG,
        st(6),
        load(200),
        6,
        want(
            4,
            st(4, since=0, changed=0),
            "4 replicas: 200 requests in flight for 0 s, target 16 per replica (at max_replicas 4)",
            "bounds",
        ),
    ),
    (
        "min_replicas raised above zero while at zero: up at once",
        CFG,
        st(0),
        load(0),
        0,
        want(
            1,
            st(1, since=0, changed=0),
            "1 replica: no request in flight for 0 s, target 16 per replica (min_replicas 1)",
            "bounds",
        ),
    ),
    # ---- rule 2: load unknown
    (
        "load unknown: the count is kept and a pending change dropped",
        CFG,
        st(3, pending=(30, 4)),
        None,
        3,
        want(
            3,
            st(3),
            "3 replicas: load unknown (Redis unreadable: ConnectionError); the count is kept "
            "until the gateways' in-flight counts can be read again",
        ),
    ),
    # ---- steady
    (
        "steady: the issue's sentence",
        CFG,
        st(3, since=120),
        load(41),
        3,
        want(
            3,
            st(3, since=120),
            "3 replicas: 41 requests in flight for 2 min, target 16 per replica",
        ),
    ),
    (
        "steady at max_replicas with more load: says it is capped",
        CFG,
        st(4, since=600),
        load(100),
        4,
        want(
            4,
            st(4, since=600),
            "4 replicas: 100 requests in flight for 10 min, target 16 per replica "
            "(at max_replicas 4)",
        ),
    ),
    (
        "steady at min_replicas with no load: says it is the minimum",
        CFG,
        st(1, since=LONG_AGO),
        load(0),
        1,
        want(
            1,
            st(1),
            "1 replica: no request in flight for 1 h, target 16 per replica (min_replicas 1)",
        ),
    ),
    # ---- rule 5: scale up after the delay
    (
        "more load: a pending scale-up starts",
        CFG,
        st(2),
        load(41),
        2,
        want(
            2,
            st(2, pending=(0, 3)),
            "2 replicas: 41 requests in flight for 0 s, " + UP.format(n=3),
        ),
    ),
    (
        "still more load within the delay: keeps the lowest count wanted and its start",
        CFG,
        st(2, pending=(30, 3)),
        load(60),
        2,
        want(
            2,
            st(2, pending=(30, 3)),
            "2 replicas: 60 requests in flight for 30 s, " + UP.format(n=3),
        ),
    ),
    (
        "the load lasted the delay: up to the pending count",
        CFG,
        st(2, pending=(60, 3)),
        load(41),
        2,
        want(
            3,
            st(3, since=60, changed=0),
            "3 replicas: 41 requests in flight for 1 min, target 16 per replica",
            "up",
        ),
    ),
    (
        "the load lasted the delay but had dipped: up to the lowest count it asked for",
        CFG,
        st(1, pending=(90, 2)),
        load(64),
        1,
        want(
            2,
            st(2, since=90, changed=0),
            "2 replicas: 64 requests in flight for 1 min, target 16 per replica",
            "up",
        ),
    ),
    (
        "the load fell back within the delay: the pending scale-up is dropped",
        CFG,
        st(2, since=600, pending=(30, 3)),
        load(20),
        2,
        want(
            2,
            st(2, since=600),
            "2 replicas: 20 requests in flight for 10 min, target 16 per replica",
        ),
    ),
    (
        "no scale-up delay: at once",
        dataclasses.replace(CFG, up_delay_secs=0),
        st(1),
        load(33),
        1,
        want(
            3,
            st(3, since=0, changed=0),
            "3 replicas: 33 requests in flight for 0 s, target 16 per replica",
            "up",
        ),
    ),
    (
        "a burst above max_replicas scales to max_replicas",
        CFG,
        st(2, pending=(60, 9)),
        load(500),
        2,
        want(
            4,
            st(4, since=60, changed=0),
            "4 replicas: 500 requests in flight for 1 min, target 16 per replica "
            "(at max_replicas 4)",
            "up",
        ),
    ),
    # ---- rule 6: scale down after the delay
    (
        "less load: a pending scale-down starts",
        CFG,
        st(3),
        load(10),
        3,
        want(
            3,
            st(3, pending=(0, 1)),
            "3 replicas: 10 requests in flight for 0 s, " + DOWN.format(n=1),
        ),
    ),
    (
        "the low load lasted the delay: down",
        CFG,
        st(3, pending=(300, 1)),
        load(10),
        3,
        want(
            1,
            st(1, since=300, changed=0),
            "1 replica: 10 requests in flight for 5 min, target 16 per replica",
            "down",
        ),
    ),
    (
        "the low load lasted the delay but had risen: down to the highest count it asked for",
        CFG,
        st(4, pending=(400, 1)),
        load(20),
        4,
        want(
            2,
            st(2, since=400, changed=0),
            "2 replicas: 20 requests in flight for 6 min, target 16 per replica",
            "down",
        ),
    ),
    (
        "a pending scale-down reversed by a surge: a scale-up starts instead",
        CFG,
        st(3, pending=(100, 1)),
        load(60),
        3,
        want(
            3, st(3, pending=(0, 4)), "3 replicas: 60 requests in flight for 0 s, " + UP.format(n=4)
        ),
    ),
    (
        "a pending scale-down at min_replicas 0 before the idle time: down to one, not zero",
        ZERO,
        st(3, idle=60),
        load(0),
        3,
        want(
            3,
            st(3, pending=(0, 1), idle=60),
            "3 replicas: no request in flight for 0 s, " + DOWN.format(n=1),
        ),
    ),
    # ---- scale to zero (min_replicas 0)
    (
        "idle starts: counted from now",
        ZERO,
        st(1),
        load(0),
        1,
        want(1, st(1, idle=0), IDLE_MSG.format(idle="0 s")),
    ),
    (
        "idle, but a short request came and went between passes: idle from that request",
        ZERO,
        st(1, idle=600),
        load(0, last=120),
        1,
        want(1, st(1, idle=120), IDLE_MSG.format(idle="2 min")),
    ),
    (
        "a request in flight ends the idle time",
        ZERO,
        st(1, since=600, idle=840),
        load(1),
        1,
        want(
            1, st(1, since=600), "1 replica: 1 request in flight for 10 min, target 16 per replica"
        ),
    ),
    (
        "idle for scale_to_zero_after_secs: zero replicas",
        ZERO,
        st(1, idle=900),
        load(0, last=1000),
        1,
        want(0, st(0, since=900, changed=0, idle=900), ZERO_MSG.format(idle="15 min"), "zero"),
    ),
    (
        "idle long enough with several replicas: straight to zero (the idle time is the delay)",
        ZERO,
        st(3, idle=1200),
        load(0),
        3,
        want(0, st(0, since=1200, changed=0, idle=1200), ZERO_MSG.format(idle="20 min"), "zero"),
    ),
    (
        "min_replicas 1 never goes to zero, however idle",
        CFG,
        st(1, idle=100_000),
        load(0),
        1,
        want(
            1,
            st(1),
            "1 replica: no request in flight for 1 h, target 16 per replica (min_replicas 1)",
        ),
    ),
    (
        "at zero with nothing asked: stays at zero",
        ZERO,
        st(0, changed=1200, idle=1200),
        load(0, last=1300, woken=1250),
        0,
        want(0, st(0, changed=1200, idle=1200), ZERO_MSG.format(idle="20 min")),
    ),
    # ---- wake on request (rule 3)
    (
        "at zero, a held request in flight: woken at once, no delay",
        ZERO,
        st(0, changed=1200, idle=1200),
        load(1, last=1),
        0,
        want(
            1,
            st(1, since=0, changed=0),
            "1 replica: woken by a request (1 request in flight), target 16 per replica",
            "wake",
        ),
    ),
    (
        "at zero, a burst of held requests: woken with as many replicas as it needs",
        ZERO,
        st(0, changed=1200, idle=1200),
        load(40, last=1),
        0,
        want(
            3,
            st(3, since=0, changed=0),
            "3 replicas: woken by a request (40 requests in flight), target 16 per replica",
            "wake",
        ),
    ),
    (
        "at zero, a wake signal newer than the change to zero (the request already gave up)",
        ZERO,
        st(0, changed=1200, idle=1200),
        load(0, woken=5),
        0,
        want(
            1,
            st(1, since=0, changed=0),
            "1 replica: woken by a request (no request in flight), target 16 per replica",
            "wake",
        ),
    ),
    (
        "at zero, a request that arrived after the change to zero (no signal seen)",
        ZERO,
        st(0, changed=1200, idle=1200),
        load(0, last=5),
        0,
        want(
            1,
            st(1, since=0, changed=0),
            "1 replica: woken by a request (no request in flight), target 16 per replica",
            "wake",
        ),
    ),
    (
        "at zero, a wake of a huge burst: at most max_replicas",
        ZERO,
        st(0, changed=1200),
        load(900),
        0,
        want(
            4,
            st(4, since=0, changed=0),
            "4 replicas: woken by a request (900 requests in flight), target 16 per replica",
            "wake",
        ),
    ),
]


@pytest.mark.parametrize(
    ("settings", "state", "reading", "start", "expected"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_autoscale_rule(
    settings: Autoscale,
    state: AutoscaleState,
    reading: ModelLoad | None,
    start: int,
    expected: Decision,
) -> None:
    got = decide(
        settings,
        state,
        reading,
        now=NOW,
        start=start,
        load_problem="Redis unreadable: ConnectionError",
    )
    assert got == expected


def test_the_decision_never_leaves_the_bounds_whatever_the_load() -> None:
    """Every count decided from any recorded count and load stays within min and max."""
    for cfg in (CFG, ZERO):
        for count in range(0, 7):
            for in_flight in (0, 1, 15, 16, 17, 64, 10_000):
                for pending in (None, (0, 1), (1000, 3), (1000, 0)):
                    state = st(count, pending=pending, idle=2000)
                    got = decide(cfg, state, load(in_flight), now=NOW, start=count)
                    assert cfg.min_replicas <= got.replicas <= cfg.max_replicas or (
                        got.replicas == 0 and cfg.min_replicas == 0
                    ), (cfg, count, in_flight, pending, got)
                    if got.replicas == 0:
                        assert in_flight == 0, (cfg, count, in_flight, got)


@pytest.mark.parametrize(
    ("in_flight", "per", "replicas"),
    [(0, 16, 0), (1, 16, 1), (16, 16, 1), (17, 16, 2), (41, 16, 3), (5, 1, 5), (3, 0, 3)],
)
def test_needed_replicas_round_up(in_flight: int, per: int, replicas: int) -> None:
    assert needed(in_flight, per) == replicas


@pytest.mark.parametrize(
    ("secs", "words"),
    [(0, "0 s"), (59.9, "59 s"), (60, "1 min"), (119, "1 min"), (3600, "1 h"), (3900, "1 h 5 min")],
)
def test_durations_in_words(secs: float, words: str) -> None:
    assert duration(secs) == words


def test_the_spec_is_written_on_a_change_and_new_figures_at_most_every_10_s() -> None:
    shown = dataclasses.replace(st(3), message="3 replicas: 40 requests...", message_at=ago(5))
    same_timing_new_words = dataclasses.replace(shown, message="3 replicas: 41 requests...")
    assert not record_due(shown, shown, NOW)  # nothing changed
    assert not record_due(shown, same_timing_new_words, NOW)  # figures only, shown 5 s ago
    older = dataclasses.replace(shown, message_at=ago(10))
    assert record_due(older, same_timing_new_words, NOW)  # figures only, shown 10 s ago
    pending = dataclasses.replace(shown, pending_since=NOW, pending_replicas=4)
    assert record_due(shown, pending, NOW)  # timing changed: at once
    never = dataclasses.replace(shown, message_at=None)
    assert record_due(never, same_timing_new_words, NOW)
    unknown = dataclasses.replace(shown, message="3 replicas: load unknown (...)")
    assert record_due(shown, unknown, NOW)  # says something else: at once
