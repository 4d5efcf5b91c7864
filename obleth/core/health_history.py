"""Health history: each endpoint check and each promotion, loss or restart of a replica, kept
``OBLETH_HEALTH_HISTORY_DAYS``; the badge's failure threshold; model down/recovery alerts.

* The gateway's endpoint check records one ``check`` row per verdict (``record_check``), the
  provisioner's executor one row per promotion/loss/cancel (``record_replica_event``).
* The badge turns unhealthy only after ``OBLETH_MODEL_UNHEALTHY_AFTER_FAILURES`` failed checks
  in a row (``badge_after_threshold``, pure): one lost answer does not flip a serving model red.
* A model that served and has had no serving endpoint for ``OBLETH_MODEL_DOWN_ALERT_SECS`` raises
  ONE ``model_down:<id>`` alert; the next serving refresh raises ``model_recovered:<id>``.

History writes are best effort: a failed insert is logged and never fails a check or a pass.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from obleth.core.choices import HealthStatus
from obleth.core.models import HealthEvent, Model

__all__ = [
    "DOWN_ALERT_PREFIX",
    "RECOVERED_ALERT_PREFIX",
    "BadgeState",
    "badge_after_threshold",
    "fire_due_down_alerts",
    "maybe_prune",
    "prune",
    "record_check",
    "record_replica_event",
    "timeline",
    "track_down_state",
]

log = logging.getLogger(__name__)

DOWN_ALERT_PREFIX = "model_down:"
RECOVERED_ALERT_PREFIX = "model_recovered:"
SERVING = frozenset({HealthStatus.HEALTHY, HealthStatus.DEGRADED})
MESSAGE_MAX = 500
PRUNE_EVERY_SECS = 600.0
PRUNE_BATCH = 5000


def _clip(text: str, limit: int = MESSAGE_MAX) -> str:
    text = str(text or "").replace("\x00", "")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _threshold() -> int:
    return max(1, int(getattr(settings, "OBLETH_MODEL_UNHEALTHY_AFTER_FAILURES", 2)))


def _down_alert_secs() -> int:
    return max(0, int(getattr(settings, "OBLETH_MODEL_DOWN_ALERT_SECS", 300)))


# ----------------------------------------------------------------------------- recording


def record_check(
    *,
    model_id: Any,
    endpoint_id: Any,
    endpoint_name: str,
    status: str,
    message: str,
    http_status: int | None,
    latency_ms: int | None,
    at: dt.datetime | None = None,
) -> None:
    """One endpoint check's verdict, as a history row."""
    _insert(
        model_id=model_id,
        kind=HealthEvent.Kind.CHECK,
        at=at or timezone.now(),
        endpoint_id=endpoint_id,
        endpoint_name=_clip(endpoint_name, 200),
        outcome=str(status)[:32],
        http_status=http_status if http_status is None or 0 <= http_status < 1000 else None,
        latency_ms=max(0, int(latency_ms)) if latency_ms is not None else None,
        message=_clip(message),
    )


def record_replica_event(
    *,
    model_id: Any,
    kind: str,
    replica_id: Any,
    outcome: str,
    message: str,
    job_id: str = "",
    endpoint_id: Any = None,
    endpoint_name: str = "",
    at: dt.datetime | None = None,
) -> None:
    """A replica promoted (``promoted``), lost (``lost``) or cancelled (``restarted``)."""
    _insert(
        model_id=model_id,
        kind=kind,
        at=at or timezone.now(),
        replica_id=replica_id,
        job_id=str(job_id or "")[:40],
        endpoint_id=endpoint_id,
        endpoint_name=_clip(endpoint_name, 200),
        outcome=str(outcome)[:32],
        message=_clip(message),
    )


def _insert(**fields: Any) -> None:
    try:
        with transaction.atomic():
            HealthEvent.objects.create(**fields)
    except Exception:  # noqa: BLE001 - history is best effort, never fails a check or a pass
        log.exception("could not record a %s health event", fields.get("kind"))


def timeline(model_id: Any) -> QuerySet[HealthEvent]:
    """A model's history, newest first."""
    return HealthEvent.objects.filter(model_id=model_id).order_by("-at", "-id")


# ----------------------------------------------------------------------------- retention

_prune_lock = threading.Lock()
_last_prune = 0.0


def prune(now: dt.datetime | None = None) -> int:
    """Delete history older than ``OBLETH_HEALTH_HISTORY_DAYS`` (in batches); rows deleted."""
    now = now or timezone.now()
    days = max(1, int(getattr(settings, "OBLETH_HEALTH_HISTORY_DAYS", 14)))
    cutoff = now - dt.timedelta(days=days)
    total = 0
    while True:
        ids = list(
            HealthEvent.objects.filter(at__lt=cutoff).values_list("id", flat=True)[:PRUNE_BATCH]
        )
        if not ids:
            return total
        deleted, _ = HealthEvent.objects.filter(id__in=ids).delete()
        total += deleted
        if len(ids) < PRUNE_BATCH:
            return total


def maybe_prune(now: dt.datetime | None = None) -> int:
    """``prune`` at most once every 10 minutes per process (the check run calls it each time)."""
    global _last_prune
    with _prune_lock:
        if time.monotonic() - _last_prune < PRUNE_EVERY_SECS and _last_prune:
            return 0
        _last_prune = time.monotonic()
    return prune(now)


def reset_prune_clock() -> None:
    global _last_prune
    with _prune_lock:
        _last_prune = 0.0


# ----------------------------------------------------------------------------- the badge


@dataclass(frozen=True)
class BadgeState:
    """A badge: status and message (obleth.gateway.health.ModelHealth has the same shape)."""

    status: str
    message: str


def badge_after_threshold(
    computed: BadgeState,
    *,
    previous_status: str,
    failures_in_a_row: int,
    threshold: int,
    checks_failed: bool,
) -> BadgeState:
    """What the badge shows: ``computed`` unless it is unhealthy from failed checks
    (``checks_failed``: endpoints are registered, none served) of a model that was serving, with
    fewer than ``threshold`` failed refreshes in a row (``failures_in_a_row`` counts this one).
    Then it stays degraded and says how many more failures turn it unhealthy."""
    if (
        computed.status != HealthStatus.UNHEALTHY
        or not checks_failed
        or previous_status not in SERVING
        or failures_in_a_row >= threshold
    ):
        return computed
    return BadgeState(
        HealthStatus.DEGRADED,
        _clip(
            f"{computed.message}: failed check {failures_in_a_row} of {threshold} in a row, "
            "unhealthy after "
            f"{threshold}"
        ),
    )


def threshold_setting() -> int:
    return _threshold()


# ----------------------------------------------------------------------------- down alerts


def track_down_state(
    model: Model,
    *,
    serving: bool,
    counts: bool,
    previous_status: str,
    down_since: dt.datetime | None,
    alerted: bool,
    message: str,
    now: dt.datetime,
) -> None:
    """After a badge refresh: start the model's down streak (a model that served now serves
    through no endpoint), end it (recovery alert if the down alert went out), or leave it.
    ``counts``: the refresh is a real verdict (not unknown/disabled)."""
    if serving:
        if down_since is None:
            return
        Model.objects.filter(pk=model.pk).update(health_down_since=None, health_down_alerted=False)
        if alerted:
            minutes = max(0, int((now - down_since).total_seconds() // 60))
            _alert(
                f"{RECOVERED_ALERT_PREFIX}{model.pk}",
                f"Model {model.name} is serving again",
                f"After {minutes} minutes without a serving endpoint, model {model.name} "
                f"serves again: {message}",
                "info",
            )
            _insert(
                model_id=model.pk,
                kind=HealthEvent.Kind.RECOVERED,
                at=now,
                outcome="recovered",
                message=_clip(f"serving again after {minutes} min: {message}"),
            )
        return
    if not counts:
        return
    if down_since is None and previous_status in SERVING:
        Model.objects.filter(pk=model.pk, health_down_since__isnull=True).update(
            health_down_since=now, health_down_alerted=False
        )
        down_since = now
    if down_since is not None and not alerted:
        fire_due_down_alerts(now, model_ids=[model.pk])


def fire_due_down_alerts(now: dt.datetime | None = None, model_ids: list[Any] | None = None) -> int:
    """Raise the down alert of each model down for longer than the threshold (once per streak;
    the claim is a filtered UPDATE, so two runs at once alert once). Returns alerts raised."""
    now = now or timezone.now()
    threshold = _down_alert_secs()
    due = Model.objects.filter(
        enabled=True,
        health_down_alerted=False,
        health_down_since__isnull=False,
        health_down_since__lte=now - dt.timedelta(seconds=threshold),
    )
    if model_ids is not None:
        due = due.filter(pk__in=model_ids)
    fired = 0
    for pk, name, since, message in due.values_list(
        "pk", "name", "health_down_since", "health_message"
    ):
        claimed = Model.objects.filter(pk=pk, health_down_alerted=False).update(
            health_down_alerted=True
        )
        if not claimed or since is None:
            continue
        minutes = max(0, int((now - since).total_seconds() // 60))
        _alert(
            f"{DOWN_ALERT_PREFIX}{pk}",
            f"Model {name} is down: no endpoint serves it",
            f"Model {name} has had no serving endpoint for {minutes} minutes (since "
            f"{since.isoformat()}): {message}. Its Health page in the admin shows each check "
            "and each replica's promotion and loss.",
            "critical",
        )
        _insert(
            model_id=pk,
            kind=HealthEvent.Kind.DOWN,
            at=now,
            outcome="down",
            message=_clip(f"no serving endpoint for {minutes} min: {message}"),
        )
        fired += 1
    return fired


def _alert(key: str, title: str, detail: str, severity: str) -> None:
    from provisioner import alerts

    try:
        alerts.fire(key, title, detail, severity=severity)
    except Exception:  # noqa: BLE001 - an alert problem must not fail the check run
        log.exception("could not fire alert %s", key)
