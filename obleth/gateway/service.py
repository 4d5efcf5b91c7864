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
import time
import urllib.parse
from typing import Any

from django.http import HttpResponse

from obleth.core import limits
from obleth.core.scrape import scrape_refusal
from obleth.gateway import metrics
from obleth.gateway.answers import (
    Message,
    Receive,
    Scope,
    Send,
    _Answer,
    _header,
    _Outcome,
    send_django,
)
from obleth.gateway.auth import Caller, Refusal, check_credentials, check_credentials_cached
from obleth.gateway.balancer import Balancer
from obleth.gateway.body import OFFLOAD_PARSE_BYTES as OFFLOAD_PARSE_BYTES
from obleth.gateway.body import BodyReader
from obleth.gateway.config import GatewayConfig
from obleth.gateway.failover import Failover
from obleth.gateway.inflight import InflightCounter
from obleth.gateway.proxy import (
    method_not_allowed,
    model_entry,
    not_allowed,
    not_found,
    openai_error,
)
from obleth.gateway.relay import model_replacement as model_replacement
from obleth.gateway.relay import passed_headers as passed_headers
from obleth.gateway.routing import RouteTable
from obleth.gateway.table import LiveTable
from obleth.gateway.upstream import UpstreamClient
from obleth.gateway.wake import Waker
from obleth.logging import bound, clean_request_id
from obleth.logging import request_id as request_id_var

log = logging.getLogger("obleth.gateway.service")

INFERENCE_PATHS = {
    "/v1/chat/completions": "/chat/completions",
    "/v1/completions": "/completions",
    "/v1/embeddings": "/embeddings",
}


class GatewayService(Failover, BodyReader):
    """The ASGI application. One instance per worker process.

    Its parts are its bases, methods of this one object (no wrapper per request): reading the
    body (:class:`~obleth.gateway.body.BodyReader`), trying the endpoints in turn
    (:class:`~obleth.gateway.failover.Failover`) and relaying the answer
    (:class:`~obleth.gateway.relay.Relay`). Here: the lifecycle, routing, authentication,
    ``/healthz``, ``/v1/models`` and the request's one log line."""

    def __init__(
        self,
        table: LiveTable | None = None,
        config: GatewayConfig | None = None,
        client: UpstreamClient | None = None,
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
