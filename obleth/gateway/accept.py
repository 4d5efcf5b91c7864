"""The gateway's event loop: uvloop, accepting new connections in batches.

libuv (uvloop's core) accepts one connection per pass of the event loop since 1.45 ("don't
accept() connections in a loop", libuv PR 3696): right for an idle server, wrong for a gateway
relaying thousands of streams, where one pass takes milliseconds. Measured here with 1,000
clients connecting at once while streams run (bench/gateway_bench.py, 1,000 streams): the
gateway accepted about 270 connections in the first 0.25 s and the rest at about 100 a second,
so requests already sent sat unread in the kernel for up to 9 s (time to first byte p99 9.3 s,
with the gateway's own request handling under 10 ms and its loop never stalled over 0.25 s).

:class:`GatewayLoop` serves plain-TCP ``create_server`` from its own listening sockets: a
reader on each accepts up to :data:`ACCEPT_BATCH` connections whenever it is readable and hands
each to ``connect_accepted_socket`` (the same transports and protocol uvicorn would get).
TLS and Unix sockets go to uvloop's own server unchanged. uvicorn picks the loop with
``loop="obleth.gateway.accept:new_event_loop"`` (:mod:`obleth.gateway.serve`).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import Callable, Iterable
from typing import Any

import uvloop

log = logging.getLogger("obleth.gateway.service")

# Connections accepted per readiness of a listening socket; the rest wait for the next pass.
ACCEPT_BATCH = 256
# After EMFILE/ENFILE/ENOBUFS/ENOMEM (out of descriptors or memory), accepting pauses this long.
ACCEPT_PAUSE_SECS = 1.0
_EXHAUSTED = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}


class BatchAcceptServer:
    """Listening sockets whose connections are accepted in batches (the parts of
    ``asyncio.Server`` that uvicorn uses: ``sockets``, ``close``, ``wait_closed``)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sockets: Iterable[socket.socket],
        protocol_factory: Callable[[], asyncio.BaseProtocol],
    ) -> None:
        self._loop = loop
        self.sockets = list(sockets)
        self._factory = protocol_factory
        self._serving = False
        self._closed = asyncio.Event()
        self._handovers: set[asyncio.Task[Any]] = set()

    def start(self) -> None:
        for sock in self.sockets:
            sock.setblocking(False)
            self._loop.add_reader(sock.fileno(), self.accept_ready, sock)
        self._serving = True

    def is_serving(self) -> bool:
        return self._serving

    def accept_ready(self, sock: socket.socket) -> int:
        """Accept what is queued on ``sock`` (up to ACCEPT_BATCH); how many were accepted."""
        accepted = 0
        while accepted < ACCEPT_BATCH:
            try:
                conn, _ = sock.accept()
            except (BlockingIOError, InterruptedError):
                break
            except ConnectionAbortedError:  # the client gave up while queued
                continue
            except OSError as exc:
                if exc.errno in _EXHAUSTED:
                    log.warning(
                        "gateway: cannot accept connections (%s); pausing %.0f s",
                        exc.strerror,
                        ACCEPT_PAUSE_SECS,
                    )
                    self._loop.remove_reader(sock.fileno())
                    self._loop.call_later(ACCEPT_PAUSE_SECS, self._resume, sock)
                    break
                raise
            accepted += 1
            conn.setblocking(False)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            task = self._loop.create_task(self._hand_over(conn))
            self._handovers.add(task)
            task.add_done_callback(self._handovers.discard)
        return accepted

    async def _hand_over(self, conn: socket.socket) -> None:
        try:
            await self._loop.connect_accepted_socket(self._factory, conn)
        except OSError:  # the client went away before its transport was made
            conn.close()

    def _resume(self, sock: socket.socket) -> None:
        if self._serving and sock.fileno() != -1:
            self._loop.add_reader(sock.fileno(), self.accept_ready, sock)

    def close(self) -> None:
        """Stop accepting (connections already made go on, as with ``asyncio.Server``)."""
        if not self._serving:
            return
        self._serving = False
        for sock in self.sockets:
            if sock.fileno() != -1:
                self._loop.remove_reader(sock.fileno())
                sock.close()
        self._closed.set()

    async def wait_closed(self) -> None:
        await self._closed.wait()


class GatewayLoop(uvloop.Loop):
    """uvloop, with :class:`BatchAcceptServer` for plain TCP servers."""

    async def create_server(  # type: ignore[override]
        self,
        protocol_factory: Callable[[], asyncio.BaseProtocol],
        host: str | None = None,
        port: int | None = None,
        *,
        sock: socket.socket | None = None,
        backlog: int = 100,
        ssl: Any = None,
        **kwargs: Any,
    ) -> Any:
        if ssl is not None or kwargs.get("family") == socket.AF_UNIX:
            parent: Any = super()
            return await parent.create_server(
                protocol_factory, host, port, sock=sock, backlog=backlog, ssl=ssl, **kwargs
            )
        if sock is not None:
            sockets = [sock]
            sock.listen(backlog)
        else:
            sockets = [
                socket.create_server(
                    (host or "", port or 0),
                    family=socket.AF_INET6 if host and ":" in host else socket.AF_INET,
                    backlog=backlog,
                    reuse_port=bool(kwargs.get("reuse_port")),
                )
            ]
        server = BatchAcceptServer(self, sockets, protocol_factory)
        server.start()
        return server


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvicorn's loop factory for the gateway (``loop="obleth.gateway.accept:new_event_loop"``)."""
    return GatewayLoop()
