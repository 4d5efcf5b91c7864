"""Executing a pass's actions (provisioner/execute.py) through ``run_pass``.

Slurm is the in-process FakeSlurmrestd (provisioner/slurm/fake.py, API v0.0.38 shapes recorded
from Slurm 22.05). It stands in for fault injection only: refusals, lost submit answers, purged
jobs and orphans on demand. The same behaviours are proven against the real slurmrestd in
tests/e2e. Submit answers are lost with an httpx transport that drops them (the request itself
reaches the fake, or does not). The warm-up test runs the project's real test engine
(provisioner/testengine/server.py) in its own process.
"""

from __future__ import annotations

import contextlib
import dataclasses
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from obleth.core.choices import ReplicaState
from obleth.core.models import Endpoint, Launch, ManagedSpec, Model, Replica, SlurmSettings
from provisioner.reconcile import PassReport, run_pass
from provisioner.slurm.client import SlurmClient
from provisioner.slurm.fake import FakeJob, FakeNode, FakeSlurmrestd
from tests.plugins.factories import make_slurm_model

REPO = Path(__file__).resolve().parents[2]
ENGINE = REPO / "provisioner" / "testengine" / "server.py"
TOKEN = "fake-slurm-token"
SUBMIT = ("POST", "/slurm/v0.0.38/job/submit")


@dataclasses.dataclass
class Cluster:
    fake: FakeSlurmrestd
    prefix: str

    def our_jobs(self) -> list[FakeJob]:
        return [j for j in list(self.fake.jobs.values()) if j.name.startswith(self.prefix)]

    def submits(self) -> int:
        return sum(1 for r in list(self.fake.requests) if r == SUBMIT)


@pytest.fixture
def cluster(db: Any, settings: Any) -> Iterator[Cluster]:
    """Slurm enabled against a fresh fake; jobs stay PENDING (start_delay) unless a test says."""
    prefix = f"obx{uuid.uuid4().hex[:6]}-"
    settings.OBLETH_PROVISIONER_JOB_PREFIX = prefix
    settings.OBLETH_PROVISIONER_DISPATCH = "inline"
    settings.OBLETH_PROVISIONER_WARMUP_TIMEOUT_SECS = 0
    settings.OBLETH_PROVISIONER_HEALTH_TIMEOUT_SECS = 2
    settings.OBLETH_PORT_SPAN = 1
    with FakeSlurmrestd(token=TOKEN, start_delay=3600, nodes=[FakeNode("localhost")]) as fake:
        slurm = SlurmSettings.load()
        slurm.enabled = True
        slurm.slurmrestd_url = fake.url
        slurm.user = "obleth"
        slurm.jwt = TOKEN
        slurm.api_version = "v0.0.38"
        slurm.node_addresses = {"localhost": "127.0.0.1"}
        slurm.save()
        yield Cluster(fake, prefix)


class LosingTransport(httpx.BaseTransport):
    """Loses the answer of the first submit. ``deliver``: the request reaches slurmrestd (the job
    exists, the answer is lost on the way back); otherwise it never leaves (no job)."""

    def __init__(self, *, deliver: bool) -> None:
        self.inner = httpx.HTTPTransport()
        self.deliver = deliver
        self.armed = True

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if self.armed and request.method == "POST" and request.url.path.endswith("/job/submit"):
            self.armed = False
            if self.deliver:
                response = self.inner.handle_request(request)
                response.read()
                response.close()
                raise httpx.ReadTimeout("answer lost on the way back", request=request)
            raise httpx.ConnectError("connection refused before sending", request=request)
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()


def losing_factory(*, deliver: bool) -> Callable[[SlurmSettings], SlurmClient]:
    def factory(slurm: SlurmSettings) -> SlurmClient:
        return SlurmClient(
            slurm.slurmrestd_url,
            slurm.user,
            slurm.jwt,
            slurm.api_version,
            timeout=5,
            transport=LosingTransport(deliver=deliver),
        )

    return factory


def failed(report: PassReport) -> list[str]:
    return [f"{r.action}: {r.detail}" for r in report.results if not r.ok]


def spec_of(model: Model) -> ManagedSpec:
    return ManagedSpec.objects.get(pk=model.pk)


# ----------------------------------------------------------------------------------- refusals


def test_refused_submit_drops_the_row_records_why_and_the_next_success_clears_it(
    cluster: Cluster,
) -> None:
    model = make_slurm_model(spec={"partition": "no-such-partition", "target_replicas": 1})

    report = run_pass()
    # A failed action makes the pass an error (it feeds the held alert), in both modes.
    assert report.status == "error", report.detail
    assert any("Invalid partition name specified" in f for f in failed(report)), report.results
    assert not Replica.objects.filter(model_id=model.pk).exists()
    launch = Launch.objects.get(model_id=model.pk)
    assert launch.end_state == "rejected"
    assert "Invalid partition name specified" in launch.end_reason
    assert launch.ended_at is not None and launch.job_id == ""
    assert launch.partition == "no-such-partition"
    spec = spec_of(model)
    assert "Invalid partition name specified" in spec.last_provision_error
    assert spec.last_provision_error.startswith("Slurm refused the job")
    assert spec.last_provision_error_at is not None
    assert cluster.our_jobs() == []

    # Right after a refusal the model backs off: the next (fast) pass does not submit again.
    report = run_pass()
    assert failed(report) == [] and not Replica.objects.filter(model_id=model.pk).exists()
    assert Launch.objects.filter(model_id=model.pk).count() == 1

    # The operator fixes the spec (a save, as the API and admin do): tried again at once.
    spec = spec_of(model)
    spec.partition = "debug"
    spec.save()
    report = run_pass()
    assert failed(report) == []
    row = Replica.objects.get(model_id=model.pk)
    assert row.job_id and row.state == ReplicaState.PENDING
    assert [str(j.job_id) for j in cluster.our_jobs()] == [row.job_id]
    spec = spec_of(model)
    assert spec.last_provision_error == "" and spec.last_provision_error_at is None
    ok_launch = Launch.objects.get(pk=row.pk)
    assert ok_launch.job_id == row.job_id and ok_launch.end_state == ""
    assert Launch.objects.filter(model_id=model.pk).count() == 2  # history keeps the refusal


def test_adapter_config_error_is_handled_like_a_refusal(cluster: Cluster) -> None:
    """v0.0.38 has no exclude field: an operator exclude is refused before anything is sent."""
    model = make_slurm_model(spec={"exclude": "node9", "target_replicas": 1})
    report = run_pass()
    assert any("excluded_nodes is not supported" in f for f in failed(report)), report.results
    assert cluster.submits() == 0  # refused by the adapter, never sent
    assert not Replica.objects.filter(model_id=model.pk).exists()
    launch = Launch.objects.get(model_id=model.pk)
    assert launch.end_state == "rejected"
    assert "excluded_nodes is not supported" in launch.end_reason
    assert launch.exclude == "node9"
    assert "excluded_nodes is not supported" in spec_of(model).last_provision_error

    spec = spec_of(model)  # the operator clears the exclude list (a save, as API and admin do)
    spec.exclude = ""
    spec.save()
    assert failed(run_pass()) == []
    assert cluster.submits() == 1
    assert spec_of(model).last_provision_error == ""


# ------------------------------------------------------------------------- uncertain answers


def test_lost_submit_answer_keeps_the_row_and_the_next_pass_adopts_the_job(
    cluster: Cluster,
) -> None:
    model = make_slurm_model(spec={"target_replicas": 1})
    report = run_pass(client_factory=losing_factory(deliver=True))
    assert report.status == "error"  # the submit failed: the pass says so
    assert any("answer lost" in f for f in failed(report)), report.results
    row = Replica.objects.get(model_id=model.pk)
    assert row.job_id == "" and row.submitted_at is not None
    assert row.job_name.startswith(cluster.prefix)
    jobs = cluster.our_jobs()
    assert [j.name for j in jobs] == [row.job_name]  # Slurm did create it

    report = run_pass()
    assert failed(report) == []
    assert any(r.action == "Adopt" for r in report.results), report.results
    row.refresh_from_db()
    assert row.job_id == str(jobs[0].job_id)
    assert cluster.submits() == 1  # adopted, not submitted again

    run_pass()
    assert len(cluster.our_jobs()) == 1
    assert Replica.objects.filter(model_id=model.pk).count() == 1


def test_submit_that_never_left_is_sent_again_with_the_same_identity(cluster: Cluster) -> None:
    model = make_slurm_model(spec={"target_replicas": 1})
    report = run_pass(client_factory=losing_factory(deliver=False))
    assert any("connection refused" in f for f in failed(report)), report.results
    row = Replica.objects.get(model_id=model.pk)
    assert row.job_id == "" and row.submitted_at is not None
    first_submitted_at = row.submitted_at
    assert cluster.our_jobs() == []

    report = run_pass()
    assert failed(report) == []
    submits = [r for r in report.results if r.action == "Submit"]
    assert [s.replica_id for s in submits] == [str(row.pk)]  # same row, not a new one
    row.refresh_from_db()
    jobs = cluster.our_jobs()
    assert [j.name for j in jobs] == [row.job_name]
    assert row.job_id == str(jobs[0].job_id)
    assert row.submitted_at is not None and row.submitted_at > first_submitted_at

    run_pass()
    assert len(cluster.our_jobs()) == 1
    assert Replica.objects.filter(model_id=model.pk).count() == 1


def test_adopted_replica_has_its_launch_history_row(cluster: Cluster) -> None:
    model = make_slurm_model(spec={"target_replicas": 1})
    run_pass(client_factory=losing_factory(deliver=True))
    run_pass()
    row = Replica.objects.get(model_id=model.pk)
    assert row.job_id
    launch = Launch.objects.filter(pk=row.pk).first()
    assert launch is not None, "no launch history for the adopted replica"
    assert launch.job_id == row.job_id and launch.job_name == row.job_name


# ---------------------------------------------------------------------- vanished and orphans


def test_a_single_vanished_job_is_marked_lost(cluster: Cluster) -> None:
    model = make_slurm_model(spec={"target_replicas": 2})
    run_pass()
    rows = list(Replica.objects.filter(model_id=model.pk).order_by("job_id"))
    assert len(rows) == 2 and all(r.job_id for r in rows)
    gone, kept = rows
    cluster.fake.purge(gone.job_id)

    report = run_pass()
    assert report.status == "ok", report.detail
    gone.refresh_from_db()
    kept.refresh_from_db()
    assert gone.state == ReplicaState.LOST
    assert gone.last_message == "job gone"
    assert kept.state == ReplicaState.PENDING
    launch = Launch.objects.get(pk=gone.pk)
    assert launch.end_state == "gone" and launch.ended_at is not None
    # and a replacement was submitted in the same pass
    live = Replica.objects.filter(model_id=model.pk).exclude(state=ReplicaState.LOST)
    assert live.count() == 2


def test_orphan_job_with_our_prefix_is_cancelled_and_others_are_untouched(
    cluster: Cluster,
) -> None:
    [orphan] = cluster.fake.bulk_add(1, name_prefix=f"{cluster.prefix}ghost-")
    [foreign] = cluster.fake.bulk_add(1, name_prefix="someone-else-")
    report = run_pass()
    assert report.status == "ok", report.detail
    assert [(r.action, r.replica_id, r.ok) for r in report.results] == [
        ("CancelOrphan", str(orphan), True)
    ]
    orphan_job, foreign_job = cluster.fake.job(orphan), cluster.fake.job(foreign)
    assert orphan_job is not None and orphan_job.state == "CANCELLED"
    assert foreign_job is not None and foreign_job.state == "RUNNING"
    assert ("DELETE", f"/slurm/v0.0.38/job/{foreign}") not in cluster.fake.requests


# ------------------------------------------------------------------------------------ warm-up


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def running_engine(port: int, model: str, api_key: str = "") -> Iterator[str]:
    """The real test engine in its own process; yields its root URL. With ``api_key`` it demands
    that key on /v1 (as a replica's engine does with its replica key)."""
    proc = subprocess.Popen(
        ["/usr/bin/python3", str(ENGINE), "--host", "127.0.0.1", "--port", str(port)]
        + ["--model", model, "--quiet"]
        + (["--api-key", api_key] if api_key else []),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("the test engine did not start")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_promotion_registers_the_endpoint_and_the_warm_up_reaches_the_engine(
    cluster: Cluster, settings: Any
) -> None:
    settings.OBLETH_PROVISIONER_WARMUP_TIMEOUT_SECS = 30
    cluster.fake.start_delay = 0.0
    port = _free_port()
    model = make_slurm_model(spec={"target_replicas": 1, "serving_port": port})
    run_pass()  # submit; the fake starts the job on "localhost" at once
    key = Replica.objects.get(model_id=model.pk).api_key  # what the job's engine is given
    with running_engine(port, "warm-model", key) as root:
        assert httpx.get(f"{root}/_stats", timeout=5).json()["warmup_seen"] is False
        report = run_pass()  # listed RUNNING, probed ready, promoted, warmed up
        assert failed(report) == []
        row = Replica.objects.get(model_id=model.pk)
        assert row.state == ReplicaState.HEALTHY, (row.last_message, report.results)
        assert row.port == port and row.nodes == "localhost"
        endpoint = Endpoint.objects.get(model=model)
        assert endpoint.api_base == f"http://127.0.0.1:{port}/v1"
        assert endpoint.replica_id == row.pk and row.endpoint_id == endpoint.pk
        assert endpoint.api_key == key  # the gateway and its checks send the replica key
        stats = httpx.get(f"{root}/_stats", timeout=5).json()
        assert stats["warmup_seen"] is True, stats  # /v1 answers only with the key
        assert Launch.objects.get(pk=row.pk).healthy_at is not None


def test_no_warm_up_when_it_is_switched_off(cluster: Cluster) -> None:
    cluster.fake.start_delay = 0.0
    port = _free_port()
    model = make_slurm_model(spec={"target_replicas": 1, "serving_port": port})
    run_pass()
    key = Replica.objects.get(model_id=model.pk).api_key
    with running_engine(port, "cold-model", key) as root:
        run_pass()
        assert Replica.objects.get(model_id=model.pk).state == ReplicaState.HEALTHY
        assert httpx.get(f"{root}/_stats", timeout=5).json()["warmup_seen"] is False


def test_a_loss_seen_while_completing_is_settled_with_its_real_end(cluster: Cluster) -> None:
    """Slurm 22.05 lists a job being torn down as COMPLETING only (with obleth_serve draining,
    for OBLETH_DRAIN_SECS after a scancel). A serving replica is marked lost then, as churn; the
    pass that lists the real end records it: CANCELLED stays churn, FAILED becomes a failed
    launch and counts toward "Stop after failed launches". The fake slurmrestd stands in for
    Slurm's states; nothing else is faked."""
    model = make_slurm_model(spec={"target_replicas": 1, "max_job_failures": 1})
    run_pass()
    first = Replica.objects.get(model_id=model.pk)
    cluster.fake.set_job_state(first.job_id, "RUNNING")
    Replica.objects.filter(pk=first.pk).update(
        state=ReplicaState.HEALTHY, healthy_at=first.created_at, nodes="localhost"
    )

    cluster.fake.set_job_state(first.job_id, "COMPLETING", exit_code=15)
    assert run_pass().status == "ok"
    first.refresh_from_db()
    launch = Launch.objects.get(pk=first.pk)
    assert first.state == ReplicaState.LOST
    assert (launch.end_state, launch.failed_launch) == ("COMPLETING", False)
    assert "churn" in first.last_message
    second = Replica.objects.exclude(pk=first.pk).get(model_id=model.pk)  # replaced at once

    cluster.fake.set_job_state(first.job_id, "FAILED", reason="NonZeroExitCode", exit_code=1)
    assert run_pass().status == "ok"
    first.refresh_from_db()
    launch.refresh_from_db()
    assert (launch.end_state, launch.end_reason) == ("FAILED", "NonZeroExitCode")
    assert launch.failed_launch and launch.exit_code == 1
    assert first.last_message == "job ended: FAILED (NonZeroExitCode)"
    assert "Stopped launching replicas after 1 failed launches" in spec_of(model).breaker_message

    # The replacement's own end is churn (cancelled by someone else): the model stays stopped
    # only because of the first one's real failure, and nothing else is submitted.
    cluster.fake.set_job_state(second.job_id, "CANCELLED", exit_code=15)
    run_pass()
    assert Replica.objects.filter(model_id=model.pk).exclude(state=ReplicaState.LOST).count() == 0
