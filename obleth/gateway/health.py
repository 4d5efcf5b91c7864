"""The gateway's endpoint check: a real one-token inference per endpoint, and the model's badge.

The provisioner's own probe (a GET of health_path) cannot see a server that answers metadata but
hangs on inference; this check can. Its verdicts are recorded on the Endpoint rows
(health_status, consecutive_failures, last_checked_at, ...) where the provisioner reads them as
its second zombie signal, and where the data plane reads them to route around dead endpoints.

Network work (``probe``) never touches the database, so it runs in a small thread pool; reading
and recording happen in the caller's thread.

Two modules: ``obleth.gateway.health_probe`` holds the check itself (the probe, its retries and
verdicts, the upstream catalog: no database); this one records the verdicts, computes the
model's badge and runs the due and on-demand checks. Every name of ``health_probe`` is
re-exported here, so ``from obleth.gateway.health import probe`` keeps working.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F, Min, Q
from django.utils import timezone

from obleth.core import health_history as history
from obleth.core.choices import HealthStatus, HostingMode
from obleth.core.models import Endpoint, ManagedSpec, Model
from obleth.gateway.health_probe import (
    AUTH_STATUSES,
    BACKOFF_SECS,
    CATALOG_TTL_SECS,
    MAX_ATTEMPTS,
    POOL_SIZE,
    REFINED_STATUSES,
    RETRY_STATUSES,
    ProbeTarget,
    Verdict,
    classify,
    clear_catalog_cache,
    fetch_catalog,
    probe,
    probe_client,
    probe_many,
    probe_request,
    rename_hint,
)

__all__ = [
    # the check itself (obleth.gateway.health_probe)
    "AUTH_STATUSES",
    "BACKOFF_SECS",
    "CATALOG_TTL_SECS",
    "MAX_ATTEMPTS",
    "POOL_SIZE",
    "REFINED_STATUSES",
    "RETRY_STATUSES",
    "ProbeTarget",
    "Verdict",
    "classify",
    "clear_catalog_cache",
    "fetch_catalog",
    "probe",
    "probe_client",
    "probe_many",
    "probe_request",
    "rename_hint",
    # recording, the model's badge, the runs (defined here)
    "DISABLED_VERDICT",
    "DUE_BATCH",
    "MAX_JITTER_SECS",
    "MESSAGE_MAX",
    "SCALED_TO_ZERO",
    "SERVING",
    "DueRun",
    "ModelCheck",
    "ModelHealth",
    "aggregate_pool",
    "aggregate_static",
    "check_endpoint",
    "check_model_endpoints",
    "model_health",
    "next_check_time",
    "record_verdict",
    "refresh_model_health",
    "request_model_refresh",
    "run_due_checks",
]

log = logging.getLogger(__name__)

MAX_JITTER_SECS = 120.0
DUE_BATCH = 200
MESSAGE_MAX = 500
SERVING = frozenset({HealthStatus.HEALTHY, HealthStatus.DEGRADED})


@dataclass(frozen=True)
class ModelHealth:
    status: str
    message: str


@dataclass(frozen=True)
class ModelCheck:
    """The outcome of check_model_endpoints: each endpoint's verdict and the model's badge."""

    model_id: str
    health: ModelHealth
    verdicts: dict[str, Verdict]


# ----------------------------------------------------------------------------- recording


def next_check_time(now: datetime) -> datetime:
    interval = float(settings.OBLETH_MODEL_HEALTH_INTERVAL_SECS)
    jitter = random.uniform(0, min(MAX_JITTER_SECS, interval / 10))
    return now + timedelta(seconds=interval + jitter)


def record_verdict(
    endpoint_id: Any,
    verdict: Verdict,
    now: datetime | None = None,
    *,
    model_id: Any = None,
    endpoint_name: str = "",
) -> None:
    """Write a verdict on the endpoint row (an UPDATE of the health fields only) and, given the
    model, in the health history (disabled endpoints are not history)."""
    now = now or timezone.now()
    if model_id is not None and verdict.status != HealthStatus.DISABLED:
        history.record_check(
            model_id=model_id,
            endpoint_id=endpoint_id,
            endpoint_name=endpoint_name,
            status=verdict.status,
            message=verdict.message,
            http_status=verdict.http_status,
            latency_ms=verdict.latency_ms,
            at=now,
        )
    failures: Any = F("consecutive_failures") + 1 if verdict.status == HealthStatus.UNHEALTHY else 0
    Endpoint.objects.filter(pk=endpoint_id).update(
        health_status=verdict.status,
        consecutive_failures=failures,
        last_checked_at=now,
        last_latency_ms=verdict.latency_ms,
        last_http_status=verdict.http_status,
        last_message=verdict.message[:MESSAGE_MAX],
        next_check_at=next_check_time(now),
    )


DISABLED_VERDICT = Verdict(HealthStatus.DISABLED, "endpoint disabled: not checked")


def check_endpoint(endpoint: Endpoint, *, refresh_model: bool = True) -> Verdict:
    """Check one endpoint now (disabled: recorded without a call), record it, and refresh its
    model's badge."""
    model = endpoint.model
    verdict = probe(ProbeTarget.of(endpoint, model)) if endpoint.enabled else DISABLED_VERDICT
    record_verdict(endpoint.pk, verdict, model_id=model.pk, endpoint_name=endpoint.name)
    if refresh_model:
        refresh_model_health(model)
    return verdict


# ----------------------------------------------------------------------------- model badge

_RANK: dict[str, int] = {
    HealthStatus.HEALTHY: 0,
    HealthStatus.DEGRADED: 1,
    HealthStatus.UNKNOWN: 2,
    HealthStatus.UNHEALTHY: 3,
}


SCALED_TO_ZERO = "scaled to zero while idle: the next request wakes it (autoscaling)"


def aggregate_pool(statuses: Iterable[str], min_replicas: int) -> ModelHealth:
    """A Slurm model's badge from its endpoint pool (disabled endpoints ignored) vs the floor."""
    live = [s for s in statuses if s != HealthStatus.DISABLED]
    if not live:
        return ModelHealth(HealthStatus.UNHEALTHY, "no live endpoint registered")
    floor = max(1, min_replicas)
    serving = sum(1 for s in live if s in SERVING)
    if serving >= floor:
        return ModelHealth(HealthStatus.HEALTHY, f"{serving} of {len(live)} serving")
    if serving > 0:
        return ModelHealth(
            HealthStatus.DEGRADED,
            f"{serving} of {len(live)} serving, below min_replicas {floor}",
        )
    if all(s == HealthStatus.UNKNOWN for s in live):
        return ModelHealth(HealthStatus.UNKNOWN, f"{len(live)} endpoint(s) not checked yet")
    return ModelHealth(HealthStatus.UNHEALTHY, f"none of {len(live)} endpoint(s) serving")


def aggregate_static(entries: Iterable[tuple[str, str, str]]) -> ModelHealth:
    """A static model's badge: its best enabled endpoint's verdict. entries: (name, status, msg)."""
    live = [e for e in entries if e[1] != HealthStatus.DISABLED]
    if not live:
        return ModelHealth(HealthStatus.UNHEALTHY, "no enabled endpoint")
    name, status, message = min(live, key=lambda e: _RANK.get(e[1], len(_RANK)))
    return ModelHealth(status, f"best of {len(live)}: {name}: {message}"[:MESSAGE_MAX])


def model_health(model: Model) -> ModelHealth:
    if not model.enabled:
        return ModelHealth(HealthStatus.DISABLED, "model disabled: not checked")
    rows = list(
        Endpoint.objects.filter(model=model, enabled=True).values_list(
            "name", "health_status", "last_message"
        )
    )
    if model.hosting_mode == HostingMode.SLURM:
        spec = (
            ManagedSpec.objects.filter(model=model)
            .values_list("min_replicas", "max_replicas", "autoscale_replicas")
            .first()
        )
        floor, most, decided = spec if spec is not None else (None, None, None)
        if not rows and most is not None and decided == 0:
            # at zero on purpose (autoscaling, idle): not a model that went down
            return ModelHealth(HealthStatus.UNKNOWN, SCALED_TO_ZERO)
        return aggregate_pool([r[1] for r in rows], 1 if floor is None else int(floor))
    return aggregate_static(rows)


def refresh_model_health(model: Model, now: datetime | None = None) -> ModelHealth:
    """Recompute and record a model's badge from its endpoints' recorded verdicts.

    The badge of a serving model turns unhealthy only after OBLETH_MODEL_UNHEALTHY_AFTER_FAILURES
    failed refreshes in a row (degraded until then); a model that served and serves through no
    endpoint starts its down streak (the down/recovery alerts: obleth.core.health_history)."""
    now = now or timezone.now()
    before = (
        Model.objects.filter(pk=model.pk)
        .values_list(
            "health_status",
            "health_consecutive_failures",
            "health_down_since",
            "health_down_alerted",
        )
        .first()
    )
    previous, failures_before, down_since, alerted = before or ("unknown", 0, None, False)
    computed = model_health(model)
    unhealthy = computed.status == HealthStatus.UNHEALTHY
    in_a_row = failures_before + 1 if unhealthy else 0
    checks_failed = Endpoint.objects.filter(model=model, enabled=True).exists()
    shown = history.badge_after_threshold(
        history.BadgeState(computed.status, computed.message),
        previous_status=previous,
        failures_in_a_row=in_a_row,
        threshold=history.threshold_setting(),
        checks_failed=checks_failed,
    )
    health = ModelHealth(shown.status, shown.message)
    earliest = Endpoint.objects.filter(model=model, enabled=True).aggregate(
        at=Min("next_check_at")
    )["at"]
    failures: Any = F("health_consecutive_failures") + 1 if unhealthy else 0
    Model.objects.filter(pk=model.pk).update(
        health_status=health.status,
        health_message=health.message[:MESSAGE_MAX],
        health_consecutive_failures=failures,
        health_checked_at=now,
        health_next_check_at=earliest or next_check_time(now),
    )
    history.track_down_state(
        model,
        serving=computed.status in SERVING,
        counts=computed.status == HealthStatus.UNHEALTHY,
        previous_status=previous,
        down_since=down_since,
        alerted=alerted,
        message=computed.message,
        now=now,
    )
    return health


# ----------------------------------------------------------------------------- services


def check_model_endpoints(model_id: Any) -> ModelCheck:
    """On-demand check of every endpoint of a model (disabled ones recorded as such)."""
    model = Model.objects.get(pk=model_id)
    endpoints = list(Endpoint.objects.filter(model=model))
    verdicts: dict[str, Verdict] = {}
    if model.enabled:
        verdicts = probe_many([ProbeTarget.of(ep, model) for ep in endpoints if ep.enabled])
    now = timezone.now()
    for ep in endpoints:
        if ep.enabled and model.enabled:
            record_verdict(
                ep.pk, verdicts[str(ep.pk)], now, model_id=model.pk, endpoint_name=ep.name
            )
        elif not ep.enabled:
            verdicts[str(ep.pk)] = DISABLED_VERDICT
            record_verdict(ep.pk, DISABLED_VERDICT, now)
    return ModelCheck(str(model.pk), refresh_model_health(model, now), verdicts)


def _claim_due(now: datetime, limit: int) -> list[Endpoint]:
    """Due endpoints of enabled models, leased so an overlapping run does not check them too."""
    due_q = Q(next_check_at__isnull=True) | Q(next_check_at__lte=now)
    with transaction.atomic():
        rows = list(
            Endpoint.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("model")
            .filter(due_q, model__enabled=True)
            .order_by(F("next_check_at").asc(nulls_first=True))[:limit]
        )
        if rows:
            lease = float(settings.OBLETH_MODEL_HEALTH_TIMEOUT_SECS) * (MAX_ATTEMPTS + 1) + 60
            Endpoint.objects.filter(pk__in=[r.pk for r in rows]).update(
                next_check_at=now + timedelta(seconds=lease)
            )
    return rows


@dataclass(frozen=True)
class DueRun:
    checked: int
    models_refreshed: int
    skipped: bool = False


def run_due_checks(now: datetime | None = None, limit: int = DUE_BATCH) -> DueRun:
    """Check every endpoint whose next check is due (or never happened), then refresh the badge
    of their models and of models whose own refresh is due (e.g. a pool that emptied)."""
    if not settings.OBLETH_MODEL_HEALTH_ENABLED:
        return DueRun(0, 0, skipped=True)
    now = now or timezone.now()
    Model.objects.filter(enabled=False).exclude(health_status=HealthStatus.DISABLED).update(
        health_status=HealthStatus.DISABLED,
        health_message="model disabled: not checked",
        health_consecutive_failures=0,
        health_checked_at=now,
        health_down_since=None,  # disabled on purpose: no down alert, no recovery notice
        health_down_alerted=False,
    )
    rows = _claim_due(now, limit)
    targets = [ProbeTarget.of(ep, ep.model) for ep in rows if ep.enabled]
    verdicts = probe_many(targets)
    done = timezone.now()
    for ep in rows:
        record_verdict(
            ep.pk,
            verdicts.get(str(ep.pk), DISABLED_VERDICT),
            done,
            model_id=ep.model_id,
            endpoint_name=ep.name,
        )
    model_ids = {ep.model_id for ep in rows}
    model_ids |= set(
        Model.objects.filter(enabled=True)
        .filter(Q(health_next_check_at__isnull=True) | Q(health_next_check_at__lte=now))
        .values_list("pk", flat=True)
    )
    for model in Model.objects.filter(pk__in=model_ids, enabled=True):
        refresh_model_health(model, done)
    history.fire_due_down_alerts(done)
    history.maybe_prune(done)
    if rows:
        log.info("endpoint checks: %d checked, %d model(s) refreshed", len(rows), len(model_ids))
    return DueRun(len(rows), len(model_ids))


def request_model_refresh(model_id: Any) -> None:
    """Ask for the model's badge to be recomputed on the next run (endpoint added/removed)."""
    Model.objects.filter(pk=model_id).update(health_next_check_at=None)
