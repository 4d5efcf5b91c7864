"""Autoscaling: a model's replica count from the gateways' in-flight requests, in the pass.

Pure: no clock (``now`` is given), database, network or Django; the planner (``plan/``) calls
:func:`decide` for every enabled model whose spec has ``max_replicas`` set, uses the count it
returns as the model's target, and records the state it returns on the spec
(``SetAutoscale``) when it changed. Table-tested in tests/autoscale/test_autoscale_plan.py.

Rules, in order:

1. **First decision**: ``target_replicas`` bounded by ``min_replicas`` and ``max_replicas``;
   a count outside bounds the operator has just changed follows them at once.
2. **Load unknown** (Redis unreadable, no gateway reporting): the count is kept; a pending
   change is dropped (nobody can say the load stayed above or below).
3. **Wake**: at zero replicas, a request in flight (the gateway holds it), a wake signal newer
   than the change to zero, or a request that arrived after it brings the model back at once (no
   delay): ``max(1, needed)`` replicas, at most ``max_replicas``.
4. **Wanted count**: ``needed = ceil(in_flight / target_in_flight)``, bounded by
   ``max_replicas`` and a floor: ``min_replicas``; with ``min_replicas = 0`` the floor is 1 until
   the model has been idle (nothing in flight, no new request) for ``scale_to_zero_after_secs``,
   then 0.
5. **Scale up** when the wanted count stays above the count for ``scale_up_delay_secs``: to the
   lowest count wanted during that window (the load stayed above it the whole time). A pass that
   wants no more than the count drops the pending change.
6. **Scale down** likewise after ``scale_down_delay_secs``, to the highest count wanted during
   the window. Going to zero needs no down delay: the idle time is its delay.

The reason sentence is what the model page and the API show, e.g.
``3 replicas: 41 requests in flight for 2 min, target 16 per replica``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re

from provisioner.domain import Autoscale, AutoscaleState, ModelLoad

__all__ = [
    "MESSAGE_REFRESH_SECS",
    "Decision",
    "decide",
    "duration",
    "needed",
    "record_due",
]

#: A sentence that changed only in its figures ("for 40 s" -> "for 50 s") is written to the spec
#: at most this often; a change of count, timing or wording is written at once.
MESSAGE_REFRESH_SECS = 10
MESSAGE_LIMIT = 480
_FIGURES = re.compile(r"\d+")


@dataclasses.dataclass(frozen=True, slots=True)
class Decision:
    replicas: int
    state: AutoscaleState  # message set; message_at as it was (the planner stamps writes)
    change: str = ""  # "", "start", "bounds", "up", "down", "zero", "wake"


def needed(in_flight: int, target_in_flight: int) -> int:
    """Replicas the load asks for: ``ceil(in_flight / target_in_flight)``."""
    per = max(target_in_flight, 1)
    return -(-max(in_flight, 0) // per)


def duration(secs: float) -> str:
    """``45 s``, ``2 min``, ``1 h``, ``1 h 5 min`` (whole units, rounded down)."""
    whole = max(int(secs), 0)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min"
    hours, minutes = divmod(whole // 60, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


def _replicas(n: int) -> str:
    return f"{n} replica" if n == 1 else f"{n} replicas"


def _load_words(in_flight: int) -> str:
    if in_flight <= 0:
        return "no request in flight"
    return "1 request in flight" if in_flight == 1 else f"{in_flight} requests in flight"


def _secs(now: dt.datetime, then: dt.datetime | None) -> float:
    return (now - then).total_seconds() if then is not None else 0.0


def _idle_since(
    cfg: Autoscale, state: AutoscaleState, load: ModelLoad, now: dt.datetime
) -> dt.datetime | None:
    """Since when nothing was in flight and no request arrived (min_replicas 0 only: other
    models never go to zero, and tracking it would write the spec on every busy/idle flip)."""
    if cfg.min_replicas > 0 or load.in_flight > 0:
        return None
    start = state.idle_since or now
    last = load.last_request_at
    if last is not None:
        last = min(last, now)
        if last > start:
            start = last
    return start


def _woken(state: AutoscaleState, load: ModelLoad) -> bool:
    if load.in_flight > 0:
        return True
    went = state.changed_at
    for at in (load.woken_at, load.last_request_at):
        if at is not None and (went is None or at > went):
            return True
    return False


def decide(
    cfg: Autoscale,
    state: AutoscaleState,
    load: ModelLoad | None,
    *,
    now: dt.datetime,
    start: int,
    load_problem: str = "",
) -> Decision:
    """The model's count for this pass and the state to keep (see the module docstring).

    ``load`` None: unknown (``load_problem`` says why). ``start``: the spec's target_replicas,
    the count before autoscaling decided anything.
    """
    top = max(cfg.max_replicas, cfg.min_replicas, 0)
    per = max(cfg.target_in_flight, 1)
    change = ""
    if state.replicas is None:  # rule 1
        count = min(max(start, cfg.min_replicas), top)
        state = AutoscaleState(replicas=count, since=now, changed_at=now)
        change = "start"
    count = int(state.replicas or 0)
    bounded = min(max(count, cfg.min_replicas), top)
    if bounded != count:  # the operator moved the bounds: follow them at once
        state = AutoscaleState(replicas=bounded, since=now, changed_at=now)
        count, change = bounded, "bounds"

    if load is None:  # rule 2
        new = dataclasses.replace(state, pending_since=None, pending_replicas=None)
        message = (
            f"{_replicas(count)}: load unknown ({load_problem or 'no reading'}); the count is "
            "kept until the gateways' in-flight counts can be read again"
        )
        return _done(new, message, change)

    need = needed(load.in_flight, per)
    idle_since = _idle_since(cfg, state, load, now)

    if count == 0:
        if _woken(state, load):  # rule 3
            woke = min(max(need, 1), top) if top > 0 else 0
            new = AutoscaleState(replicas=woke, since=now, changed_at=now)
            message = (
                f"{_replicas(woke)}: woken by a request ({_load_words(load.in_flight)}), "
                f"target {per} per replica"
            )
            return _done(new, message, "wake")
        new = dataclasses.replace(
            state, pending_since=None, pending_replicas=None, idle_since=idle_since
        )
        idle = duration(_secs(now, idle_since or state.changed_at))
        message = (
            f"0 replicas: idle for {idle} (scales to zero after "
            f"{duration(cfg.zero_after_secs)} without a request); the next request wakes it"
        )
        return _done(new, message, change)

    # rule 4
    if cfg.min_replicas > 0:
        floor = cfg.min_replicas
    else:
        idle_long = idle_since is not None and _secs(now, idle_since) >= cfg.zero_after_secs
        floor = 0 if idle_long else 1
    wanted = min(max(need, floor), top)
    base = dataclasses.replace(state, idle_since=idle_since)

    if wanted == count:
        new = dataclasses.replace(base, pending_since=None, pending_replicas=None)
        return _done(new, _steady(cfg, new, count, load, need, now), change)

    up = wanted > count
    pending = state.pending_replicas
    same_way = (
        pending is not None
        and state.pending_since is not None
        and (pending > count if up else pending < count)
    )
    if same_way and pending is not None:
        since = state.pending_since or now
        bound = min(pending, wanted) if up else max(pending, wanted)
    else:
        since, bound = now, wanted

    if not up and wanted == 0:  # rule 6, to zero: the idle time was the delay
        new = AutoscaleState(
            replicas=0, since=idle_since or now, changed_at=now, idle_since=idle_since
        )
        message = (
            f"0 replicas: idle for {duration(_secs(now, idle_since))} (scales to zero after "
            f"{duration(cfg.zero_after_secs)} without a request); the next request wakes it"
        )
        return _done(new, message, "zero")

    delay = cfg.up_delay_secs if up else cfg.down_delay_secs
    if _secs(now, since) >= delay:  # rules 5 and 6
        new = AutoscaleState(replicas=bound, since=since, changed_at=now, idle_since=idle_since)
        return _done(new, _steady(cfg, new, bound, load, need, now), "up" if up else "down")

    new = dataclasses.replace(base, pending_since=since, pending_replicas=bound)
    verb = "up" if up else "down"
    message = (
        f"{_replicas(count)}: {_load_words(load.in_flight)} for {duration(_secs(now, since))}, "
        f"target {per} per replica; scaling {verb} to {bound} once it lasts {duration(delay)}"
    )
    return _done(new, message, change)


def _steady(
    cfg: Autoscale, state: AutoscaleState, count: int, load: ModelLoad, need: int, now: dt.datetime
) -> str:
    per = max(cfg.target_in_flight, 1)
    if cfg.min_replicas == 0 and load.in_flight == 0 and state.idle_since is not None:
        return (
            f"{_replicas(count)}: idle for {duration(_secs(now, state.idle_since))}, target "
            f"{per} per replica; scales to zero after {duration(cfg.zero_after_secs)} "
            "without a request"
        )
    text = (
        f"{_replicas(count)}: {_load_words(load.in_flight)} for "
        f"{duration(_secs(now, state.since))}, target {per} per replica"
    )
    if need > count and count >= cfg.max_replicas:
        text += f" (at max_replicas {cfg.max_replicas})"
    elif need < count and count <= cfg.min_replicas:
        text += f" (min_replicas {cfg.min_replicas})"
    return text


def _done(state: AutoscaleState, message: str, change: str) -> Decision:
    count = int(state.replicas or 0)
    return Decision(count, dataclasses.replace(state, message=message[:MESSAGE_LIMIT]), change)


def _timing(state: AutoscaleState) -> tuple[object, ...]:
    return (
        state.replicas,
        state.since,
        state.changed_at,
        state.pending_since,
        state.pending_replicas,
        state.idle_since,
    )


def _skeleton(message: str) -> str:
    return _FIGURES.sub("#", message)


def record_due(before: AutoscaleState, after: AutoscaleState, now: dt.datetime) -> bool:
    """Whether the spec must be written: the count or timing changed, the sentence says
    something else, or only its figures changed and the one shown is at least
    ``MESSAGE_REFRESH_SECS`` old."""
    if _timing(before) != _timing(after):
        return True
    if before.message == after.message:
        return False
    if _skeleton(before.message) != _skeleton(after.message):
        return True
    return before.message_at is None or _secs(now, before.message_at) >= MESSAGE_REFRESH_SECS
