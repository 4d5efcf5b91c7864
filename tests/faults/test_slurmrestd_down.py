"""slurmrestd down, for real: ``scripts/slurm-local rest-stop`` stops only slurmrestd (slurmctld,
slurmd and the jobs keep running) while a real job runs the test engine behind a real endpoint.

Passes during the outage hold (no row changed, the job untouched), the reason and the held alert
are shown, the gateway keeps routing to the replica; after ``rest-start`` the next pass is ok and
acts again (a scale-up is carried out). The outage lasts a few seconds, not 30: a pass fails the
same way on a refused connection whenever it happens, and other sessions share this slurmrestd.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from obleth.core.models import Alert, ManagedSpec, Replica, SlurmSettings
from provisioner.reconcile import run_pass
from provisioner.status import HELD_ALERT_KEY, describe_status
from tests.faults.conftest import free_windows
from tests.faults.procs import scancel_prefix, squeue_prefix
from tests.faults.test_slurmrestd_faults import chat
from tests.plugins.factories import make_slurm_model
from tests.plugins.real_slurm import RealSlurm, job_workdir

ROOT = Path(__file__).resolve().parents[2]
SLURM_LOCAL = ROOT / "scripts" / "slurm-local"
pytestmark = [pytest.mark.slurm, pytest.mark.e2e]


def serving_count(model_id: Any) -> int:
    return Replica.objects.filter(model_id=model_id, state="healthy").count()


def passes_until(model_id: Any, count: int, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while serving_count(model_id) != count:
        report = run_pass(dispatch="inline")
        assert time.monotonic() < deadline, report.as_dict()
        time.sleep(0.5)


def test_real_slurmrestd_down_holds_and_recovers(
    real_slurm: RealSlurm, transactional_db: Any, settings: Any
) -> None:
    from tests.e2e.conftest import engine_script

    prefix = f"obc-d{uuid.uuid4().hex[:6]}-"
    settings.OBLETH_PROVISIONER_JOB_PREFIX = prefix
    settings.OBLETH_PROVISIONER_DISPATCH = "inline"
    settings.OBLETH_PROVISIONER_WARMUP_TIMEOUT_SECS = 0
    settings.OBLETH_PROVISIONER_HEALTH_TIMEOUT_SECS = 2
    settings.OBLETH_PROVISIONER_HELD_ALERT_SECS = 1
    settings.OBLETH_MODEL_HEALTH_ENABLED = False
    settings.OBLETH_GATEWAY_OPEN = True  # the gateway is closed by default (gateway keys)
    slurm = SlurmSettings.load()
    slurm.enabled = True
    slurm.slurmrestd_url = real_slurm.url
    slurm.user = real_slurm.user
    slurm.api_version = ""
    slurm.jwt = real_slurm.fresh_token(3600)
    slurm.log_dir = str(job_workdir(real_slurm, "logs"))
    slurm.save()
    name = f"down-{uuid.uuid4().hex[:4]}"
    model = make_slurm_model(
        name=name,
        upstream_model=name,
        spec={
            "target_replicas": 1,
            "serving_port": free_windows(2),
            "script_body": engine_script(name),
            "launch_command": "",
            "health_path": "/health",
            "mem": "128M",
            "time_limit": "30",
        },
    )
    stopped = False
    try:
        passes_until(model.pk, 1)
        before = sorted(Replica.objects.values_list("id", "state", "job_id", "endpoint_id"))
        jobs_before = squeue_prefix(prefix)
        assert len(jobs_before) == 1

        down = subprocess.run([str(SLURM_LOCAL), "rest-stop"], capture_output=True, text=True)
        assert down.returncode == 0, down.stderr
        stopped = True
        for _ in range(3):
            report = run_pass(dispatch="inline")
            assert report.status == "error", report.as_dict()
            assert "holding" in report.detail, report.detail
            time.sleep(0.6)
        assert sorted(Replica.objects.values_list("id", "state", "job_id", "endpoint_id")) == before
        assert squeue_prefix(prefix) == jobs_before, "the job must be left alone"
        shown = describe_status()
        assert shown["last_pass_status"] == "error" and shown["held_alert_active"] is True
        assert Alert.objects.filter(key=HELD_ALERT_KEY).exists()
        assert chat(name) == 200, "the gateway keeps routing while slurmrestd is down"
    finally:
        if stopped:
            up = subprocess.run([str(SLURM_LOCAL), "rest-start"], capture_output=True, text=True)
            assert up.returncode == 0, up.stderr
    try:
        report = run_pass(dispatch="inline")
        assert report.status == "ok", report.as_dict()
        assert sorted(Replica.objects.values_list("id", "state", "job_id", "endpoint_id")) == before
        assert describe_status()["held_alert_active"] is False
        ManagedSpec.objects.filter(model=model).update(target_replicas=2)
        passes_until(model.pk, 2)
        assert chat(name) == 200
    finally:
        scancel_prefix(prefix)
