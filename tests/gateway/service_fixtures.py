"""The gateway service as it runs in production: ``python -m obleth.gateway.serve`` in a
subprocess (uvicorn, uvloop, httptools) on a free 127.0.0.1 port, reading the test database.

Also upstreams the stdlib recorder cannot play: one that accepts connections and never answers.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class GatewayProcess:
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def health(self) -> dict[str, object]:
        return dict(httpx.get(self.url + "/healthz", timeout=2).json())

    def settle(self, secs: float = 15) -> None:
        """Until the routing table was reloaded after this call (so it holds the test's writes:
        the test's transaction has committed and a reload started after it)."""
        first = int(self.health()["reloads"])  # type: ignore[call-overload]
        deadline = time.monotonic() + secs
        while time.monotonic() < deadline:
            if int(self.health()["reloads"]) >= first + 2:  # type: ignore[call-overload]
                return
            time.sleep(0.05)
        raise AssertionError(f"gateway did not reload its table; log:\n{self.log()}")


def _env(**overrides: str) -> dict[str, str]:
    db = connection.settings_dict
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OBLETH_GATEWAY_", "PYTEST", "DJANGO_SETTINGS"))
    }
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "obleth.settings",
            "DATABASE_URL": (
                f"postgres://{db['USER'] or 'postgres'}@{db['HOST'] or '127.0.0.1'}:"
                f"{db['PORT'] or 5432}/{db['NAME']}"
            ),
            "OBLETH_GATEWAY_RELOAD_SECS": "1",
            "OBLETH_GATEWAY_OPEN": "1",  # tests of keys set it to "0"
            "OBLETH_LOG_LEVEL": "INFO",
            "PYTHONPATH": str(ROOT),
        }
    )
    env.update(overrides)
    return env


@pytest.fixture
def gateway_factory(tmp_path: Path) -> Iterator[Callable[..., GatewayProcess]]:
    started: list[GatewayProcess] = []

    def start(*args: str, **env: str) -> GatewayProcess:
        port = free_port()
        log_path = tmp_path / f"gateway-{port}.log"
        out = log_path.open("wb")
        process = subprocess.Popen(
            [sys.executable, "-m", "obleth.gateway.serve", "--bind", f"127.0.0.1:{port}", *args],
            cwd=ROOT,
            env=_env(**env),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        gw = GatewayProcess(port, process, log_path)
        started.append(gw)
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(gw.url + "/healthz", timeout=1).status_code == 200:
                    return gw
            except httpx.HTTPError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"gateway did not start on {port}:\n{gw.log()}")
            time.sleep(0.1)

    yield start
    for gw in started:
        if gw.process.poll() is None:
            gw.process.send_signal(signal.SIGTERM)
            try:
                gw.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                gw.process.kill()
                gw.process.wait()


@dataclass
class HungUpstream:
    """Accepts connections, reads what comes, never answers. Counts connections."""

    port: int = field(default_factory=free_port)
    accepted: int = 0
    closed_by_peer: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _conns: list[socket.socket] = field(default_factory=list)

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> HungUpstream:
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", self.port))
        self._sock.listen(1024)
        self._sock.settimeout(0.2)
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted += 1
            self._conns.append(conn)
            threading.Thread(target=self._drain, args=(conn,), daemon=True).start()

    def _drain(self, conn: socket.socket) -> None:
        conn.settimeout(0.5)
        while not self._stop.is_set():
            try:
                if not conn.recv(65536):
                    self.closed_by_peer += 1
                    return
            except TimeoutError:
                continue
            except OSError:
                return

    def stop(self) -> None:
        self._stop.set()
        for conn in self._conns:
            conn.close()
        self._sock.close()


@pytest.fixture
def hung_upstream() -> Iterator[HungUpstream]:
    up = HungUpstream().start()
    yield up
    up.stop()
