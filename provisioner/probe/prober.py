"""Probing one port: resolve the host (once per pass), connect a plain non-blocking socket, ask
for the health path over HTTP on it and, when the answer is ready, have the server prove its
identity (``provisioner.probe.proof``)."""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import os
import socket

import httpx

from provisioner.probe.answers import body_says_loading, health_url
from provisioner.probe.proof import _prove
from provisioner.probe.targets import IdentityProof, _PortResult
from provisioner.probe.transport import _SOCKET_EXTENSION

_MAX_BODY_BYTES = 64 * 1024  # a health answer is tiny; never read more than this
# A whole answer (head and body) gets at most this many timeouts: a server that trickles its
# body a byte at a time cannot hold a probe (and the pass) for hours.
_WHOLE_ANSWER_TIMEOUTS = 2
_Address = tuple[socket.AddressFamily, str, int]  # family, IP, IPv6 scope id


def _os_reason(exc: BaseException) -> str:
    """A short operator-facing reason for a failed connection."""
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, socket.gaierror):
        return "name does not resolve"
    if isinstance(exc, OSError) and exc.errno is not None:
        if exc.errno == errno.ECONNREFUSED:
            return "connection refused"
        if exc.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH):
            return "network unreachable"
        if exc.errno == errno.EMFILE:
            return "too many open files"
        return f"cannot connect ({os.strerror(exc.errno).lower()})"
    return f"cannot connect ({type(exc).__name__})"


class _Prober:
    def __init__(self, client: httpx.AsyncClient, limit: int, timeout: float) -> None:
        self.client = client
        self.semaphore = asyncio.Semaphore(limit)
        self.timeout = timeout
        self.addresses: dict[str, asyncio.Future[list[_Address] | str]] = {}

    async def _lookup(self, host: str) -> list[_Address] | str:
        """Socket addresses for ``host`` (without port), or the reason there are none."""
        try:
            ip = ipaddress.ip_address(host.split("%", 1)[0])
        except ValueError:
            pass
        else:
            if ip.version == 4:
                return [(socket.AF_INET, host, 0)]
            return [(socket.AF_INET6, host, 0)]
        if not host:
            return "no host"
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.timeout):
                infos = await loop.getaddrinfo(host, 0, type=socket.SOCK_STREAM)
        except TimeoutError:
            return "name lookup timed out"
        except OSError as exc:
            return _os_reason(exc)
        found: list[_Address] = []
        for family, _type, _proto, _name, sockaddr in infos:
            if family == socket.AF_INET:
                found.append((family, str(sockaddr[0]), 0))
            elif family == socket.AF_INET6 and len(sockaddr) == 4:
                found.append((family, str(sockaddr[0]), int(sockaddr[3])))
        found.sort(key=lambda item: item[0] != socket.AF_INET)  # IPv4 first
        return found or "name does not resolve"

    async def addresses_for(self, host: str) -> list[_Address] | str:
        future = self.addresses.get(host)
        if future is None:
            future = asyncio.ensure_future(self._lookup(host))
            self.addresses[host] = future
        return await asyncio.shield(future)

    async def connect(self, host: str, port: int) -> socket.socket | str:
        addresses = await self.addresses_for(host)
        if isinstance(addresses, str):
            return addresses
        loop = asyncio.get_running_loop()
        reason = "no address"
        for family, ip, scope in addresses:
            address = (ip, port) if family == socket.AF_INET else (ip, port, 0, scope)
            try:
                sock = socket.socket(family, socket.SOCK_STREAM)
            except OSError as exc:
                return _os_reason(exc)
            try:
                sock.setblocking(False)
                async with asyncio.timeout(self.timeout):
                    await loop.sock_connect(sock, address)
            except TimeoutError:
                sock.close()
                reason = "timed out"
                continue
            except OSError as exc:
                sock.close()
                reason = _os_reason(exc)
                continue
            except BaseException:
                sock.close()
                raise
            return sock
        return reason

    async def probe_port(
        self, host: str, port: int, health_path: str, identity: IdentityProof | None = None
    ) -> _PortResult:
        async with self.semaphore:
            sock = await self.connect(host, port)
            if isinstance(sock, str):
                return _PortResult(False, sock)
            result = await self._ask(sock, health_url(host, port, health_path))
            if not result.ready or identity is None:
                return result
            return await _prove(self._get, host, port, identity)

    async def _get(
        self, host: str, port: int, path: str, headers: dict[str, str] | None = None
    ) -> tuple[int, bytes] | str:
        """(status, body) of one GET on a connection of its own, or why there is no answer."""
        sock = await self.connect(host, port)
        if isinstance(sock, str):
            return sock
        try:
            async with (
                asyncio.timeout(self.timeout * _WHOLE_ANSWER_TIMEOUTS),
                self.client.stream(
                    "GET",
                    health_url(host, port, path),
                    headers=headers,
                    extensions={_SOCKET_EXTENSION: sock},
                ) as response,
            ):
                body = b""
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) >= _MAX_BODY_BYTES:
                        break
                return response.status_code, body
        except (httpx.TimeoutException, TimeoutError):
            return "timed out"
        except httpx.HTTPError as exc:
            return f"no HTTP answer ({type(exc).__name__})"
        except OSError as exc:
            return _os_reason(exc)
        except Exception as exc:  # noqa: BLE001 - one bad target, not the pass
            return f"probe failed ({type(exc).__name__})"
        finally:
            sock.close()

    async def _ask(self, sock: socket.socket, url: str) -> _PortResult:
        try:
            async with (
                asyncio.timeout(self.timeout * _WHOLE_ANSWER_TIMEOUTS),
                self.client.stream("GET", url, extensions={_SOCKET_EXTENSION: sock}) as response,
            ):
                body = b""
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) >= _MAX_BODY_BYTES:
                        break
                status = response.status_code
                content_type = response.headers.get("content-type", "")
        except (httpx.TimeoutException, TimeoutError):
            return _PortResult(False, "timed out")
        except httpx.HTTPError as exc:  # protocol errors, connection dropped mid-answer
            return _PortResult(False, f"no HTTP answer ({type(exc).__name__})")
        except OSError as exc:
            return _PortResult(False, _os_reason(exc))
        except Exception as exc:  # noqa: BLE001 - e.g. InvalidURL: one bad target, not the pass
            return _PortResult(False, f"probe failed ({type(exc).__name__})")
        finally:
            sock.close()  # no-op when the transport already closed it
        loading = body_says_loading(body, content_type)
        if loading:
            return _PortResult(False, f"loading (HTTP {status}, {loading})")
        if 200 <= status < 300:
            return _PortResult(True, "")
        return _PortResult(False, f"HTTP {status}")
