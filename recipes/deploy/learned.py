"""Learned from past launches: what a recipe's recent launches say about the next one.

Pure functions over :class:`PastLaunch` (one per ``Launch`` row, newest first; the service
builds them). :func:`suggestions` returns :class:`Suggestion` values, each with the evidence
the operator reads and the overrides that would apply it. Only ``prefill`` suggestions (the
account and QoS every recent launch used) are filled in, marked ``learned``, and only where
the operator gave no value; every other one is shown and never applied until picked (sent back
as an override).

Rules (``RECENT`` = the last 5 launches):

- ``account`` / ``qos``: at least 2 recent launches and all used the same non-empty value.
- ``time_limit``: a recent launch ended TIMEOUT: twice the longest limit that timed out,
  capped by the partition's MaxTime (nothing when already at it).
- ``mem``: a recent launch ended OUT_OF_MEMORY: twice the memory it had (capped by the largest
  node); the whole node (``0``) when no size was given or the cap is reached; more nodes when
  it already had the whole node.
- ``exclude``: a node where at least 2 recent launches failed (FAILED, NODE_FAIL, BOOT_FAIL,
  LAUNCH_FAILED) and none there served.
- ``partition``: a recent launch waited at least ``LONG_PENDING`` for ``Resources`` and another
  partition has idle nodes a replica fits on now.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Sequence
from typing import Any

from recipes.deploy.checks import format_mb, format_minutes

__all__ = [
    "LONG_PENDING",
    "RECENT",
    "PastLaunch",
    "Suggestion",
    "suggestions",
]

RECENT = 5
LONG_PENDING = dt.timedelta(minutes=10)
_NODE_FAILURES = frozenset({"FAILED", "NODE_FAIL", "BOOT_FAIL", "LAUNCH_FAILED"})


@dataclasses.dataclass(frozen=True)
class PastLaunch:
    """What one launch asked for and how it ended (from a ``Launch`` row)."""

    submitted_at: dt.datetime
    partition: str = ""
    account: str = ""
    qos: str = ""
    time_limit_minutes: int | None = None
    mem_mb: int | None = None
    nodes_requested: int = 1
    exclude: str = ""
    nodes: tuple[str, ...] = ()  # where it ran
    started_at: dt.datetime | None = None
    healthy_at: dt.datetime | None = None
    ended_at: dt.datetime | None = None
    end_state: str = ""
    pending_reason: str = ""  # Slurm's reason while it was (or is) pending


@dataclasses.dataclass(frozen=True)
class Suggestion:
    field: str
    value: Any
    evidence: str
    apply: dict[str, Any]
    prefill: bool = False
    source: str = "learned"

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _same_value(recent: Sequence[PastLaunch], field: str) -> Suggestion | None:
    values = [getattr(launch, field) for launch in recent]
    if len(values) < 2 or not values[0] or any(v != values[0] for v in values):
        return None
    word = "account" if field == "account" else "QoS"
    return Suggestion(
        field=field,
        value=values[0],
        evidence=f"The last {len(values)} launches of this recipe all used {word} {values[0]!r}.",
        apply={field: values[0]},
        prefill=True,
    )


def _timeout(recent: Sequence[PastLaunch], max_time_minutes: int | None) -> Suggestion | None:
    hit = [launch for launch in recent if launch.end_state.upper() == "TIMEOUT"]
    limits = [launch.time_limit_minutes for launch in hit if launch.time_limit_minutes]
    if not hit or not limits:
        return None
    longest = max(limits)
    value = longest * 2
    cap = ""
    if max_time_minutes is not None:
        if longest >= max_time_minutes:
            return None
        if value > max_time_minutes:
            value, cap = max_time_minutes, " (the partition's MaxTime)"
    shown = format_minutes(value)
    if len(recent) == 1:
        counted = "The last launch hit"
    else:
        counted = f"{len(hit)} of the last {len(recent)} launches hit"
    return Suggestion(
        field="time_limit",
        value=shown,
        evidence=f"{counted} the {format_minutes(longest)} limit (TIMEOUT): try {shown}{cap}.",
        apply={"time_limit": shown},
    )


def _out_of_memory(recent: Sequence[PastLaunch], largest_node_mb: int | None) -> Suggestion | None:
    hit = [launch for launch in recent if launch.end_state.upper() == "OUT_OF_MEMORY"]
    if not hit:
        return None
    counted = f"{len(hit)} of the last {len(recent)} launches ran out of memory (OUT_OF_MEMORY)"
    if len(recent) == 1:
        counted = "The last launch ran out of memory (OUT_OF_MEMORY)"
    sizes = [launch.mem_mb for launch in hit if launch.mem_mb is not None]
    if sizes and min(sizes) == 0:
        nodes = max(launch.nodes_requested for launch in hit) + 1
        return Suggestion(
            field="nodes",
            value=nodes,
            evidence=f"{counted} with the whole node's memory: try {nodes} nodes.",
            apply={"nodes": nodes},
        )
    if not sizes:
        return Suggestion(
            field="mem",
            value="0",
            evidence=f"{counted} with Slurm's default memory: try the whole node (mem 0).",
            apply={"mem": "0"},
        )
    value = max(sizes) * 2
    if largest_node_mb is not None and value >= largest_node_mb:
        return Suggestion(
            field="mem",
            value="0",
            evidence=f"{counted} with {format_mb(max(sizes))}: try the whole node (mem 0).",
            apply={"mem": "0"},
        )
    shown = format_mb(value)
    return Suggestion(
        field="mem",
        value=shown,
        evidence=f"{counted} with {format_mb(max(sizes))}: try {shown}.",
        apply={"mem": shown},
    )


def _bad_nodes(recent: Sequence[PastLaunch], exclude: str) -> list[Suggestion]:
    failed: dict[str, list[str]] = {}
    served: set[str] = set()
    for launch in recent:
        if not launch.nodes:
            continue
        if launch.healthy_at is not None:
            served.update(launch.nodes)
        if launch.end_state.upper() in _NODE_FAILURES:
            failed.setdefault(launch.nodes[0], []).append(launch.end_state.upper())
    out: list[Suggestion] = []
    current = [n for n in exclude.split(",") if n.strip()]
    for node, states in sorted(failed.items()):
        if len(states) < 2 or node in served or node in current:
            continue
        value = ",".join([*current, node])
        out.append(
            Suggestion(
                field="exclude",
                value=value,
                evidence=(
                    f"{len(states)} of the last {len(recent)} launches failed on {node} "
                    f"({', '.join(sorted(set(states)))}) and none served there: avoid {node}."
                ),
                apply={"exclude": value},
            )
        )
    return out


def _long_pending(
    recent: Sequence[PastLaunch],
    partition: str,
    idle_elsewhere: Callable[[], dict[str, int]] | None,
    now: dt.datetime,
) -> Suggestion | None:
    waited = [
        launch
        for launch in recent
        if "resources" in launch.pending_reason.lower()
        and ((launch.started_at or launch.ended_at or now) - launch.submitted_at) >= LONG_PENDING
    ]
    if not waited or idle_elsewhere is None:
        return None
    others = {p: n for p, n in idle_elsewhere().items() if p != partition and n > 0}
    if not others:
        return None
    best = max(sorted(others), key=lambda p: others[p])
    minutes = int(LONG_PENDING.total_seconds() // 60)
    return Suggestion(
        field="partition",
        value=best,
        evidence=(
            f"{len(waited)} of the last {len(recent)} launches waited over {minutes} min for "
            f"Resources in {partition!r}; {best!r} has {_plural(others[best], 'idle node')} a "
            "replica fits on now."
        ),
        apply={"partition": best},
    )


def suggestions(
    launches: Sequence[PastLaunch],
    *,
    partition: str = "",
    exclude: str = "",
    max_time_minutes: int | None = None,
    largest_node_mb: int | None = None,
    idle_elsewhere: Callable[[], dict[str, int]] | None = None,
    now: dt.datetime | None = None,
) -> list[Suggestion]:
    """Every suggestion the recent launches support (``launches`` newest first).

    ``idle_elsewhere`` returns partition -> idle nodes a replica fits on (None: unknown)."""
    recent = list(launches[:RECENT])
    if not recent:
        return []
    now = now or dt.datetime.now(dt.UTC)
    out: list[Suggestion] = []
    for field in ("account", "qos"):
        found = _same_value(recent, field)
        if found:
            out.append(found)
    for found in (
        _timeout(recent, max_time_minutes),
        _out_of_memory(recent, largest_node_mb),
        _long_pending(recent, partition, idle_elsewhere, now),
    ):
        if found:
            out.append(found)
    out.extend(_bad_nodes(recent, exclude))
    return out
