"""The gateway's endpoint check itself: a real one-token inference per endpoint, with retries,
classified into a verdict (reference §5.2), and the upstream catalog that refines a 400/404/422.

Network work only: nothing here touches the database (``ProbeTarget`` carries what a probe
needs, copied out of the rows), so probes run in a small thread pool. Recording the verdicts and
the model's badge: ``obleth.gateway.health``, which re-exports every name of this module.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx
from django.conf import settings

from obleth.core.choices import HealthStatus, HostingMode, ModelType
from obleth.core.models import Endpoint, Model
from obleth.logging import redact, register_secret

MAX_ATTEMPTS = 3
BACKOFF_SECS = (0.1, 0.2)
RETRY_STATUSES = frozenset({408, 429})
REFINED_STATUSES = frozenset({400, 404, 422})  # refined with the upstream catalog
AUTH_STATUSES = frozenset({401, 403})
CATALOG_TTL_SECS = 60.0
POOL_SIZE = 8


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
