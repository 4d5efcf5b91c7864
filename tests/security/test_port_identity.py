"""Replicas prove they are ours before promotion (issue 7, part 5).

Real local HTTP servers sit inside a replica's port window on 127.0.0.1: a foreign server that
answers 200 to /health and to everything (it accepts any key), the project's test engine started
with ANOTHER key, a server that takes any bearer token, and a stand-in for Ollama. The pass runs
for real (observe, plan, execute, real probes over TCP); only slurmrestd is the in-process fake
(provisioner/slurm/fake.py), because a job here must "run" while the test, not Slurm, starts the
server inside its window. The real-Slurm proof that the library test-engine recipe still comes up
healthy with its key is tests/e2e (the "healthy" tests).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from obleth.core.choices import IdentityCheck, ReplicaState
from obleth.core.models import Endpoint, Launch, Replica, SlurmSettings
from obleth.gateway.health import check_endpoint, clear_catalog_cache
from provisioner.probe import IdentityProof, probe_one
from provisioner.reconcile import run_pass
from provisioner.services import warm_up_replica
from provisioner.slurm.fake import FakeNode, FakeSlurmrestd
from tests.plugins.factories import make_slurm_model
from tests.plugins.gateway_client import GatewayClient

ENGINE = Path(__file__).resolve().parents[2] / "provisioner" / "testengine" / "server.py"
TOKEN = "fake-slurm-token"
SPAN = 4
OUR_PORTS = range(20400, 20500)  # this helper's port range (HELPERS.md)


# ---------------------------------------------------------------------------------- servers


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_window(span: int = SPAN) -> int:
    """The base of ``span`` consecutive free ports in our range."""
    for base in range(OUR_PORTS.start, OUR_PORTS.stop - span + 1, span):
        if all(_port_free(p) for p in range(base, base + span)):
            return base
    raise RuntimeError("no free port window in 20400-20499")


@dataclasses.dataclass
class Seen:
    method: str
    path: str
    authorization: str


class Recorder(ThreadingHTTPServer):
    """A stdlib server in a thread that records every request and answers per ``mode``:

    - ``accept-all``: 200 to everything (health, /v1/models, inference): accepts any key;
    - ``any-bearer``: 401 without an Authorization header, 200 with any bearer token;
    - ``keyed``: an engine that checks ``key`` like vLLM (/health open, /v1 needs the key);
    - ``ollama``: no key at all; /api/tags and /v1/models list ``models``;
    - ``stall``: /health answers 200, every other request hangs;
    - ``trickle``: every answer's body comes one byte every 0.1 s.
    """

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, port: int, mode: str, key: str = "", models: tuple[str, ...] = ()):
        self.mode, self.key, self.models = mode, key, models
        self.seen: list[Seen] = []
        super().__init__(("127.0.0.1", port), _Handler)

    def answer(self, method: str, path: str, auth: str) -> tuple[int, dict[str, Any]]:
        self.seen.append(Seen(method, path, auth))
        listing = {"object": "list", "data": [{"id": m, "object": "model"} for m in self.models]}
        chat = {
            "id": "x",
            "object": "chat.completion",
            "model": self.models[0] if self.models else "m",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "hi"},
                    "finish_reason": "stop",
                }
            ],
        }
        if self.mode == "stall" and path != "/health":
            time.sleep(30)  # a client that stalls: health is fine, nothing else ever answers
        if self.mode in ("accept-all", "stall"):
            return 200, listing if path == "/v1/models" else {"status": "ok", **chat}
        if self.mode == "any-bearer":
            if path == "/health":
                return 200, {"status": "ok"}
            return (200, listing) if auth.startswith("Bearer ") else (401, {"error": "no key"})
        if self.mode == "ollama":
            if path == "/api/tags":
                return 200, {"models": [{"name": m} for m in self.models]}
            return (200, listing) if path == "/v1/models" else (200, chat)
        # keyed
        if path == "/health":
            return 200, {"status": "ok"}
        if auth != f"Bearer {self.key}":
            return 401, {"error": "Unauthorized"}
        return (200, listing) if path == "/v1/models" else (200, chat)

    def bearers(self) -> list[str]:
        return [s.authorization for s in self.seen if s.authorization]


class _Handler(BaseHTTPRequestHandler):
    server: Recorder

    def _reply(self) -> None:
        if self.server.mode == "trickle":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "100000")
            self.end_headers()
            with contextlib.suppress(OSError):
                for _ in range(600):  # one byte every 0.1 s, for a minute
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(0.1)
            return
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        status, payload = self.server.answer(
            self.command, self.path.split("?")[0], self.headers.get("Authorization", "")
        )
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = _reply
    do_POST = _reply

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass


@contextlib.contextmanager
def recorder(port: int, mode: str, **kwargs: Any) -> Iterator[Recorder]:
    server = Recorder(port, mode, **kwargs)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def run_engine(port: int, model: str, *flags: str) -> Iterator[str]:
    """The project's real test engine in its own process, e.g. with ``--api-key KEY``."""
    proc = subprocess.Popen(
        ["/usr/bin/python3", str(ENGINE), "--host", "127.0.0.1", "--port", str(port)]
        + ["--model", model, "--quiet", *flags],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={"PATH": "/usr/bin:/bin"},  # no replica key from this process's environment
    )
    try:
        deadline = time.monotonic() + 20
        while _port_free(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the test engine did not start: {_stderr(proc)}")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _stderr(proc: subprocess.Popen[bytes]) -> str:
    if proc.poll() is None or proc.stderr is None:
        return "still running"
    return proc.stderr.read().decode(errors="replace")[-500:]


# ---------------------------------------------------------------------------------- cluster


@dataclasses.dataclass
class Cluster:
    fake: FakeSlurmrestd
    prefix: str

    def submit_and_key(self, model: Any) -> Replica:
        """One pass: the row is written with its key and the job "runs" on localhost."""
        run_pass()
        row = Replica.objects.get(model_id=model.pk)
        assert row.api_key.startswith("obr_") and len(row.api_key) > 40
        return row


@pytest.fixture
def cluster(db: Any, settings: Any) -> Iterator[Cluster]:
    prefix = f"obi{uuid.uuid4().hex[:6]}-"
    settings.OBLETH_PROVISIONER_JOB_PREFIX = prefix
    settings.OBLETH_PROVISIONER_DISPATCH = "inline"
    settings.OBLETH_PROVISIONER_WARMUP_TIMEOUT_SECS = 0
    settings.OBLETH_PROVISIONER_HEALTH_TIMEOUT_SECS = 2
    settings.OBLETH_PORT_SPAN = SPAN
    settings.OBLETH_GATEWAY_API_KEYS = []
    settings.OBLETH_GATEWAY_OPEN = True
    clear_catalog_cache()
    with FakeSlurmrestd(token=TOKEN, start_delay=0.0, nodes=[FakeNode("localhost")]) as fake:
        slurm = SlurmSettings.load()
        slurm.enabled = True
        slurm.slurmrestd_url = fake.url
        slurm.user = "obleth"
        slurm.jwt = TOKEN
        slurm.api_version = "v0.0.38"
        slurm.node_addresses = {"localhost": "127.0.0.1"}
        slurm.save()
        yield Cluster(fake, prefix)
    clear_catalog_cache()


def slurm_model(base: int, name: str = "idm", **spec: Any) -> Any:
    return make_slurm_model(
        name=name,
        upstream_model=spec.pop("upstream_model", name),
        spec={"target_replicas": 1, "serving_port": base, **spec},
    )


def passes(n: int = 3) -> None:
    for _ in range(n):
        run_pass()


# ---------------------------------------------------------------------------------- the probe


def test_a_foreign_server_that_accepts_anything_is_never_promoted(cluster: Cluster) -> None:
    base = free_window()
    model = slurm_model(base)
    row = cluster.submit_and_key(model)
    with recorder(base, "accept-all", models=("idm",)) as foreign:
        passes(3)
        row.refresh_from_db()
        assert row.state == ReplicaState.STARTING, row.last_message
        assert not Endpoint.objects.filter(model=model).exists()
        outcome = probe_one(
            "127.0.0.1",
            base,
            SPAN,
            "/health",
            timeout=2,
            identity=IdentityProof("key", row.api_key),
        )
        # the foreign server never received the key, nor a warm-up or any inference
        assert row.api_key not in " ".join(foreign.bearers())
        assert not [s for s in foreign.seen if s.method == "POST"]
    assert not outcome.ready
    assert f"wrong server: answered /v1/models without the replica key on port {base}" in (
        outcome.detail
    )


def test_a_foreign_server_with_another_key_is_never_promoted(cluster: Cluster) -> None:
    base = free_window()
    model = slurm_model(base)
    row = cluster.submit_and_key(model)
    with run_engine(base, "idm", "--api-key", "obr_someone-elses-key-0123456789abcdef"):
        passes(3)
        row.refresh_from_db()
        assert row.state == ReplicaState.STARTING
        assert not Endpoint.objects.filter(model=model).exists()
        outcome = probe_one(
            "127.0.0.1", base, 1, "/health", timeout=2, identity=IdentityProof("key", row.api_key)
        )
    assert "wrong server: refused the replica key on /v1/models (HTTP 401)" in outcome.detail


def test_a_server_that_takes_any_bearer_token_is_never_promoted(cluster: Cluster) -> None:
    base = free_window()
    model = slurm_model(base)
    row = cluster.submit_and_key(model)
    with recorder(base, "any-bearer", models=("idm",)):
        passes(2)
        row.refresh_from_db()
        assert row.state == ReplicaState.STARTING
        outcome = probe_one(
            "127.0.0.1", base, 1, "/health", timeout=2, identity=IdentityProof("key", row.api_key)
        )
    assert "wrong server: accepted a wrong key on /v1/models" in outcome.detail


def test_our_test_engine_with_the_key_is_promoted_past_a_foreign_server(
    cluster: Cluster, settings: Any
) -> None:
    """The foreign server holds the window's first port; our engine took the next free one,
    as the batch script's window block does."""
    settings.OBLETH_PROVISIONER_WARMUP_TIMEOUT_SECS = 20
    base = free_window()
    model = slurm_model(base)
    row = cluster.submit_and_key(model)
    with (
        recorder(base, "accept-all", models=("idm",)) as foreign,
        run_engine(base + 1, "idm", "--api-key", row.api_key),
    ):
        passes(2)
        row.refresh_from_db()
        assert row.state == ReplicaState.HEALTHY, row.last_message
        assert row.port == base + 1 and row.identity_proven
        endpoint = Endpoint.objects.get(model=model)
        assert endpoint.api_base == f"http://127.0.0.1:{base + 1}/v1"
        assert endpoint.api_key == row.api_key
        stats = json.loads(_get(f"http://127.0.0.1:{base + 1}/_stats"))
        assert stats["warmup_seen"] is True  # the warm-up went to ours, with the key
        assert not [s for s in foreign.seen if s.method == "POST"]  # and never to theirs
        assert row.api_key not in " ".join(foreign.bearers())


def _get(url: str) -> str:
    import httpx

    return httpx.get(url, timeout=5).text


def test_a_server_that_stalls_after_a_ready_health_is_not_promoted(cluster: Cluster) -> None:
    base = free_window()
    model = slurm_model(base)
    row = cluster.submit_and_key(model)
    with recorder(base, "stall", models=("idm",)):
        started = time.monotonic()
        outcome = probe_one(
            "127.0.0.1", base, 1, "/health", timeout=1, identity=IdentityProof("key", row.api_key)
        )
        took = time.monotonic() - started
        run_pass()
        row.refresh_from_db()
    assert not outcome.ready and "identity not proven: GET /v1/models timed out" in outcome.detail
    assert took < 10  # bounded by the probe timeout, not by the server
    assert row.state == ReplicaState.STARTING


def test_a_server_that_trickles_its_answer_cannot_hold_the_probe() -> None:
    base = free_window(1)
    with recorder(base, "trickle"):
        started = time.monotonic()
        outcome = probe_one("127.0.0.1", base, 1, "/health", timeout=1)
        took = time.monotonic() - started
    assert not outcome.ready and "timed out" in outcome.detail
    assert took < 5  # two timeouts for the whole answer, not one per byte


# ---------------------------------------------------------------------------------- Ollama


def ollama_model(base: int, name: str) -> Any:
    return slurm_model(
        base,
        name=name,
        upstream_model="qwen2.5:0.5b",
        health_path="/api/tags",
        launcher_spec={"recipe": {"id": None, "name": "Ollama", "engine": "ollama"}},
    )


def test_an_ollama_replica_is_promoted_on_its_model_name_and_flagged_not_proven(
    cluster: Cluster, admin_client: Client, api_client: Any
) -> None:
    base = free_window()
    model = ollama_model(base, "olm")
    row = cluster.submit_and_key(model)
    assert row.identity_check == IdentityCheck.MODEL_NAME
    with recorder(base, "ollama", models=("qwen2.5:0.5b",)):
        passes(2)
    row.refresh_from_db()
    assert row.state == ReplicaState.HEALTHY, row.last_message
    assert row.identity_proven is False
    page = admin_client.get("/admin/core/replica/")
    assert page.status_code == 200
    assert "identity not proven" in page.content.decode()
    answer = api_client.get(f"/api/v1/replicas/{row.pk}")
    assert answer.status_code == 200
    assert answer.json()["identity_proven"] is False
    assert answer.json()["identity_check"] == "model-name"


def test_an_ollama_style_server_serving_another_model_is_not_promoted(cluster: Cluster) -> None:
    base = free_window()
    model = ollama_model(base, "olm2")
    row = cluster.submit_and_key(model)
    with recorder(base, "ollama", models=("llama3:latest",)):
        passes(2)
        outcome = probe_one(
            "127.0.0.1",
            base,
            1,
            "/api/tags",
            timeout=2,
            identity=IdentityProof("model-name", row.api_key, model_name="qwen2.5:0.5b"),
        )
    row.refresh_from_db()
    assert row.state == ReplicaState.STARTING
    assert "wrong server: /v1/models does not list model 'qwen2.5:0.5b'" in outcome.detail


# ------------------------------------------------------------------- the key travels upstream


def test_the_gateway_its_check_and_the_warm_up_send_the_replica_key_upstream(
    cluster: Cluster, settings: Any, gateway: GatewayClient
) -> None:
    """A fake upstream that checks the key like vLLM and counts the Authorization headers."""
    base = free_window()
    model = slurm_model(base, name="keyed")
    row = cluster.submit_and_key(model)
    with recorder(base, "keyed", key=row.api_key, models=("keyed",)) as upstream:
        passes(2)
        row.refresh_from_db()
        assert row.state == ReplicaState.HEALTHY, row.last_message
        endpoint = Endpoint.objects.get(model=model)
        before = len(upstream.seen)

        answer = gateway.post(
            "/v1/chat/completions",
            data=json.dumps({"model": "keyed", "messages": [{"role": "user", "content": "hi"}]}),
            content_type="application/json",
        )
        assert answer.status_code == 200, answer.content
        proxied = [s for s in upstream.seen[before:] if s.path == "/v1/chat/completions"]
        assert [s.authorization for s in proxied] == [f"Bearer {row.api_key}"]

        before = len(upstream.seen)
        check_endpoint(endpoint)
        checked = upstream.seen[before:]
        assert checked and all(s.authorization == f"Bearer {row.api_key}" for s in checked)

        settings.OBLETH_PROVISIONER_WARMUP_TIMEOUT_SECS = 10
        before = len(upstream.seen)
        result = warm_up_replica(str(row.pk), endpoint.api_base, "chat")
        assert result["ok"] is True, result
        warmed = upstream.seen[before:]
        assert {s.path for s in warmed} == {"/v1/models", "/v1/chat/completions"}
        assert all(s.authorization == f"Bearer {row.api_key}" for s in warmed)


# ---------------------------------------------------------------------------- no leak anywhere


def test_the_key_is_in_the_job_environment_only(
    cluster: Cluster, caplog: pytest.LogCaptureFixture, admin_client: Client, api_client: Any
) -> None:
    caplog.set_level(logging.DEBUG)
    base = free_window()
    model = slurm_model(base, name="leak")
    row = cluster.submit_and_key(model)
    key = row.api_key
    (job,) = [j for j in cluster.fake.jobs.values() if j.name.startswith(cluster.prefix)]
    assert job.environment.get("OBLETH_REPLICA_API_KEY") == key  # the job gets it
    assert key not in job.script and key not in job.name
    launch = Launch.objects.get(pk=row.pk)
    assert launch.submission["environment"]["OBLETH_REPLICA_API_KEY"] == "[set]"
    assert key not in json.dumps(launch.submission)
    assert key not in caplog.text
    # stored encrypted: the column does not hold the key in clear
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT api_key::text FROM core_replica WHERE id = %s", [row.pk])
        (raw,) = cursor.fetchone()
    assert key not in str(raw)
    for url in (f"/api/v1/replicas/{row.pk}", "/api/v1/replicas"):
        answer = api_client.get(url)
        assert answer.status_code == 200, (url, answer.content)
        assert key not in answer.content.decode(), url
    detail = api_client.get(f"/api/v1/replicas/{row.pk}").json()
    assert "api_key" not in detail and detail["identity_check"] == "key"
    for url in ("/admin/core/replica/", f"/admin/core/replica/{row.pk}/change/"):
        page = admin_client.get(url)
        assert page.status_code == 200 and key not in page.content.decode(), url


def test_a_resubmitted_row_keeps_its_key(cluster: Cluster) -> None:
    """A row whose submit never reached Slurm is submitted again with the same key."""
    base = free_window()
    model = slurm_model(base, name="again")
    row = cluster.submit_and_key(model)
    Replica.objects.filter(pk=row.pk).update(job_id="", submitted_at=None)
    cluster.fake.jobs.clear()
    run_pass()
    again = Replica.objects.get(pk=row.pk)
    assert again.api_key == row.api_key and again.job_id
    (job,) = list(cluster.fake.jobs.values())
    assert job.environment["OBLETH_REPLICA_API_KEY"] == row.api_key


@pytest.fixture
def admin_client(db: Any) -> Client:
    user = get_user_model().objects.create_superuser("identity-admin", "a@example.org", "pw-x")
    client = Client()
    client.force_login(user)
    return client
