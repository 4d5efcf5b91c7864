"""SlurmClient against the REAL local Slurm 22.05 cluster (fixture ``real_slurm``; not skipped).

A job serves HTTP from inside Slurm and is reached from the test process; requeue, TIMEOUT
and an expired token are observed through the client. The TIMEOUT job (time_limit 1 minute)
is submitted by a module fixture at first use, so it runs while the other tests do; its test
comes last and waits for Slurm to end it (about 80-100 s after it starts).
"""

from __future__ import annotations

import dataclasses
import os
import re
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from provisioner.slurm.client import SlurmClient
from provisioner.slurm.convert import parse_memory_mb, parse_time_limit
from provisioner.slurm.errors import SlurmAuthError
from provisioner.slurm.types import JobInfo, JobPhase, JobSubmission
from tests.plugins.real_slurm import RealSlurm, scontrol_requeue

PATH = "/usr/local/bin:/usr/bin:/bin"

HTTP_SCRIPT = """#!/bin/bash
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); \
print(s.getsockname()[1]); s.close()')
echo "PORT=$PORT"
exec python3 -m http.server "$PORT" --bind 127.0.0.1 --directory "$OBLETH_TEST_DIR"
"""


@pytest.fixture(scope="module")
def log_dir() -> Iterator[Path]:
    """A world-writable directory under /tmp for the jobs' output (they run as the cluster
    user, the test as root)."""
    path = Path(tempfile.mkdtemp(prefix="obleth-slurm-real-", dir="/tmp"))
    os.chmod(path, 0o777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def client(real_slurm: RealSlurm) -> Iterator[SlurmClient]:
    with SlurmClient(real_slurm.url, real_slurm.user, real_slurm.token) as slurm:
        yield slurm


def submission(log_dir: Path, name: str, **changes: object) -> JobSubmission:
    sub = JobSubmission(
        name=name,
        script="#!/bin/bash\nsleep 600\n",
        partition="debug",
        current_working_directory=str(log_dir),
        environment=(("PATH", PATH), ("OBLETH_TEST_DIR", str(log_dir))),
        time_limit_minutes=10,
        memory_per_node_mb=64,
        standard_output=f"{log_dir}/{name}-%j.out",
        standard_error=f"{log_dir}/{name}-%j.err",
    )
    return dataclasses.replace(sub, **changes)  # type: ignore[arg-type]


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


def running(job: JobInfo | None) -> bool:
    return job is not None and job.phase is JobPhase.RUNNING


@pytest.fixture(scope="module")
def timeout_job(client: SlurmClient, log_dir: Path) -> Iterator[str]:
    """A job with a 1 minute limit, submitted early so that it times out during the module."""
    job_id = client.submit(
        submission(log_dir, f"obleth-rt-timeout-{secrets.token_hex(3)}", time_limit_minutes=1)
    )
    try:
        yield job_id
    finally:
        client.cancel(job_id)


def test_a_job_serves_http_that_the_test_reaches_then_cancel_ends_it(
    client: SlurmClient, log_dir: Path, timeout_job: str
) -> None:
    marker = secrets.token_hex(8)
    (log_dir / "marker.txt").write_text(marker)
    name = f"obleth-rt-http-{secrets.token_hex(3)}"
    job_id = client.submit(submission(log_dir, name, script=HTTP_SCRIPT))
    try:
        job = wait_for(client, job_id, running, 60)
        assert job is not None and job.state == "RUNNING" and job.nodes == ("localhost",)
        out = log_dir / f"{name}-{job_id}.out"
        deadline = time.monotonic() + 60
        port = None
        while port is None:
            text = out.read_text() if out.exists() else ""
            found = re.search(r"^PORT=(\d+)$", text, re.M)
            port = int(found.group(1)) if found else None
            assert port or time.monotonic() < deadline, f"no PORT line in {out}: {text!r}"
            time.sleep(0.1)
        answer = None
        while answer is None:
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}/marker.txt", timeout=5)
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the job's http.server never answered"
                time.sleep(0.1)
        assert answer.status_code == 200 and answer.text == marker
    finally:
        assert client.cancel(job_id) is True
    ended = wait_for(client, job_id, lambda j: j is None or j.phase is JobPhase.GONE, 60)
    assert ended is None or ended.state == "CANCELLED"
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(f"http://127.0.0.1:{port}/marker.txt", timeout=2)
        except httpx.TransportError:
            break  # the server died with the job
        assert time.monotonic() < deadline, "the job's http.server outlived the cancel"
        time.sleep(0.2)


def test_a_requeued_job_reads_pending_with_a_restart(client: SlurmClient, log_dir: Path) -> None:
    job_id = client.submit(submission(log_dir, f"obleth-rt-requeue-{secrets.token_hex(3)}"))
    try:
        wait_for(client, job_id, running, 60)
        scontrol_requeue(int(job_id))
        # 22.05 may show COMPLETING (its flag hides the base state) for a moment first.
        job = wait_for(
            client,
            job_id,
            lambda j: j is not None and j.restart_count >= 1 and j.state != "COMPLETING",
            60,
        )
        assert job is not None
        assert (job.state, job.phase, job.restart_count) == ("PENDING", JobPhase.PENDING, 1)
        assert job.nodes == () and job.job_id == job_id
    finally:
        client.cancel(job_id)


def test_malformed_limits_raise_value_errors_naming_the_field_and_submit_nothing(
    client: SlurmClient,
) -> None:
    prefix = f"obleth-rt-malformed-{secrets.token_hex(3)}"
    with pytest.raises(ValueError, match="time_limit"):
        parse_time_limit("4h")
    with pytest.raises(ValueError, match="mem"):
        parse_memory_mb("lots")
    assert client.list_jobs(prefix) == []


def test_an_expired_token_is_an_auth_error_that_says_how_to_fix_it(
    real_slurm: RealSlurm, log_dir: Path
) -> None:
    token = real_slurm.fresh_token(lifespan=1)
    time.sleep(3)
    with SlurmClient(real_slurm.url, real_slurm.user, token, real_slurm.api_version) as expired:
        with pytest.raises(SlurmAuthError) as caught:
            expired.list_jobs()
        message = str(caught.value)
        assert "expired" in message and f"scontrol token username={real_slurm.user}" in message
        assert token not in message
        with pytest.raises(SlurmAuthError, match="scontrol token"):
            expired.submit(submission(log_dir, f"obleth-rt-expired-{secrets.token_hex(3)}"))
        with pytest.raises(SlurmAuthError):
            expired.get_job("1")
        ping = expired.ping()
        assert not ping.ok and "scontrol token" in ping.detail


def test_a_one_minute_job_reads_timeout_after_it_ends(
    client: SlurmClient, timeout_job: str
) -> None:
    job = wait_for(client, timeout_job, lambda j: j is not None and j.phase is JobPhase.GONE, 240)
    assert job is not None
    assert (job.state, job.reason, job.phase) == ("TIMEOUT", "TimeLimit", JobPhase.GONE)
    assert job.start_time and job.end_time and job.end_time >= job.start_time + 60
