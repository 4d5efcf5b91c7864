"""The fake slurmrestd's fault switches and scale, seen through SlurmClient.

Only what the real cluster cannot do on demand here (stop answering, go slow, lose slurmctld,
sit behind a broken proxy, purge jobs, thousands of jobs) -- the behaviour both share is
checked against the real server in test_contract_live.py.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import jwt
import pytest

from provisioner.slurm.client import SlurmClient
from provisioner.slurm.errors import SlurmAuthError, SlurmRejected, SlurmUncertain
from provisioner.slurm.fake import FakeNode, FakeSlurmrestd
from provisioner.slurm.types import JobPhase, JobSubmission

SUB = JobSubmission(name="obleth-f", script="#!/bin/bash\nsleep 1\n", memory_per_node_mb=64)


@pytest.fixture
def fake() -> Iterator[FakeSlurmrestd]:
    server = FakeSlurmrestd(start_delay=0.05, requeue_delay=0.05).start()
    try:
        yield server
    finally:
        server.stop()


def client_of(fake: FakeSlurmrestd, **kw: float) -> SlurmClient:
    token = next(iter(fake.tokens))
    return SlurmClient(fake.url, fake.tokens[token], token, "v0.0.38", **kw)


def wait_phase(client: SlurmClient, job_id: str, phase: JobPhase) -> None:
    deadline = time.monotonic() + 10
    while (job := client.get_job(job_id)) is None or job.phase is not phase:
        assert time.monotonic() < deadline, job
        time.sleep(0.02)


def test_thousands_of_jobs_list_in_one_request(fake: FakeSlurmrestd) -> None:
    fake.bulk_add(5000, name_prefix="obleth-bulk-")
    fake.bulk_add(100, name_prefix="other-", state="PENDING")
    with client_of(fake) as client:
        before = client.request_count
        jobs = client.list_jobs("obleth-bulk-")
        assert client.request_count - before == 1
    assert len(jobs) == 5000 and {j.phase for j in jobs} == {JobPhase.RUNNING}
    assert len({j.job_id for j in jobs}) == 5000


def test_down_means_connection_refused_then_back_on_the_same_port(
    fake: FakeSlurmrestd,
) -> None:
    with client_of(fake) as client:
        job_id = client.submit(SUB)
        port = fake.port
        fake.set_down(True)
        with pytest.raises(SlurmUncertain, match="ConnectError"):
            client.get_job(job_id)
        assert client.ping().ok is False
        fake.set_down(False)
        assert fake.port == port
        job = client.get_job(job_id)
        assert job is not None and job.job_id == job_id


def test_slow_answers_time_out_as_uncertain(fake: FakeSlurmrestd) -> None:
    fake.slow_seconds = 1.0
    with client_of(fake, timeout=0.2) as client, pytest.raises(SlurmUncertain, match="timed out"):
        client.list_jobs()


def test_controller_down_and_proxy_errors_are_uncertain_never_gone(
    fake: FakeSlurmrestd,
) -> None:
    with client_of(fake) as client:
        job_id = client.submit(SUB)
        fake.controller_down = True
        with pytest.raises(SlurmUncertain) as submit_error:
            client.submit(SUB)
        assert not isinstance(submit_error.value, SlurmAuthError)
        assert "1800" in str(submit_error.value)
        with pytest.raises(SlurmUncertain):
            client.get_job(job_id)  # 22.05 says -1, like a bad token
        with pytest.raises(SlurmUncertain):
            client.cancel(job_id)
        fake.controller_down = False
        fake.html_502 = True
        with pytest.raises(SlurmUncertain, match="502"):
            client.get_job(job_id)
        fake.html_502 = False
        assert client.get_job(job_id) is not None


def test_auth_failures(fake: FakeSlurmrestd) -> None:
    with client_of(fake) as client:
        fake.auth_failure = True
        for call in (client.list_jobs, lambda: client.submit(SUB), lambda: client.cancel("1")):
            with pytest.raises(SlurmAuthError, match="scontrol token"):
                call()
        fake.auth_failure = False
    expired = jwt.encode(
        {"exp": int(time.time()) - 5, "sun": "obleth"}, "k" * 32, algorithm="HS256"
    )
    fake.add_token(expired, "obleth")
    old = SlurmClient(fake.url, "obleth", expired, "v0.0.38")
    with old, pytest.raises(SlurmAuthError, match="expired at"):
        old.get_job("1")
    assert httpx.get(f"{fake.url}/slurm/v0.0.38/jobs").status_code == 401


def test_state_machine_requeue_timeout_and_purge(fake: FakeSlurmrestd) -> None:
    fake.time_scale = 0.001  # one minute of time_limit lasts 60 ms
    with client_of(fake) as client:
        job_id = client.submit(SUB)
        assert client.get_job(job_id).phase is JobPhase.PENDING  # type: ignore[union-attr]
        wait_phase(client, job_id, JobPhase.RUNNING)
        fake.requeue(job_id)
        job = client.get_job(job_id)
        assert job is not None and (job.state, job.reason, job.restart_count) == (
            "PENDING",
            "BeginTime",
            1,
        )
        wait_phase(client, job_id, JobPhase.RUNNING)
        limited = client.submit(
            JobSubmission(name="obleth-t", script="#!/bin/bash\n", time_limit_minutes=1)
        )
        wait_phase(client, limited, JobPhase.GONE)
        ended = client.get_job(limited)
        assert ended is not None and (ended.state, ended.reason) == ("TIMEOUT", "TimeLimit")
        fake.set_job_state(job_id, "PREEMPTED")
        assert client.get_job(job_id).state == "PREEMPTED"  # type: ignore[union-attr]
        fake.purge(job_id)
        assert client.get_job(job_id) is None
        assert client.cancel(job_id) is False


def test_purge_after_ending(fake: FakeSlurmrestd) -> None:
    fake.purge_after = 0.05
    with client_of(fake) as client:
        job_id = client.submit(SUB)
        assert client.cancel(job_id) is True
        deadline = time.monotonic() + 10
        while client.get_job(job_id) is not None:
            assert time.monotonic() < deadline
            time.sleep(0.02)


def test_refusals_look_like_22_05(fake: FakeSlurmrestd) -> None:
    with client_of(fake) as client:
        with pytest.raises(SlurmRejected, match="Invalid partition name specified"):
            client.submit(JobSubmission(name="x", script="#!/bin/bash\n", partition="nope"))
        with pytest.raises(SlurmRejected, match="Requested node configuration is not available"):
            client.submit(
                JobSubmission(name="obleth-big", script="#!/bin/bash\n", memory_per_node_mb=10**7)
            )
        leftovers = client.list_jobs("obleth-big")
        assert [j.state for j in leftovers] == ["FAILED"]  # like 22.05, a record remains
    token = next(iter(fake.tokens))
    headers = {"X-SLURM-USER-NAME": "obleth", "X-SLURM-USER-TOKEN": token}
    answer = httpx.post(
        f"{fake.url}/slurm/v0.0.38/job/submit",
        headers=headers,
        json={"script": "#!/bin/bash\n", "job": {"environment": ["PATH=/bin"]}},
    )
    assert answer.status_code == 400
    assert answer.json()["errors"][0]["error"] == "environment must be a dictionary"
    answer = httpx.post(
        f"{fake.url}/slurm/v0.0.38/job/submit",
        headers=headers,
        json={"script": "#!/bin/bash\n", "job": {"environment": {"PATH": "/bin"}, "exclude": "n1"}},
    )
    assert answer.json()["errors"][0]["description"] == 'Unknown key "exclude"'


def test_multi_node_jobs_spread_over_the_partition() -> None:
    nodes = [FakeNode(f"gpu{i:02d}", partitions=("gpu",)) for i in range(1, 5)]
    fake = FakeSlurmrestd(nodes=nodes, default_partition="gpu", start_delay=0)
    with fake, client_of(fake) as client:
        job_id = client.submit(
            JobSubmission(name="obleth-mn", script="#!/bin/bash\n", nodes=2, partition="gpu")
        )
        wait_phase(client, job_id, JobPhase.RUNNING)
        job = client.get_job(job_id)
        assert job is not None and len(job.nodes) == 2
        assert set(job.nodes) <= {n.name for n in nodes}
        assert client.whole_node_memory_mb("gpu") == 24105
