"""The gateway's HTTP/1.1 client to the endpoints: kept-alive connections pooled per endpoint.

One :class:`UpstreamClient` per gateway worker process. A request takes an idle connection to
the endpoint's host and port (or opens one within the connect timeout), writes the request head
and body in one write, and returns an :class:`UpstreamResponse` once the status line and headers
have arrived; its body is read whole (:meth:`UpstreamResponse.read`) or chunk by chunk as it
comes (:meth:`UpstreamResponse.next_chunk`), each with a timeout on silence. A response read to
its end on a connection the endpoint keeps alive goes back to the pool; anything else (cancelled,
timed out, broken, read half-way) closes its connection at once, so an endpoint counts every
client that went away.

Why not aiohttp, which the gateway used before: with 256 concurrent 2 s streams relayed by one
worker, its request path (request objects, header multidicts, tracing hooks, a timer per read,
several awaits before the request is written) made new requests wait behind the chunks of the
streams already running: time to the upstream's headers p99 45-53 ms in a process doing nothing
else, against 17.5 ms for a raw asyncio client on the same load (bench/README.md, gateway
section). Here the request path has no await between taking a pooled connection and writing
the request, the response is parsed by httptools (llhttp, the parser uvicorn's server side
uses), a body chunk costs one parser callback (handed straight to the client's socket when the
relay asks for that, :meth:`UpstreamResponse.deliver_to`; else one future), and a response's
idle timeout is one timer re-armed only when it fires.

The request's bytes, the endpoint's address and the errors are in
:mod:`obleth.gateway.upstream_wire` (re-exported here).
"""

from __future__ import annotations

import asyncio
import collections
import ssl
from collections.abc import Callable
from typing import cast

import httptools

from obleth.gateway.upstream_wire import (
    HIGH_WATER,
    MAX_HEAD_BYTES,
    MAX_IDLE_PER_ORIGIN,
    Origin,
    UpstreamBroken,
    UpstreamConnectError,
    UpstreamError,
    UpstreamRequest,
    request_head,
)

__all__ = [
    "HIGH_WATER",
    "MAX_HEAD_BYTES",
    "MAX_IDLE_PER_ORIGIN",
    "Origin",
    "UpstreamBroken",
    "UpstreamClient",
    "UpstreamConnectError",
    "UpstreamError",
    "UpstreamRequest",
    "UpstreamResponse",
    "request_head",
]


class _Connection(asyncio.Protocol):
    """One TCP (or TLS) connection to an endpoint, and the exchange running on it."""

    def __init__(self, client: UpstreamClient, origin: Origin) -> None:
        self.client = client
        self.origin = origin
        self.loop = client.loop
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.idle_since = 0.0
        self._drain: asyncio.Future[None] | None = None
        self._write_paused = False
        self._begin_exchange()

    def _begin_exchange(self) -> None:
        self.head: asyncio.Future[None] | None = None
        self.status = 0
        self.headers: dict[str, str] = {}
        self.head_bytes = 0
        self.keep_alive = False
        self.delimited = True  # the body's end is known (Content-Length or chunked)
        self.complete = False
        self.error: BaseException | None = None
        self.got_bytes = False
        self.chunks: collections.deque[bytes] = collections.deque()
        self.buffered = 0
        self.paused = False
        self.waiter: asyncio.Future[None] | None = None
        # Takes body bytes as they arrive (returns False to leave them to next_chunk)
        self.sink: Callable[[bytes], bool] | None = None
        self.last_data = 0.0
        self.idle_timeout = 0.0
        self.timer: asyncio.TimerHandle | None = None

    # ------------------------------------------------------------------ transport callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        if self.head is None or self.complete or self.error is not None:
            self.close()  # bytes nobody asked for: the connection cannot be trusted again
            return
        self.got_bytes = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(UpstreamBroken("the endpoint switched protocols"))
        except httptools.HttpParserCallbackError as exc:
            cause = exc.__context__
            self._fail(cause if isinstance(cause, UpstreamBroken) else UpstreamBroken(str(exc)))
        except httptools.HttpParserError as exc:
            self._fail(UpstreamBroken(f"the endpoint's answer is not valid HTTP ({exc})"))

    def eof_received(self) -> bool:
        return False  # close our side too; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.client._forget(self)
        if self._drain is not None and not self._drain.done():
            self._drain.set_result(None)
        if self.head is None or self.complete or self.error is not None:
            return
        if self.status and not self.delimited:
            self.on_message_complete()  # a body without a length ends when the connection does
            return
        detail = f" ({type(exc).__name__})" if exc else ""
        self._fail(UpstreamBroken(f"the endpoint closed the connection{detail}"))

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._drain is not None and not self._drain.done():
            self._drain.set_result(None)

    # ------------------------------------------------------------------ parser callbacks

    def on_header(self, name: bytes, value: bytes) -> None:
        self.head_bytes += len(name) + len(value) + 4
        if self.head_bytes > MAX_HEAD_BYTES:
            raise UpstreamBroken(f"the endpoint's headers exceed {MAX_HEAD_BYTES // 1024} KB")
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if 100 <= status < 200:  # an interim answer (100 Continue): the real one follows
            self.headers = {}
            return
        self.status = status
        headers = self.headers
        self.delimited = (
            "content-length" in headers
            or "chunked" in headers.get("transfer-encoding", "").lower()
            or status in (204, 304)
        )
        self.last_data = self.loop.time()
        if self.head is not None and not self.head.done():
            self.head.set_result(None)

    def on_body(self, body: bytes) -> None:
        sink = self.sink
        if sink is not None and not self.chunks:  # nothing waits in order before these bytes
            self.last_data = self.loop.time()
            try:
                if sink(body):
                    return
            except Exception as exc:  # the sink's bug: the relay's next_chunk raises it
                self._fail(exc)
                return
        self.chunks.append(body)
        self.buffered += len(body)
        self.last_data = self.loop.time()
        if self.buffered > HIGH_WATER and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if not self.status:
            return  # the end of an interim answer
        self.complete = True
        self.keep_alive = self.delimited and self.parser.should_keep_alive()
        self._wake()

    # ------------------------------------------------------------------ the exchange

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _fail(self, error: BaseException) -> None:
        if self.error is None:
            self.error = error
        if self.head is not None and not self.head.done():
            self.head.set_exception(error)
        self._wake()
        self.close()

    def close(self) -> None:
        self.closed = True
        if self.head is not None and not self.head.done():
            self.head.cancel()  # nobody will read it: no "exception never retrieved"
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.transport is not None and not self.transport.is_closing():
            self.transport.abort()

    async def send(self, data: bytes) -> None:
        assert self.transport is not None
        self.head = self.loop.create_future()
        self.transport.write(data)
        if self._write_paused and not self.closed:  # a large body: wait until it is sent
            self._drain = self.loop.create_future()
            await self._drain
            self._drain = None

    def _arm(self, timeout: float) -> None:
        self.idle_timeout = timeout
        if timeout > 0 and self.timer is None:
            self.timer = self.loop.call_at(self.last_data + timeout, self._check_silence)

    def _check_silence(self) -> None:
        self.timer = None
        if self.complete or self.error is not None:
            return
        due = self.last_data + self.idle_timeout
        if self.waiter is None or self.paused or self.loop.time() < due:
            # data came since the timer was set, or nobody waits for more: look again later
            self.timer = self.loop.call_at(max(due, self.loop.time() + 0.05), self._check_silence)
            return
        self._fail(TimeoutError(f"the endpoint sent nothing for {self.idle_timeout:g} s"))

    async def next_chunk(self, idle_timeout: float) -> bytes:
        while True:
            if self.chunks:
                if len(self.chunks) == 1:
                    data = self.chunks.popleft()
                else:
                    data = b"".join(self.chunks)
                    self.chunks.clear()
                self.buffered = 0
                if self.paused and self.transport is not None:
                    self.paused = False
                    self.transport.resume_reading()
                return data
            if self.error is not None:
                raise self.error
            if self.complete:
                return b""
            self._arm(idle_timeout)
            self.waiter = self.loop.create_future()
            try:
                await self.waiter
            finally:
                self.waiter = None

    def release(self) -> None:
        """The exchange is over: back to the pool if it ended cleanly and may be reused."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        reusable = self.complete and self.keep_alive and not self.chunks and not self.closed
        if not reusable:
            self.close()
            return
        self._begin_exchange()
        self.client._put_idle(self)


class UpstreamResponse:
    """An endpoint's answer whose status line and headers have arrived."""

    __slots__ = ("_conn", "headers", "status")

    def __init__(self, conn: _Connection) -> None:
        self._conn: _Connection | None = conn
        self.status = conn.status
        self.headers = conn.headers

    async def next_chunk(self, idle_timeout: float) -> bytes:
        """The body bytes that arrived since the last call (waiting for some), b"" at the end.
        TimeoutError after ``idle_timeout`` seconds without a byte; UpstreamBroken when the
        connection breaks before the end."""
        conn = self._conn
        if conn is None:
            return b""
        try:
            return await conn.next_chunk(idle_timeout)
        except BaseException:
            self.release()
            raise

    def deliver_to(self, sink: Callable[[bytes], bool] | None) -> None:
        """From now on, body bytes go to ``sink`` from the connection's callback as they arrive
        (none waits for the relay's task); bytes it declines (it returns False: the client is
        not reading) wait for :meth:`next_chunk`, and until they are taken every later byte
        does too, so nothing is reordered. :meth:`next_chunk` still reports the end (b""), a
        broken connection and silence."""
        if self._conn is not None:
            self._conn.sink = sink

    async def read(self, idle_timeout: float) -> bytes:
        """The whole body (it is bounded by what the endpoint sends)."""
        parts = []
        while chunk := await self.next_chunk(idle_timeout):
            parts.append(chunk)
        return b"".join(parts)

    def release(self) -> None:
        """Done with the answer: its connection goes back to the pool or is closed."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.release()


class UpstreamClient:
    """Kept-alive HTTP/1.1 connections to the endpoints, pooled by host and port."""

    def __init__(self, *, keepalive_secs: float = 30.0) -> None:
        self.loop = asyncio.get_running_loop()
        self.keepalive_secs = keepalive_secs
        self._idle: dict[Origin, list[_Connection]] = {}
        self._origins: dict[str, Origin] = {}
        self._sweeper: asyncio.TimerHandle | None = None
        self._tls: ssl.SSLContext | None = None
        self.opened = 0  # connections opened since start (tests count reuse by it)

    def origin(self, base: str) -> Origin:
        origin = self._origins.get(base)
        if origin is None:
            origin = Origin.parse(base)
            if len(self._origins) > 10_000:
                self._origins.clear()
            self._origins[base] = origin
        return origin

    def prepare(
        self, base: str, path: str, body: bytes, headers: dict[str, str]
    ) -> UpstreamRequest:
        """The bytes of a POST to ``base`` + ``path``. ValueError, naming the problem, for an
        api_base or a header value that cannot be sent (the one check, where they land)."""
        origin = self.origin(base)
        return UpstreamRequest(origin, request_head(origin, path, headers, len(body)) + body)

    async def post(
        self,
        base: str,
        path: str,
        body: bytes,
        headers: dict[str, str],
        *,
        connect_timeout: float,
    ) -> UpstreamResponse:
        """:meth:`prepare`, then :meth:`send`."""
        request = self.prepare(base, path, body, headers)
        return await self.send(request, connect_timeout=connect_timeout)

    async def send(self, request: UpstreamRequest, *, connect_timeout: float) -> UpstreamResponse:
        """Send the request; return once the answer's headers are in. Cancelling this (the
        caller's time-to-first-byte timeout, a client that went away) closes the connection.

        A kept-alive connection the endpoint closed just before our request reached it (nothing
        came back) is retried once on a new connection: the endpoint saw no request."""
        origin = request.origin
        for _ in range(2):
            conn = self._take_idle(origin)
            reused = conn is not None
            if conn is None:
                conn = await self._connect(origin, connect_timeout)
            try:
                await conn.send(request.data)
                assert conn.head is not None
                await conn.head
            except UpstreamBroken:
                if reused and not conn.got_bytes:
                    continue
                raise
            except BaseException:
                conn.close()
                raise
            return UpstreamResponse(conn)
        raise UpstreamBroken("the endpoint closed two connections before answering")

    async def _connect(self, origin: Origin, timeout: float) -> _Connection:
        ssl_context: ssl.SSLContext | None = None
        if origin.tls:
            if self._tls is None:
                self._tls = ssl.create_default_context()
            ssl_context = self._tls
        try:
            async with asyncio.timeout(timeout if timeout > 0 else None):
                _, conn = await self.loop.create_connection(
                    lambda: _Connection(self, origin),
                    origin.host,
                    origin.port,
                    ssl=ssl_context,
                    server_hostname=origin.host if ssl_context else None,
                )
        except TimeoutError:
            raise UpstreamConnectError(f"no connection within {timeout:g} s") from None
        except (OSError, ssl.SSLError) as exc:
            raise UpstreamConnectError(f"{type(exc).__name__}: {exc.strerror or exc}") from None
        self.opened += 1
        return conn

    def _take_idle(self, origin: Origin) -> _Connection | None:
        idle = self._idle.get(origin)
        while idle:
            conn = idle.pop()
            if not conn.closed and conn.transport is not None and not conn.transport.is_closing():
                return conn
        return None

    def _put_idle(self, conn: _Connection) -> None:
        idle = self._idle.setdefault(conn.origin, [])
        if len(idle) >= MAX_IDLE_PER_ORIGIN:
            conn.close()
            return
        conn.idle_since = self.loop.time()
        idle.append(conn)
        if self._sweeper is None:
            self._sweeper = self.loop.call_later(self.keepalive_secs, self._sweep)

    def _forget(self, conn: _Connection) -> None:
        idle = self._idle.get(conn.origin)
        if idle and conn in idle:
            idle.remove(conn)

    def _sweep(self) -> None:
        """Close connections idle longer than the keep-alive time (oldest first in each list)."""
        self._sweeper = None
        cutoff = self.loop.time() - self.keepalive_secs
        for origin, idle in list(self._idle.items()):
            stale = 0
            while stale < len(idle) and idle[stale].idle_since <= cutoff:
                stale += 1
            for conn in idle[:stale]:
                conn.close()
            del idle[:stale]
            if not idle:
                del self._idle[origin]
        if self._idle:
            self._sweeper = self.loop.call_later(self.keepalive_secs / 2, self._sweep)

    def idle_connections(self) -> int:
        return sum(len(idle) for idle in self._idle.values())

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for idle in self._idle.values():
            for conn in list(idle):
                conn.close()
        self._idle.clear()
