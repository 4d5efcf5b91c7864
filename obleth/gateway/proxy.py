"""What the gateway service answers besides the upstream's own bytes, in one place.

- OpenAI-shaped errors (:func:`openai_error`): the model not found or not allowed, a wrong
  method, a model without a routable endpoint (:func:`no_replica_response`, worded by
  :mod:`obleth.gateway.availability`), every endpoint misconfigured;
- the allow-list of upstream headers a client may see (nothing naming the engine or the node);
- an upstream's error body scrubbed of the address that answered;
- an endpoint row that cannot make a request (an api_base with CR/LF or no valid host, a
  non-ASCII API key: rows written before validation existed) logged once with its reason,
  never the key.

Relaying itself is :mod:`obleth.gateway.service` (its failover and relay:
:mod:`obleth.gateway.failover`, :mod:`obleth.gateway.relay`); the web process serves no /v1
(:mod:`obleth.gateway.elsewhere`).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
import urllib.parse
from typing import Any

from django.http import HttpResponse

from obleth.gateway.availability import explain
from obleth.gateway.routing import RouteEndpoint, RouteModel

log = logging.getLogger("obleth.gateway.service")

# Headers of an upstream answer that reach the client; everything else (Server, Via, Date,
# hop-by-hop headers, X-* identifying the engine or node) is dropped.
PASSED_HEADERS = frozenset({"content-type", "cache-control", "retry-after"})
PASSED_PREFIXES = ("x-ratelimit-",)


def openai_error(
    status: int,
    message: str,
    *,
    kind: str = "invalid_request_error",
    code: str | None = None,
    param: str | None = None,
    headers: dict[str, str] | None = None,
    model: str = "",
) -> HttpResponse:
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    response = HttpResponse(json.dumps(body), status=status, content_type="application/json")
    for name, value in (headers or {}).items():
        response[name] = value
    # What the one INFO line logged for this answer says (never an ERROR line)
    response.obleth_reason = f"{code or kind}: {message}"  # type: ignore[attr-defined]
    response.obleth_model = model  # type: ignore[attr-defined]
    return response


def not_allowed(name: str) -> HttpResponse:
    return openai_error(
        403,
        f"This gateway key may not use the model '{name}'. GET /v1/models lists the models it may "
        "use; ask an operator to add the model to the key.",
        kind="permission_error",
        param="model",
        code="model_not_allowed",
        model=name,
    )


def not_found(name: str) -> HttpResponse:
    return openai_error(
        404,
        f"The model '{name}' does not exist or is disabled. GET /v1/models lists the models.",
        param="model",
        code="model_not_found",
        model=name,
    )


def method_not_allowed(allowed: str) -> HttpResponse:
    return openai_error(
        405, f"Use {allowed} on this path.", code="method_not_allowed", headers={"Allow": allowed}
    )


def model_entry(route: RouteModel) -> dict[str, Any]:
    return {"id": route.name, "object": "model", "created": route.created, "owned_by": "obleth"}


def scrub_upstream_address(data: bytes, base: str) -> bytes:
    """An engine's error page or traceback may name its own address; clients must not learn
    which node answered."""
    parts = urllib.parse.urlsplit(base)
    for needle in {parts.netloc, parts.hostname or ""}:
        if needle:
            data = data.replace(needle.encode(), b"upstream")
    return data


_reported_unusable: set[tuple[str, str]] = set()
_reported_lock = threading.Lock()


def report_unusable(endpoint: RouteEndpoint, route: RouteModel, problem: str) -> None:
    """Log a skipped endpoint once per process and reason (a busy model would flood the log)."""
    key = (endpoint.id, problem)
    with _reported_lock:
        if key in _reported_unusable:
            return
        if len(_reported_unusable) > 10_000:
            _reported_unusable.clear()
        _reported_unusable.add(key)
    log.warning(
        "gateway: endpoint %s of %s skipped, it cannot be sent a request (%s); fix it in the admin",
        endpoint.id,
        route.name,
        problem,
    )


def usable_endpoints(route: RouteModel, candidates: list[RouteEndpoint]) -> list[RouteEndpoint]:
    """The candidates a request can be sent to; the others are logged (once) and skipped."""
    usable = []
    for endpoint in candidates:
        if endpoint.problem:
            report_unusable(endpoint, route, endpoint.problem)
        else:
            usable.append(endpoint)
    return usable


def misconfigured_response(route: RouteModel) -> HttpResponse:
    return openai_error(
        502,
        f"Every endpoint of model '{route.name}' is misconfigured (an invalid address or API "
        "key); an operator must fix them in the admin.",
        kind="server_error",
        code="upstream_misconfigured",
        model=route.name,
    )


def no_replica_response(route: RouteModel, now: dt.datetime | None = None) -> HttpResponse:
    """503 for a model without a routable endpoint, naming the model's actual state (pending
    in the queue and why, starting, stopped by the breaker, refused, disabled...), with
    Retry-After only when a retry can help."""
    answer = explain(route.name, route.state, now or dt.datetime.now(dt.UTC), model_id=route.id)
    headers = {"Retry-After": str(answer.retry_after)} if answer.retry_after is not None else None
    return openai_error(
        answer.status,
        answer.message,
        kind="service_unavailable",
        code=answer.code,
        headers=headers,
        model=route.name,
    )
