"""Node address resolution: the address a replica's endpoint and probes use for a node name.

Order for a hostname (reference 2.9): the operator's override (Slurm settings' node addresses,
exact key after trim) -> an IP literal is its own address -> a fresh cache entry (younger than
``ttl``) -> system DNS, up to ``attempts`` tries ``retry_delay`` apart, first IPv4 address
preferred, cached on success -> the last known address (stale cache, any age) -> None (callers
then use the name itself). The cache lives in the process (``get_resolver()``), so it survives
between passes in one worker.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit, urlunsplit

__all__ = ["NodeResolver", "get_resolver", "is_ip_literal", "system_lookup"]

Lookup = Callable[[str], Sequence[str]]


def is_ip_literal(host: str) -> bool:
    host = host.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    return True


def system_lookup(host: str) -> list[str]:
    """All addresses the system resolver gives for ``host`` (raises OSError on failure)."""
    infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    seen: list[str] = []
    for family, _type, _proto, _name, sockaddr in infos:
        if family in (socket.AF_INET, socket.AF_INET6):
            address = str(sockaddr[0])
            if address not in seen:
                seen.append(address)
    return seen


def _pick(addresses: Iterable[str]) -> str | None:
    """The first IPv4 address, else the first address; only valid IP literals count."""
    valid = [a.strip() for a in addresses if isinstance(a, str) and is_ip_literal(a)]
    for address in valid:
        if ":" not in address:
            return address
    return valid[0] if valid else None


def _url_host(address: str) -> str:
    return f"[{address}]" if ":" in address else address


class NodeResolver:
    """Hostname -> IP address with overrides, retries and a success cache. Thread-safe."""

    def __init__(
        self,
        overrides: Mapping[str, str] | None = None,
        ttl: float = 300,
        attempts: int = 3,
        retry_delay: float = 0.15,
        lookup: Lookup | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.ttl = float(ttl)
        self.attempts = max(1, int(attempts))
        self.retry_delay = max(0.0, float(retry_delay))
        self._lookup: Lookup = lookup or system_lookup
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._overrides: dict[str, str] = {}
        self._cache: dict[str, tuple[str, float]] = {}  # host -> (address, resolved at)
        self.set_overrides(overrides or {})

    # ------------------------------------------------------------------------------ overrides

    def set_overrides(self, overrides: Mapping[str, str] | None) -> None:
        """Replace the operator's hostname -> IP map (blank keys or values are ignored)."""
        cleaned: dict[str, str] = {}
        for key, value in (overrides or {}).items():
            name, address = str(key).strip(), str(value).strip()
            if name and address:
                cleaned[name] = address
        with self._lock:
            self._overrides = cleaned

    @property
    def overrides(self) -> dict[str, str]:
        with self._lock:
            return dict(self._overrides)

    # ------------------------------------------------------------------------------ resolving

    def resolve(self, host: str) -> str | None:
        """The address for ``host``, or None when nothing is known about it."""
        host = (host or "").strip()
        if not host:
            return None
        with self._lock:
            override = self._overrides.get(host)
        if override:
            return override
        if is_ip_literal(host):
            return host[1:-1] if host.startswith("[") and host.endswith("]") else host
        key = host.lower()
        now = self._clock()
        with self._lock:
            cached = self._cache.get(key)
        if cached is not None and now - cached[1] < self.ttl:
            return cached[0]
        for attempt in range(self.attempts):
            if attempt:
                self._sleep(self.retry_delay)
            try:
                address = _pick(self._lookup(host))
            except (OSError, UnicodeError, ValueError):
                address = None
            if address:
                with self._lock:
                    self._cache[key] = (address, self._clock())
                return address
        return cached[0] if cached is not None else None

    def address_for(self, host: str) -> str:
        """The address to use for ``host``: resolved, or the name itself (trimmed)."""
        return self.resolve(host) or (host or "").strip()

    def resolve_many(self, hosts: Iterable[str], *, max_workers: int = 16) -> dict[str, str]:
        """``address_for`` of each distinct host, looked up concurrently."""
        distinct = list(dict.fromkeys(h for h in hosts if h and h.strip()))
        if len(distinct) <= 1 or max_workers <= 1:
            return {host: self.address_for(host) for host in distinct}
        with ThreadPoolExecutor(max_workers=min(max_workers, len(distinct))) as pool:
            return dict(zip(distinct, pool.map(self.address_for, distinct), strict=True))

    def rewrite_url(self, url: str) -> str:
        """``url`` with its host replaced by the host's address; scheme, port, path kept.

        Unchanged when the URL cannot be parsed, has no host, already uses an IP literal, or
        the host does not resolve.
        """
        try:
            parts = urlsplit(url)
            host = parts.hostname
            port = parts.port
        except ValueError:
            return url
        if not host or not parts.scheme or is_ip_literal(host):
            return url
        # urlsplit lower-cases hostname; look the override up with the spelling in the URL too
        netloc = parts.netloc
        userinfo, _, hostport = netloc.rpartition("@")
        written = hostport.rsplit(":", 1)[0] if port is not None else hostport
        address = self.resolve(written) or self.resolve(host)
        if not address:
            return url
        new_netloc = _url_host(address) + (f":{port}" if port is not None else "")
        if userinfo:
            new_netloc = f"{userinfo}@{new_netloc}"
        return urlunsplit((parts.scheme, new_netloc, parts.path, parts.query, parts.fragment))

    # ------------------------------------------------------------------------------- the cache

    def forget(self, host: str | None = None) -> None:
        """Drop the cached address of ``host`` (all hosts when None)."""
        with self._lock:
            if host is None:
                self._cache.clear()
            else:
                self._cache.pop(host.strip().lower(), None)

    def cached(self, host: str) -> str | None:
        """The cached address of ``host`` whatever its age (for display)."""
        with self._lock:
            entry = self._cache.get(host.strip().lower())
        return entry[0] if entry else None


_shared: NodeResolver | None = None
_shared_lock = threading.Lock()


def get_resolver() -> NodeResolver:
    """The process-wide resolver (its cache survives between passes in one worker)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = NodeResolver()
        return _shared
