"""What the gateway's upstream client puts on the wire and the errors it raises: where an
endpoint's ``api_base`` points (:class:`Origin`), a request's head (:func:`request_head`, the
one place CR/LF/NUL are refused before they could reach the wire), and the client's limits.
:mod:`obleth.gateway.upstream` holds the connections and the pool.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass

# Bytes a response may buffer before its connection stops reading (the client reads slower
# than the endpoint writes); reading resumes once the relay has taken them.
HIGH_WATER = 256 * 1024
# Idle kept-alive connections per endpoint beyond this are closed when they come back.
MAX_IDLE_PER_ORIGIN = 1024
# An answer's status line and headers together; more is a broken endpoint, not an answer.
MAX_HEAD_BYTES = 64 * 1024


class UpstreamError(Exception):
    """A request to an endpoint did not get a usable answer."""


class UpstreamConnectError(UpstreamError):
    """No connection to the endpoint (refused, unreachable, unknown host, connect timeout, TLS)."""


class UpstreamBroken(UpstreamError):
    """The connection closed, or the endpoint spoke bad HTTP, after the request was sent."""


@dataclass(frozen=True)
class Origin:
    """Where an endpoint's ``api_base`` points: what a connection and a request line need."""

    host: str
    port: int
    tls: bool
    prefix: str  # the api_base's path, without a trailing slash ("/v1")
    host_header: bytes

    @classmethod
    def parse(cls, base: str) -> Origin:
        """``http(s)://host[:port][/path]``; ValueError (naming the problem) for anything else."""
        for c in base:
            if c in "\r\n\x00 \t" or ord(c) > 126:
                raise ValueError("the api_base holds a control character, a space or non-ASCII")
        parts = urllib.parse.urlsplit(base)
        if parts.scheme not in ("http", "https"):
            raise ValueError("the api_base must start with http:// or https://")
        host = parts.hostname
        if not host:
            raise ValueError("the api_base names no host")
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            raise ValueError("the api_base's port is not a number from 1 to 65535") from None
        netloc = parts.netloc.rpartition("@")[2]
        return cls(
            host=host,
            port=port,
            tls=parts.scheme == "https",
            prefix=parts.path.rstrip("/"),
            host_header=netloc.encode("ascii"),
        )


@dataclass(frozen=True)
class UpstreamRequest:
    """A request ready to write: where it goes and its bytes (head and body)."""

    origin: Origin
    data: bytes


def request_head(origin: Origin, path: str, headers: dict[str, str], length: int) -> bytes:
    """The request line and headers of a POST. A name or value that could end the header line
    (CR, LF, NUL) or is not Latin-1 is refused here, where it would land on the wire."""
    target = origin.prefix + path
    if not target.startswith("/") or any(c in target for c in "\r\n\x00 \t"):
        raise ValueError("the request path holds a control character or a space")
    lines = [
        b"POST ",
        target.encode("ascii"),
        b" HTTP/1.1\r\nHost: ",
        origin.host_header,
        b"\r\nUser-Agent: obleth-gateway\r\nContent-Length: ",
        str(length).encode(),
        b"\r\n",
    ]
    for name, value in headers.items():
        if any(c in name or c in value for c in "\r\n\x00"):
            raise ValueError(f"the {name} header holds a line break or NUL")
        lines += [name.encode("latin-1"), b": ", value.encode("latin-1"), b"\r\n"]
    lines.append(b"\r\n")
    return b"".join(lines)
