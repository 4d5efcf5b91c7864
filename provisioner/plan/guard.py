"""The model's guards on new submits: the failed-launch breaker ("Stop after failed launches")
and the replacement-storm backoff, their sentences (``SetGuard``), and why a pass may not submit.
"""

from __future__ import annotations

import datetime as dt

from provisioner.domain import ModelSpec, SetGuard
from provisioner.plan.state import _age_secs, _Group, _Pass

RESUME_HINT = (
    'Fix the cause (the job logs say why), then press "Try once more" on the model\'s page '
    '(or POST /api/v1/models/<id>/replicas/clear-lost/), or raise "Stop after failed '
    'launches" (0 never stops).'
)
_STORM_BACKOFF_BASE_SECS = 15
_STORM_BACKOFF_MAX_SECS = 300


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


def _submit_block(spec: ModelSpec, breaker: bool, failures: int, storm_hold: bool) -> str:
    """Why no new replica may be submitted for the model in this pass ("" = they may)."""
    if breaker:
        return f"stopped after {failures} failed launches"
    if spec.hold_submits:
        return "Slurm refused a submit moments ago"
    if storm_hold:
        return "replacement storm backoff"
    return ""
