"""The gateway's upstream client (obleth/gateway/upstream.py) against real TCP servers.

Each test starts a small asyncio server on 127.0.0.1 that answers the way the case needs (a
kept-alive answer, a stream, an answer without a length, a hang, bad HTTP, a connection closed
while idle) and counts what it saw: connections, requests, and when the client closed. Nothing
is faked on the client's side; the loop is uvloop, as in the gateway process.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import uvloop

from obleth.gateway import upstream as upstream_module
from obleth.gateway.upstream import (
    Origin,
    UpstreamBroken,
    UpstreamClient,
    UpstreamConnectError,
    request_head,
)

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, "Seen"], Awaitable[None]]


@dataclass
class Seen:
    connections: int = 0
    requests: list[bytes] = field(default_factory=list)
    closed_at: list[float] = field(default_factory=list)


async def read_request(reader: asyncio.StreamReader, seen: Seen) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line[15:])
    body = await reader.readexactly(length)
    seen.requests.append(head + body)
    return head + body


def plain(body: bytes, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), extra, body)


CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


async def events(w: asyncio.StreamWriter, count: int | None, every: float) -> None:
    """A stream's head, then ``count`` events (None: without end) ``every`` seconds apart."""
    w.write(CHUNKED_HEAD)
    sent = 0
    while count is None or sent < count:
        w.write(chunk(b"data: tok\n\n"))
        await w.drain()
        await asyncio.sleep(every)
        sent += 1


def run(case: Callable[[UpstreamClient, str, Seen], Awaitable[None]], handler: Handler) -> Seen:
    """Start a server with ``handler``, run ``case`` with a client against it, on uvloop."""
    seen = Seen()

    async def main() -> None:
        async def on_client(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            seen.connections += 1
            try:
                await handler(r, w, seen)
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            finally:
                seen.closed_at.append(time.monotonic())
                w.close()

        server = await asyncio.start_server(on_client, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = UpstreamClient(keepalive_secs=30)
        try:
            async with asyncio.timeout(20):
                await case(client, f"http://127.0.0.1:{port}/v1", seen)
        finally:
            await client.close()
            server.close()

    uvloop.run(main())
    return seen


async def serve_plain_forever(r: asyncio.StreamReader, w: asyncio.StreamWriter, seen: Seen) -> None:
    while True:
        await read_request(r, seen)
        w.write(plain(b'{"ok":true}', b"Content-Type: application/json\r\nX-Engine: vllm\r\n"))
        await w.drain()


def test_a_kept_alive_connection_is_reused_and_the_request_is_what_was_asked() -> None:
    async def case(client: UpstreamClient, base: str, seen: Seen) -> None:
        for n in range(3):
            answer = await client.post(
                base,
                "/chat/completions",
                b'{"n":%d}' % n,
                {"X-Request-ID": "r1"},
                connect_timeout=5,
            )
            assert answer.status == 200
            assert answer.headers["content-type"] == "application/json"
            assert await answer.read(5) == b'{"ok":true}'
            answer.release()
        assert client.opened == 1

    seen = run(case, serve_plain_forever)
    assert seen.connections == 1
    assert len(seen.requests) == 3
    first = seen.requests[0]
    assert first.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
    assert b"\r\nHost: 127.0.0.1:" in first and b"\r\nX-Request-ID: r1\r\n" in first
    assert first.endswith(b'\r\n\r\n{"n":0}')


def test_a_stream_arrives_chunk_by_chunk_not_at_its_end() -> None:
    release_rest = asyncio.Event()

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, seen: Seen) -> None:
        await read_request(r, seen)
        w.write(CHUNKED_HEAD + chunk(b"data: 1\n\n"))
        await w.drain()
        await release_rest.wait()
        w.write(chunk(b"data: 2\n\n") + b"0\r\n\r\n")
        await w.drain()
        await asyncio.sleep(5)

    async def case(client: UpstreamClient, base: str, seen: Seen) -> None:
        answer = await client.post(base, "/completions", b"{}", {}, connect_timeout=5)
        assert await answer.next_chunk(5) == b"data: 1\n\n"  # before the rest was even sent
        release_rest.set()
        assert await answer.next_chunk(5) == b"data: 2\n\n"
        assert await answer.next_chunk(5) == b""
        answer.release()
        assert client.idle_connections() == 1  # a chunked answer read to its end is reusable

    run(case, handler)


def test_an_answer_without_a_length_ends_with_its_connection_which_is_not_reused() -> None:
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, seen: Seen) -> None:
        await read_request(r, seen)
        w.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\npart one, ")
        await w.drain()
        await asyncio.sleep(0.05)
        w.write(b"part two")
        await w.drain()

    async def case(client: UpstreamClient, base: str, seen: Seen) -> None:
        answer = await client.post(base, "/completions", b"{}", {}, connect_timeout=5)
        assert await answer.read(5) == b"part one, part two"
        answer.release()
        assert client.idle_connections() == 0

    run(case, handler)


def test_a_connection_the_endpoint_closed_while_idle_is_retried_on_a_new_one() -> None:
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, seen: Seen) -> None:
        await read_request(r, seen)
        w.write(plain(b"one"))  # then close: keep-alive ended by the server
        await w.drain()

    async def case(client: UpstreamClient, base: str, seen: Seen) -> None:
        answer = await client.post(base, "/x", b"{}", {}, connect_timeout=5)
        assert await answer.read(5) == b"one"
        answer.release()
        await asyncio.sleep(0.2)  # the close has reached the client
        again = await client.post(base, "/x", b"{}", {}, connect_timeout=5)
        assert await again.read(5) == b"one"
        again.release()

    seen = run(case, handler)
    assert seen.connections == 2 and len(seen.requests) == 2


def test_a_reused_connection_that_breaks_before_answering_is_retried_once() -> None:
    """The race the pool cannot see coming: the endpoint closes a kept-alive connection just as
    the request is written. Staged here by a server that reads the second request and closes
    without a byte; the client must send it once more on a new connection."""

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, seen: Seen) -> None:
        await read_request(r, seen)
        w.write(plain(b"first"))
        await w.drain()
        if seen.connections == 1:
            await read_request(r, seen)  # and close without answering
            return
        while True:
            await read_request(r, seen)
            w.write(plain(b"fresh"))
            await w.drain()

    async def case(client: UpstreamClient, base: str, seen: Seen) -> None:
        answer = await client.post(base, "/x", b"{}", {}, connect_timeout=5)
        await answer.read(5)
        answer.release()
        again = await client.post(base, "/x", b"{}", {}, connect_timeout=5)
        assert await again.read(5) in (b"first", b"fresh")
        again.release()
        assert client.opened == 2

    seen = run(case, handler)
    assert seen.connections == 2


def test_a_broken_stream_raises_and_a_fresh_connection_that_breaks_is_not_retried() -> None:
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, seen: Seen) -> None:
        await read_request(r, seen)
        w.write(CHUNKED_HEAD + chunk(b"data: 1\n\n"))
        await w.drain()
        w.transport.abort()

    async def case(client: UpstreamClient, base: str, seen: Seen) -> None:
        answer = await client.post(base, "/x", b"{}", {}, connect_timeout=5)
        assert await answer.next_chunk(5) == b"data: 1\n\n"
        with pytest.raises(UpstreamBroken, match="closed the connection"):
            await answer.next_chunk(5)

    seen = run(case, handler)
    assert seen.connections == 1


async def hang(r: asyncio.StreamReader, w: asyncio.StreamWriter, seen: Seen) -> None:
    await read_request(r, seen)
    await r.read()  # returns when the client closes


def test_a_hung_endpoint_costs_a_cancelled_request_and_its_connection_is_closed() -> None:
    """The gateway's time-to-first-byte timeout is the caller's asyncio.timeout around post();
    the endpoint must see its connection closed at once (it may stop generating)."""
    cancelled_at: list[float] = []

    async def case(client: UpstreamClient, base: str, seen: Seen) -> None:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.3):
                await client.post(base, "/x", b"{}", {}, connect_timeout=5)
        cancelled_at.append(time.monotonic())
        await asyncio.sleep(1.0)
        assert client.idle_connections() == 0

    seen = run(case, hang)
    assert seen.closed_at and seen.closed_at[0] - cancelled_at[0] < 1.0


def test_a_client_cancelled_mid_stream_closes_the_upstream_connection() -> None:
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, seen: Seen) -> None:
        await read_request(r, seen)
        await events(w, None, 0.02)

    cancelled_at: list[float] = []

    async def case(client: UpstreamClient, base: str, seen: Seen) -> None:
        answer = await client.post(base, "/x", b"{}", {}, connect_timeout=5)

        async def relay() -> None:
            while await answer.next_chunk(5):
                pass

        task = asyncio.create_task(relay())
        await asyncio.sleep(0.2)
        task.cancel()
        cancelled_at.append(time.monotonic())
        await asyncio.sleep(1.0)

    seen = run(case, handler)
    assert seen.closed_at and seen.closed_at[0] - cancelled_at[0] < 1.0


def test_a_stream_silent_longer_than_the_idle_timeout_raises_timeout_and_closes() -> None:
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, seen: Seen) -> None:
        await read_request(r, seen)
        await events(w, 5, 0.1)  # busy at first: the timer must not fire while data flows
        await r.read()

    async def case(client: UpstreamClient, base: str, seen: Seen) -> None:
        answer = await client.post(base, "/x", b"{}", {}, connect_timeout=5)
        started = time.monotonic()
        got = 0
        with pytest.raises(TimeoutError, match="sent nothing for 0.3 s"):
            while await answer.next_chunk(0.3):
                got += 1
        assert got >= 4  # 0.5 s of chunks 0.1 s apart passed a 0.3 s idle timeout
        assert 0.6 < time.monotonic() - started < 2.0

    seen = run(case, handler)
    assert seen.closed_at


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (b"SMTP ready\r\n\r\n", "not valid HTTP"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: nope\r\n\r\n", "not valid HTTP"),
        (b"HTTP/1.1 200 OK\r\n" + b"X-Big: " + b"a" * 70_000 + b"\r\n\r\n", "exceed 64 KB"),
        (
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: upgrade\r\n\r\n",
            "switched",
        ),
    ],
    ids=["not-http", "bad-length", "huge-header", "upgrade"],
)
def test_an_endpoint_that_does_not_speak_http_is_a_broken_answer(answer: bytes, words: str) -> None:
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, seen: Seen) -> None:
        await read_request(r, seen)
        w.write(answer)
        await w.drain()
        await asyncio.sleep(2)

    async def case(client: UpstreamClient, base: str, seen: Seen) -> None:
        with pytest.raises(UpstreamBroken, match=words):
            got = await client.post(base, "/x", b"{}", {}, connect_timeout=5)
            await got.read(1)
        assert client.idle_connections() == 0

    run(case, handler)


def test_a_refused_connection_is_a_connect_error() -> None:
    async def case(client: UpstreamClient, base: str, seen: Seen) -> None:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]  # nothing listens here once the socket is closed
        with pytest.raises(UpstreamConnectError):
            await client.post(f"http://127.0.0.1:{port}", "/x", b"{}", {}, connect_timeout=2)

    run(case, serve_plain_forever)


def test_a_slow_reader_pauses_the_endpoint_instead_of_buffering_everything() -> None:
    """A client that reads slower than the engine writes: the connection stops reading once
    the answer holds HIGH_WATER bytes; memory stays bounded and nothing is lost."""
    total = 8 * 1024 * 1024
    piece = b"x" * 65536

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, seen: Seen) -> None:
        await read_request(r, seen)
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % total)
        for _ in range(total // len(piece)):
            w.write(piece)
            await w.drain()

    async def case(client: UpstreamClient, base: str, seen: Seen) -> None:
        answer = await client.post(base, "/x", b"{}", {}, connect_timeout=5)
        conn: Any = answer._conn
        received = 0
        most_buffered = 0
        while True:
            await asyncio.sleep(0.005)
            most_buffered = max(most_buffered, conn.buffered)
            data = await answer.next_chunk(5)
            if not data:
                break
            received += len(data)
        assert received == total
        assert most_buffered < upstream_module.HIGH_WATER + 512 * 1024
        answer.release()

    run(case, handler)


def test_idle_connections_are_closed_after_the_keep_alive_time() -> None:
    async def case(client: UpstreamClient, base: str, seen: Seen) -> None:
        client.keepalive_secs = 0.3
        answer = await client.post(base, "/x", b"{}", {}, connect_timeout=5)
        await answer.read(5)
        answer.release()
        assert client.idle_connections() == 1
        await asyncio.sleep(0.8)
        assert client.idle_connections() == 0

    seen = run(case, serve_plain_forever)
    assert seen.closed_at  # the server saw the client close it


@pytest.mark.parametrize(
    ("base", "words"),
    [
        ("ftp://node1:8000", "http:// or https://"),
        ("http://:8000/v1", "names no host"),
        ("http://node1:99999/v1", "port"),
        ("http://node1:8000/v1\r\nX-Evil: 1", "control character"),
        ("http://node1:8000/v1\x00", "control character"),
        ("http://node1:8000/v 1", "control character"),
        ("http://nöde1:8000/v1", "non-ASCII"),
    ],
)
def test_an_unusable_api_base_is_refused_with_its_reason(base: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        Origin.parse(base)


@pytest.mark.parametrize(
    "headers",
    [
        {"Authorization": "Bearer sk-1\r\nX-Evil: 1"},
        {"Authorization": "Bearer sk-1\nHost: evil"},
        {"X-Request-ID": "a\x00b"},
    ],
)
def test_a_header_that_could_end_its_line_never_reaches_the_wire(headers: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="line break or NUL"):
        request_head(Origin.parse("http://node1:8000/v1"), "/chat/completions", headers, 2)


def test_a_request_head_names_the_endpoint_and_the_length() -> None:
    head = request_head(Origin.parse("https://node1:8443/v1/"), "/embeddings", {"A": "b"}, 17)
    assert head == (
        b"POST /v1/embeddings HTTP/1.1\r\nHost: node1:8443\r\nUser-Agent: obleth-gateway\r\n"
        b"Content-Length: 17\r\nA: b\r\n\r\n"
    )
