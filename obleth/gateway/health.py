"""The gateway's endpoint check: a real one-token inference per endpoint, and the model's badge.

The provisioner's own probe (a GET of health_path) cannot see a server that answers metadata but
hangs on inference; this check can. Its verdicts are recorded on the Endpoint rows
(health_status, consecutive_failures, last_checked_at, ...) where the provisioner reads them as
its second zombie signal, and where the data plane reads them to route around dead endpoints.

Network work (``probe``) never touches the database, so it runs in a small thread pool; reading
and recording happen in the caller's thread.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import httpx
from django.conf import settings
from django.db import transaction
from django.db.models import F, Min, Q
from django.utils import timezone

from obleth.core import health_history as history
from obleth.core.choices import HealthStatus, HostingMode, ModelType
from obleth.core.models import Endpoint, ManagedSpec, Model
from obleth.logging import redact, register_secret

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 3
BACKOFF_SECS = (0.1, 0.2)
RETRY_STATUSES = frozenset({408, 429})
REFINED_STATUSES = frozenset({400, 404, 422})  # refined with the upstream catalog
AUTH_STATUSES = frozenset({401, 403})
CATALOG_TTL_SECS = 60.0
MAX_JITTER_SECS = 120.0
POOL_SIZE = 8
DUE_BATCH = 200
MESSAGE_MAX = 500
SERVING = frozenset({HealthStatus.HEALTHY, HealthStatus.DEGRADED})


@dataclass(frozen=True)
class Verdict:
    """The outcome of one endpoint check."""

    status: str
    message: str
    http_status: int | None = None
    latency_ms: int | None = None
    attempts: int = 0


@dataclass(frozen=True)
class ProbeTarget:
    """What a probe needs, copied out of the database so probes can run in threads."""

    endpoint_id: str
    model_id: str
    api_base: str
    api_key: str = field(repr=False)
    model_type: str
    forwarded_name: str
    # A Slurm replica's engine was proven up by the provisioner before promotion: any answer
    # from it counts as serving (seed 000), a 404 for a renamed model included.
    answered_is_serving: bool = False

    @classmethod
    def of(cls, endpoint: Endpoint, model: Model) -> ProbeTarget:
        return cls(
            endpoint_id=str(endpoint.pk),
            model_id=str(model.pk),
            api_base=endpoint.api_base.rstrip("/"),
            api_key=endpoint.api_key or "",
            model_type=model.model_type,
            forwarded_name=model.forwarded_name,
            answered_is_serving=model.hosting_mode == HostingMode.SLURM,
        )


def _misconfiguration(target: ProbeTarget) -> str | None:
    """Why no request can be sent to this endpoint (a row from before validation), or None."""
    from django.core.exceptions import ValidationError

    from obleth.core.validators import validate_api_base, validate_api_key

    try:
        validate_api_base(target.api_base)
    except ValidationError:
        return "fix its api_base"
    try:
        validate_api_key(target.api_key)
    except ValidationError:
        return "set its API key again"
    return None


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


# ----------------------------------------------------------------------------- the probe

_client_lock = threading.Lock()
_client: httpx.Client | None = None


def probe_client() -> httpx.Client:
    global _client
    with _client_lock:
        if _client is None:
            _client = httpx.Client(
                limits=httpx.Limits(max_connections=64, max_keepalive_connections=16),
                follow_redirects=False,
                trust_env=False,
                headers={"User-Agent": "obleth-endpoint-check"},
            )
        return _client


def probe_request(model_type: str, forwarded_name: str) -> tuple[str, dict[str, Any]]:
    """The path (under api_base) and body of the one-token inference for a model type."""
    if model_type == ModelType.EMBEDDING:
        return "/embeddings", {"model": forwarded_name, "input": "ping"}
    if model_type == ModelType.COMPLETION:
        return "/completions", {"model": forwarded_name, "prompt": "ping", "max_tokens": 1}
    return "/chat/completions", {
        "model": forwarded_name,
        "messages": [{"role": "user", "content": "ping"}],
        "max_tokens": 1,
        "temperature": 0,
    }


def _headers(api_key: str) -> dict[str, str]:
    if not api_key:
        return {}
    register_secret(api_key)
    return {"Authorization": f"Bearer {api_key}"}


def _retryable(status: int) -> bool:
    return status in RETRY_STATUSES or status >= 500


def _clip(text: str, limit: int = 200) -> str:
    text = " ".join(redact(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _upstream_reason(response: httpx.Response) -> str:
    try:
        payload = response.json()
    except ValueError:
        return _clip(response.text)
    if isinstance(payload, dict):
        error = payload.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return _clip(error["message"])
        if isinstance(error, str):
            return _clip(error)
        if isinstance(payload.get("detail"), str):
            return _clip(payload["detail"])
    return _clip(json.dumps(payload))


_catalog_lock = threading.Lock()
_catalog_cache: dict[str, tuple[float, frozenset[str] | None]] = {}


def fetch_catalog(
    api_base: str, api_key: str, timeout: float, client: httpx.Client | None = None
) -> frozenset[str] | None:
    """Model ids from GET <api_base>/models (cached 60 s per api_base); None when unreadable."""
    now = time.monotonic()
    with _catalog_lock:
        cached = _catalog_cache.get(api_base)
        if cached is not None and now - cached[0] < CATALOG_TTL_SECS:
            return cached[1]
    ids: frozenset[str] | None = None
    try:
        response = (client or probe_client()).get(
            api_base + "/models", headers=_headers(api_key), timeout=timeout
        )
        if response.is_success:
            data = response.json().get("data")
            if isinstance(data, list):
                ids = frozenset(
                    str(item["id"]) for item in data if isinstance(item, dict) and "id" in item
                )
    except (httpx.HTTPError, ValueError, AttributeError):
        ids = None
    with _catalog_lock:
        _catalog_cache[api_base] = (now, ids)
    return ids


def clear_catalog_cache() -> None:
    with _catalog_lock:
        _catalog_cache.clear()


def _name_key(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


def rename_hint(forwarded_name: str, catalog: frozenset[str] | None) -> str:
    """What to do when the engine does not know the name obleth sends: the catalog's likely
    spelling of it (``qwen2.5:0.5b`` for ``qwen2.5-0.5b``), or what it lists."""
    names = sorted(n for n in (catalog or frozenset()) if n != "*")
    same = [n for n in names if _name_key(n) == _name_key(forwarded_name)]
    if same:
        return (
            f"the engine names the model '{same[0]}', not '{forwarded_name}': set the model's "
            f"upstream model name to '{same[0]}'"
        )
    if names:
        shown = ", ".join(f"'{n}'" for n in names[:5]) + (" ..." if len(names) > 5 else "")
        return (
            f"the engine does not list '{forwarded_name}' (it lists {shown}): set the model's "
            "upstream model name to the engine's name for it"
        )
    return (
        f"if the engine names the model differently from '{forwarded_name}', set the model's "
        "upstream model name to the engine's name for it"
    )


def classify(
    status: int,
    reason: str,
    *,
    listed: Callable[[], frozenset[str] | None],
    forwarded_name: str,
    answered_is_serving: bool = False,
) -> tuple[str, str]:
    """Reference §5.2: the verdict for an answer with HTTP ``status``.

    ``listed`` fetches the upstream catalog; it is called only for 400/404/422. With
    ``answered_is_serving`` (a Slurm replica's engine) a 400/404/422 is an answer from an engine
    that is up: degraded (serving), with the renamed-model hint, never unhealthy."""
    if 200 <= status < 300:
        return HealthStatus.HEALTHY, f"answered {status}"
    if status in AUTH_STATUSES:
        return (
            HealthStatus.UNHEALTHY,
            f"refused the check with {status}: check the endpoint's API key ({reason})",
        )
    if status in REFINED_STATUSES:
        catalog = listed()
        if answered_is_serving and not (catalog and forwarded_name in catalog):
            return (
                HealthStatus.DEGRADED,
                f"answered {status}: the engine is up (counted as serving) but refused "
                f"'{forwarded_name}': {rename_hint(forwarded_name, catalog)} ({reason})",
            )
        if catalog is not None and "*" not in catalog:
            if forwarded_name in catalog:
                return (
                    HealthStatus.DEGRADED,
                    f"answered {status} but lists '{forwarded_name}': the model_type may be "
                    f"misconfigured ({reason})",
                )
            return (
                HealthStatus.UNHEALTHY,
                f"answered {status} and does not list '{forwarded_name}': model not found "
                f"upstream; {rename_hint(forwarded_name, catalog)} ({reason})",
            )
        return HealthStatus.UNHEALTHY, f"answered {status} ({reason})"
    return HealthStatus.DEGRADED, f"answered {status} ({reason})"


def probe(
    target: ProbeTarget,
    *,
    timeout: float | None = None,
    client: httpx.Client | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> Verdict:
    """Send the one-token inference (with retries) and classify the outcome. No database."""
    timeout = float(settings.OBLETH_MODEL_HEALTH_TIMEOUT_SECS if timeout is None else timeout)
    client = client or probe_client()
    path, body = probe_request(target.model_type, target.forwarded_name)
    problem = _misconfiguration(target)
    if problem:
        return Verdict(
            HealthStatus.UNHEALTHY,
            f"{path}: misconfigured endpoint, no request can be sent ({problem})",
            None,
            0,
            0,
        )
    url = target.api_base + path
    response: httpx.Response | None = None
    failure = ""
    latency_ms = 0
    attempts = 0
    for attempt in range(MAX_ATTEMPTS):
        if attempt:
            sleep(BACKOFF_SECS[min(attempt - 1, len(BACKOFF_SECS) - 1)])
        attempts += 1
        started = time.monotonic()
        try:
            response = client.post(
                url, json=body, headers=_headers(target.api_key), timeout=timeout
            )
        except httpx.TimeoutException:
            response = None
            failure = f"no answer within {timeout:g} s"
        except httpx.TransportError as exc:
            response = None
            failure = f"could not connect ({type(exc).__name__})"
        except (httpx.InvalidURL, ValueError) as exc:
            # A row written before validation (CR/LF in api_base, a non-ASCII key): unhealthy,
            # and the other endpoints' checks go on.
            return Verdict(
                HealthStatus.UNHEALTHY,
                f"{path}: misconfigured endpoint, no request can be sent ({type(exc).__name__}); "
                "fix its api_base or API key",
                None,
                0,
                attempts,
            )
        latency_ms = int((time.monotonic() - started) * 1000)
        if response is not None and not _retryable(response.status_code):
            break
    tries = f"{attempts} attempt{'s' if attempts != 1 else ''}"
    if response is None:
        return Verdict(
            HealthStatus.UNHEALTHY, f"{path}: {failure} ({tries})", None, latency_ms, attempts
        )
    code = response.status_code
    reason = "" if response.is_success else _upstream_reason(response)
    status, message = classify(
        code,
        reason,
        listed=lambda: fetch_catalog(target.api_base, target.api_key, timeout, client),
        forwarded_name=target.forwarded_name,
        answered_is_serving=target.answered_is_serving,
    )
    return Verdict(
        status, f"{path}: {message} in {latency_ms} ms ({tries})", code, latency_ms, attempts
    )


def probe_many(targets: Sequence[ProbeTarget]) -> dict[str, Verdict]:
    """Probe several endpoints concurrently (small pool); endpoint id -> verdict."""
    if not targets:
        return {}
    if len(targets) == 1:
        return {targets[0].endpoint_id: probe(targets[0])}
    with ThreadPoolExecutor(max_workers=min(POOL_SIZE, len(targets))) as pool:
        verdicts = list(pool.map(probe, targets))
    return {t.endpoint_id: v for t, v in zip(targets, verdicts, strict=True)}


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
