"""The /v1 data plane as its own ASGI service (run by ``python -m obleth.gateway.serve``).

One event loop per worker process relays thousands of concurrent requests and streams; a
request holds a coroutine, not a thread, so a replica that accepts and never answers costs only
the requests routed to it. Nothing here touches the database on a request: the routing table is
held in memory (:mod:`obleth.gateway.table`).

Routes: ``GET /v1/models``, ``GET /v1/models/{name}``, ``POST /v1/chat/completions``,
``/v1/completions``, ``/v1/embeddings``; ``GET /healthz`` (the gateway process, no database) and
``GET /metrics`` (Prometheus).

A request's life:
1. headers read within ``OBLETH_GATEWAY_HEADER_TIMEOUT_SECS`` (in the HTTP protocol, see
   :mod:`obleth.gateway.serve`), then authenticated;
2. a ``Content-Length`` over ``OBLETH_GATEWAY_MAX_BODY_BYTES`` is refused with 413 before a byte
   of the body is read; the body must arrive within ``OBLETH_GATEWAY_BODY_TIMEOUT_SECS`` and stay
   under the limit; JSON with more than ``OBLETH_GATEWAY_MAX_JSON_CONTAINERS`` objects/arrays is
   refused before it is parsed;
3. endpoints in balancer order (least outstanding requests within the best priority tier); a
   connection error, a 5xx, or no answer within ``OBLETH_GATEWAY_TTFB_TIMEOUT_SECS`` moves the
   request to the next endpoint while nothing has reached the client yet, at most
   ``OBLETH_GATEWAY_MAX_TRIES`` endpoints; such failures put an endpoint in passive cooldown
   after ``OBLETH_GATEWAY_COOLDOWN_AFTER`` in a row;
4. streams are relayed chunk by chunk as they come; a stream silent for
   ``OBLETH_GATEWAY_STREAM_IDLE_TIMEOUT_SECS`` ends with an error event; a client that goes
   away closes the upstream request at once.

A model without a routable endpoint gets a 503 naming its actual state (pending in the Slurm
queue and why, starting, stopped by the breaker, refused, disabled...), decided from the state
the table holds (:mod:`obleth.gateway.availability`). Every answer that is not a success is one
INFO line with the model and the reason; only a bug (an exception) is logged at ERROR, and its
client gets an OpenAI-shaped 500. This is the only server of /v1: the web process answers it
with a 404 pointing here (:mod:`obleth.gateway.elsewhere`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from django.conf import settings
from django.http import HttpResponse

from obleth.core import limits
from obleth.core.scrape import scrape_refusal
from obleth.gateway import metrics
from obleth.gateway.auth import Caller, Refusal, check_credentials, check_credentials_cached
from obleth.gateway.balancer import Balancer
from obleth.gateway.inflight import InflightCounter
from obleth.gateway.proxy import (
    PASSED_HEADERS,
    PASSED_PREFIXES,
    method_not_allowed,
    misconfigured_response,
    model_entry,
    no_replica_response,
    not_allowed,
    not_found,
    openai_error,
    scrub_upstream_address,
    usable_endpoints,
)
from obleth.gateway.routing import RouteEndpoint, RouteModel, RouteTable
from obleth.gateway.table import LiveTable
from obleth.gateway.wake import Waker
from obleth.logging import bound, clean_request_id, register_secret
from obleth.logging import request_id as request_id_var

log = logging.getLogger("obleth.gateway.service")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

INFERENCE_PATHS = {
    "/v1/chat/completions": "/chat/completions",
    "/v1/completions": "/completions",
    "/v1/embeddings": "/embeddings",
}
OFFLOAD_PARSE_BYTES = 256 * 1024  # bigger bodies are parsed in a thread, off the event loop


@dataclass(frozen=True)
class GatewayConfig:
    """The gateway's limits and timeouts (from ``OBLETH_GATEWAY_*`` settings)."""

    connect_timeout: float = 5.0
    ttfb_timeout: float = 120.0
    read_timeout: float = 600.0
    stream_idle_timeout: float = 120.0
    body_timeout: float = 30.0
    max_body_bytes: int = 8 * 1024 * 1024
    max_json_containers: int = 100_000
    max_tries: int = 3
    cooldown_after: int = 3
    cooldown_secs: float = 30.0
    endpoint_max_concurrency: int = 0
    queue_timeout: float = 30.0
    affinity_header: str = ""
    access_log: bool = False

    @classmethod
    def from_settings(cls) -> GatewayConfig:
        s = settings
        return cls(
            connect_timeout=float(getattr(s, "OBLETH_GATEWAY_CONNECT_TIMEOUT_SECS", 5)),
            ttfb_timeout=float(getattr(s, "OBLETH_GATEWAY_TTFB_TIMEOUT_SECS", 120)),
            read_timeout=float(getattr(s, "OBLETH_GATEWAY_TIMEOUT_SECS", 600)),
            stream_idle_timeout=float(getattr(s, "OBLETH_GATEWAY_STREAM_IDLE_TIMEOUT_SECS", 120)),
            body_timeout=float(getattr(s, "OBLETH_GATEWAY_BODY_TIMEOUT_SECS", 30)),
            max_body_bytes=int(getattr(s, "OBLETH_GATEWAY_MAX_BODY_BYTES", 8 * 1024 * 1024)),
            max_json_containers=int(getattr(s, "OBLETH_GATEWAY_MAX_JSON_CONTAINERS", 100_000)),
            max_tries=max(1, int(getattr(s, "OBLETH_GATEWAY_MAX_TRIES", 3))),
            cooldown_after=int(getattr(s, "OBLETH_GATEWAY_COOLDOWN_AFTER", 3)),
            cooldown_secs=float(getattr(s, "OBLETH_GATEWAY_COOLDOWN_SECS", 30)),
            endpoint_max_concurrency=int(getattr(s, "OBLETH_GATEWAY_ENDPOINT_MAX_CONCURRENCY", 0)),
            queue_timeout=float(getattr(s, "OBLETH_GATEWAY_QUEUE_TIMEOUT_SECS", 30)),
            affinity_header=str(getattr(s, "OBLETH_GATEWAY_AFFINITY_HEADER", "") or "").lower(),
            access_log=bool(getattr(s, "OBLETH_GATEWAY_ACCESS_LOG", False)),
        )


class _Answer(Exception):
    """A finished answer to send instead of relaying (raised from deep inside a request)."""

    def __init__(self, response: HttpResponse) -> None:
        self.response = response


@dataclass
class _Outcome:
    status: int = 0
    endpoint: str = ""
    reason: str = ""
    model: str = ""
    started: bool = False  # the answer's head went out


def _header(scope: Scope, name: bytes) -> str:
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value).decode("latin-1")
    return ""


async def send_django(send: Send, response: HttpResponse, request_id: str) -> None:
    """Send a finished Django response (the OpenAI error bodies are built in one place)."""
    headers = [(k.lower().encode("latin-1"), str(v).encode("latin-1")) for k, v in response.items()]
    headers.append((b"x-request-id", request_id.encode("latin-1")))
    body = bytes(response.content)
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def passed_headers(upstream: Mapping[str, str]) -> dict[str, str]:
    """The upstream answer's headers a client may see (nothing naming the engine or node)."""
    kept: dict[str, str] = {}
    for name, value in upstream.items():
        lower = name.lower()
        if lower in PASSED_HEADERS or lower.startswith(PASSED_PREFIXES):
            kept[lower] = value
    return kept


def _count_usage(model: str, payload: Any) -> None:
    usage = payload.get("usage") if isinstance(payload, dict) else None
    if not isinstance(usage, dict):
        return
    for kind in ("prompt", "completion"):
        value = usage.get(f"{kind}_tokens")
        if isinstance(value, int) and value > 0:
            metrics.TOKENS.labels(model, kind).inc(value)


class GatewayService:
    """The ASGI application. One instance per worker process."""

    def __init__(
        self,
        table: LiveTable | None = None,
        config: GatewayConfig | None = None,
        client: aiohttp.ClientSession | None = None,
    ) -> None:
        self.config = config or GatewayConfig.from_settings()
        self.table = table or LiveTable()
        self.balancer = Balancer(
            cooldown_after=self.config.cooldown_after,
            cooldown_secs=self.config.cooldown_secs,
            max_concurrency=self.config.endpoint_max_concurrency,
        )
        self._client = client
        self._slot_freed = asyncio.Condition()
        self._refresher: asyncio.Task[None] | None = None
        self.in_flight = 0
        # per-model counts shared through Redis (autoscaling), and the hold of scale-to-zero
        self.load = InflightCounter()
        self.waker = Waker(self.table, self.load)

    # ------------------------------------------------------------------ lifecycle

    @property
    def client(self) -> aiohttp.ClientSession:
        """One pooled session per process (kept-alive connections to every endpoint).

        aiohttp rather than httpx here: on this machine httpx's async client cost 0.93 ms of CPU
        per proxied request against aiohttp's 0.06 ms (bench/gateway_bench.py has the figures).
        """
        if self._client is None:
            self._client = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    limit=0, limit_per_host=0, keepalive_timeout=30, ttl_dns_cache=60
                ),
                timeout=aiohttp.ClientTimeout(
                    total=None,
                    connect=self.config.connect_timeout,
                    sock_read=self.config.read_timeout,
                ),
                auto_decompress=False,
                trust_env=False,
                headers={"User-Agent": "obleth-gateway"},
            )
        return self._client

    def _table_reloaded(self, table: RouteTable) -> None:
        metrics.TABLE_RELOADS.inc()
        ids = {ep.id for model in table.models.values() for ep in model.endpoints}
        self.balancer.forget_except(ids)
        self.waker.table_reloaded()

    async def startup(self, *, keep_fresh: bool = True) -> None:
        """Load the table; with ``keep_fresh``, keep it current (change notices and the timer).
        Tests in this process pass False and reload it themselves."""
        self.table.on_reload = self._table_reloaded
        await self.table.reload()
        if keep_fresh:
            self._refresher = asyncio.create_task(self.table.run())
        self.load.start()

    async def shutdown(self) -> None:
        await self.load.close()
        if self._refresher is not None:
            self._refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._refresher
        if self._client is not None:
            await self._client.close()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        request_id = clean_request_id(_header(scope, b"x-request-id") or None)
        started = time.monotonic()
        outcome = _Outcome()

        async def tracked(message: Message) -> None:
            if message["type"] == "http.response.start":
                outcome.started = True
            await send(message)

        with bound(request_id_var, request_id):
            try:
                await self._route(scope, receive, tracked, request_id, outcome)
            except _Answer as answer:
                self._answer_outcome(outcome, answer.response)
                await send_django(tracked, answer.response, request_id)
            except Exception:  # a bug: logged at ERROR with its traceback, the client gets 500
                log.exception(
                    "gateway: %s %s failed (request %s)",
                    scope.get("method"),
                    scope.get("path", ""),
                    request_id,
                )
                outcome.status, outcome.reason = 500, "internal error (logged above)"
                if not outcome.started:
                    error = openai_error(
                        500,
                        f"The gateway failed on this request (request {request_id}); the "
                        "operator's log has the details.",
                        kind="server_error",
                        code="gateway_error",
                    )
                    await send_django(tracked, error, request_id)
            finally:
                self._log(scope, outcome, time.monotonic() - started, request_id)

    @staticmethod
    def _answer_outcome(outcome: _Outcome, response: HttpResponse) -> None:
        outcome.status = response.status_code
        outcome.reason = str(getattr(response, "obleth_reason", "") or "") or outcome.reason
        outcome.model = outcome.model or str(getattr(response, "obleth_model", "") or "")

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.startup()
                except Exception as exc:  # a broken start must say why, not hang
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return

    def _log(self, scope: Scope, outcome: _Outcome, secs: float, request_id: str) -> None:
        """One INFO line for an answer that is not a plain success (a client's 4xx, a model's
        503, an upstream failure): the model and the reason, never ERROR (a bug is logged at
        ERROR where it is caught). The path only: a query string may carry a secret."""
        path = scope.get("path", "")
        if outcome.status >= 400 or outcome.reason:
            log.info(
                "gateway: %s %s %s model=%s%s (%.0f ms, request %s)",
                outcome.status,
                scope.get("method"),
                path,
                outcome.model or "-",
                f": {outcome.reason}" if outcome.reason else "",
                secs * 1000,
                request_id,
            )
        elif self.config.access_log:
            log.info(
                "gateway: %s %s -> %s in %.0f ms (request %s)",
                scope.get("method"),
                path,
                outcome.status,
                secs * 1000,
                request_id,
            )

    # ------------------------------------------------------------------ routing

    async def _route(
        self, scope: Scope, receive: Receive, send: Send, request_id: str, outcome: _Outcome
    ) -> None:
        path: str = scope.get("path", "")
        method: str = scope.get("method", "GET")
        if path == "/healthz":
            await self._healthz(send, request_id, outcome)
            return
        if path == "/metrics":
            self._metrics_allowed(scope)
            page, content_type = metrics.render()
            outcome.status = 200
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", content_type.encode())],
                }
            )
            await send({"type": "http.response.body", "body": page})
            return
        if not path.startswith("/v1/") and path != "/v1":
            raise _Answer(openai_error(404, f"No route {path}; the gateway serves /v1/."))
        caller = await self._authenticate(scope)
        table = self._table()
        if path == "/v1/models" or path.startswith("/v1/models/"):
            if method not in ("GET", "HEAD"):
                raise _Answer(method_not_allowed("GET"))
            await self._models(path, table, caller, send, request_id, outcome)
            return
        upstream_path = INFERENCE_PATHS.get(path)
        if upstream_path is None:
            raise _Answer(openai_error(404, f"No route {path}.", code="unknown_route"))
        if method != "POST":
            raise _Answer(method_not_allowed("POST"))
        body = await self._read_json(scope, receive)
        name = body.get("model")
        if not isinstance(name, str) or not name:
            raise _Answer(
                openai_error(
                    400,
                    "'model' is required: give the name of a model from GET /v1/models.",
                    param="model",
                )
            )
        outcome.model = name
        if not caller.allows(name):
            raise _Answer(not_allowed(name))
        route = table.lookup(name)  # a disabled model gets a 503 that says so
        if route is None:
            raise _Answer(not_found(name))
        with self.load.track(route.id, route.name):
            ready = await self.waker.ready(route, receive)  # a model at zero: held while it wakes
            if isinstance(ready, HttpResponse):
                raise _Answer(ready)
            await self._forward(
                scope, receive, send, ready, upstream_path, body, request_id, outcome
            )

    def _metrics_allowed(self, scope: Scope) -> None:
        client = str((scope.get("client") or ("", 0))[0])
        refused = scrape_refusal(_header(scope, b"authorization"), client)
        if refused is not None:
            kind = "permission_error" if refused[0] == 403 else "invalid_request_error"
            raise _Answer(openai_error(refused[0], refused[1], kind=kind))

    def _table(self) -> RouteTable:
        table = self.table.table
        if table is None:
            raise _Answer(
                openai_error(
                    503,
                    "The gateway has not loaded its routing table yet (database unreachable?).",
                    kind="service_unavailable",
                    code="gateway_starting",
                    headers={"Retry-After": "5"},
                )
            )
        return table

    async def _authenticate(self, scope: Scope) -> Caller:
        """The caller, by the same decision as everywhere (:func:`check_credentials`).

        The usual request is decided on the event loop from the process's cached key table
        (:func:`check_credentials_cached`: no query, no log line). The rest runs in a thread:
        the key table is rebuilt from the database now and then, an unknown key costs the
        lockout bookkeeping, a key's last use is written once a minute; none of that may block
        the event loop (nor may the ORM run in it)."""
        query = bytes(scope.get("query_string", b"")).decode("latin-1")
        names = [urllib.parse.unquote_plus(p.split("=", 1)[0]) for p in query.split("&") if p]
        client = scope.get("client") or ("unknown", 0)
        # Behind OBLETH_TRUSTED_PROXY_COUNT proxies: the address the outermost one saw.
        address = limits.address_of(str(client[0]), _header(scope, b"x-forwarded-for"))
        authorization = _header(scope, b"authorization")
        decision = check_credentials_cached(authorization, address=address, query_names=names)
        if decision is None:
            decision = await asyncio.to_thread(
                check_credentials,
                authorization,
                address=address,
                path=str(scope.get("path", "")),
                query_names=names,
                has_x_api_key=bool(_header(scope, b"x-api-key")),
            )
        if isinstance(decision, Refusal):
            raise _Answer(decision.response())
        return decision

    async def _healthz(self, send: Send, request_id: str, outcome: _Outcome) -> None:
        age = self.table.age_secs
        ok = age is not None
        payload = {
            "status": "ok" if ok else "starting",
            "routing_table_age_secs": None if age is None else round(age, 1),
            "models": 0 if self.table.table is None else len(self.table.table.models),
            "reloads": self.table.reloads,
            "in_flight": self.in_flight,
        }
        outcome.status = 200 if ok else 503
        await send_django(
            send,
            HttpResponse(
                json.dumps(payload), status=outcome.status, content_type="application/json"
            ),
            request_id,
        )

    async def _models(
        self,
        path: str,
        table: RouteTable,
        caller: Caller,
        send: Send,
        request_id: str,
        outcome: _Outcome,
    ) -> None:
        if path == "/v1/models":
            payload: dict[str, Any] = {
                "object": "list",
                "data": [model_entry(r) for r in table.listed() if caller.allows(r.name)],
            }
        else:
            name = path[len("/v1/models/") :]  # uvicorn has unquoted the path already
            if not caller.allows(name):
                raise _Answer(not_allowed(name))
            route = table.get(name)
            if route is None:
                raise _Answer(not_found(name))
            payload = model_entry(route)
        outcome.status = 200
        await send_django(
            send, HttpResponse(json.dumps(payload), content_type="application/json"), request_id
        )

    # ------------------------------------------------------------------ request body

    async def _read_json(self, scope: Scope, receive: Receive) -> dict[str, Any]:
        limit = self.config.max_body_bytes
        declared = _header(scope, b"content-length")
        if declared:
            try:
                size = int(declared)
            except ValueError:
                raise _Answer(openai_error(400, "Content-Length is not a number.")) from None
            if size > limit:
                raise _Answer(_too_large(limit))
        chunks: list[bytes] = []
        total = 0
        try:
            async with asyncio.timeout(self.config.body_timeout):
                more = True
                while more:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        raise _Answer(openai_error(400, "The client went away."))
                    chunk = message.get("body", b"")
                    total += len(chunk)
                    if total > limit:
                        raise _Answer(_too_large(limit))
                    chunks.append(chunk)
                    more = bool(message.get("more_body"))
        except TimeoutError:
            raise _Answer(
                openai_error(
                    408,
                    f"The request body did not arrive within {self.config.body_timeout:.0f} s.",
                    code="body_timeout",
                )
            ) from None
        raw = b"".join(chunks)
        containers = raw.count(b"{") + raw.count(b"[")
        if containers > self.config.max_json_containers:
            raise _Answer(
                openai_error(
                    413,
                    f"The request body has more than {self.config.max_json_containers} JSON "
                    "objects and arrays (OBLETH_GATEWAY_MAX_JSON_CONTAINERS).",
                    code="body_too_complex",
                )
            )
        try:
            if len(raw) > OFFLOAD_PARSE_BYTES:
                body = await asyncio.to_thread(json.loads, raw)
            else:
                body = json.loads(raw)
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise _Answer(
                openai_error(400, "The request body is not valid JSON; send a JSON object.")
            ) from None
        if not isinstance(body, dict):
            raise _Answer(openai_error(400, "The request body must be a JSON object."))
        return body

    # ------------------------------------------------------------------ relay

    async def _wait_for_room(self, endpoints: list[RouteEndpoint], route: RouteModel) -> None:
        if self.balancer.max_concurrency <= 0:
            return
        ids = [ep.id for ep in endpoints]

        def room() -> bool:
            return any(self.balancer.has_room(eid) for eid in ids)

        try:
            async with asyncio.timeout(self.config.queue_timeout):
                async with self._slot_freed:
                    await self._slot_freed.wait_for(room)
        except TimeoutError:
            raise _Answer(self._busy(route)) from None

    def _busy(self, route: RouteModel) -> HttpResponse:
        return openai_error(
            429,
            f"Every replica of model '{route.name}' is at its limit of "
            f"{self.balancer.max_concurrency} requests; retry shortly.",
            kind="rate_limit_error",
            code="replicas_busy",
            headers={"Retry-After": "1"},
            model=route.name,
        )

    async def _release(self, endpoint_id: str, model: str) -> None:
        self.balancer.finished(endpoint_id)
        metrics.IN_FLIGHT.labels(model, endpoint_id).dec()
        if self.balancer.max_concurrency > 0:
            async with self._slot_freed:
                self._slot_freed.notify(1)

    def _failed(self, route: RouteModel, ep: RouteEndpoint, kind: str, detail: str) -> None:
        metrics.UPSTREAM_ERRORS.labels(route.name, ep.id, kind).inc()
        if self.balancer.failed(ep.id, detail):
            metrics.COOLDOWNS.labels(route.name, ep.id).inc()
            log.warning(
                "gateway: endpoint %s of %s cooled down for %.0f s: %s",
                ep.id,
                route.name,
                self.config.cooldown_secs,
                detail,
            )

    async def _forward(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        route: RouteModel,
        path: str,
        body: dict[str, Any],
        request_id: str,
        outcome: _Outcome,
    ) -> None:
        started = time.monotonic()
        affinity = _header(scope, self.config.affinity_header.encode()) or None
        if not self.config.affinity_header:
            affinity = None
        if not route.endpoints:
            raise _Answer(no_replica_response(route))
        # Rows that cannot make a request are skipped before the tries are counted.
        usable = usable_endpoints(route, list(route.endpoints))
        if not usable:
            raise _Answer(misconfigured_response(route))
        await self._wait_for_room(usable, route)
        candidates = [
            ep for ep in self.balancer.order(usable, affinity) if self.balancer.has_room(ep.id)
        ]
        if not candidates:
            raise _Answer(self._busy(route))
        stream = body.get("stream") is True
        content = json.dumps({**body, "model": route.forwarded_name}).encode()
        tries = candidates[: self.config.max_tries]
        task = asyncio.current_task()
        assert task is not None
        state = {"done": False, "gone": False}

        async def watch_disconnect() -> None:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    if not state["done"]:
                        state["gone"] = True
                        task.cancel()
                    return

        watcher = asyncio.create_task(watch_disconnect())
        self.in_flight += 1
        try:
            for attempt, ep in enumerate(tries, start=1):
                last = attempt == len(tries)
                if await self._try(
                    send, route, ep, path, content, stream, last, started, request_id, outcome
                ):
                    return
            outcome.status = 502
            outcome.reason = f"no endpoint answered (tried {len(tries)})"
            raise _Answer(
                openai_error(
                    502,
                    f"No replica of model '{route.name}' could be reached (tried {len(tries)}). "
                    "Retry shortly; if it persists, check the model's endpoints.",
                    kind="server_error",
                    code="upstream_unreachable",
                )
            )
        except asyncio.CancelledError:
            if not state["gone"]:
                raise
            task.uncancel()
            outcome.status = outcome.status or 499
            outcome.reason = "client went away"
        finally:
            self.in_flight -= 1
            state["done"] = True
            watcher.cancel()
            metrics.LATENCY.labels(route.name).observe(time.monotonic() - started)
            metrics.REQUESTS.labels(route.name, outcome.endpoint or "-", str(outcome.status)).inc()

    async def _try(
        self,
        send: Send,
        route: RouteModel,
        ep: RouteEndpoint,
        path: str,
        content: bytes,
        stream: bool,
        last: bool,
        started: float,
        request_id: str,
        outcome: _Outcome,
    ) -> bool:
        """One endpoint. True when the answer (any answer) went to the client."""
        headers = {
            "Content-Type": "application/json",
            "Accept": "text/event-stream" if stream else "application/json",
            "Accept-Encoding": "identity",
            "X-Request-ID": request_id,
        }
        if ep.api_key:
            register_secret(ep.api_key)
            headers["Authorization"] = f"Bearer {ep.api_key}"
        timeout = aiohttp.ClientTimeout(
            total=None,
            connect=self.config.connect_timeout,
            sock_read=self.config.stream_idle_timeout if stream else self.config.read_timeout,
        )
        try:
            url = ep.base + path
            if any(c in url for c in "\r\n\x00 "):
                raise ValueError("the api_base holds a control character or a space")
            for value in headers.values():
                value.encode("latin-1")
                if "\r" in value or "\n" in value:
                    raise ValueError("the API key holds a line break")
        except (ValueError, UnicodeError) as exc:
            self._failed(route, ep, "bad_endpoint", f"unusable endpoint row ({exc})")
            log.warning("gateway: endpoint %s of %s skipped: %s", ep.id, route.name, exc)
            return False
        self.balancer.started(ep.id)
        metrics.IN_FLIGHT.labels(route.name, ep.id).inc()
        try:
            try:
                async with asyncio.timeout(self.config.ttfb_timeout):
                    upstream = await self.client.post(
                        url, data=content, headers=headers, timeout=timeout, allow_redirects=False
                    )
            except (aiohttp.ClientError, OSError, ValueError) as exc:
                self._failed(route, ep, "connect", type(exc).__name__)
                log.info(
                    "gateway: endpoint %s of %s unreachable (%s)",
                    ep.id,
                    route.name,
                    type(exc).__name__,
                )
                return False
            except TimeoutError:
                self._failed(
                    route, ep, "ttfb_timeout", f"no answer within {self.config.ttfb_timeout:.0f} s"
                )
                log.warning(
                    "gateway: endpoint %s of %s sent nothing within %.0f s; trying the next one",
                    ep.id,
                    route.name,
                    self.config.ttfb_timeout,
                )
                return False
            metrics.TTFB.labels(route.name).observe(time.monotonic() - started)
            try:
                if upstream.status >= 500 and not last:
                    self._failed(route, ep, "5xx", f"HTTP {upstream.status}")
                    return False
                if stream and upstream.status < 300:
                    await self._relay_stream(send, route, ep, upstream, request_id, outcome)
                else:
                    try:
                        data = await upstream.read()
                    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                        self._failed(route, ep, "broken", type(exc).__name__)
                        return False
                    await self._send_plain(send, route, ep, upstream, data, request_id, outcome)
            finally:
                upstream.release()
            if upstream.status < 500:
                self.balancer.succeeded(ep.id)
            else:
                self._failed(route, ep, "5xx", f"HTTP {upstream.status}")
            return True
        finally:
            await self._release(ep.id, route.name)

    async def _send_plain(
        self,
        send: Send,
        route: RouteModel,
        ep: RouteEndpoint,
        upstream: aiohttp.ClientResponse,
        data: bytes,
        request_id: str,
        outcome: _Outcome,
    ) -> None:
        passed = passed_headers(upstream.headers)
        ok = upstream.status < 300
        if ok and "json" in passed.get("content-type", ""):
            if b'"model"' in data:  # engines answer with their own id (a path, an alias)
                data = _MODEL_FIELD.sub(model_replacement(route.name), data)
            if b'"usage"' in data:
                with contextlib.suppress(ValueError, UnicodeDecodeError):
                    _count_usage(route.name, json.loads(data))
        elif not ok:
            data = scrub_upstream_address(data, ep.base)
        headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in passed.items()]
        headers += [
            (b"content-length", str(len(data)).encode()),
            (b"x-request-id", request_id.encode("latin-1")),
        ]
        outcome.status, outcome.endpoint = upstream.status, ep.id
        await send({"type": "http.response.start", "status": upstream.status, "headers": headers})
        await send({"type": "http.response.body", "body": data})

    async def _relay_stream(
        self,
        send: Send,
        route: RouteModel,
        ep: RouteEndpoint,
        upstream: aiohttp.ClientResponse,
        request_id: str,
        outcome: _Outcome,
    ) -> None:
        passed = passed_headers(upstream.headers)
        passed["cache-control"] = "no-cache"
        passed["x-accel-buffering"] = "no"
        headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in passed.items()]
        headers.append((b"x-request-id", request_id.encode("latin-1")))
        outcome.status, outcome.endpoint = upstream.status, ep.id
        await send({"type": "http.response.start", "status": upstream.status, "headers": headers})
        renamer = _StreamRenamer(route.name)
        try:
            async for chunk in upstream.content.iter_any():
                if b'"usage"' in chunk:
                    self._usage_from_events(route.name, chunk)
                out = renamer.feed(chunk)
                if out:
                    await send({"type": "http.response.body", "body": out, "more_body": True})
            rest = renamer.flush()
            if rest:
                await send({"type": "http.response.body", "body": rest, "more_body": True})
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            kind = "idle_timeout" if isinstance(exc, TimeoutError) else "broken"
            self._failed(route, ep, kind, type(exc).__name__)
            outcome.reason = (
                f"stream silent for {self.config.stream_idle_timeout:.0f} s"
                if kind == "idle_timeout"
                else f"stream broke off ({type(exc).__name__})"
            )
            error = {
                "error": {
                    "message": "The replica stopped answering in the middle of the stream.",
                    "type": "server_error",
                    "param": None,
                    "code": "upstream_stream_broken",
                }
            }
            await send(
                {
                    "type": "http.response.body",
                    "body": b"data: " + json.dumps(error).encode() + b"\n\n",
                    "more_body": True,
                }
            )
        await send({"type": "http.response.body", "body": b""})

    def _usage_from_events(self, model: str, chunk: bytes) -> None:
        for line in chunk.split(b"\n"):
            if b'"usage"' in line and line.startswith(b"data:"):
                with contextlib.suppress(ValueError, UnicodeDecodeError):
                    _count_usage(model, json.loads(line[5:]))


_MODEL_FIELD = re.compile(rb'("model"\s*:\s*)"(?:[^"\\]|\\.)*"')


def model_replacement(client_name: str) -> bytes:
    """What :data:`_MODEL_FIELD` is replaced with: the key, then the client's name as JSON."""
    return rb"\1" + json.dumps(client_name).encode().replace(b"\\", b"\\\\")


class _StreamRenamer:
    """Sets "model" of each event back to the client's name, at C speed: a regular expression
    over whole lines replaces the value of every ``"model":`` key (an escaped ``\\"model\\"``
    inside generated text does not match), so no event is parsed as JSON. Bytes pass through
    untouched when no line names a model; a line split across chunks waits for its end."""

    def __init__(self, client_name: str) -> None:
        self._replacement = model_replacement(client_name)
        self._pending = b""

    def feed(self, chunk: bytes) -> bytes:
        data = self._pending + chunk if self._pending else chunk
        if b'"model"' not in data:
            self._pending = b""
            return data
        complete, newline, self._pending = data.rpartition(b"\n")
        if not newline:
            self._pending = data
            return b""
        return _MODEL_FIELD.sub(self._replacement, complete) + b"\n"

    def flush(self) -> bytes:
        rest, self._pending = self._pending, b""
        return _MODEL_FIELD.sub(self._replacement, rest) if rest else b""


def _too_large(limit: int) -> HttpResponse:
    return openai_error(
        413,
        f"The request body is larger than {limit} bytes (OBLETH_GATEWAY_MAX_BODY_BYTES).",
        code="body_too_large",
    )
