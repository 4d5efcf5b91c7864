"""Sending a request to a model's endpoints in turn until one answers.

Endpoints in balancer order (least outstanding requests within the best priority tier), each
one with room under ``OBLETH_GATEWAY_ENDPOINT_MAX_CONCURRENCY`` (a request waits up to
``OBLETH_GATEWAY_QUEUE_TIMEOUT_SECS`` for room, then gets a 429); a connection error, a 5xx, or
no answer within ``OBLETH_GATEWAY_TTFB_TIMEOUT_SECS`` moves the request to the next endpoint
while nothing has reached the client yet, at most ``OBLETH_GATEWAY_MAX_TRIES`` endpoints; a
client that goes away cancels the request at once. The answer itself is relayed by
:class:`obleth.gateway.relay.Relay`. :class:`Failover` is a base of
:class:`obleth.gateway.service.GatewayService`, which makes the attributes declared here.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from django.http import HttpResponse

from obleth.gateway import metrics
from obleth.gateway.answers import (
    BodyWriter,
    Receive,
    Scope,
    Send,
    _Answer,
    _header,
    _Outcome,
    body_writer,
)
from obleth.gateway.proxy import (
    misconfigured_response,
    no_replica_response,
    openai_error,
    usable_endpoints,
)
from obleth.gateway.relay import Relay
from obleth.gateway.routing import RouteEndpoint, RouteModel
from obleth.gateway.upstream import UpstreamBroken, UpstreamClient, UpstreamError
from obleth.logging import register_secret

# The service's logger: one name for every line the gateway's request handling logs.
log = logging.getLogger("obleth.gateway.service")


class Failover(Relay):
    """The failover half of :class:`obleth.gateway.service.GatewayService`."""

    _client: UpstreamClient | None
    _slot_freed: asyncio.Condition
    in_flight: int

    @property
    def client(self) -> UpstreamClient:
        """One pool of kept-alive connections to every endpoint per process
        (:mod:`obleth.gateway.upstream` says why it is not aiohttp's or httpx's)."""
        if self._client is None:
            self._client = UpstreamClient()
        return self._client

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

        writer = body_writer(scope) if stream else None
        watcher = asyncio.create_task(watch_disconnect())
        self.in_flight += 1
        try:
            for attempt, ep in enumerate(tries, start=1):
                last = attempt == len(tries)
                if await self._try(
                    send,
                    route,
                    ep,
                    path,
                    content,
                    stream,
                    last,
                    started,
                    request_id,
                    outcome,
                    writer,
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
        writer: BodyWriter | None = None,
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
        try:
            request = self.client.prepare(ep.base, path, content, headers)
        except ValueError as exc:  # an api_base or API key no request can carry
            detail = "the API key is not Latin-1" if isinstance(exc, UnicodeError) else str(exc)
            self._failed(route, ep, "bad_endpoint", f"unusable endpoint row ({detail})")
            log.warning("gateway: endpoint %s of %s skipped: %s", ep.id, route.name, detail)
            return False
        self.balancer.started(ep.id)
        metrics.IN_FLIGHT.labels(route.name, ep.id).inc()
        try:
            try:
                async with asyncio.timeout(self.config.ttfb_timeout):
                    upstream = await self.client.send(
                        request, connect_timeout=self.config.connect_timeout
                    )
            except UpstreamError as exc:
                self._failed(route, ep, "connect", str(exc))
                log.info("gateway: endpoint %s of %s unreachable (%s)", ep.id, route.name, exc)
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
                    await self._relay_stream(send, route, ep, upstream, request_id, outcome, writer)
                else:
                    try:
                        data = await upstream.read(self.config.read_timeout)
                    except (UpstreamBroken, TimeoutError) as exc:
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
