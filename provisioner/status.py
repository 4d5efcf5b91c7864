"""The provisioner's heartbeat and the outcome of its passes (the ``ProvisionerStatus`` row), and
the held/recovered alerts (reference 5.4).

A heartbeat only proves the process is alive: a provisioner can beat for days while every pass
fails, holding replica states frozen. So each pass records its outcome with ``record_pass``:

* ``ok``: ``last_ok_at`` = now, the non-ok streak ends (``non_ok_since`` cleared);
* ``idle`` or ``error``: ``last_ok_at`` kept, the streak starts now unless already running.

When Slurm is enabled and a non-ok streak has lasted ``OBLETH_PROVISIONER_HELD_ALERT_SECS``, ONE
``slurm_reconcile_held`` alert fires; the next ok pass fires ``slurm_reconcile_recovered``.
"""

from __future__ import annotations

import datetime as dt
import logging
import socket
from typing import Any, Literal

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from obleth.build import version_label
from obleth.core.models import ProvisionerStatus, SlurmSettings
from obleth.logging import redact
from provisioner import alerts

__all__ = [
    "DETAIL_MAX_CHARS",
    "HELD_ALERT_KEY",
    "PASS_KINDS",
    "PASS_OUTCOMES",
    "RECOVERED_ALERT_KEY",
    "RUNNING_WINDOW_SECS",
    "describe_status",
    "heartbeat",
    "recent_model_task_failures",
    "record_model_task",
    "record_pass",
]

log = logging.getLogger(__name__)

PassOutcome = Literal["ok", "idle", "error"]
PassKind = Literal["full", "fast"]
PASS_KINDS: tuple[PassKind, ...] = ("full", "fast")
PASS_OUTCOMES: tuple[PassOutcome, ...] = ("ok", "idle", "error")
HELD_ALERT_KEY = "slurm_reconcile_held"
RECOVERED_ALERT_KEY = "slurm_reconcile_recovered"
HELD_ALERT_TITLE = "Provisioner passes are failing: replica states are frozen"
RECOVERED_ALERT_TITLE = "Provisioner passes are succeeding again"
RUNNING_WINDOW_SECS = 60
DETAIL_MAX_CHARS = 2000


def _clean_detail(detail: str) -> str:
    text = redact(str(detail or "")).strip()
    if len(text) > DETAIL_MAX_CHARS:
        text = text[: DETAIL_MAX_CHARS - 3] + "..."
    return text


def _host() -> str:
    return socket.gethostname()[:200]


def _slurm_enabled() -> bool:
    return bool(SlurmSettings.objects.filter(pk=1).values_list("enabled", flat=True).first())


def _held_secs_setting() -> int:
    return int(getattr(settings, "OBLETH_PROVISIONER_HELD_ALERT_SECS", 600))


def _minutes(seconds: float) -> int:
    return max(0, int(seconds // 60))


def heartbeat(*, now: dt.datetime | None = None) -> None:
    """Mark the provisioner alive (heartbeat time, version, host)."""
    now = now or timezone.now()
    ProvisionerStatus.load()
    ProvisionerStatus.objects.filter(pk=1).update(
        heartbeat_at=now, version=version_label(), host=_host()
    )


def record_pass(
    status: PassOutcome,
    detail: str,
    duration_ms: int,
    *,
    kind: PassKind = "full",
    now: dt.datetime | None = None,
) -> ProvisionerStatus:
    """Store a pass's outcome (also a heartbeat) and fire the held/recovered alert when due.

    ``status``: "ok", "idle" or "error". ``detail`` is redacted and capped at 2000 characters.
    ``kind``: "full" (probes serving replicas too) or "fast"; the last pass of each kind and the
    count of passes by kind and outcome are kept for /metrics (``passes_by_kind``).
    """
    if status not in PASS_OUTCOMES:
        raise ValueError(f"status must be 'ok', 'idle' or 'error' (got {status!r})")
    if kind not in PASS_KINDS:
        raise ValueError(f"kind must be 'full' or 'fast' (got {kind!r})")
    now = now or timezone.now()
    detail = _clean_detail(detail)
    duration = max(0, int(duration_ms))
    fire: tuple[str, str, str] | None = None  # (key, title, detail) to send after the commit
    ProvisionerStatus.load()
    with transaction.atomic():
        row = ProvisionerStatus.objects.select_for_update().get(pk=1)
        was_held = row.held_alert_active
        streak_start = row.non_ok_since
        row.heartbeat_at = now
        row.version = version_label()
        row.host = _host()
        row.last_pass_status = status
        row.last_pass_detail = detail
        row.last_pass_at = now
        row.last_pass_ms = duration
        row.passes_by_kind = _with_pass(row.passes_by_kind, kind, status, duration, now)
        if status == "ok":
            row.last_ok_at = now
            row.non_ok_since = None
            if was_held:
                row.held_alert_active = False
                held_for = (now - streak_start).total_seconds() if streak_start else 0.0
                fire = (
                    RECOVERED_ALERT_KEY,
                    RECOVERED_ALERT_TITLE,
                    f"A provisioner pass succeeded after {_minutes(held_for)} minutes of "
                    "failing passes; replica states are being reconciled again.",
                )
        else:
            if row.non_ok_since is None or row.non_ok_since > now:
                row.non_ok_since = now
            held_for = (now - row.non_ok_since).total_seconds()
            if not was_held and held_for >= _held_secs_setting() and _slurm_enabled():
                row.held_alert_active = True
                fire = (
                    HELD_ALERT_KEY,
                    HELD_ALERT_TITLE,
                    f"No provisioner pass has succeeded for {_minutes(held_for)} minutes "
                    f"(since {row.non_ok_since.isoformat()}). Last pass: {status}"
                    + (f": {detail}" if detail else "")
                    + ". Replica states are frozen: nothing is submitted, promoted, "
                    "replaced or cancelled until a pass succeeds.",
                )
        row.save()
    if fire is not None:
        key, title, text = fire
        try:
            alerts.fire(key, title, text, severity="warning" if key == HELD_ALERT_KEY else "info")
        except Exception:  # an alert problem must not fail the pass bookkeeping
            log.exception("could not fire alert %s", key)
    return row


def _with_pass(
    kinds: Any, kind: PassKind, status: PassOutcome, duration_ms: int, now: dt.datetime
) -> dict[str, Any]:
    """``passes_by_kind`` with one more pass of ``kind`` (a malformed entry starts over)."""
    kinds = dict(kinds) if isinstance(kinds, dict) else {}
    entry = kinds.get(kind)
    outcomes = entry.get("outcomes") if isinstance(entry, dict) else None
    if not isinstance(outcomes, dict):
        outcomes = {}
    counts = {o: int(n) for o, n in outcomes.items() if o in PASS_OUTCOMES and isinstance(n, int)}
    counts[status] = counts.get(status, 0) + 1
    kinds[kind] = {"status": status, "ms": duration_ms, "at": now.isoformat(), "outcomes": counts}
    return kinds


def _task_failure_ttl_secs() -> float:
    """How long a model task's failure stands without a newer outcome for that model: a few
    passes, so a model that is no longer planned (deleted, fixed out of band) stops counting."""
    return 4.0 * float(getattr(settings, "OBLETH_PROVISIONER_INTERVAL_SECS", 15)) + 60.0


def record_model_task(
    model_id: str, model_name: str, failed: list[str], *, now: dt.datetime | None = None
) -> None:
    """Celery mode: store a model task's outcome where the next pass reads it. ``failed``: one
    "Action: why" per failed action; empty clears the model's entry (its actions succeeded)."""
    now = now or timezone.now()
    ProvisionerStatus.load()
    with transaction.atomic():
        row = ProvisionerStatus.objects.select_for_update().get(pk=1)
        failures = dict(row.model_task_failures or {})
        if failed:
            failures[str(model_id)] = {
                "name": str(model_name or model_id)[:200],
                "at": now.isoformat(),
                "detail": _clean_detail("; ".join(failed[:3]))[:500],
                "count": len(failed),
            }
        elif str(model_id) not in failures:
            return
        else:
            failures.pop(str(model_id), None)
        row.model_task_failures = failures
        row.save(update_fields=["model_task_failures"])


def recent_model_task_failures(*, now: dt.datetime | None = None) -> list[str]:
    """Failures of model tasks not yet followed by a success for that model, as
    "model: N failed: Action: why" sentences; stale entries are dropped."""
    now = now or timezone.now()
    row = ProvisionerStatus.objects.filter(pk=1).values_list("model_task_failures", flat=True)
    failures: dict[str, Any] = dict(row.first() or {})
    if not failures:
        return []
    oldest = now - dt.timedelta(seconds=_task_failure_ttl_secs())
    kept: dict[str, Any] = {}
    for model_id, entry in failures.items():
        try:
            at = dt.datetime.fromisoformat(str(entry.get("at")))
        except (TypeError, ValueError, AttributeError):
            continue
        if at >= oldest:
            kept[model_id] = entry
    if len(kept) != len(failures):
        ProvisionerStatus.objects.filter(pk=1).update(model_task_failures=kept)
    return [
        f"model {e.get('name')}: {e.get('count', 1)} failed: {e.get('detail', '')}"
        for e in sorted(kept.values(), key=lambda e: str(e.get("name")))
    ]


def describe_status(now: dt.datetime | None = None) -> dict[str, Any]:
    """The provisioner's state for the dashboard and the API.

    ``state``: "running" (heartbeat within 60 s and the last pass ok), "failing" (heartbeat
    within 60 s, passes not ok) or "not running"; ``text`` says it in words.
    """
    now = now or timezone.now()
    row = ProvisionerStatus.objects.filter(pk=1).first()
    heartbeat_at = row.heartbeat_at if row else None
    age = (now - heartbeat_at).total_seconds() if heartbeat_at else None
    running = age is not None and age <= RUNNING_WINDOW_SECS
    status = row.last_pass_status if row else ""
    since = row.non_ok_since if row and status in ("idle", "error") else None
    held_secs = max(0, int((now - since).total_seconds())) if since else None
    if not running:
        state, text = "not running", "not running"
    elif since is not None:
        state, text = "failing", f"running but failing since {since.isoformat()}"
    else:
        state, text = "running", "running"
    return {
        "state": state,
        "text": text,
        "heartbeat_at": heartbeat_at.isoformat() if heartbeat_at else None,
        "heartbeat_age_secs": max(0, int(age)) if age is not None else None,
        "version": row.version if row else "",
        "host": row.host if row else "",
        "last_pass_status": status or None,
        "last_pass_detail": row.last_pass_detail if row else "",
        "last_pass_at": row.last_pass_at.isoformat() if row and row.last_pass_at else None,
        "last_pass_ms": row.last_pass_ms if row else None,
        "last_ok_at": row.last_ok_at.isoformat() if row and row.last_ok_at else None,
        "non_ok_since": since.isoformat() if since else None,
        "held_secs": held_secs,
        "held_alert_active": bool(row and row.held_alert_active),
        # Replica states are frozen while passes do not succeed (held, idle or erroring) or
        # while a provisioner that used to run is gone.
        "frozen": since is not None or (heartbeat_at is not None and not running),
    }
