"""The obleth test engine, run as a real process with /usr/bin/python3 (stdlib only).

Nothing is faked: every test starts ``provisioner/testengine/server.py`` as a subprocess on a free
127.0.0.1 port and talks HTTP to it with httpx. No database is used.
"""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from provisioner.testengine import ENGINE_HEADER, LISTENING_MARK, SERVER_PATH, engine_command

SYSTEM_PYTHON = "/usr/bin/python3"
REPO_ROOT = Path(__file__).resolve().parents[2]
SENTENCE = "this is the obleth test engine, not a model"
WORDS = SENTENCE.split()

pytestmark = pytest.mark.skipif(
    not os.path.exists(SYSTEM_PYTHON), reason="the engine is meant for /usr/bin/python3"
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def free_port_run(count: int) -> int:
    """The first of ``count`` consecutive ports that can all be bound right now."""
    for base in range(20000, 60000 - count, count + 37):
        socks: list[socket.socket] = []
        try:
            for port in range(base, base + count):
                sock = socket.socket()
                socks.append(sock)
                sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
    pytest.fail(f"no run of {count} free ports found")


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OBLETH_")}
    env.update(extra or {})
    return env


def wait_until(check: Callable[[], bool], timeout: float = 15.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}")


@dataclass
class Engine:
    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def get(self, path: str, **kw: Any) -> httpx.Response:
        return httpx.get(self.base + path, timeout=kw.pop("timeout", 10.0), **kw)

    def post(self, path: str, body: Any = None, **kw: Any) -> httpx.Response:
        return httpx.post(self.base + path, json=body, timeout=kw.pop("timeout", 10.0), **kw)

    def stats(self) -> dict[str, Any]:
        result: dict[str, Any] = self.get("/_stats").json()
        return result

    def wait_listening(self) -> None:
        def ready() -> bool:
            if self.proc.poll() is not None:
                pytest.fail(f"engine exited with {self.proc.returncode}: {self.log()}")
            return LISTENING_MARK in self.log()

        wait_until(ready, what="the engine to listen")


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[..., Engine]]:
    """Start engines; every one still running is stopped at teardown."""
    started: list[Engine] = []

    def _start(
        *flags: str,
        env: dict[str, str] | None = None,
        port: int | None = None,
        use_port_flag: bool = True,
        wait: bool = True,
        argv: list[str] | None = None,
    ) -> Engine:
        port = free_port() if port is None else port
        args = list(flags)
        if use_port_flag:
            args = ["--port", str(port), *args]
        if "--host" not in args:
            args = ["--host", "127.0.0.1", *args]
        log_path = tmp_path / f"engine-{len(started)}.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                (argv or engine_command()) + args,
                stdout=log,
                stderr=log,
                env=clean_env(env),
                cwd=REPO_ROOT,
            )
        engine = Engine(proc, port, log_path)
        started.append(engine)
        if wait:
            engine.wait_listening()
        return engine

    yield _start
    for engine in started:
        if engine.proc.poll() is None:
            engine.proc.kill()
            engine.proc.wait(timeout=10)


def sse_events(response: httpx.Response) -> list[str]:
    assert response.headers["content-type"].startswith("text/event-stream")
    events = [part for part in response.text.split("\n\n") if part]
    assert all(part.startswith("data: ") for part in events), events
    return [part[len("data: ") :] for part in events]


CHAT = {"model": "test-engine", "messages": [{"role": "user", "content": "hello there"}]}
WARMUP = {
    "model": "test-engine",
    "messages": [{"role": "user", "content": "warmup"}],
    "max_tokens": 1,
    "temperature": 0,
    "stream": False,
}


# --- configuration ----------------------------------------------------------------------------


def test_missing_port_names_the_flag_and_the_variable(tmp_path: Path) -> None:
    result = subprocess.run(
        [SYSTEM_PYTHON, str(SERVER_PATH), "--host", "127.0.0.1"],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=30,
    )
    assert result.returncode == 2
    assert "--port" in result.stderr
    assert "OBLETH_SERVING_PORT" in result.stderr


def test_port_and_model_from_environment_and_flags_win(start: Callable[..., Engine]) -> None:
    port = free_port()
    engine = start(
        "--model",
        "flag-model",
        port=port,
        use_port_flag=False,
        env={
            "OBLETH_SERVING_PORT": str(port),
            "OBLETH_TESTENGINE_MODEL": "env-model",
            "OBLETH_TESTENGINE_EMBEDDING_DIM": "5",
        },
    )
    assert f"listening on 127.0.0.1:{port} model=flag-model" in engine.log()
    assert engine.get("/v1/models").json()["data"][0]["id"] == "flag-model"
    vector = engine.post("/v1/embeddings", {"input": "x"}).json()["data"][0]["embedding"]
    assert len(vector) == 5


def test_runs_as_module_with_project_python(start: Callable[..., Engine]) -> None:
    engine = start(argv=[sys.executable, "-m", "provisioner.testengine"])
    assert engine.get("/health").json() == {"status": "ok"}


# --- routes -----------------------------------------------------------------------------------


@pytest.fixture
def engine(start: Callable[..., Engine]) -> Engine:
    return start()


def test_health_models_and_headers(engine: Engine) -> None:
    for path in ("/health", "/v1/health"):
        response = engine.get(path)
        assert response.status_code == 200
        assert response.json() == {"status": "ok"}
        assert response.headers[ENGINE_HEADER] == "1"
    models = engine.get("/v1/models").json()
    assert models["object"] == "list"
    assert models["data"][0] == {
        "id": "test-engine",
        "object": "model",
        "created": models["data"][0]["created"],
        "owned_by": "obleth-test-engine",
    }
    assert "not a model" in engine.log()


def test_chat_completion_honours_max_tokens(engine: Engine) -> None:
    response = engine.post("/v1/chat/completions", CHAT | {"max_tokens": 12})
    assert response.status_code == 200
    assert response.headers[ENGINE_HEADER] == "1"
    body = response.json()
    assert body["object"] == "chat.completion"
    assert body["system_fingerprint"] == "obleth-test-engine"
    choice = body["choices"][0]
    assert choice["message"]["role"] == "assistant"
    words = choice["message"]["content"].split(" ")
    assert words == (WORDS * 2)[:12]
    assert choice["finish_reason"] == "length"
    assert body["usage"] == {"prompt_tokens": 2, "completion_tokens": 12, "total_tokens": 14}
    again = engine.post("/v1/chat/completions", CHAT | {"max_tokens": 12}).json()
    assert again["choices"][0]["message"]["content"] == choice["message"]["content"]


def test_chat_completion_streams_sse_ending_with_done(engine: Engine) -> None:
    body = CHAT | {"max_tokens": 5, "stream": True, "stream_options": {"include_usage": True}}
    response = engine.post("/v1/chat/completions", body)
    assert response.status_code == 200
    events = sse_events(response)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text.split(" ") == WORDS[:5]
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["usage"]["completion_tokens"] == 5


def test_completions_plain_and_streamed(engine: Engine) -> None:
    body = engine.post("/v1/completions", {"prompt": "one two three", "max_tokens": 3}).json()
    assert body["object"] == "text_completion"
    assert body["system_fingerprint"] == "obleth-test-engine"
    assert body["choices"][0]["text"] == "this is the"
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}
    streamed = engine.post("/v1/completions", {"prompt": [1, 2], "max_tokens": 4, "stream": True})
    events = sse_events(streamed)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert "".join(c["choices"][0]["text"] for c in chunks) == "this is the obleth"
    assert {c["object"] for c in chunks} == {"text_completion"}


def test_embeddings_are_deterministic_unit_vectors(engine: Engine) -> None:
    one = engine.post("/v1/embeddings", {"model": "test-engine", "input": "a cat"}).json()
    assert one["object"] == "list"
    assert one["usage"] == {"prompt_tokens": 2, "total_tokens": 2}
    vector = one["data"][0]["embedding"]
    assert len(vector) == 8
    assert math.isclose(sum(v * v for v in vector), 1.0, rel_tol=1e-9)
    batch = engine.post("/v1/embeddings", {"input": ["a cat", "a dog"]}).json()
    assert [d["index"] for d in batch["data"]] == [0, 1]
    assert batch["data"][0]["embedding"] == vector
    assert batch["data"][1]["embedding"] != vector
    sized = engine.post("/v1/embeddings", {"input": "a cat", "dimensions": 3}).json()
    assert len(sized["data"][0]["embedding"]) == 3


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/chat/completions", {"model": "m"}, "messages"),
        ("/v1/chat/completions", {"messages": [{"content": "x"}]}, "messages[0]"),
        ("/v1/chat/completions", CHAT | {"max_tokens": 0}, "max_tokens"),
        ("/v1/chat/completions", CHAT | {"stream": "yes"}, "stream"),
        ("/v1/chat/completions", CHAT | {"model": 5}, "model"),
        ("/v1/completions", {"max_tokens": 2}, "prompt"),
        ("/v1/embeddings", {"input": []}, "input"),
        ("/v1/embeddings", {"input": ["ok", {}]}, "input[1]"),
        ("/v1/embeddings", {"input": "x", "encoding_format": "int8"}, "encoding_format"),
    ],
)
def test_bad_requests_name_the_field(engine: Engine, path: str, body: Any, field: str) -> None:
    response = engine.post(path, body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == field
    assert error["type"] == "invalid_request_error"
    assert f"'{field}'" in error["message"]


def test_unknown_route_and_wrong_method(engine: Engine) -> None:
    missing = engine.get("/v1/nothing")
    assert missing.status_code == 404
    assert missing.json()["error"]["message"] == "Invalid URL (GET /v1/nothing)"
    assert missing.headers[ENGINE_HEADER] == "1"
    wrong = engine.get("/v1/chat/completions")
    assert wrong.status_code == 405
    assert wrong.headers["allow"] == "POST"
    bad_json = httpx.post(engine.base + "/v1/chat/completions", content=b"{nope")
    assert bad_json.status_code == 400
    assert engine.post("/_control", {"hang_inference": True}).status_code == 404


def test_stats_count_requests_and_see_warmup(engine: Engine) -> None:
    assert engine.stats()["warmup_seen"] is False
    engine.post("/v1/chat/completions", CHAT)
    engine.post(
        "/v1/chat/completions",
        {"messages": [{"role": "system", "content": "x"}, {"role": "user", "content": "warmup"}]},
    )
    assert engine.stats()["warmup_seen"] is False
    assert engine.post("/v1/chat/completions", WARMUP).status_code == 200
    stats = engine.stats()
    assert stats["warmup_seen"] is True
    assert stats["requests"]["/v1/chat/completions"] == 3
    assert stats["requests"]["/_stats"] == 3
    assert "POST /v1/chat/completions 200" in engine.log()


# --- fault switches ---------------------------------------------------------------------------


def test_slow_start_refuses_connections_then_answers(start: Callable[..., Engine]) -> None:
    engine = start("--slow-start", "2", wait=False)
    wait_until(lambda: "slow start" in engine.log(), what="the slow-start line")
    with pytest.raises(httpx.ConnectError):
        engine.get("/health")
    assert engine.proc.poll() is None
    engine.wait_listening()
    assert engine.get("/health").json() == {"status": "ok"}


def test_loading_phase_then_ready(start: Callable[..., Engine]) -> None:
    ok_while_loading = start("--loading", "2")
    llama_style = start("--loading", "2", env={"OBLETH_TESTENGINE_LOADING_STATUS": "503"})
    health = ok_while_loading.get("/health")
    assert (health.status_code, health.json()) == (200, {"status": "loading"})
    busy = ok_while_loading.post("/v1/chat/completions", CHAT)
    assert busy.status_code == 503
    assert busy.json()["error"]["message"] == "Loading model"
    assert ok_while_loading.post("/v1/embeddings", {"input": "x"}).status_code == 503
    loading = llama_style.get("/health")
    assert loading.status_code == 503
    assert loading.json()["error"]["message"] == "Loading model"

    def ready() -> bool:
        return bool(ok_while_loading.get("/health").json() == {"status": "ok"})

    wait_until(ready, what="the loading phase to end")
    assert ok_while_loading.post("/v1/chat/completions", CHAT).status_code == 200
    wait_until(lambda: llama_style.get("/health").status_code == 200, what="llama-style ready")


def test_dead_health_while_inference_works(start: Callable[..., Engine]) -> None:
    engine = start("--dead-health")
    assert engine.get("/health").status_code == 500
    assert engine.get("/v1/health").status_code == 500
    assert engine.post("/v1/chat/completions", CHAT).status_code == 200


def test_hang_inference_times_out_while_health_answers(start: Callable[..., Engine]) -> None:
    engine = start(env={"OBLETH_TESTENGINE_HANG_INFERENCE": "1"})
    with pytest.raises(httpx.ReadTimeout):
        engine.post("/v1/chat/completions", CHAT, timeout=0.5)
    with pytest.raises(httpx.ReadTimeout):
        engine.post("/v1/embeddings", {"input": "x"}, timeout=0.5)
    assert engine.get("/health").json() == {"status": "ok"}
    assert engine.get("/v1/models").status_code == 200
    # The engine notices that the clients gave up and stops holding their requests.
    wait_until(lambda: engine.stats()["hanging"] == 0, what="hung requests to be dropped")
    assert "POST /v1/chat/completions 499" in engine.log()


def test_exit_after_exits_with_code_3(start: Callable[..., Engine]) -> None:
    engine = start("--exit-after", "1")
    assert engine.get("/health").status_code == 200
    assert engine.proc.wait(timeout=15) == 3
    assert "exiting with code 3" in engine.log()


def test_latency_delays_answers(start: Callable[..., Engine]) -> None:
    engine = start("--latency-ms", "400")
    with pytest.raises(httpx.ReadTimeout):
        engine.get("/health", timeout=0.1)
    assert engine.get("/health", timeout=10).status_code == 200


def test_control_flips_hang_and_health_then_exits(start: Callable[..., Engine]) -> None:
    engine = start("--control")
    flipped = engine.post("/_control", {"hang_inference": True, "dead_health": True})
    assert flipped.json()["hang_inference"] is True
    assert engine.get("/health").status_code == 500
    with pytest.raises(httpx.ReadTimeout):
        engine.post("/v1/chat/completions", CHAT, timeout=0.5)

    held: list[httpx.Response] = []
    waiter = threading.Thread(
        target=lambda: held.append(engine.post("/v1/chat/completions", WARMUP, timeout=30))
    )
    waiter.start()
    wait_until(lambda: engine.stats()["hanging"] == 1, what="the request to hang")
    assert engine.stats()["warmup_seen"] is True
    assert engine.stats()["warmup_answered"] is False
    engine.post("/_control", {"hang_inference": False, "dead_health": False})
    waiter.join(timeout=15)
    assert held and held[0].status_code == 200
    assert engine.get("/health").status_code == 200
    bad = engine.post("/_control", {"hang_inference": "yes"})
    assert bad.status_code == 400
    assert bad.json()["error"]["param"] == "hang_inference"
    assert engine.post("/_control", {"exit": True}).json()["exiting"] is True
    assert engine.proc.wait(timeout=15) == 3


def test_sigterm_exits_zero_and_pid_file(start: Callable[..., Engine], tmp_path: Path) -> None:
    pid_file = tmp_path / "engine.pid"
    engine = start("--pid-file", str(pid_file))
    assert int(pid_file.read_text()) == engine.proc.pid
    engine.proc.send_signal(signal.SIGTERM)
    assert engine.proc.wait(timeout=10) == 0
    assert not pid_file.exists()


# --- multi-port mode --------------------------------------------------------------------------


def test_multi_port_mode_answers_on_first_and_last_port(start: Callable[..., Engine]) -> None:
    count = 2000
    first = free_port_run(count)
    engine = start(
        "--ports-from",
        str(first),
        "--ports-count",
        str(count),
        "--quiet",
        port=first,
        use_port_flag=False,
    )
    last = first + count - 1
    assert f"127.0.0.1:{first}-{last} ({count} ports)" in engine.log()
    for port in (first, last):
        response = httpx.get(f"http://127.0.0.1:{port}/health", timeout=10)
        assert response.json() == {"status": "ok"}
    chat = httpx.post(f"http://127.0.0.1:{last}/v1/chat/completions", json=WARMUP, timeout=10)
    assert chat.json()["choices"][0]["message"]["content"] == "this"
    stats = httpx.get(f"http://127.0.0.1:{first + 1}/_stats", timeout=10).json()
    assert stats["warmup_seen"] is True
    assert stats["requests_by_port"][str(last)] == 2


def test_install_copy_is_world_readable_and_idempotent(tmp_path: Path) -> None:
    """Slurm jobs run as an unprivileged user: the installed copy and its folders must be
    readable by everyone, and a second install must not rewrite an unchanged file."""
    import stat

    from provisioner.testengine import SERVER_PATH, install_copy

    target = install_copy(tmp_path / "engines")
    assert target.read_bytes() == SERVER_PATH.read_bytes()
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert stat.S_IMODE(target.parent.stat().st_mode) == 0o755
    before = target.stat().st_mtime_ns
    assert install_copy(tmp_path / "engines") == target
    assert target.stat().st_mtime_ns == before
