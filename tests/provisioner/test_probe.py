"""The provisioner's health probe against real local HTTP servers (127.0.0.1 / ::1 only).

Nothing is faked: windows are made of real listening sockets (small stdlib servers answering
what each test needs, and the project's test engine in multi-port mode) and real closed ports.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from provisioner.probe import (
    LOADING_WORDS,
    ProbeOutcome,
    ProbeTarget,
    body_says_loading,
    health_url,
    probe_all,
    probe_one,
)

REPO = Path(__file__).resolve().parents[2]
Answer = tuple[int, str, str]  # status, content type, body


def _port_free(port: int, family: int = socket.AF_INET, host: str = "127.0.0.1") -> bool:
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_window(span: int, *, family: int = socket.AF_INET, host: str = "127.0.0.1") -> int:
    """A base port whose ``span`` consecutive ports are all free right now."""
    for _ in range(200):
        base = random.randint(20000, 60000 - span)
        if all(_port_free(base + i, family, host) for i in range(span)):
            return base
    raise RuntimeError("no free port window found")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def _handler(answer: Answer | Callable[[str], Answer]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - stdlib name
            status, ctype, body = answer(self.path) if callable(answer) else answer
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            if status in (301, 302):
                self.send_header("Location", "/ok")
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    return Handler


@contextlib.contextmanager
def serve(
    port: int, answer: Answer | Callable[[str], Answer], host: str = "127.0.0.1"
) -> Iterator[None]:
    server_class = _Server
    if ":" in host:

        class _Server6(_Server):
            address_family = socket.AF_INET6

        server_class = _Server6
    server = server_class((host, port), _handler(answer))
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()


OK_JSON: Answer = (200, "application/json", '{"status": "ok"}')


def test_lowest_ready_port_wins_and_closed_ports_are_refused() -> None:
    base = free_window(8)
    with serve(base + 5, OK_JSON), serve(base + 2, (200, "text/plain", "OK")):
        outcome = probe_one("127.0.0.1", base, 8, "/health", timeout=5)
    assert outcome == ProbeOutcome(base + 2, f"ready on port {base + 2}")
    assert outcome.ready


def test_all_ports_closed_says_connection_refused() -> None:
    base = free_window(8)
    outcome = probe_one("127.0.0.1", base, 8, "/health", timeout=5)
    assert outcome.ready_port is None
    assert outcome.detail == f"connection refused on all 8 ports ({base}-{base + 7})"


@pytest.mark.parametrize(
    "answer",
    [
        (200, "application/json", '{"status": "loading"}'),
        (200, "application/json", '{"status": "Loading Model"}'),
        (200, "application/json", '{"state": "STARTING"}'),
        (200, "application/json", '{"status": "initializing", "progress": 0.4}'),
        (200, "application/json", '{"status": " warming up "}'),
        (200, "text/plain", "Loading model weights, please wait"),
        (503, "application/json", '{"error": {"code": 503, "message": "Loading model"}}'),
    ],
)
def test_a_server_still_loading_is_not_ready(answer: Answer) -> None:
    base = free_window(2)
    with serve(base, answer):
        outcome = probe_one("127.0.0.1", base, 2, "/health", timeout=5)
    assert outcome.ready_port is None
    assert f"loading (HTTP {answer[0]}" in outcome.detail
    assert f"on port {base}" in outcome.detail
    assert f"connection refused on port {base + 1}" in outcome.detail


def test_loading_words_are_the_documented_ones() -> None:
    assert {"loading", "loading model", "starting", "initializing", "warming up"} == set(
        LOADING_WORDS
    )
    assert body_says_loading(b'{"status": "ok"}') is None
    assert body_says_loading(b'{"status": "ready", "model": "loading model-x"}') == (
        "'loading model'"
    )
    assert body_says_loading(b"") is None
    assert body_says_loading(b"[1, 2]") is None
    assert body_says_loading(b"OK") is None


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ((500, "application/json", '{"error": "boom"}'), "HTTP 500"),
        ((404, "text/plain", "not found"), "HTTP 404"),
        ((301, "text/plain", ""), "HTTP 301"),  # redirects are not followed
        ((204, "text/plain", ""), None),  # any 2xx is ready
    ],
)
def test_http_answers(answer: Answer, reason: str | None) -> None:
    base = free_window(1)
    with serve(base, answer):
        outcome = probe_one("127.0.0.1", base, 1, "/health", timeout=5)
    if reason is None:
        assert outcome.ready_port == base
    else:
        assert outcome == ProbeOutcome(None, f"{reason} on port {base}")


def test_the_health_path_is_the_one_asked_for() -> None:
    seen: list[str] = []

    def answer(path: str) -> Answer:
        seen.append(path)
        return (200, "text/plain", "ok") if path == "/api/tags" else (404, "text/plain", "")

    base = free_window(1)
    with serve(base, answer):
        good = probe_one("127.0.0.1", base, 1, "/api/tags", timeout=5)
        bad = probe_one("127.0.0.1", base, 1, "health", timeout=5)  # leading / added
    assert good.ready_port == base
    assert bad.detail == f"HTTP 404 on port {base}"
    assert seen == ["/api/tags", "/health"]


def test_a_silent_port_times_out() -> None:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)  # accepts connections, never answers
    try:
        port = listener.getsockname()[1]
        outcome = probe_one("127.0.0.1", port, 1, "/health", timeout=0.5)
    finally:
        listener.close()
    assert outcome == ProbeOutcome(None, f"timed out on port {port}")


def test_mixed_reasons_are_summarised_most_telling_first() -> None:
    base = free_window(4)
    with (
        serve(base + 1, (500, "text/plain", "")),
        serve(base + 3, (200, "application/json", '{"status":"loading"}')),
    ):
        outcome = probe_one("127.0.0.1", base, 4, "/health", timeout=5)
    assert outcome.ready_port is None
    assert outcome.detail == (
        f"HTTP 500 on port {base + 1}; loading (HTTP 200, status 'loading') on port {base + 3}; "
        f"connection refused on ports {base},{base + 2}"
    )


def test_invalid_ports_are_skipped() -> None:
    assert ProbeTarget("k", "h", 65533, 8, "/").ports() == [65533, 65534, 65535]
    assert ProbeTarget("k", "h", -2, 4, "/").ports() == [1]
    assert ProbeTarget("k", "h", 8000, 0, "/").ports() == []
    outcome = probe_one("127.0.0.1", 70000, 8, "/health", timeout=1)
    assert outcome.ready_port is None
    assert "no port to probe" in outcome.detail


def test_unresolvable_host_and_no_targets() -> None:
    assert probe_all([], timeout=1, concurrency=4) == {}
    outcome = probe_one("no-such-node.invalid", 8000, 2, "/health", timeout=5)
    assert outcome.ready_port is None
    assert "does not resolve" in outcome.detail or "lookup" in outcome.detail
    with pytest.raises(ValueError, match="timeout"):
        probe_all([ProbeTarget(1, "127.0.0.1", 1, 1, "/")], timeout=0, concurrency=1)


def test_hostname_targets_resolve_once_and_probe() -> None:
    base = free_window(2)
    with serve(base + 1, OK_JSON):
        outcome = probe_one("localhost", base, 2, "/health", timeout=5)
    assert outcome.ready_port == base + 1


def _ipv6_loopback() -> bool:
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


def test_ipv6_hosts_are_bracketed() -> None:
    assert health_url("::1", 8000, "/health") == "http://[::1]:8000/health"
    assert health_url("[::1]", 8000, "/health") == "http://[::1]:8000/health"
    assert health_url("fe80::1%eth0", 1, "/h") == "http://[fe80::1%25eth0]:1/h"
    assert health_url("10.0.0.1", 8000, "health") == "http://10.0.0.1:8000/health"
    if not _ipv6_loopback():
        pytest.skip("this machine has no IPv6 loopback")
    base = free_window(2, family=socket.AF_INET6, host="::1")
    with serve(base + 1, OK_JSON, host="::1"):
        outcome = probe_one("::1", base, 2, "/health", timeout=5)
    assert outcome.ready_port == base + 1


def test_callable_from_inside_a_running_event_loop() -> None:
    base = free_window(1)

    async def inside() -> dict[str, ProbeOutcome]:
        return probe_all(
            [ProbeTarget("a", "127.0.0.1", base, 1, "/health")], timeout=5, concurrency=2
        )

    with serve(base, OK_JSON):
        result = asyncio.run(inside())
    assert result == {"a": ProbeOutcome(base, f"ready on port {base}")}


# ----------------------------------------------------------------- with the real test engine


@contextlib.contextmanager
def running_engine(*args: str) -> Iterator[None]:
    """The project's test engine (provisioner/testengine) in its own process."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "provisioner.testengine", "--host", "127.0.0.1", "--quiet", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_listening(port: int, seconds: float = 15) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"test engine did not listen on {port}")


def _post_json(port: int, path: str, body: dict[str, object]) -> None:
    import httpx

    httpx.post(f"http://127.0.0.1:{port}{path}", json=body, timeout=5).raise_for_status()


def test_engine_loading_then_ready() -> None:
    base = free_window(3)
    with running_engine("--port", str(base + 1), "--loading", "600", "--control"):
        _wait_listening(base + 1)
        loading = probe_one("127.0.0.1", base, 3, "/health", timeout=5)
        assert loading.ready_port is None
        assert f"loading (HTTP 200, status 'loading') on port {base + 1}" in loading.detail
        _post_json(base + 1, "/_control", {"loading": 0})
        ready = probe_one("127.0.0.1", base, 3, "/health", timeout=5)
        assert ready.ready_port == base + 1
        _post_json(base + 1, "/_control", {"dead_health": True})
        dead = probe_one("127.0.0.1", base, 3, "/health", timeout=5)
        assert dead.ready_port is None
        assert f"HTTP 500 on port {base + 1}" in dead.detail


def test_engine_llama_cpp_style_503_is_not_ready() -> None:
    base = free_window(1)
    with running_engine("--port", str(base), "--loading", "600", "--loading-status", "503"):
        _wait_listening(base)
        outcome = probe_one("127.0.0.1", base, 1, "/health", timeout=5)
    assert outcome.ready_port is None
    assert outcome.detail.startswith("loading (HTTP 503")


def test_two_thousand_windows_of_eight_ports() -> None:
    """2000 windows x 8 ports (16000 probes): a real multi-port engine and real closed ports.

    As on a cluster, a window holds at most one serving port: a quarter of the windows end on
    the engine's first port, a quarter start on its last one, half are closed (the 16 ports on
    each side of the engine are checked free)."""
    count = 4
    for _ in range(50):
        first = free_window(count + 32) + 16
        if all(_port_free(p) for p in range(first - 16, first + count + 16)):
            break
    last = first + count - 1
    bases = (first - 7, last, first - 16, last + 9)
    expected_ready = (first, last, None, None)
    # Hold the closed ports: bound but not listening, they refuse connections, and no other
    # process on this shared machine can start listening on them during the probe.
    holders = []
    for port in [*range(first - 16, first), *range(last + 1, last + 17)]:
        holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        holder.bind(("127.0.0.1", port))
        holders.append(holder)
    try:
        with running_engine("--ports-from", str(first), "--ports-count", str(count)):
            for port in (first, last):
                _wait_listening(port)
            targets = [
                ProbeTarget(("window", i), "127.0.0.1", bases[i % 4], 8, "/health")
                for i in range(2000)
            ]
            outcomes = probe_all(targets, timeout=10, concurrency=256)
    finally:
        for holder in holders:
            holder.close()
    assert len(outcomes) == 2000
    for i, target in enumerate(targets):
        got = outcomes[target.key]
        assert got.ready_port == expected_ready[i % 4], (target, got)
        if expected_ready[i % 4] is None:
            assert got.detail.startswith("connection refused on all 8 ports"), got
