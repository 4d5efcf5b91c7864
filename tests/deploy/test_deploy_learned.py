"""Table tests of every "learned from past launches" rule, each with the evidence the operator
reads and the override that would apply it. Pure functions over PastLaunch values."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from recipes.deploy.learned import PastLaunch, suggestions

NOW = dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.UTC)


def launch(minutes_ago: int = 60, **kw: Any) -> PastLaunch:
    return PastLaunch(submitted_at=NOW - dt.timedelta(minutes=minutes_ago), **kw)


def found(launches: list[PastLaunch], **kw: Any) -> list[tuple[str, Any, str, bool]]:
    return [(s.field, s.value, s.evidence, s.prefill) for s in suggestions(launches, now=NOW, **kw)]


CASES: list[tuple[str, list[PastLaunch], dict[str, Any], list[tuple[str, Any, str, bool]]]] = [
    ("nothing to learn from", [], {}, []),
    (
        "every recent launch used one account and QoS: prefilled",
        [launch(account="ml", qos="long"), launch(account="ml", qos="long")],
        {},
        [
            ("account", "ml", "The last 2 launches of this recipe all used account 'ml'.", True),
            ("qos", "long", "The last 2 launches of this recipe all used QoS 'long'.", True),
        ],
    ),
    (
        "one launch is not a habit",
        [launch(account="ml")],
        {},
        [],
    ),
    (
        "accounts differ: nothing",
        [launch(account="ml"), launch(account="ops")],
        {},
        [],
    ),
    (
        "3 of the last 4 hit the 2 h limit",
        [
            launch(time_limit_minutes=120, end_state="TIMEOUT"),
            launch(time_limit_minutes=120, end_state="TIMEOUT"),
            launch(time_limit_minutes=120, end_state="COMPLETED"),
            launch(time_limit_minutes=120, end_state="TIMEOUT"),
        ],
        {},
        [
            (
                "time_limit",
                "4:00:00",
                "3 of the last 4 launches hit the 2:00:00 limit (TIMEOUT): try 4:00:00.",
                False,
            )
        ],
    ),
    (
        "a longer walltime is capped by the partition's MaxTime",
        [launch(time_limit_minutes=1000, end_state="TIMEOUT")],
        {"max_time_minutes": 1440},
        [
            (
                "time_limit",
                "1-00:00:00",
                "The last launch hit the 16:40:00 limit (TIMEOUT): try 1-00:00:00 (the "
                "partition's MaxTime).",
                False,
            )
        ],
    ),
    (
        "already at MaxTime: nothing to suggest",
        [launch(time_limit_minutes=1440, end_state="TIMEOUT")],
        {"max_time_minutes": 1440},
        [],
    ),
    (
        "out of memory with 8G: twice as much",
        [launch(mem_mb=8192, end_state="OUT_OF_MEMORY"), launch(mem_mb=8192)],
        {},
        [
            (
                "mem",
                "16G",
                "1 of the last 2 launches ran out of memory (OUT_OF_MEMORY) with 8G: try 16G.",
                False,
            )
        ],
    ),
    (
        "out of memory near the largest node: the whole node",
        [launch(mem_mb=40000, end_state="OUT_OF_MEMORY")],
        {"largest_node_mb": 64000},
        [
            (
                "mem",
                "0",
                "The last launch ran out of memory (OUT_OF_MEMORY) with 39.1G: try the whole "
                "node (mem 0).",
                False,
            )
        ],
    ),
    (
        "out of memory with the default: the whole node",
        [launch(end_state="OUT_OF_MEMORY")],
        {},
        [
            (
                "mem",
                "0",
                "The last launch ran out of memory (OUT_OF_MEMORY) with Slurm's default memory: "
                "try the whole node (mem 0).",
                False,
            )
        ],
    ),
    (
        "out of memory with the whole node: more nodes",
        [launch(mem_mb=0, nodes_requested=1, end_state="OUT_OF_MEMORY")],
        {},
        [
            (
                "nodes",
                2,
                "The last launch ran out of memory (OUT_OF_MEMORY) with the whole node's memory: "
                "try 2 nodes.",
                False,
            )
        ],
    ),
    (
        "repeated failures on one node: avoid it",
        [
            launch(nodes=("gpu03",), end_state="NODE_FAIL"),
            launch(nodes=("gpu03",), end_state="FAILED"),
            launch(nodes=("gpu01",), end_state="FAILED"),
        ],
        {"exclude": "gpu09"},
        [
            (
                "exclude",
                "gpu09,gpu03",
                "2 of the last 3 launches failed on gpu03 (FAILED, NODE_FAIL) and none served "
                "there: avoid gpu03.",
                False,
            )
        ],
    ),
    (
        "a node that also served is not blamed",
        [
            launch(nodes=("gpu03",), end_state="FAILED"),
            launch(nodes=("gpu03",), end_state="FAILED"),
            launch(nodes=("gpu03",), healthy_at=NOW, end_state="COMPLETED"),
        ],
        {},
        [],
    ),
    (
        "long Resources pending: a partition with idle fitting nodes",
        [
            launch(minutes_ago=45, pending_reason="Resources"),
            launch(minutes_ago=50, started_at=NOW - dt.timedelta(minutes=48)),
        ],
        {"partition": "gpu", "idle_elsewhere": lambda: {"gpu": 0, "cpu": 2, "tiny": 1}},
        [
            (
                "partition",
                "cpu",
                "1 of the last 2 launches waited over 10 min for Resources in 'gpu'; 'cpu' has "
                "2 idle nodes a replica fits on now.",
                False,
            )
        ],
    ),
    (
        "long pending but no idle fitting node elsewhere",
        [launch(minutes_ago=45, pending_reason="Resources")],
        {"partition": "gpu", "idle_elsewhere": lambda: {"gpu": 0, "cpu": 0}},
        [],
    ),
    (
        "a short wait is no evidence",
        [launch(minutes_ago=3, pending_reason="Resources")],
        {"partition": "gpu", "idle_elsewhere": lambda: {"cpu": 2}},
        [],
    ),
    (
        "only the last 5 launches count",
        [launch() for _ in range(5)]
        + [launch(time_limit_minutes=60, end_state="TIMEOUT") for _ in range(3)],
        {},
        [],
    ),
]


@pytest.mark.parametrize(
    ("launches", "context", "expected"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_suggestion_rules(
    launches: list[PastLaunch],
    context: dict[str, Any],
    expected: list[tuple[str, Any, str, bool]],
) -> None:
    assert found(launches, **context) == expected


def test_each_suggestion_says_how_to_apply_it() -> None:
    (only,) = suggestions([launch(time_limit_minutes=30, end_state="TIMEOUT")], now=NOW)
    assert only.apply == {"time_limit": "1:00:00"}
    assert only.source == "learned"
