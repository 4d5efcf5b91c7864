"""The small pieces every part of the gateway's request handling shares.

The ASGI type aliases; :class:`BodyWriter`, the server's direct path for streamed bytes;
:class:`_Answer`, raised from deep inside a request to send a finished
answer instead of relaying; :class:`_Outcome`, what the request's one log line and its metrics
say; :func:`_header`, a request header from the ASGI scope; :func:`send_django`, a finished
Django response (the OpenAI error bodies of :mod:`obleth.gateway.proxy`) sent over ASGI.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any, Protocol

from django.http import HttpResponse

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


# The ASGI scope extension under which the gateway's own HTTP server (obleth.gateway.serve)
# offers a :class:`BodyWriter` for the answer to this request.
BODY_WRITER = "obleth.body_writer"


class BodyWriter(Protocol):
    """Writes a streamed answer's body bytes to the client at once, from a transport callback,
    without a trip through the ASGI ``send`` coroutine and the request's task."""

    def ready(self) -> bool:
        """True when :meth:`write` may be called now: the answer's head went out chunked, it is
        not finished, and the client is reading (not flow-controlled)."""
        ...

    def write(self, data: bytes) -> None: ...


def body_writer(scope: Scope) -> BodyWriter | None:
    extensions = scope.get("extensions") or {}
    writer: BodyWriter | None = extensions.get(BODY_WRITER)
    return writer


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
