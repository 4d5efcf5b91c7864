"""The probe's httpx transport: one connection per request on an already connected socket, no
pool (see the package docstring, "Scale"), with httpcore's errors mapped to httpx's."""

from __future__ import annotations

import asyncio
import importlib.util
import socket
import sys
from collections.abc import AsyncIterator

import httpcore
import httpx

_SOCKET_EXTENSION = "obleth_connected_socket"


def _avoid_repeated_sniffio_lookups() -> None:
    """httpcore imports ``sniffio`` for every lock it sets up; when the package is not installed
    each attempt scans sys.path again (about 0.1 ms, thousands of times per pass). Record it
    once as absent, which is what it is."""
    if "sniffio" not in sys.modules and importlib.util.find_spec("sniffio") is None:
        sys.modules["sniffio"] = None  # type: ignore[assignment]


_avoid_repeated_sniffio_lookups()


class _SocketStream(httpcore.AsyncNetworkStream):
    """A connected plain TCP socket driven by the running asyncio loop (probes are http://)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                return await loop.sock_recv(self._sock, max_bytes)
        except TimeoutError as exc:
            raise httpcore.ReadTimeout("timed out waiting for the answer") from exc
        except OSError as exc:
            raise httpcore.ReadError(str(exc)) from exc

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                await loop.sock_sendall(self._sock, buffer)
        except TimeoutError as exc:
            raise httpcore.WriteTimeout("timed out sending the request") from exc
        except OSError as exc:
            raise httpcore.WriteError(str(exc)) from exc

    async def aclose(self) -> None:
        self._sock.close()

    def get_extra_info(self, info: str) -> object:
        return self._sock if info == "socket" else None


# httpcore exceptions -> the httpx ones (most specific first).
_EXC_MAP: tuple[tuple[type[Exception], type[httpx.HTTPError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.ProtocolError, httpx.ProtocolError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
)


def _mapped(exc: Exception) -> Exception:
    for source, target in _EXC_MAP:
        if isinstance(exc, source):
            return target(str(exc))
    return exc


class _ClosingBody(httpx.AsyncByteStream):
    """A response body that closes its one-shot connection when it is closed."""

    def __init__(self, response: httpcore.Response, connection: httpcore.AsyncConnectionInterface):
        self._response = response
        self._connection = connection

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.aiter_stream():
                yield chunk
        except (httpcore.TimeoutException, httpcore.NetworkError, httpcore.ProtocolError) as exc:
            raise _mapped(exc) from exc

    async def aclose(self) -> None:
        try:
            await self._response.aclose()
        finally:
            await self._connection.aclose()


class _OneShotTransport(httpx.AsyncBaseTransport):
    """One connection per request, closed with its response; no pool.

    The request's ``obleth_connected_socket`` extension, when present, is the already connected
    socket to speak HTTP/1.1 on; otherwise the transport connects itself.
    """

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        extensions = dict(request.extensions)
        sock = extensions.pop(_SOCKET_EXTENSION, None)
        core_request = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path
            ),
            headers=request.headers.raw,
            content=request.stream if isinstance(request.stream, httpx.AsyncByteStream) else b"",
            extensions=extensions,
        )
        connection: httpcore.AsyncConnectionInterface
        if isinstance(sock, socket.socket):
            connection = httpcore.AsyncHTTP11Connection(
                origin=core_request.url.origin, stream=_SocketStream(sock)
            )
        else:
            connection = httpcore.AsyncHTTPConnection(origin=core_request.url.origin)
        try:
            response = await connection.handle_async_request(core_request)
        except Exception as exc:
            await connection.aclose()
            mapped = _mapped(exc)
            if mapped is exc:
                raise
            raise mapped from exc
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_ClosingBody(response, connection),
            extensions=response.extensions,
        )
