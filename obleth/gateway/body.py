"""Reading a request's JSON body within the gateway's limits.

A ``Content-Length`` over ``OBLETH_GATEWAY_MAX_BODY_BYTES`` is refused with 413 before a byte
of the body is read; the body must arrive within ``OBLETH_GATEWAY_BODY_TIMEOUT_SECS`` and stay
under the limit; JSON with more than ``OBLETH_GATEWAY_MAX_JSON_CONTAINERS`` objects/arrays is
refused before it is parsed; a big body is parsed in a thread. :class:`BodyReader` is a base of
:class:`obleth.gateway.service.GatewayService`, whose ``config`` it reads.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from django.http import HttpResponse

from obleth.gateway.answers import Receive, Scope, _Answer, _header
from obleth.gateway.config import GatewayConfig
from obleth.gateway.proxy import openai_error

OFFLOAD_PARSE_BYTES = 256 * 1024  # bigger bodies are parsed in a thread, off the event loop


class BodyReader:
    """The request-body half of :class:`obleth.gateway.service.GatewayService`."""

    config: GatewayConfig

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


def _too_large(limit: int) -> HttpResponse:
    return openai_error(
        413,
        f"The request body is larger than {limit} bytes (OBLETH_GATEWAY_MAX_BODY_BYTES).",
        code="body_too_large",
    )
