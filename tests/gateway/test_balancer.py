"""The gateway's balancer (pure): which endpoint takes the next request, as tables of cases."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from obleth.core.choices import HealthStatus
from obleth.gateway.balancer import Balancer
from obleth.gateway.routing import RouteEndpoint


def ep(
    eid: str, *, priority: int = 100, weight: int = 1, health: str = HealthStatus.HEALTHY
) -> RouteEndpoint:
    return RouteEndpoint(
        id=eid,
        api_base=f"http://{eid}/v1",
        api_key="",
        priority=priority,
        weight=weight,
        health_status=health,
    )


@dataclass
class Clock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Case:
    name: str
    endpoints: list[RouteEndpoint]
    in_flight: dict[str, int] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)
    first: str = ""
    order: list[str] | None = None


CASES = [
    Case(
        "least outstanding wins", [ep("a"), ep("b"), ep("c")], {"a": 3, "b": 1, "c": 2}, first="b"
    ),
    Case(
        "idle endpoint before busy ones",
        [ep("a"), ep("b")],
        {"a": 5},
        order=["b", "a"],
    ),
    Case(
        "weight divides the load: 4 in flight on weight 4 beats 2 on weight 1",
        [ep("heavy", weight=4), ep("light")],
        {"heavy": 4, "light": 2},
        first="heavy",
    ),
    Case(
        "better priority tier first even when busier",
        [ep("primary", priority=10), ep("backup", priority=20)],
        {"primary": 50},
        order=["primary", "backup"],
    ),
    Case(
        "unhealthy endpoint goes last",
        [ep("sick", health=HealthStatus.UNHEALTHY, priority=1), ep("ok", priority=50)],
        order=["ok", "sick"],
    ),
    Case(
        "all unhealthy: still tried, in priority order",
        [
            ep("x", health=HealthStatus.UNHEALTHY, priority=2),
            ep("y", health=HealthStatus.UNHEALTHY, priority=1),
        ],
        order=["y", "x"],
    ),
    Case(
        "cooling endpoint goes behind every usable one",
        [ep("cold", priority=1), ep("warm", priority=9)],
        failures={"cold": 3},
        order=["warm", "cold"],
    ),
    Case(
        "two failures are not a cooldown yet (threshold 3)",
        [ep("a"), ep("b")],
        {"b": 1},
        failures={"a": 2},
        first="a",
    ),
    Case("no endpoints", [], order=[]),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_order(case: Case) -> None:
    b = Balancer(cooldown_after=3, cooldown_secs=30, clock=Clock(), rng=random.Random(7))
    for eid, n in case.in_flight.items():
        for _ in range(n):
            b.started(eid)
    for eid, n in case.failures.items():
        for _ in range(n):
            b.failed(eid, "connect")
    got = [e.id for e in b.order(case.endpoints)]
    if case.order is not None:
        assert got == case.order
    if case.first:
        assert got[0] == case.first


def test_ties_are_spread_at_random() -> None:
    b = Balancer(rng=random.Random(1))
    firsts = {b.order([ep("a"), ep("b"), ep("c")])[0].id for _ in range(60)}
    assert firsts == {"a", "b", "c"}


def test_cooldown_ends_after_its_time_and_success_resets_the_count() -> None:
    clock = Clock()
    b = Balancer(cooldown_after=2, cooldown_secs=30, clock=clock)
    assert b.failed("a", "5xx") is False
    assert b.failed("a", "HTTP 502") is True  # started a cooldown
    assert b.cooling("a")
    (cd,) = b.cooldowns()
    assert cd.endpoint_id == "a" and "HTTP 502" in cd.reason and cd.seconds_left == 30
    clock.now += 31
    assert not b.cooling("a") and b.cooldowns() == []
    b.succeeded("a")
    assert b.state("a").consecutive_failures == 0
    assert b.failed("a", "x") is False  # counting starts again


def test_cooldown_disabled_with_zero() -> None:
    b = Balancer(cooldown_after=0)
    for _ in range(10):
        assert b.failed("a", "x") is False
    assert not b.cooling("a")


def test_affinity_keeps_a_key_on_one_endpoint_and_spreads_keys() -> None:
    b = Balancer()
    eps = [ep("a"), ep("b"), ep("c")]
    for key in ("user-1", "user-2", "user-3"):
        picks = {b.order(eps, affinity=key)[0].id for _ in range(20)}
        assert len(picks) == 1
    favourites = {b.order(eps, affinity=f"k{i}")[0].id for i in range(60)}
    assert favourites == {"a", "b", "c"}


def test_affinity_gives_way_to_a_cooldown() -> None:
    b = Balancer(cooldown_after=1)
    eps = [ep("a"), ep("b")]
    favourite = b.order(eps, affinity="k")[0].id
    b.failed(favourite, "connect")
    assert b.order(eps, affinity="k")[0].id != favourite


def test_concurrency_limit_and_in_flight_never_negative() -> None:
    b = Balancer(max_concurrency=2)
    b.started("a")
    assert b.has_room("a")
    b.started("a")
    assert not b.has_room("a")
    b.finished("a")
    b.finished("a")
    b.finished("a")
    assert b.state("a").in_flight == 0 and b.has_room("a")


def test_forget_keeps_endpoints_in_flight() -> None:
    b = Balancer()
    b.started("busy")
    b.failed("gone", "x")
    b.forget_except(set())
    assert "busy" in b.states and "gone" not in b.states
