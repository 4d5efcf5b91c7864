"""Warm-up after promotion, against REAL local HTTP servers: the project's test engine
(provisioner/testengine, in its own process) and small stdlib servers for broken answers."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from provisioner.warmup import WarmupResult, warm_up

REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def engine(*args: str) -> Iterator[str]:
    """Run the test engine; yields its ``/v1`` base URL."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "provisioner.testengine", "--host", "127.0.0.1"]
        + ["--port", str(port), "--quiet", "--model", "tiny-test", *args],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 15
        while True:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if time.monotonic() > deadline or proc.poll() is not None:
                raise AssertionError("the test engine did not start")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def stats(api_base: str) -> dict[str, Any]:
    root = api_base.rsplit("/v1", 1)[0]
    response = httpx.get(f"{root}/_stats", timeout=5)
    response.raise_for_status()
    data = response.json()
    assert isinstance(data, dict)
    return data


Route = Callable[[str, str, bytes], tuple[int, Any]]  # method, path, body -> status, JSON


@contextlib.contextmanager
def stdlib_server(route: Route) -> Iterator[tuple[str, list[tuple[str, str, Any]]]]:
    """A small HTTP server answering JSON from ``route``; yields (base URL, requests seen)."""
    seen: list[tuple[str, str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            seen.append((self.command, self.path, json.loads(body) if body else None))
            status, payload = route(self.command, self.path, body)
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _answer  # noqa: N815 - stdlib names

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", seen
    finally:
        server.shutdown()
        server.server_close()


MODELS = {"object": "list", "data": [{"id": "served-model", "object": "model"}]}


def test_chat_warmup_reaches_the_test_engine() -> None:
    with engine() as base:
        assert stats(base)["warmup_seen"] is False
        result = warm_up(base + "/", timeout=30)  # trailing slash trimmed
        after = stats(base)
    assert result.ok, result.detail
    assert result.model_id == "tiny-test"
    assert after["warmup_seen"] is True
    assert after["requests"]["/v1/models"] == 1
    assert after["requests"]["/v1/chat/completions"] == 1


def test_exact_chat_payload() -> None:
    def route(method: str, path: str, body: bytes) -> tuple[int, Any]:
        if path == "/v1/models":
            return 200, MODELS
        return 200, {"choices": [{"message": {"content": "x"}}]}

    with stdlib_server(route) as (base, seen):
        result = warm_up(base, timeout=10)
    assert result == WarmupResult(True, result.detail, "served-model")
    assert seen == [
        ("GET", "/v1/models", None),
        (
            "POST",
            "/v1/chat/completions",
            {
                "model": "served-model",
                "messages": [{"role": "user", "content": "warmup"}],
                "max_tokens": 1,
                "temperature": 0,
                "stream": False,
            },
        ),
    ]


def test_embedding_and_completion_models() -> None:
    with engine() as base:
        embedded = warm_up(base, timeout=30, model_type="embedding")
        completed = warm_up(base, timeout=30, model_type="completion")
        after = stats(base)
    assert embedded.ok and completed.ok, (embedded, completed)
    assert after["requests"]["/v1/embeddings"] == 1
    assert after["requests"]["/v1/completions"] == 1
    assert "/v1/chat/completions" not in after["requests"]
    assert after["warmup_seen"] is False


def test_embedding_payload() -> None:
    with stdlib_server(lambda m, p, b: (200, MODELS if p == "/v1/models" else {})) as (
        base,
        seen,
    ):
        assert warm_up(base, timeout=10, model_type="embedding").ok
    assert seen[1] == ("POST", "/v1/embeddings", {"model": "served-model", "input": "warmup"})


def test_a_server_still_loading_is_asked_again_within_the_budget() -> None:
    with engine("--loading", "3") as base:
        result = warm_up(base, timeout=60)
        after = stats(base)
    assert result.ok, result.detail
    assert after["warmup_seen"] is True
    assert after["requests"]["/v1/chat/completions"] >= 2  # 503 first, then the answer


@pytest.mark.parametrize(
    ("models", "inference", "expect"),
    [
        ((200, {"data": []}), (200, {}), "no model id in data[0].id"),
        ((200, {"data": [{"id": ""}]}), (200, {}), "no model id"),
        ((200, ["not", "an", "object"]), (200, {}), "no model id"),
        ((404, {"error": "nope"}), (200, {}), "HTTP 404 (nope)"),
        ((200, MODELS), (500, {"error": {"message": "CUDA out of memory"}}), "HTTP 500"),
        ((200, MODELS), (400, {"detail": "bad"}), "HTTP 400 (bad)"),
    ],
)
def test_failures_are_returned_not_raised(
    models: tuple[int, Any], inference: tuple[int, Any], expect: str
) -> None:
    def route(method: str, path: str, body: bytes) -> tuple[int, Any]:
        return models if path == "/v1/models" else inference

    with stdlib_server(route) as (base, _seen):
        result = warm_up(base, timeout=10)
    assert result.ok is False
    assert expect in result.detail
    if models == (200, MODELS):
        assert result.model_id == "served-model"
        assert "CUDA out of memory" in result.detail or inference[0] != 500


def test_hung_inference_is_bounded_by_the_budget() -> None:
    with engine("--hang-inference") as base:
        result = warm_up(base, timeout=1.5)
    assert result.ok is False
    assert "timed out" in result.detail or "budget" in result.detail
    assert result.model_id == "tiny-test"


def test_unreachable_and_invalid_targets() -> None:
    closed = _free_port()
    refused = warm_up(f"http://127.0.0.1:{closed}/v1", timeout=5)
    assert refused.ok is False and "ConnectError" in refused.detail
    assert warm_up("gpu7:8000/v1", timeout=5).ok is False
    disabled = warm_up("http://127.0.0.1:1/v1", timeout=0)
    assert disabled == WarmupResult(False, "warm-up disabled (timeout 0)")


def test_a_given_client_is_used_and_left_open() -> None:
    with engine() as base, httpx.Client() as client:
        result = warm_up(base, timeout=30, client=client)
        assert result.ok
        assert client.is_closed is False
        assert client.get(base + "/models").status_code == 200
