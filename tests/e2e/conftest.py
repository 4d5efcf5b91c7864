"""Fixtures for end-to-end provisioner tests on the REAL local Slurm cluster.

Nothing here is faked: jobs are real Slurm jobs running the project's test engine, the
provisioner talks to the real slurmrestd, probes real ports and registers real endpoints.
"""

from __future__ import annotations

import contextlib
import dataclasses
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from django.conf import settings as django_settings

from obleth.core.choices import HostingMode, ReplicaState
from obleth.core.models import Endpoint, ManagedSpec, Model, Replica, SlurmSettings
from provisioner.reconcile import PassReport, run_pass
from provisioner.testengine import install_copy
from tests.plugins.real_slurm import RealSlurm, job_workdir

# The job user may not be able to read the checkout: jobs run an installed, world-readable copy.
ENGINE = install_copy(django_settings.OBLETH_ENGINES_DIR)


def engine_script(model_name: str, *flags: str) -> str:
    """A batch script that runs the test engine on the replica's port and keeps the job alive if
    the engine dies (so a dead server inside a RUNNING job can be observed)."""
    extra = " ".join(flags)
    return (
        "#!/bin/bash\n"
        f'echo "replica of {model_name} on $(hostname) port $OBLETH_SERVING_PORT"\n'
        f'/usr/bin/python3 {ENGINE} --host 127.0.0.1 --port "$OBLETH_SERVING_PORT" '
        f"--model {model_name} --control {extra} || true\n"
        'echo "engine exited"\n'
        "exec sleep 100000\n"
    )


def squeue(prefix: str) -> dict[str, tuple[str, str]]:
    """Ground truth from the Slurm CLI: live jobs carrying the prefix -> (name, state)."""
    out = subprocess.run(
        ["squeue", "-h", "-o", "%i|%j|%T"], capture_output=True, text=True, check=True
    ).stdout
    jobs: dict[str, tuple[str, str]] = {}
    for line in out.splitlines():
        job_id, name, state = line.split("|")
        if name.startswith(prefix):
            jobs[job_id] = (name, state)
    return jobs


@dataclasses.dataclass
class ProvisionerEnv:
    slurm: RealSlurm
    prefix: str
    log_dir: str
    port: int

    def deploy(
        self, name: str, *, replicas: int = 2, flags: tuple[str, ...] = (), **spec: Any
    ) -> Model:
        model = Model.objects.create(name=name, hosting_mode=HostingMode.SLURM, upstream_model=name)
        values: dict[str, Any] = {
            "partition": "debug",
            "serving_port": self.port,
            "script_body": engine_script(name, *flags),
            "target_replicas": replicas,
            "mem": "128M",
            "time_limit": "30",
        }
        values.update(spec)
        ManagedSpec.objects.create(model=model, **values)
        self.port += 100
        return model

    def passes_until(
        self,
        condition: Callable[[], bool],
        *,
        timeout: float = 90,
        interval: float = 0.5,
        what: str = "",
    ) -> list[PassReport]:
        reports: list[PassReport] = []
        deadline = time.monotonic() + timeout
        while True:
            reports.append(run_pass(dispatch="inline"))
            if condition():
                return reports
            if time.monotonic() > deadline:
                rows = list(Replica.objects.values("model_name", "state", "job_id", "last_message"))
                raise AssertionError(
                    f"timed out waiting for {what or condition}: "
                    f"last pass {reports[-1].as_dict()!r}, "
                    f"rows {rows!r}, jobs {squeue(self.prefix)!r}"
                )
            time.sleep(interval)

    def healthy(self, model: Model) -> list[Replica]:
        return list(Replica.objects.filter(model_id=model.pk, state=ReplicaState.HEALTHY))

    def live_jobs(self) -> dict[str, tuple[str, str]]:
        return squeue(self.prefix)


def engine_base(endpoint: Endpoint) -> str:
    return endpoint.api_base.removesuffix("/v1")


def engine_stats(endpoint: Endpoint) -> dict[str, Any]:
    return httpx.get(engine_base(endpoint) + "/_stats", timeout=5).json()


def engine_control(endpoint: Endpoint, **switches: Any) -> None:
    with contextlib.suppress(httpx.HTTPError):  # "exit" closes the connection
        httpx.post(engine_base(endpoint) + "/_control", json=switches, timeout=5)


@pytest.fixture
def provisioner_env(
    real_slurm: RealSlurm, transactional_db: Any, settings: Any
) -> Iterator[ProvisionerEnv]:
    prefix = f"obt{uuid.uuid4().hex[:6]}-"
    settings.OBLETH_PROVISIONER_JOB_PREFIX = prefix
    settings.OBLETH_PROVISIONER_RESTART_AFTER_FAILURES = 3
    settings.OBLETH_PROVISIONER_HEALTH_TIMEOUT_SECS = 2
    settings.OBLETH_PROVISIONER_WARMUP_TIMEOUT_SECS = 30
    settings.OBLETH_PROVISIONER_DISPATCH = "inline"
    log_dir = str(job_workdir(real_slurm, "logs"))
    slurm = SlurmSettings.load()
    slurm.enabled = True
    slurm.slurmrestd_url = real_slurm.url
    slurm.user = real_slurm.user
    slurm.api_version = ""  # detected from what slurmrestd serves
    slurm.jwt = real_slurm.fresh_token(7200)
    slurm.log_dir = log_dir
    slurm.save()
    # Below the kernel's ephemeral range (32768-60999 here): a port in it can be taken by any
    # outgoing connection on the machine, and the engine's bind then fails (seen in CI).
    base = 20000 + (uuid.uuid4().int % 110) * 100
    env = ProvisionerEnv(slurm=real_slurm, prefix=prefix, log_dir=log_dir, port=base)
    try:
        yield env
    finally:
        for job_id in squeue(prefix):
            subprocess.run(["scancel", job_id], check=False)
