"""On the REAL local Slurm: jobs whose server runs under ``obleth_serve``.

``scancel``:

Slurm reports the job CANCELLED at once (so the provisioner takes the replica out of routing on
its next pass) while the server finishes the request it is answering; the job then ends within
``OBLETH_DRAIN_SECS``. Nothing is faked: slurmrestd, slurmd's SIGTERM to every process of the job
(proctrack/linuxproc), the job script rendered by ``render_batch_script``, the test engine.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.conf import settings as django_settings

from obleth.core.models import Replica
from provisioner.identity import new_replica_key
from provisioner.script import render_batch_script
from provisioner.slurm.client import SlurmClient
from provisioner.slurm.types import JobSubmission
from provisioner.testengine import install_copy
from tests.plugins.factories import make_slurm_model
from tests.plugins.real_slurm import RealSlurm

pytestmark = [pytest.mark.slurm]

PATH = "/usr/local/bin:/usr/bin:/bin"


@pytest.fixture
def log_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="obleth-drain-", dir="/tmp"))
    os.chmod(path, 0o777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def _wait(predicate: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.TransportError:
        return False


@pytest.mark.timeout(180)
def test_a_cancelled_job_reads_cancelled_while_its_server_finishes_the_request_in_flight(
    real_slurm: RealSlurm, log_dir: Path
) -> None:
    engine = install_copy(django_settings.OBLETH_ENGINES_DIR)
    port = _free_port()
    script = render_batch_script(
        script_body=(
            "#!/bin/bash\nset -euo pipefail\n"
            f'obleth_serve /usr/bin/python3 {engine} --host 127.0.0.1 --port "$OBLETH_SERVING_PORT"'
            " --model drain-test --latency-ms 3000\n"
        ),
        image="",
        preamble="",
        launch_command="",
        port_base=port,
        port_span=1,
    )
    name = f"obleth-drain-{secrets.token_hex(3)}"
    sub = JobSubmission(
        name=name,
        script=script,
        partition="debug",
        current_working_directory=str(log_dir),
        environment=(("PATH", PATH), ("OBLETH_DRAIN_SECS", "8")),
        time_limit_minutes=5,
        memory_per_node_mb=128,
        standard_output=f"{log_dir}/{name}-%j.out",
        standard_error=f"{log_dir}/{name}-%j.out",
    )
    base = f"http://127.0.0.1:{port}"
    with SlurmClient(real_slurm.url, real_slurm.user, real_slurm.token) as client:
        job_id = client.submit(sub)
        try:
            _wait(lambda: _answers(base + "/_stats"), 60, "the engine to answer /_stats")
            result: dict[str, object] = {}

            def in_flight() -> None:
                try:
                    r = httpx.post(
                        base + "/v1/chat/completions",
                        json={
                            "model": "drain-test",
                            "messages": [{"role": "user", "content": "x"}],
                        },
                        timeout=30,
                    )
                    result["status"] = r.status_code
                    result["body"] = r.text
                except httpx.HTTPError as exc:
                    result["error"] = repr(exc)

            caller = threading.Thread(target=in_flight)
            caller.start()
            time.sleep(0.8)  # the request is being answered (3 s of latency)
            cancelled_at = time.monotonic()
            assert client.cancel(job_id) is True
            # Slurm says at once that the job is over (22.05: COMPLETING, later versions
            # CANCELLED+COMPLETING): the provisioner's plan takes a serving replica in that state
            # out of routing and replaces it (tests/provisioner/test_plan.py).
            job = client.get_job(job_id)
            assert job is None or job.state in ("COMPLETING", "CANCELLED"), job
            caller.join(timeout=30)
            # ... while the server finished the request it had.
            assert result.get("status") == 200, result
            assert "choices" in str(result.get("body"))
            # Then the server stops, within the drain bound (8 s) and well before KillWait.
            _wait(lambda: not _answers(base + "/_stats"), 30, "the server to stop")
            stopped_after = time.monotonic() - cancelled_at
            assert stopped_after < 20, stopped_after
        finally:
            client.cancel(job_id)
    out = next(log_dir.glob(f"{name}-*.out")).read_text()
    assert "drains for up to 8 s" in out, out


@pytest.mark.timeout(240)
def test_slurms_warning_signal_reaches_obleth_from_the_job_with_the_replicas_key(
    real_slurm: RealSlurm, log_dir: Path, live_server: Any, transactional_db: Any
) -> None:
    """Slurm's warning signal reaches the batch shell; ``obleth_serve`` posts it to the real API
    view of ``live_server`` with the replica's key, which stamps ``drain_signal_at``.

    Slurm 22.05's REST API refuses the batch-shell warning form ``B:USR1@secs`` at submit (see
    the v0.0.38 adapter), so on this cluster the test has slurmctld deliver the same signal to
    the batch shell with ``scancel --batch --signal=USR1``, the way the warning arrives."""
    model = make_slurm_model(name=f"warn-{secrets.token_hex(3)}")
    key = new_replica_key()
    replica = Replica.objects.create(
        model_id=model.pk, model_name=model.name, job_name="j", state="healthy", api_key=key
    )
    engine = install_copy(django_settings.OBLETH_ENGINES_DIR)
    port = _free_port()
    script = render_batch_script(
        script_body=(
            "#!/bin/bash\nset -euo pipefail\n"
            f'obleth_serve /usr/bin/python3 {engine} --host 127.0.0.1 --port "$OBLETH_SERVING_PORT"'
            " --model warn-test\n"
        ),
        image="",
        preamble="",
        launch_command="",
        port_base=port,
        port_span=1,
    )
    name = f"obleth-warn-{secrets.token_hex(3)}"
    url = f"{live_server.url}/api/v1/replicas/{replica.pk}/drain-signal"
    sub = JobSubmission(
        name=name,
        script=script,
        partition="debug",
        current_working_directory=str(log_dir),
        environment=(
            ("PATH", PATH),
            ("OBLETH_SIGNAL_URL", url),
            ("OBLETH_REPLICA_API_KEY", key),
        ),
        time_limit_minutes=2,
        memory_per_node_mb=128,
        standard_output=f"{log_dir}/{name}-%j.out",
        standard_error=f"{log_dir}/{name}-%j.out",
    )
    with SlurmClient(real_slurm.url, real_slurm.user, real_slurm.token) as client:
        job_id = client.submit(sub)
        try:
            _wait(lambda: _answers(f"http://127.0.0.1:{port}/_stats"), 60, "the engine")
            subprocess.run(["scancel", "--batch", "--signal=USR1", str(job_id)], check=True)
            _wait(
                lambda: Replica.objects.get(pk=replica.pk).drain_signal_at is not None,
                30,
                "the job to report Slurm's warning signal",
            )
            # The server was not disturbed by the signal: it still answers.
            assert _answers(f"http://127.0.0.1:{port}/_stats")
        finally:
            client.cancel(job_id)
    out = next(log_dir.glob(f"{name}-*.out")).read_text()
    assert "warning signal reported, HTTP 202" in out, out
    assert key not in out  # the key never reaches the job log
