"""Walltime handover on the REAL local Slurm cluster, with a bounded load loop through the gateway.

Nothing is faked: real slurmrestd, real jobs running the project's test engine with a 3-minute
time limit, real probes and endpoints, and requests through obleth's /v1 gateway (Django's test
client in-process; the gateway proxies over HTTP to the engines on 127.0.0.1). One boundary only:
three boundaries of a 3-minute job take over ten minutes on the shared 2-CPU cluster.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from django.db import connection
from django.test import Client

from obleth.core.choices import ReplicaState
from obleth.core.models import Endpoint, Launch, ManagedSpec, Replica
from obleth.gateway import keys
from provisioner.reconcile import run_pass
from tests.e2e.conftest import ProvisionerEnv, squeue

pytestmark = [pytest.mark.slurm, pytest.mark.e2e]


class LoadLoop(threading.Thread):
    """Sequential chat requests through the gateway until stopped (at most ``limit``)."""

    def __init__(self, model: str, secret: str, limit: int = 5000) -> None:
        super().__init__(daemon=True)
        self.model, self.secret, self.limit = model, secret, limit
        self.stop = threading.Event()
        self.ok = 0
        self.failures: list[str] = []

    def run(self) -> None:
        client = Client(HTTP_AUTHORIZATION=f"Bearer {self.secret}")
        body = json.dumps({"model": self.model, "messages": [{"role": "user", "content": "hi"}]})
        try:
            for _ in range(self.limit):
                if self.stop.is_set():
                    break
                answer = client.post(
                    "/v1/chat/completions", data=body, content_type="application/json"
                )
                if answer.status_code == 200:
                    self.ok += 1
                else:
                    self.failures.append(f"{answer.status_code}: {answer.content[:200]!r}")
                time.sleep(0.05)
        finally:
            connection.close()


def test_replica_is_replaced_before_its_time_limit_with_zero_failed_requests(
    provisioner_env: ProvisionerEnv, settings: Any
) -> None:
    env = provisioner_env
    settings.OBLETH_PROVISIONER_DRAIN_SECS = 5
    model = env.deploy("e2e-handover", replicas=1, time_limit="3", handover_secs=120)
    env.passes_until(lambda: len(env.healthy(model)) == 1, timeout=120, what="first replica")
    first = env.healthy(model)[0]

    key = keys.create_key("e2e-handover")
    load = LoadLoop("e2e-handover", key.secret)
    load.start()
    serving_samples: list[int] = []
    try:

        def handed_over() -> bool:
            serving_samples.append(
                Endpoint.objects.filter(model=model, replica_id__isnull=False).count()
            )
            old = Replica.objects.filter(pk=first.pk).first()
            return old is None or (
                old.state == ReplicaState.DRAINING and old.drain_deadline is None
            )

        env.passes_until(handed_over, timeout=200, interval=1.0, what="handover of the first")
        # the successor serves; let the load run on it for a moment
        time.sleep(3)
    finally:
        load.stop.set()
        load.join(timeout=30)

    successor = Replica.objects.get(successor_of=first.pk)
    assert successor.state == ReplicaState.HEALTHY, successor.last_message
    assert load.failures == [], load.failures[:5]
    assert load.ok > 20, load.ok
    # routing never went empty while the pass sampled it
    assert min(serving_samples) >= 1, serving_samples
    launch = Launch.objects.get(pk=first.pk)
    # cancelled by the handover before Slurm's time limit, not ended by TIMEOUT
    assert launch.end_state == "cancelled:handed-over", launch.end_state
    assert successor.job_id in squeue(env.prefix)
    spec = ManagedSpec.objects.get(pk=model.pk)
    assert spec.handover_message == "", spec.handover_message
    run_pass(dispatch="inline")
