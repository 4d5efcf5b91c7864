"""Walltime handover on the REAL local Slurm cluster, with a bounded load loop through the gateway.

Nothing is faked: real slurmrestd, real jobs running the project's test engine with a 3-minute
time limit, real probes and endpoints, and requests through obleth's /v1 gateway service (in this
process, tests/plugins/gateway_client.py, its routing table read before each request; it proxies
over HTTP to the engines on 127.0.0.1). Three boundaries:
each successor is itself handed over about a minute after it starts (time limit 3 minutes,
handover 120 s), so the test takes about four minutes.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from django.db import connection

from obleth.core.choices import ReplicaState
from obleth.core.models import Endpoint, Launch, ManagedSpec, Replica
from obleth.gateway import keys
from tests.e2e.conftest import ProvisionerEnv, squeue
from tests.plugins.gateway_client import GatewayClient

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
        client = GatewayClient(HTTP_AUTHORIZATION=f"Bearer {self.secret}")
        body = json.dumps({"model": self.model, "messages": [{"role": "user", "content": "hi"}]})
        try:
            for _ in range(self.limit):
                if self.stop.is_set():
                    break
                answer = client.post("/v1/chat/completions", data=body)
                if answer.status_code == 200:
                    self.ok += 1
                else:
                    self.failures.append(f"{answer.status_code}: {answer.content[:200]!r}")
                time.sleep(0.05)
        finally:
            client.close()
            connection.close()


BOUNDARIES = 3


def test_replicas_are_replaced_before_their_time_limit_with_zero_failed_requests(
    provisioner_env: ProvisionerEnv, settings: Any
) -> None:
    env = provisioner_env
    settings.OBLETH_PROVISIONER_DRAIN_SECS = 5
    model = env.deploy("e2e-handover", replicas=1, time_limit="3", handover_secs=120)
    env.passes_until(lambda: len(env.healthy(model)) == 1, timeout=120, what="first replica")
    current = env.healthy(model)[0]

    key = keys.create_key("e2e-handover")
    load = LoadLoop("e2e-handover", key.secret)
    load.start()
    serving_samples: list[int] = []
    handed: list[Replica] = []
    try:
        for boundary in range(BOUNDARIES):
            old_id = current.pk

            def handed_over(old_id: Any = old_id) -> bool:
                serving_samples.append(
                    Endpoint.objects.filter(model=model, replica_id__isnull=False).count()
                )
                old = Replica.objects.filter(pk=old_id).first()
                return old is None or (
                    old.state == ReplicaState.DRAINING and old.drain_deadline is None
                )

            env.passes_until(
                handed_over, timeout=240, interval=1.0, what=f"handover {boundary + 1}"
            )
            handed.append(current)
            current = Replica.objects.get(successor_of=old_id)
            assert current.state == ReplicaState.HEALTHY, current.last_message
        time.sleep(2)  # the last successor serves the load for a moment
    finally:
        load.stop.set()
        load.join(timeout=30)

    assert load.failures == [], load.failures[:5]
    assert load.ok > 20 * BOUNDARIES, load.ok
    # routing never went empty while the passes sampled it
    assert min(serving_samples) >= 1, serving_samples
    for replica in handed:
        launch = Launch.objects.get(pk=replica.pk)
        # cancelled by the handover before Slurm's time limit, not ended by TIMEOUT
        assert launch.end_state == "cancelled:handed-over", (launch.job_id, launch.end_state)
    assert current.job_id in squeue(env.prefix)
    spec = ManagedSpec.objects.get(pk=model.pk)
    assert spec.handover_message == "", spec.handover_message
    print(f"handover e2e: {BOUNDARIES} boundaries, {load.ok} requests ok, 0 failed")
