"""The gateway's loop accepts queued connections in batches (obleth/gateway/accept.py).

Real listening sockets, real client connections queued in the kernel before the loop looks,
real transports and protocols made by uvloop. Only the descriptor exhaustion case hands the
server a socket stand-in whose accept() raises EMFILE (running this process out of
descriptors would break the test run itself).
"""

from __future__ import annotations

import asyncio
import errno
import socket
from typing import Any

import pytest

from obleth.gateway import accept
from obleth.gateway.accept import ACCEPT_BATCH, BatchAcceptServer, GatewayLoop


class Echo(asyncio.Protocol):
    made = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        Echo.made += 1
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)  # type: ignore[attr-defined]


def run(case: Any) -> None:
    loop = accept.new_event_loop()
    assert isinstance(loop, GatewayLoop)
    try:
        loop.run_until_complete(asyncio.wait_for(case(), 20))
    finally:
        loop.close()


def test_connections_queued_in_the_kernel_are_accepted_a_batch_per_readiness() -> None:
    """libuv alone accepts one per pass of the loop; here one readiness takes up to a batch."""
    queued = ACCEPT_BATCH + 44

    async def case() -> None:
        loop = asyncio.get_running_loop()
        Echo.made = 0
        server = await loop.create_server(Echo, "127.0.0.1", 0, backlog=1024)
        assert isinstance(server, BatchAcceptServer)
        listener = server.sockets[0]
        loop.remove_reader(listener.fileno())  # the test calls it by hand, once per step
        port = listener.getsockname()[1]
        clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(queued)]
        try:
            assert server.accept_ready(listener) == ACCEPT_BATCH
            assert server.accept_ready(listener) == queued - ACCEPT_BATCH
            assert server.accept_ready(listener) == 0
            for _ in range(100):
                await asyncio.sleep(0.01)
                if Echo.made == queued:
                    break
            assert Echo.made == queued  # every one became a transport with its protocol
            clients[-1].sendall(b"ping")
            clients[-1].settimeout(5)
            assert await loop.run_in_executor(None, clients[-1].recv, 4) == b"ping"
        finally:
            for c in clients:
                c.close()
            server.close()
            await server.wait_closed()

    run(case)


def test_a_closed_server_accepts_nothing_more_and_frees_its_port() -> None:
    async def case() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(Echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=2)

    run(case)


def test_out_of_descriptors_pauses_accepting_instead_of_spinning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def case() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(Echo, "127.0.0.1", 0)
        real = server.sockets[0]
        calls = []

        class Exhausted:
            def fileno(self) -> int:
                return real.fileno()

            def accept(self) -> Any:
                calls.append(1)
                if len(calls) == 1:  # out of descriptors once, then the kernel recovers
                    raise OSError(errno.EMFILE, "Too many open files")
                return real.accept()

        monkeypatch.setattr(accept, "ACCEPT_PAUSE_SECS", 0.2)
        loop.remove_reader(real.fileno())
        client = socket.create_connection(("127.0.0.1", real.getsockname()[1]))
        assert server.accept_ready(Exhausted()) == 0  # type: ignore[arg-type]
        assert len(calls) == 1  # one try, then a pause; not a busy loop
        await asyncio.sleep(0.1)
        assert len(calls) == 1  # still paused
        await asyncio.sleep(0.4)  # the pause ended: the socket is read again, the client served
        client.sendall(b"x")
        client.settimeout(5)
        assert await loop.run_in_executor(None, client.recv, 1) == b"x"
        client.close()
        server.close()

    run(case)


def test_tls_servers_are_left_to_uvloop() -> None:
    import ssl

    async def case() -> None:
        loop = asyncio.get_running_loop()
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server = await loop.create_server(Echo, "127.0.0.1", 0, ssl=context)
        assert not isinstance(server, BatchAcceptServer)
        server.close()

    run(case)
