"""The test engine's HTTP/1.x plumbing on asyncio streams: reading one request (head,
``Content-Length`` or chunked body, ``Expect: 100-continue``), the :class:`Reply` to write,
and the response head.

Part of the test engine (``server.py``): standard library only."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

if __package__:  # imported as provisioner.testengine.<module>
    from .engine_config import (
        MAX_BODY_BYTES,
    )
else:  # run as a script (python3 server.py): the modules sit side by side
    from engine_config import (  # type: ignore[import-not-found,no-redef]
        MAX_BODY_BYTES,
    )


@dataclass
class Request:
    method: str
    path: str
    version: str
    headers: dict[str, str]
    body: bytes
    port: int


@dataclass
class Reply:
    status: int
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    events: list[bytes] | None = None  # server-sent events, for streaming answers
    after: Callable[[], None] | None = None  # run once the answer is written


def json_reply(status: int, payload: Any, headers: dict[str, str] | None = None) -> Reply:
    return Reply(status, json.dumps(payload).encode(), headers=headers or {})


class ProtocolError(Exception):
    """The client sent something that is not HTTP/1.x we can read; answer 400 and close."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


async def read_request(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, port: int
) -> Request | None:
    """Read one request; None when the client closed the connection between requests."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if exc.partial.strip():
            raise ProtocolError("incomplete request head") from None
        return None
    except asyncio.LimitOverrunError:
        raise ProtocolError("request head too large", 431) from None
    lines = head.decode("latin-1").lstrip("\r\n").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise ProtocolError("malformed request line")
    method, target, version = parts
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise ProtocolError("malformed header line")
        headers[name.strip().lower()] = value.strip()
    if headers.get("expect", "").lower() == "100-continue":
        # Clients such as curl wait for this before they send a large body.
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        await writer.drain()
    body = b""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = await _read_chunked(reader)
    elif "content-length" in headers:
        try:
            length = int(headers["content-length"])
        except ValueError:
            raise ProtocolError("Content-Length is not a number") from None
        if length < 0:
            raise ProtocolError("Content-Length is negative")
        if length > MAX_BODY_BYTES:
            raise ProtocolError("request body too large", 413)
        body = await reader.readexactly(length)
    path = target.split("?", 1)[0].split("#", 1)[0] or "/"
    return Request(method.upper(), path, version, headers, body, port)


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    body = bytearray()
    while True:
        size_line = await reader.readuntil(b"\r\n")
        try:
            size = int(size_line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise ProtocolError("malformed chunk size") from None
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":
                pass  # trailers, ignored
            return bytes(body)
        if len(body) + size > MAX_BODY_BYTES:
            raise ProtocolError("request body too large", 413)
        body += await reader.readexactly(size)
        await reader.readexactly(2)


def _head(status: int, headers: Mapping[str, str]) -> bytes:
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Status"
    lines = [f"HTTP/1.1 {status} {phrase}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
