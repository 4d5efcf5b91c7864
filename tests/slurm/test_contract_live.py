"""The same contract, through SlurmClient, against the REAL slurmrestd and the fake one.

``backend`` is parametrized: ``real`` is the local Slurm 22.05 cluster (fixture
``real_slurm``, never skipped), ``fake`` is ``provisioner.slurm.fake.FakeSlurmrestd``. The
fake exists for fault injection and scale; these tests are what keep it honest -- every
check here must pass on both.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from provisioner.slurm.client import SlurmClient
from provisioner.slurm.errors import SlurmAuthError, SlurmRejected
from provisioner.slurm.fake import FakeSlurmrestd
from provisioner.slurm.types import JobInfo, JobPhase, JobSubmission

BAD_TOKEN = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdW4iOiJvYmxldGgifQ.bm90LXRoZS1zaWduYXR1cmU"


@dataclasses.dataclass
class Backend:
    name: str
    url: str
    user: str
    token: str = dataclasses.field(repr=False)
    api_version: str
    workdir: Path

    def client(self, token: str | None = None, *, pinned: bool = True) -> SlurmClient:
        return SlurmClient(
            self.url, self.user, token or self.token, self.api_version if pinned else None
        )

    def submission(self, name: str, **changes: object) -> JobSubmission:
        sub = JobSubmission(
            name=name,
            script="#!/bin/bash\necho started\nsleep 300\n",
            partition="debug",
            current_working_directory=str(self.workdir),
            environment=(("PATH", "/usr/local/bin:/usr/bin:/bin"),),
            time_limit_minutes=5,
            memory_per_node_mb=64,
            standard_output=f"{self.workdir}/{name}-%j.out",
            standard_error=f"{self.workdir}/{name}-%j.err",
        )
        return dataclasses.replace(sub, **changes)  # type: ignore[arg-type]


def _workdir() -> Path:
    path = Path(tempfile.mkdtemp(prefix="obleth-slurm-contract-", dir="/tmp"))
    os.chmod(path, 0o777)  # the job user (obleth) writes its output here
    return path


@pytest.fixture(scope="module")
def fake_server() -> Iterator[FakeSlurmrestd]:
    server = FakeSlurmrestd(start_delay=0.3).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(params=["real", "fake"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    workdir = _workdir()
    try:
        if request.param == "real":
            real = request.getfixturevalue("real_slurm")
            yield Backend("real", real.url, real.user, real.token, real.api_version, workdir)
        else:
            fake: FakeSlurmrestd = request.getfixturevalue("fake_server")
            token = next(iter(fake.tokens))
            yield Backend("fake", fake.url, fake.tokens[token], token, fake.api_version, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def wait_for(
    client: SlurmClient, job_id: str, done: Callable[[JobInfo | None], bool], timeout: float
) -> JobInfo | None:
    deadline = time.monotonic() + timeout
    while True:
        job = client.get_job(job_id)
        if done(job):
            return job
        assert time.monotonic() < deadline, f"job {job_id} never got there; last: {job}"
        time.sleep(0.2)


def unique(prefix: str) -> str:
    return f"obleth-ct-{prefix}-{secrets.token_hex(3)}"


def test_submit_read_list_cancel_and_see_it_end(backend: Backend) -> None:
    name = unique("life")
    with backend.client() as client:
        job_id = client.submit(backend.submission(name))
        try:
            first = client.get_job(job_id)
            assert first is not None and first.name == name
            assert first.phase in (JobPhase.PENDING, JobPhase.RUNNING)
            running = wait_for(
                client, job_id, lambda j: j is not None and j.phase is JobPhase.RUNNING, 60
            )
            assert running is not None
            assert running.state == "RUNNING" and running.nodes == ("localhost",)
            assert running.user == backend.user and running.partition == "debug"
            assert running.start_time and running.reason == ""
            listed = client.list_jobs(name)
            assert [(j.job_id, j.phase) for j in listed] == [(job_id, JobPhase.RUNNING)]
            assert client.list_jobs(unique("nobody")) == []
        finally:
            assert client.cancel(job_id) is True
        ended = wait_for(client, job_id, lambda j: j is None or j.phase is JobPhase.GONE, 60)
        if ended is not None:
            assert ended.state == "CANCELLED" and ended.phase is JobPhase.GONE
        assert client.cancel(job_id) is True  # cancelling an ended job is not an error


def test_unknown_job_reads_as_none_and_cancel_as_false(backend: Backend) -> None:
    with backend.client() as client:
        assert client.get_job("999999") is None
        assert client.cancel("999999") is False


def test_bad_partition_is_rejected_in_slurms_words(backend: Backend) -> None:
    with backend.client() as client, pytest.raises(SlurmRejected) as caught:
        client.submit(backend.submission(unique("badpart"), partition="nosuchpart"))
    assert caught.value.reason == "Invalid partition name specified"


def test_bad_token_is_an_auth_error_telling_how_to_fix_it(backend: Backend) -> None:
    with backend.client(BAD_TOKEN) as client:
        with pytest.raises(SlurmAuthError) as caught:
            client.get_job("1")
        assert "scontrol token username=" in str(caught.value)
        assert BAD_TOKEN not in str(caught.value)
        with pytest.raises(SlurmAuthError):
            client.submit(backend.submission(unique("badtoken")))
        with pytest.raises(SlurmAuthError):
            client.list_jobs()
        assert client.ping().ok is False


def test_version_detection_ping_and_discovery(backend: Backend) -> None:
    with backend.client(pinned=False) as client:
        assert client.detect_version() == "v0.0.38"
        ping = client.ping()
        assert ping.ok and ping.api_version == "v0.0.38" and ping.slurm_release == "22.05.8"
        resources = client.discover()
    assert "debug" in [p.name for p in resources.partitions]
    debug = next(p for p in resources.partitions if p.name == "debug")
    assert debug.is_default and "localhost" in debug.nodes
    node = next(n for n in resources.nodes if n.name == "localhost")
    assert node.real_memory_mb and node.cpus and "debug" in node.partitions
    assert "not served" in resources.errors["associations"]
    with backend.client() as client:
        whole = client.whole_node_memory_mb("debug")
    assert whole == node.real_memory_mb - (node.specialized_memory_mb or 0)
