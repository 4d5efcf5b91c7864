"""Relaying an endpoint's answer to the client: a plain body, or a stream chunk by chunk.

The answer keeps only the headers a client may see (:func:`passed_headers`); "model" is set
back to the client's name (:class:`_StreamRenamer` on a stream, at C speed, no event parsed as
JSON); the token usage the engine reports is counted (:func:`_count_usage`); a stream that goes
silent for ``OBLETH_GATEWAY_STREAM_IDLE_TIMEOUT_SECS`` or breaks off ends with an error event.
:meth:`Relay._failed` is the failure bookkeeping (passive cooldown) the relay and the failover
(:mod:`obleth.gateway.failover`) share. :class:`Relay` is a base of
:class:`obleth.gateway.service.GatewayService`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Mapping
from typing import Any

from obleth.gateway import metrics
from obleth.gateway.answers import BodyWriter, Send, _Outcome
from obleth.gateway.balancer import Balancer
from obleth.gateway.config import GatewayConfig
from obleth.gateway.proxy import PASSED_HEADERS, PASSED_PREFIXES, scrub_upstream_address
from obleth.gateway.routing import RouteEndpoint, RouteModel
from obleth.gateway.upstream import UpstreamBroken, UpstreamResponse

# The service's logger: one name for every line the gateway's request handling logs.
log = logging.getLogger("obleth.gateway.service")


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


class Relay:
    """The relay half of :class:`obleth.gateway.service.GatewayService`."""

    config: GatewayConfig
    balancer: Balancer

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

    async def _send_plain(
        self,
        send: Send,
        route: RouteModel,
        ep: RouteEndpoint,
        upstream: UpstreamResponse,
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
        upstream: UpstreamResponse,
        request_id: str,
        outcome: _Outcome,
        writer: BodyWriter | None = None,
    ) -> None:
        passed = passed_headers(upstream.headers)
        passed["cache-control"] = "no-cache"
        passed["x-accel-buffering"] = "no"
        headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in passed.items()]
        headers.append((b"x-request-id", request_id.encode("latin-1")))
        outcome.status, outcome.endpoint = upstream.status, ep.id
        await send({"type": "http.response.start", "status": upstream.status, "headers": headers})
        renamer = _StreamRenamer(route.name)

        def relayed(chunk: bytes) -> bytes:  # what the client gets of an endpoint's chunk
            if b'"usage"' in chunk:
                self._usage_from_events(route.name, chunk)
            return renamer.feed(chunk)

        sending = False  # the loop below is sending bytes: later ones must wait behind them
        if writer is not None:
            # Chunks go from the endpoint's socket callback to the client's socket (the server's
            # BodyWriter); the loop below only sees what the writer cannot take at once.
            def deliver(chunk: bytes) -> bool:
                if sending or not writer.ready():
                    return False
                out = relayed(chunk)
                if out:
                    writer.write(out)
                return True

            upstream.deliver_to(deliver)
        try:
            idle = self.config.stream_idle_timeout
            while chunk := await upstream.next_chunk(idle):
                out = relayed(chunk)
                if out:
                    sending = True
                    try:
                        await send({"type": "http.response.body", "body": out, "more_body": True})
                    finally:
                        sending = False
            rest = renamer.flush()
            if rest:
                await send({"type": "http.response.body", "body": rest, "more_body": True})
        except (UpstreamBroken, TimeoutError) as exc:
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
    untouched when no line names a model; a line split across chunks (a "model" key cut in two
    included) waits for its end.

    An engine writes the same ``"model":"<its id>"`` in every event: once learned, that exact
    field is swapped with ``bytes.replace`` while it accounts for every ``"model"`` in the bytes
    (a value cannot hold an unescaped quote, so each such field starts where the expression
    would match); anything else goes through the expression."""

    def __init__(self, client_name: str) -> None:
        self._replacement = model_replacement(client_name)
        self._pending = b""
        self._known: tuple[bytes, bytes] | None = None  # (the engine's field, the client's)

    def _rename(self, data: bytes) -> bytes:
        known = self._known
        if known is not None and data.count(b'"model"') == data.count(known[0]):
            return data.replace(known[0], known[1])
        fields = {m.group(0): m for m in _MODEL_FIELD.finditer(data)}
        if len(fields) == 1:
            ((text, match),) = fields.items()
            self._known = (text, match.expand(self._replacement))
        return _MODEL_FIELD.sub(self._replacement, data)

    def feed(self, chunk: bytes) -> bytes:
        data = self._pending + chunk if self._pending else chunk
        if b'"model"' not in data:
            # The bytes may end in the start of a "model" key cut by the chunk's end: keep it.
            tail = data.rfind(b'"', max(0, len(data) - 6))
            if tail >= 0 and b'"model"'.startswith(data[tail:]):
                self._pending = data[tail:]
                return data[:tail]
            self._pending = b""
            return data
        complete, newline, self._pending = data.rpartition(b"\n")
        if not newline:
            self._pending = data
            return b""
        return self._rename(complete) + b"\n"

    def flush(self) -> bytes:
        rest, self._pending = self._pending, b""
        return self._rename(rest) if rest else b""
