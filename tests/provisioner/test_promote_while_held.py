"""The replacement outlier of issue 8: a replica whose job was already seen running waited for a
slurmrestd outage to end before it was promoted, although its server answered (9-13 s in the
soak). A pass whose job listing fails now still promotes such replicas, and nothing else.

Slurm is the in-process FakeSlurmrestd (provisioner/slurm/fake.py), which can be made
unreachable on demand (the shared real slurmrestd must not be stopped); the replica's server is
a real HTTP server on the replica's port.
"""

from __future__ import annotations

import http.server
import json
import socket
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from obleth.core.models import Endpoint, Replica, SlurmSettings
from provisioner.reconcile import run_pass
from provisioner.slurm.fake import FakeNode, FakeSlurmrestd
from tests.plugins.factories import make_slurm_model

TOKEN = "fake-slurm-token"


def free_window(span: int = 8) -> int:
    """A port p with p..p+span-1 free right now (nothing listening)."""
    for _ in range(50):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            base = int(sock.getsockname()[1])
        if base + span >= 65535:
            continue
        taken = False
        for port in range(base, base + span):
            with socket.socket() as probe:
                taken = probe.connect_ex(("127.0.0.1", port)) == 0
            if taken:
                break
        if not taken:
            return base
    raise RuntimeError("no free port window")


def keyed_engine(key: str) -> type[http.server.BaseHTTPRequestHandler]:
    """A server that proves it is the replica's: /health open, /v1/models only with its key."""

    class Engine(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path.startswith("/v1/") and self.headers.get("Authorization") != (
                f"Bearer {key}"
            ):
                status, payload = 401, {"error": "bad key"}
            elif self.path.startswith("/v1/models"):
                status, payload = 200, {"object": "list", "data": [{"id": "held"}]}
            else:
                status, payload = 200, {"status": "ok"}
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return None

    return Engine


@pytest.fixture
def fake(db: Any, settings: Any) -> Iterator[FakeSlurmrestd]:
    settings.OBLETH_PROVISIONER_JOB_PREFIX = f"obh{uuid.uuid4().hex[:6]}-"
    settings.OBLETH_PROVISIONER_DISPATCH = "inline"
    settings.OBLETH_PROVISIONER_WARMUP_TIMEOUT_SECS = 0
    settings.OBLETH_MODEL_HEALTH_ENABLED = False
    settings.OBLETH_PROVISIONER_HEALTH_TIMEOUT_SECS = 2
    with FakeSlurmrestd(token=TOKEN, start_delay=0, nodes=[FakeNode("localhost")]) as server:
        slurm = SlurmSettings.load()
        slurm.enabled, slurm.slurmrestd_url, slurm.user = True, server.url, "obleth"
        slurm.jwt, slurm.api_version = TOKEN, "v0.0.38"
        slurm.node_addresses = {"localhost": "127.0.0.1"}
        slurm.save()
        yield server


def test_a_replica_seen_running_is_promoted_while_slurmrestd_is_down(
    fake: FakeSlurmrestd,
) -> None:
    base = free_window()
    model = make_slurm_model(name="held", spec={"serving_port": base, "target_replicas": 1})
    assert run_pass(dispatch="inline").status == "ok"  # submit
    assert run_pass(dispatch="inline").status == "ok"  # running, nothing answers yet
    row = Replica.objects.get(model_id=model.pk)
    assert (row.state, row.nodes) == ("starting", "localhost")

    fake.set_down(True)  # slurmrestd goes away; the engine comes up meanwhile
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", row.port_base or base), keyed_engine(row.api_key)
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        report = run_pass(dispatch="inline", fast=True)
        assert report.status == "error" and "listing failed" in report.detail
        row.refresh_from_db()
        assert row.state == "healthy", report.detail
        endpoint = Endpoint.objects.get(model_id=model.pk)
        assert endpoint.api_base == f"http://127.0.0.1:{row.port_base}/v1"
        assert "meanwhile promoted 1 replica" in report.detail
        assert [r.action for r in report.results] == ["Promote"]

        fake.set_down(False)  # back: an ordinary pass, nothing to repair
        assert run_pass(dispatch="inline").status == "ok"
        assert Endpoint.objects.filter(model_id=model.pk).count() == 1
        assert Replica.objects.get(pk=row.pk).state == "healthy"
    finally:
        server.shutdown()
        server.server_close()


def test_while_held_nothing_but_promotion_happens(fake: FakeSlurmrestd) -> None:
    """Rows never seen running, rows asked to restart and replicas whose server does not answer
    are left alone; no loss, submit or endpoint removal without the listing."""
    base = free_window()
    model = make_slurm_model(name="held2", spec={"serving_port": base, "target_replicas": 2})
    assert run_pass(dispatch="inline").status == "ok"
    assert run_pass(dispatch="inline").status == "ok"
    first, second = Replica.objects.filter(model_id=model.pk).order_by("port_base")
    Replica.objects.filter(pk=second.pk).update(cancel_requested=True)
    before = sorted(Replica.objects.values_list("id", "state", "job_id", "endpoint_id"))
    fake.set_down(True)
    report = run_pass(dispatch="inline")
    assert report.status == "error" and report.results == []
    assert sorted(Replica.objects.values_list("id", "state", "job_id", "endpoint_id")) == before
    assert not Endpoint.objects.filter(model_id=model.pk).exists()


# ------------------------------------------------------------------ the pure rule (no database)


def _held_cases() -> list[Any]:
    from tests.provisioner.test_plan import H, P, S, eid, ep, promote, rep, snap, spec

    starting = rep(1, S, "101", nodes=("gpu7",), message="RUNNING")
    return [
        pytest.param(
            snap(replicas=[starting], probes={1: 8003}),
            [promote(1, node="gpu7", port=8003)],
            id="seen running on a known node, server answers: promoted",
        ),
        pytest.param(
            snap(replicas=[starting], probes={1: None}),
            [],
            id="server does not answer: nothing",
        ),
        pytest.param(
            snap(replicas=[rep(1, P, "101", nodes=())], probes={1: 8000}),
            [],
            id="never seen running (pending, no node): nothing",
        ),
        pytest.param(
            snap(replicas=[rep(1, S, "101", nodes=("gpu7",), cancel=True)], probes={1: 8000}),
            [],
            id="restart requested: nothing",
        ),
        pytest.param(
            snap(specs=[spec(target=0)], replicas=[starting], probes={1: 8000}),
            [promote(1, node="gpu7", port=8000)],
            id="target lowered meanwhile: still promoted (the next listed pass scales down)",
        ),
        pytest.param(
            snap(specs=[], replicas=[starting], probes={1: 8000}),
            [],
            id="model no longer provisioned: nothing",
        ),
        pytest.param(
            snap(
                replicas=[rep(2, H, "102", endpoint=eid(2)), starting],
                endpoints=[ep(2)],
                probes={2: 8008},
            ),
            [],
            id="serving replicas are left alone",
        ),
        pytest.param(
            snap(replicas=[starting], probes={1: 8003}, addresses={"gpu7": "10.0.0.7"}),
            [promote(1, node="gpu7", address="10.0.0.7", port=8003)],
            id="registered by the node's resolved address",
        ),
    ]


@pytest.mark.parametrize(("snapshot", "expected"), _held_cases())
def test_promotions_while_held(snapshot: Any, expected: list[Any]) -> None:
    from provisioner.plan import promotions_while_held

    assert promotions_while_held(snapshot) == expected
