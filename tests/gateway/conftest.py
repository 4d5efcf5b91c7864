"""Real local HTTP servers for the gateway tests.

- ``engine``: starts the project's test engine (provisioner/testengine/server.py) as a
  subprocess on a free 127.0.0.1 port; it is an OpenAI-compatible server, not a model.
- ``recorder``: a tiny stdlib HTTP server in a thread that records each request (path, headers,
  JSON body) and answers what the test scripted (status, body, headers, or a slow stream). Used
  where the test must see exactly what the gateway sent upstream.
"""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from obleth.gateway.health import clear_catalog_cache
from obleth.gateway.keys import invalidate_keys

ENGINE = Path(__file__).resolve().parents[2] / "provisioner" / "testengine" / "server.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(autouse=True)
def _fresh_caches() -> Iterator[None]:
    invalidate_keys()
    clear_catalog_cache()
    yield
    invalidate_keys()
    clear_catalog_cache()


@pytest.fixture(autouse=True)
def _open_gateway(settings: Any) -> None:
    """These tests are about routing and forwarding, not keys: the gateway is explicitly open
    here (it is closed by default). Tests of keys set OBLETH_GATEWAY_OPEN = False themselves;
    tests/security/test_gateway_keys.py covers the closed gateway."""
    settings.OBLETH_GATEWAY_OPEN = True


@dataclass
class Engine:
    port: int
    process: subprocess.Popen[bytes]

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stats(self) -> dict[str, Any]:
        return dict(httpx.get(self.root + "/_stats", timeout=5).json())

    def inference_count(self, path: str) -> int:
        return int(self.stats()["requests"].get(path, 0))

    def control(self, **switches: Any) -> None:
        httpx.post(self.root + "/_control", json=switches, timeout=5).raise_for_status()


@pytest.fixture
def engine_factory() -> Iterator[Callable[..., Engine]]:
    started: list[Engine] = []

    def start(*flags: str) -> Engine:
        port = free_port()
        process = subprocess.Popen(
            [
                "/usr/bin/python3",
                str(ENGINE),
                "--port",
                str(port),
                "--host",
                "127.0.0.1",
                "--quiet",
                *flags,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        engine = Engine(port, process)
        started.append(engine)
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(engine.api_base + "/models", timeout=1).status_code == 200:
                    return engine
            except httpx.HTTPError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                err = process.stderr.read().decode() if process.stderr else ""
                raise RuntimeError(f"test engine did not start on {port}: {err}")
            time.sleep(0.05)

    yield start
    for engine in started:
        engine.process.terminate()
        try:
            engine.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            engine.process.kill()
        if engine.process.stderr:
            engine.process.stderr.close()


@pytest.fixture
def engine(engine_factory: Callable[..., Engine]) -> Engine:
    return engine_factory("--control")


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class Script:
    """What the recorder answers. ``stream`` (list of byte chunks) wins over ``body``."""

    status: int = 200
    body: Any = field(default_factory=lambda: {"ok": True, "model": "whatever-upstream"})
    headers: dict[str, str] = field(default_factory=dict)
    stream: list[bytes] | None = None
    # Before sending stream chunk i (i >= 1), wait for this event (set by the test), at most
    # hold_secs; ``released`` tells whether the test released it or the wait ran out.
    hold: threading.Event | None = None
    hold_secs: float = 10.0
    endless: bool = False  # stream a chunk every 50 ms until the client goes away


class Recorder:
    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.script = Script()
        self.released: bool | None = None
        self.client_gone = threading.Event()
        self.port = free_port()
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _record(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body: Any = json.loads(raw) if raw else None
                except ValueError:
                    body = raw
                recorder.requests.append(
                    Recorded(
                        self.command,
                        self.path,
                        {k.lower(): v for k, v in self.headers.items()},
                        body,
                    )
                )

            def do_GET(self) -> None:
                self._record()
                self._answer()

            def do_POST(self) -> None:
                self._record()
                self._answer()

            def _answer(self) -> None:
                script = recorder.script
                if script.stream is None and not script.endless:
                    data = json.dumps(script.body).encode()
                    self.send_response(script.status)
                    self.send_header("Content-Type", "application/json")
                    for k, v in script.headers.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                self.send_response(script.status)
                self.send_header("Content-Type", "text/event-stream")
                for k, v in script.headers.items():
                    self.send_header(k, v)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    if script.endless:
                        n = 0
                        while True:
                            n += 1
                            self._chunk(b'data: {"n": %d}\n\n' % n)
                            time.sleep(0.05)
                    for i, chunk in enumerate(script.stream or []):
                        if i >= 1 and script.hold is not None and recorder.released is None:
                            recorder.released = script.hold.wait(script.hold_secs)
                        self._chunk(chunk)
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    recorder.client_gone.set()
                    self.close_connection = True

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def inference_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.method == "POST"]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def recorder_factory() -> Iterator[Callable[[], Recorder]]:
    made: list[Recorder] = []

    def make() -> Recorder:
        rec = Recorder()
        made.append(rec)
        return rec

    yield make
    for rec in made:
        if rec.script.hold is not None:
            rec.script.hold.set()
        rec.close()


@pytest.fixture
def recorder(recorder_factory: Callable[[], Recorder]) -> Recorder:
    return recorder_factory()


@pytest.fixture
def closed_port_base() -> str:
    """An api_base nobody listens on (connection refused)."""
    return f"http://127.0.0.1:{free_port()}/v1"


# The gateway service as a process of its own (tests/gateway/test_service.py).
from tests.gateway.service_fixtures import gateway_factory, hung_upstream  # noqa: E402, F401
