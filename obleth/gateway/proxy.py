"""Forward one OpenAI request to a model's endpoints, with failover, and relay the answer.

- Endpoints are tried in routing order (priority, then weighted random); a connection error or
  a 5xx answer before any byte reached the client moves on to the next one, at most
  MAX_TRIES endpoints per request.
- The request's "model" is rewritten to the model's forwarded name; the endpoint's API key is
  sent as a bearer token; the client's own Authorization header never goes upstream.
- Answers keep only an allow-list of headers, so nothing names the node that answered, and the
  "model" field of answers is set back to the name the client used.
- Streams pass through chunk by chunk; the upstream connection is closed when the client goes
  away (Django closes the response, which closes the upstream response).
- An endpoint row that cannot make a request (an api_base with CR/LF or no valid host, a
  non-ASCII API key: rows written before validation existed) is skipped with a logged reason;
  the request fails over to the model's other endpoints instead of answering 500.
"""

from __future__ import annotations

import json
import logging
import threading
import urllib.parse
from collections.abc import Iterator
from typing import Any

import httpx
from django.conf import settings
from django.core.exceptions import ValidationError
from django.http import HttpResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase

from obleth.core.validators import validate_api_base, validate_api_key
from obleth.gateway.routing import RouteEndpoint, RouteModel, order_endpoints
from obleth.logging import register_secret

log = logging.getLogger(__name__)

MAX_TRIES = 3
CONNECT_TIMEOUT_SECS = 5.0
# Headers of an upstream answer that reach the client; everything else (Server, Via, Date,
# hop-by-hop headers, X-* identifying the engine or node) is dropped.
PASSED_HEADERS = frozenset({"content-type", "cache-control", "retry-after"})
PASSED_PREFIXES = ("x-ratelimit-",)

_client_lock = threading.Lock()
_client: httpx.Client | None = None


def http_client() -> httpx.Client:
    """The process-wide pooled client (keep-alive connections to every endpoint)."""
    global _client
    with _client_lock:
        if _client is None:
            _client = httpx.Client(
                timeout=request_timeout(),
                limits=httpx.Limits(max_connections=1000, max_keepalive_connections=200),
                follow_redirects=False,
                trust_env=False,
                headers={"User-Agent": "obleth-gateway"},
            )
        return _client


def request_timeout() -> httpx.Timeout:
    read = float(settings.OBLETH_GATEWAY_TIMEOUT_SECS)
    return httpx.Timeout(read, connect=CONNECT_TIMEOUT_SECS, pool=CONNECT_TIMEOUT_SECS)


def openai_error(
    status: int,
    message: str,
    *,
    kind: str = "invalid_request_error",
    code: str | None = None,
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> HttpResponse:
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    response = HttpResponse(json.dumps(body), status=status, content_type="application/json")
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def _passed_headers(upstream: httpx.Response) -> dict[str, str]:
    kept: dict[str, str] = {}
    for name, value in upstream.headers.items():
        lower = name.lower()
        if lower in PASSED_HEADERS or lower.startswith(PASSED_PREFIXES):
            kept[lower] = value
    return kept


def _rename_model(payload: Any, client_name: str) -> bool:
    """Set an answer's "model" back to the client's name. True when something changed."""
    if isinstance(payload, dict) and "model" in payload and payload["model"] != client_name:
        payload["model"] = client_name
        return True
    return False


def rewrite_json_body(content: bytes, client_name: str) -> bytes:
    try:
        payload = json.loads(content)
    except (ValueError, UnicodeDecodeError):
        return content
    return json.dumps(payload).encode() if _rename_model(payload, client_name) else content


def rewrite_sse_line(line: bytes, client_name: str) -> bytes:
    """One line of an event stream (without its newline), with "model" renamed."""
    stripped = line.rstrip(b"\r")
    if not stripped.startswith(b"data:"):
        return line
    data = stripped[5:].strip()
    if not data.startswith(b"{"):
        return line
    try:
        payload = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return line
    if not _rename_model(payload, client_name):
        return line
    return b"data: " + json.dumps(payload).encode() + line[len(stripped) :]


class UpstreamStream:
    """Iterates an upstream event stream, renaming "model" per event; close() ends upstream."""

    def __init__(self, upstream: httpx.Response, client_name: str) -> None:
        self.upstream = upstream
        self.client_name = client_name
        self._closed = False

    def __iter__(self) -> Iterator[bytes]:
        pending = b""
        try:
            for chunk in self.upstream.iter_bytes():
                pending += chunk
                if b"\n" not in pending:
                    continue
                complete, _, pending = pending.rpartition(b"\n")
                lines = complete.split(b"\n")
                yield b"\n".join(rewrite_sse_line(x, self.client_name) for x in lines) + b"\n"
            if pending:
                yield rewrite_sse_line(pending, self.client_name)
        except httpx.HTTPError as exc:
            log.warning(
                "gateway: stream of model %s broke off: %s", self.client_name, type(exc).__name__
            )
            error = {
                "error": {
                    "message": "The replica stopped answering in the middle of the stream.",
                    "type": "server_error",
                    "param": None,
                    "code": "upstream_stream_broken",
                }
            }
            yield b"data: " + json.dumps(error).encode() + b"\n\n"
        finally:
            self.close()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.upstream.close()


def _upstream_headers(endpoint: RouteEndpoint, stream: bool) -> dict[str, str]:
    headers = {
        "Content-Type": "application/json",
        "Accept": "text/event-stream" if stream else "application/json",
        "Accept-Encoding": "identity",
    }
    if endpoint.api_key:
        register_secret(endpoint.api_key)
        headers["Authorization"] = f"Bearer {endpoint.api_key}"
    return headers


_reported_unusable: set[tuple[str, str]] = set()
_reported_lock = threading.Lock()


def endpoint_problem(endpoint: RouteEndpoint) -> str | None:
    """Why this endpoint cannot be sent a request, or None. The reason never holds the key."""
    try:
        validate_api_base(endpoint.api_base)
    except ValidationError as exc:
        return f"bad api_base: {exc.messages[0]}"
    try:
        validate_api_key(endpoint.api_key)
    except ValidationError:
        return "bad api_key: it holds characters an HTTP header cannot carry; set the key again"
    return None


def _report_unusable(endpoint: RouteEndpoint, route: RouteModel, problem: str) -> None:
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
    usable = []
    for endpoint in candidates:
        problem = endpoint_problem(endpoint)
        if problem is None:
            usable.append(endpoint)
        else:
            _report_unusable(endpoint, route, problem)
    return usable


def misconfigured_response(route: RouteModel) -> HttpResponse:
    return openai_error(
        502,
        f"Every endpoint of model '{route.name}' is misconfigured (an invalid address or API "
        "key); an operator must fix them in the admin.",
        kind="server_error",
        code="upstream_misconfigured",
    )


def no_replica_response(route: RouteModel) -> HttpResponse:
    return openai_error(
        503,
        f"Model '{route.name}' has no replica ready yet (no enabled endpoint). "
        "A replica may still be starting; retry in a minute.",
        kind="service_unavailable",
        code="no_replica_ready",
        headers={"Retry-After": "30"},
    )


def forward(route: RouteModel, path: str, body: dict[str, Any]) -> HttpResponseBase:
    """Send ``body`` (a parsed OpenAI request) to ``<api_base><path>`` of the model's endpoints."""
    candidates = order_endpoints(route.endpoints)
    if not candidates:
        return no_replica_response(route)
    candidates = usable_endpoints(route, candidates)
    if not candidates:
        return misconfigured_response(route)
    stream = body.get("stream") is True
    content = json.dumps({**body, "model": route.forwarded_name}).encode()
    client = http_client()
    timeout = request_timeout()
    tries = candidates[:MAX_TRIES]
    for attempt, endpoint in enumerate(tries, start=1):
        last = attempt == len(tries)
        try:
            request = client.build_request(
                "POST",
                endpoint.base + path,
                content=content,
                headers=_upstream_headers(endpoint, stream),
                timeout=timeout,
            )
        except (httpx.InvalidURL, ValueError, UnicodeError, TypeError) as exc:
            # A row endpoint_problem let through but httpx refuses: skip it all the same.
            _report_unusable(endpoint, route, f"request refused by httpx: {type(exc).__name__}")
            continue
        try:
            upstream = client.send(request, stream=True)
        except httpx.WriteTimeout:
            # The request never got through: nothing was processed, the next endpoint may take it.
            log.warning("gateway: endpoint %s of %s took no request", endpoint.id, route.name)
            continue
        except httpx.ReadTimeout:
            log.warning("gateway: endpoint %s of %s timed out", endpoint.id, route.name)
            return _timeout_response(route)
        except httpx.TransportError as exc:
            log.warning(
                "gateway: endpoint %s of %s unreachable (%s)",
                endpoint.id,
                route.name,
                type(exc).__name__,
            )
            continue
        if upstream.status_code >= 500 and not last:
            log.warning(
                "gateway: endpoint %s of %s answered %s; trying the next one",
                endpoint.id,
                route.name,
                upstream.status_code,
            )
            upstream.close()
            continue
        if stream and upstream.is_success:
            response = StreamingHttpResponse(
                UpstreamStream(upstream, route.name), status=upstream.status_code
            )
            for name, value in _passed_headers(upstream).items():
                response[name] = value
            response["Cache-Control"] = "no-cache"
            response["X-Accel-Buffering"] = "no"
            return response
        try:
            data = upstream.read()
        except (httpx.ReadTimeout, httpx.WriteTimeout):
            return _timeout_response(route)
        except httpx.TransportError as exc:
            log.warning(
                "gateway: endpoint %s of %s broke off (%s)",
                endpoint.id,
                route.name,
                type(exc).__name__,
            )
            continue
        finally:
            upstream.close()
        headers = _passed_headers(upstream)
        if upstream.is_success and "json" in headers.get("content-type", ""):
            data = rewrite_json_body(data, route.name)
        elif not upstream.is_success:
            data = scrub_upstream_address(data, endpoint.base)
        response_plain = HttpResponse(data, status=upstream.status_code)
        if "content-type" not in headers:
            del response_plain["Content-Type"]
        for name, value in headers.items():
            response_plain[name] = value
        return response_plain
    return openai_error(
        502,
        f"No replica of model '{route.name}' could be reached (tried {len(tries)}). "
        "Retry shortly; if it persists, check the model's endpoints.",
        kind="server_error",
        code="upstream_unreachable",
    )


def scrub_upstream_address(data: bytes, base: str) -> bytes:
    """An engine's error page or traceback may name its own address; clients must not learn
    which node answered."""
    parts = urllib.parse.urlsplit(base)
    for needle in {parts.netloc, parts.hostname or ""}:
        if needle:
            data = data.replace(needle.encode(), b"upstream")
    return data


def _timeout_response(route: RouteModel) -> HttpResponse:
    return openai_error(
        504,
        f"Model '{route.name}' did not answer within {settings.OBLETH_GATEWAY_TIMEOUT_SECS} s "
        "(OBLETH_GATEWAY_TIMEOUT_SECS).",
        kind="server_error",
        code="upstream_timeout",
    )
