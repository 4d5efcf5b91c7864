"""Make-before-break on the REAL local Slurm: a spec change on a 2-replica model rolls out with
zero failed requests and never fewer than 2 serving replicas, sampled every 200 ms.

Nothing is faked: real slurmrestd and jobs running the project's test engine, the provisioner's
passes (inline, driven by the test), the gateway service in its own process
(``python -m obleth.gateway.serve``, fed by the change messages), and a bounded load loop of
sequential chat requests through it on 127.0.0.1.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import pytest
from django.db import connection

from obleth.core.choices import ReplicaState
from obleth.core.models import Endpoint, Launch, ManagedSpec, Replica
from provisioner.spec_fingerprint import spec_fingerprint
from tests.e2e.conftest import ProvisionerEnv, engine_script
from tests.gateway.service_fixtures import gateway_factory  # noqa: F401

pytestmark = [pytest.mark.slurm, pytest.mark.e2e]

MODEL = "e2e-rollout"


class Load(threading.Thread):
    """Sequential chat requests through the gateway service until stopped."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.stop = threading.Event()
        self.ok = 0
        self.failures: list[str] = []

    def run(self) -> None:
        body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
        with httpx.Client(timeout=30) as client:
            while not self.stop.is_set():
                try:
                    answer = client.post(self.url + "/v1/chat/completions", json=body)
                except httpx.HTTPError as exc:
                    self.failures.append(repr(exc))
                else:
                    if answer.status_code == 200:
                        self.ok += 1
                    else:
                        self.failures.append(f"{answer.status_code}: {answer.text[:200]}")
                time.sleep(0.02)


class Sampler(threading.Thread):
    """Every 200 ms: how many of the model's endpoints point at a serving replica."""

    def __init__(self, model_id: Any) -> None:
        super().__init__(daemon=True)
        self.model_id = model_id
        self.stop = threading.Event()
        self.samples: list[int] = []

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                serving = Replica.objects.filter(
                    model_id=self.model_id, state=ReplicaState.HEALTHY
                ).values("pk")
                self.samples.append(
                    Endpoint.objects.filter(model_id=self.model_id, replica_id__in=serving).count()
                )
                time.sleep(0.2)
        finally:
            connection.close()


@pytest.mark.timeout(15 * 60)
def test_a_spec_change_rolls_out_with_zero_failed_requests_never_below_two_serving(
    provisioner_env: ProvisionerEnv,
    gateway_factory: Any,  # noqa: F811
    settings: Any,
) -> None:
    env = provisioner_env
    settings.OBLETH_PROVISIONER_DRAIN_SECS = 3
    model = env.deploy(MODEL, replicas=2)
    env.passes_until(lambda: len(env.healthy(model)) == 2, timeout=180, what="2 healthy replicas")
    old = {r.pk for r in env.healthy(model)}

    gw = gateway_factory()
    gw.settle()
    load, sampler = Load(gw.url), Sampler(model.pk)
    load.start()
    sampler.start()
    try:
        time.sleep(2)  # load on the old spec first
        spec = ManagedSpec.objects.get(model=model)
        before = spec_fingerprint(spec)
        spec.script_body = engine_script(MODEL, "--embedding-dim", "16")  # a job field changes
        spec.save()
        assert spec_fingerprint(ManagedSpec.objects.get(model=model)) != before

        def rolled_out() -> bool:
            healthy = env.healthy(model)
            return (
                len(healthy) == 2
                and not {r.pk for r in healthy} & old
                and not Replica.objects.filter(pk__in=old).exists()
            )

        env.passes_until(rolled_out, timeout=420, interval=0.5, what="the rollout")
        time.sleep(2)  # the new replicas serve the load
    finally:
        load.stop.set()
        sampler.stop.set()
        load.join(timeout=60)
        sampler.join(timeout=10)

    assert load.failures == [], load.failures[:5]
    assert load.ok > 20, load.ok
    assert sampler.samples and min(sampler.samples) >= 2, sampler.samples
    for launch in Launch.objects.filter(pk__in=old):
        # each old replica left routing once a new one served, then was cancelled after its drain
        assert launch.end_state == "cancelled:handed-over", (launch.job_id, launch.end_state)
    print(
        f"rollout e2e: {load.ok} requests ok, 0 failed, serving replicas min "
        f"{min(sampler.samples)} over {len(sampler.samples)} samples at 200 ms"
    )
