"""A relayed stream keeps every byte in order, whether a chunk goes straight from the endpoint's
socket to the client's (the gateway server's body writer) or waits for a client that stopped
reading (the relay's fallback through ASGI ``send``), and whichever of the two the next chunk
takes. Real gateway process (uvicorn), a real upstream server in a thread that streams
numbered events as fast as TCP lets it, and a real client socket that stops reading for a
while so the gateway's send buffer fills; nothing is faked.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.gateway.service_fixtures import free_port
from tests.plugins.factories import make_endpoint, make_model

pytestmark = pytest.mark.django_db(transaction=True)

EVENTS = 3000
PAD = "x" * 900  # ~1 KB an event: 3 MB, far more than the sockets buffer


class FastStreamer:
    """Answers each POST with EVENTS numbered SSE events, chunked, written back to back."""

    def __init__(self) -> None:
        self.port = free_port()
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", self.port))
        self._sock.listen(64)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head, _, body = data.partition(b"\r\n\r\n")
            length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))  # type: ignore[union-attr]
            while len(body) < length:
                body += conn.recv(65536)
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            )
            for n in range(EVENTS):
                event = json.dumps({"model": "engine-name", "n": n, "pad": PAD})
                payload = f"data: {event}\n\n".encode()
                try:
                    conn.sendall(b"%x\r\n%s\r\n" % (len(payload), payload))
                except OSError:
                    return
            conn.sendall(b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n")

    def close(self) -> None:
        self._sock.close()


@pytest.fixture
def streamer() -> Iterator[FastStreamer]:
    s = FastStreamer()
    yield s
    s.close()


def read_stream(port: int, pause_after: int, pause_secs: float) -> bytes:
    """POST a streamed chat request; read ``pause_after`` bytes, stop reading for
    ``pause_secs`` (the gateway's writes back up), then read to the end."""
    messages = [{"role": "user", "content": "x"}]
    body = json.dumps({"model": "fast", "stream": True, "messages": messages})
    request = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n{body}"
    ).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(request)
        got = b""
        paused = False
        while True:
            if not paused and len(got) >= pause_after:
                time.sleep(pause_secs)
                paused = True
            data = s.recv(65536)
            if not data:
                return got
            got += data


def dechunk(raw: bytes) -> bytes:
    head, _, rest = raw.partition(b"\r\n\r\n")
    assert b" 200 " in head.split(b"\r\n")[0], head
    out = b""
    while True:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            return out
        out += rest[:size]
        rest = rest[size + 2 :]


def test_a_client_that_stops_reading_gets_every_event_once_in_order(
    gateway_factory: Any, streamer: FastStreamer
) -> None:
    model = make_model(name="fast", upstream_model="engine-name")
    make_endpoint(model, api_base=f"http://127.0.0.1:{streamer.port}/v1")
    gw = gateway_factory()
    gw.settle()
    for pause_after in (2_000, 200_000):  # early, and once the direct path has run a while
        raw = read_stream(gw.port, pause_after, pause_secs=1.5)
        events = [line for line in dechunk(raw).split(b"\n\n") if line]
        assert events[-1] == b"data: [DONE]"
        numbers = [json.loads(e[6:])["n"] for e in events[:-1]]
        assert numbers == list(range(EVENTS))
        assert all(b'"model": "fast"' in e for e in events[:-1])  # renamed on both paths
