"""The provisioner's own health probe: which port of a replica's window is ready to serve.

DB-free on purpose (it runs inside asyncio). ``probe_all`` probes every port of every window
concurrently, bounded by a semaphore, through ONE ``httpx.AsyncClient`` (no redirects, no proxies
from the environment). It is safe to call from synchronous code: it runs its own event loop, in a
worker thread when the calling thread already runs one.

A port is READY only when ``GET http://<host>:<port><health_path>`` answers 2xx and the body does
not say the server is still loading (``{"status": "loading"}`` and friends, or a text body with
"loading model"). llama.cpp's 503 "Loading model" is not ready either (it is not 2xx). The lowest
ready port of a window wins.

Identity. A ready health answer only says that *some* server listens there; on a shared node it
may be another user's. A target with an ``identity`` is promoted only when the server also
proves it is this replica's:

* ``check="key"``: ``GET <identity path>`` (``/v1/models``; llama.cpp: ``/props``) WITHOUT the
  replica's key is refused (401/403), with a wrong key is refused too, and WITH
  ``Authorization: Bearer <key>`` succeeds (2xx). A server that answers without the key (or to
  any key) accepts anything: not ours.
* ``check="model-name"`` (engines that cannot check a key, e.g. Ollama): ``GET /v1/models``
  lists the expected model id. Weaker; the replica is shown as "identity not proven".

The key is sent only to ports whose health answer was ready, and never appears in a detail.

Scale: a pass may probe thousands of windows of 8 ports, most of them closed. Each port is first
connected with a plain non-blocking socket (a refused port costs a few microseconds and no HTTP
machinery); only ports that accept the connection are asked over HTTP, on that same socket, by the
shared httpx client. Probes never reuse connections (each port is its own origin), so the client's
transport opens none itself and keeps no pool (httpcore's pool scans every connection on every
request, which is quadratic at this scale).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import errno
import importlib.util
import ipaddress
import json
import os
import resource
import secrets
import socket
import sys
from collections.abc import AsyncIterator, Hashable, Iterable, Sequence
from typing import Generic, TypeVar

import httpcore
import httpx

__all__ = [
    "LOADING_WORDS",
    "IdentityProof",
    "ProbeOutcome",
    "ProbeTarget",
    "body_says_loading",
    "health_url",
    "probe_all",
    "probe_one",
]

K = TypeVar("K", bound=Hashable)

# Values of "status"/"state" in a JSON health body that mean "not ready yet" (case-insensitive).
LOADING_WORDS = frozenset({"loading", "loading model", "starting", "initializing", "warming up"})
_MAX_BODY_BYTES = 64 * 1024  # a health answer is tiny; never read more than this
# A whole answer (head and body) gets at most this many timeouts: a server that trickles its
# body a byte at a time cannot hold a probe (and the pass) for hours.
_WHOLE_ANSWER_TIMEOUTS = 2
_DECOYS = 2  # wrong keys sent with the replica key (in a random order) when proving identity
_FD_RESERVE = 64  # file descriptors left for everything else in the process
_SOCKET_EXTENSION = "obleth_connected_socket"
_Address = tuple[socket.AddressFamily, str, int]  # family, IP, IPv6 scope id


@dataclasses.dataclass(frozen=True, slots=True)
class IdentityProof:
    """How a ready port proves it is this replica's server (see the module docstring)."""

    check: str  # "key" or "model-name"
    api_key: str = dataclasses.field(default="", repr=False)
    path: str = "/v1/models"
    model_name: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class ProbeTarget(Generic[K]):
    """One replica's port window: ports ``port_base .. port_base + port_span - 1`` on ``host``.

    ``identity`` None: health only (replicas made before identity checks)."""

    key: K
    host: str
    port_base: int
    port_span: int
    health_path: str
    identity: IdentityProof | None = None

    def ports(self) -> list[int]:
        """The window's valid TCP ports (ports <= 0 or > 65535 are skipped)."""
        end = self.port_base + max(self.port_span, 0)
        return [p for p in range(self.port_base, end) if 0 < p < 65536]


@dataclasses.dataclass(frozen=True, slots=True)
class ProbeOutcome:
    """``ready_port``: the lowest ready port, or None. ``detail``: why (for logs and messages)."""

    ready_port: int | None
    detail: str

    @property
    def ready(self) -> bool:
        return self.ready_port is not None


@dataclasses.dataclass(frozen=True, slots=True)
class _PortResult:
    ready: bool
    reason: str  # "" when ready
    proof: str = ""  # "key" / "model-name" when an identity was checked


# ------------------------------------------------------------------------------------ helpers


def _bare_host(host: str) -> str:
    host = host.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host


def url_host(host: str) -> str:
    """The host as it goes in a URL: IPv6 literals bracketed (zone id escaped)."""
    host = _bare_host(host)
    if ":" in host:
        return "[" + host.replace("%", "%25") + "]"
    return host


def health_url(host: str, port: int, health_path: str) -> str:
    """``http://<host>:<port><health_path>`` with IPv6 bracketed and a leading ``/`` ensured."""
    path = health_path.strip() or "/"
    if not path.startswith("/"):
        path = "/" + path
    return f"http://{url_host(host)}:{port}{path}"


def body_says_loading(body: bytes, content_type: str = "") -> str | None:
    """What the body says if it says the server is still loading; None when it does not."""
    text = body.decode("utf-8", errors="replace").strip()
    if not text:
        return None
    if text[:1] == "{" or "json" in content_type.lower():
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if isinstance(data, dict):
            for field in ("status", "state"):
                value = data.get(field)
                if isinstance(value, str) and value.strip().lower() in LOADING_WORDS:
                    return f"{field} {value.strip()!r}"
    if "loading model" in text.lower():
        return "'loading model'"
    return None


def listed_model_ids(body: bytes) -> list[str]:
    """The ``data[].id`` values of an OpenAI ``/v1/models`` answer (empty when it is not one)."""
    try:
        data = json.loads(body.decode("utf-8", errors="replace"))
    except ValueError:
        return []
    items = data.get("data") if isinstance(data, dict) else None
    if not isinstance(items, list):
        return []
    return [str(m["id"]) for m in items if isinstance(m, dict) and isinstance(m.get("id"), str)]


def model_listed(expected: str, listed: Sequence[str]) -> bool:
    """``expected`` is served: the same id, or Ollama's ``name:latest`` for a tag-less name."""
    want = expected.strip()
    if not want:
        return False
    return any(m == want or (":" not in want and m == f"{want}:latest") for m in listed)


def _decoy_key() -> str:
    """A key no replica has, shaped like one: the check that a server compares the key."""
    return "obr_" + secrets.token_urlsafe(32)


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


def _avoid_repeated_sniffio_lookups() -> None:
    """httpcore imports ``sniffio`` for every lock it sets up; when the package is not installed
    each attempt scans sys.path again (about 0.1 ms, thousands of times per pass). Record it
    once as absent, which is what it is."""
    if "sniffio" not in sys.modules and importlib.util.find_spec("sniffio") is None:
        sys.modules["sniffio"] = None  # type: ignore[assignment]


_avoid_repeated_sniffio_lookups()


# ------------------------------------------------------------------------ transport plumbing


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


# -------------------------------------------------------------------------------- the probe


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
            return await self._prove(host, port, identity)

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

    async def _prove(self, host: str, port: int, identity: IdentityProof) -> _PortResult:
        """The health answer was ready: is the server on ``port`` this replica's?"""
        path = identity.path
        if identity.check == "model-name":
            answer = await self._get(host, port, path)
            if isinstance(answer, str):
                return _PortResult(False, f"identity not proven: GET {path} {answer}")
            status, body = answer
            if not 200 <= status < 300:
                return _PortResult(False, f"identity not proven: GET {path} answered HTTP {status}")
            listed = listed_model_ids(body)
            if not model_listed(identity.model_name, listed):
                shown = ", ".join(repr(m) for m in listed[:5]) or "none"
                return _PortResult(
                    False,
                    f"wrong server: {path} does not list model {identity.model_name!r} "
                    f"(lists {shown})",
                )
            return _PortResult(True, "", proof="model-name")
        if not identity.api_key:
            return _PortResult(False, "identity not proven: the replica has no key")
        bare = await self._get(host, port, path)
        if isinstance(bare, str):
            return _PortResult(False, f"identity not proven: GET {path} {bare}")
        status = bare[0]
        if 200 <= status < 300:
            return _PortResult(False, f"wrong server: answered {path} without the replica key")
        if status not in (401, 403):
            return _PortResult(
                False,
                f"identity not proven: {path} without the replica key answered HTTP {status} "
                "(expected 401 or 403)",
            )
        # A server that takes any bearer token is not checking ours: wrong keys, looking just
        # like the replica's and sent in a random order with it, must be refused too.
        keys = [identity.api_key, *(_decoy_key() for _ in range(_DECOYS))]
        secrets.SystemRandom().shuffle(keys)
        for key in keys:
            real = key == identity.api_key
            answer = await self._get(host, port, path, {"Authorization": f"Bearer {key}"})
            which = "the replica key" if real else "a wrong key"
            if isinstance(answer, str):
                return _PortResult(False, f"identity not proven: GET {path} with {which} {answer}")
            status = answer[0]
            if not real and 200 <= status < 300:
                return _PortResult(False, f"wrong server: accepted a wrong key on {path}")
            if real and status in (401, 403):
                return _PortResult(
                    False, f"wrong server: refused the replica key on {path} (HTTP {status})"
                )
            if real and not 200 <= status < 300:
                return _PortResult(
                    False,
                    f"identity not proven: {path} with the replica key answered HTTP {status}",
                )
        return _PortResult(True, "", proof="key")

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


def _summarise(
    target: ProbeTarget[K], ports: Sequence[int], results: Sequence[_PortResult]
) -> ProbeOutcome:
    if not ports:
        return ProbeOutcome(
            None,
            f"no port to probe: window {target.port_base}+{target.port_span} has no valid TCP port",
        )
    for port, result in zip(ports, results, strict=True):
        if result.ready:
            how = {
                "key": " (identity proven with the replica key)",
                "model-name": " (model listed; identity not proven)",
            }.get(result.proof, "")
            return ProbeOutcome(port, f"ready on port {port}{how}")
    by_reason: dict[str, list[int]] = {}
    for port, result in zip(ports, results, strict=True):
        by_reason.setdefault(result.reason, []).append(port)
    if len(by_reason) == 1:
        reason = next(iter(by_reason))
        if len(ports) == 1:
            return ProbeOutcome(None, f"{reason} on port {ports[0]}")
        return ProbeOutcome(None, f"{reason} on all {len(ports)} ports ({ports[0]}-{ports[-1]})")

    # Most telling first: an answer (loading, HTTP errors), then other failures, then refusals.
    def rank(reason: str) -> int:
        if reason.startswith(("wrong server", "identity")):
            return -1
        if reason.startswith(("loading", "HTTP")):
            return 0
        return 2 if reason == "connection refused" else 1

    parts = []
    for reason in sorted(by_reason, key=lambda r: (rank(r), by_reason[r][0])):
        plist = by_reason[reason]
        where = f"port {plist[0]}" if len(plist) == 1 else "ports " + ",".join(map(str, plist))
        parts.append(f"{reason} on {where}")
    detail = "; ".join(parts)
    return ProbeOutcome(None, detail if len(detail) <= 400 else detail[:397] + "...")


def _effective_concurrency(concurrency: int) -> int:
    wanted = max(1, int(concurrency))
    try:
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):  # pragma: no cover - platform without rlimits
        return wanted
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return wanted
    return max(1, min(wanted, soft - _FD_RESERVE))


async def _probe_all_async(
    targets: Sequence[ProbeTarget[K]], timeout: float, concurrency: int
) -> dict[K, ProbeOutcome]:
    windows = [target.ports() for target in targets]
    async with httpx.AsyncClient(
        timeout=httpx.Timeout(timeout),
        transport=_OneShotTransport(),  # connections are bounded by the prober's semaphore
        follow_redirects=False,
        trust_env=False,
        headers={"User-Agent": "obleth-provisioner-probe", "Accept": "*/*"},
    ) as client:
        prober = _Prober(client, _effective_concurrency(concurrency), timeout)
        rows = [
            [
                asyncio.ensure_future(
                    prober.probe_port(target.host, port, target.health_path, target.identity)
                )
                for port in ports
            ]
            for target, ports in zip(targets, windows, strict=True)
        ]
        every = [task for row in rows for task in row]
        if every:
            await asyncio.gather(*every)
    outcomes: dict[K, ProbeOutcome] = {}
    for target, ports, row in zip(targets, windows, rows, strict=True):
        outcomes[target.key] = _summarise(target, ports, [task.result() for task in row])
    return outcomes


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def probe_all(
    targets: Iterable[ProbeTarget[K]], *, timeout: float, concurrency: int
) -> dict[K, ProbeOutcome]:
    """Probe every port of every target's window; one outcome per target key.

    ``timeout`` bounds connecting to and hearing from each port (seconds); ``concurrency``
    bounds the ports probed at once (also capped by the process's open-file limit). Network
    errors never raise: they become the outcome's ``detail``. Targets sharing a key: last wins.
    """
    items = list(targets)
    if not items:
        return {}
    if not timeout > 0:
        raise ValueError("timeout must be a positive number of seconds (e.g. 5)")
    if not _loop_running():
        return asyncio.run(_probe_all_async(items, timeout, concurrency))
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, _probe_all_async(items, timeout, concurrency)).result()


def probe_one(
    host: str,
    port_base: int,
    port_span: int,
    health_path: str,
    *,
    timeout: float,
    identity: IdentityProof | None = None,
) -> ProbeOutcome:
    """Probe a single window (troubleshooting views, tests)."""
    target = ProbeTarget(
        key=0,
        host=host,
        port_base=port_base,
        port_span=port_span,
        health_path=health_path,
        identity=identity,
    )
    return probe_all([target], timeout=timeout, concurrency=max(1, port_span))[0]
