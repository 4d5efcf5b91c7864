"""Autoscaling and scale-to-zero on the REAL local Slurm cluster, through the REAL gateway.

Nothing is faked: real slurmrestd, real jobs running the project's test engine (every answer
delayed by 500 ms, so concurrent clients are requests in flight), the provisioner's passes run
here, and the gateway service (``python -m obleth.gateway.serve`` in its own process) counting
in-flight requests into Redis, which the passes read. Short delays keep the test to a few
minutes.

1. A load step from 1 to 40 concurrent clients scales 1 -> 3 replicas (max_replicas), and back to
   1 once the step ends, by draining: zero failed requests all along.
2. A model with min_replicas 0 goes to zero when idle, and the next request wakes it: the
   gateway holds it while a replica is submitted and becomes healthy, then serves it.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import pytest

from obleth.core.choices import ReplicaState
from obleth.core.models import Endpoint, Launch, ManagedSpec, Replica
from tests.e2e.conftest import ProvisionerEnv, squeue
from tests.gateway.service_fixtures import gateway_factory  # noqa: F401

pytestmark = [pytest.mark.slurm, pytest.mark.e2e]

BODY = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


class Clients:
    """``count`` concurrent clients, each sending chat requests one after the other."""

    def __init__(self, url: str, model: str, count: int) -> None:
        self.url, self.model = url, model
        self.stop = threading.Event()
        self.ok = 0
        self.failures: list[str] = []
        self._lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(count)]

    def start(self) -> Clients:
        for t in self.threads:
            t.start()
        return self

    def _run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=60) as client:
            while not self.stop.is_set():
                try:
                    r = client.post("/v1/chat/completions", json={**BODY, "model": self.model})
                    outcome = "" if r.status_code == 200 else f"{r.status_code}: {r.text[:200]}"
                except httpx.HTTPError as exc:
                    outcome = f"{type(exc).__name__}: {exc}"
                with self._lock:
                    if outcome:
                        self.failures.append(outcome)
                    else:
                        self.ok += 1

    def finish(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=70)


def _live(model_id: Any) -> int:
    """Replicas of the model that are not lost or draining."""
    return (
        Replica.objects.filter(model_id=model_id)
        .exclude(state__in=[ReplicaState.LOST, ReplicaState.DRAINING])
        .count()
    )


@pytest.mark.timeout(15 * 60)
def test_a_load_step_scales_one_to_three_replicas_and_back_with_zero_failed_requests(
    provisioner_env: ProvisionerEnv,
    gateway_factory: Any,  # noqa: F811
    settings: Any,
) -> None:
    env = provisioner_env
    settings.OBLETH_PROVISIONER_DRAIN_SECS = 5
    gw = gateway_factory()
    model = env.deploy(
        "e2e-autoscale",
        replicas=1,
        flags=("--latency-ms", "500"),
        min_replicas=1,
        max_replicas=3,
        target_in_flight=8,
        scale_up_delay_secs=3,
        scale_down_delay_secs=8,
    )
    env.passes_until(lambda: len(env.healthy(model)) == 1, timeout=180, what="first replica")
    gw.settle()

    trickle = Clients(gw.url, "e2e-autoscale", 1).start()
    step: Clients | None = None
    serving: list[int] = []

    def sample() -> int:
        count = Endpoint.objects.filter(model=model, replica_id__isnull=False).count()
        serving.append(count)
        return count

    try:
        env.passes_until(
            lambda: ManagedSpec.objects.get(model=model).autoscale_replicas == 1,
            timeout=30,
            what="autoscaling's first decision (1 replica at one client)",
        )
        step = Clients(gw.url, "e2e-autoscale", 39).start()  # 40 concurrent clients now
        stepped_at = time.monotonic()
        env.passes_until(
            lambda: sample() == 3, timeout=240, interval=0.5, what="3 serving replicas"
        )
        scaled_up_in = time.monotonic() - stepped_at
        spec = ManagedSpec.objects.get(model=model)
        assert spec.autoscale_replicas == 3, spec.autoscale_message
        time.sleep(2)  # the three serve the step for a moment
        step.finish()
        ended_at = time.monotonic()
        env.passes_until(
            lambda: sample() == 1 and _live(model.pk) == 1,
            timeout=120,
            interval=0.5,
            what="back to one serving replica",
        )
        scaled_down_in = time.monotonic() - ended_at
        # the two removed replicas drained, then their jobs were cancelled as a scale-down
        env.passes_until(
            lambda: (
                Launch.objects.filter(model_id=model.pk, end_state="cancelled:scale-down").count()
                == 2
            ),
            timeout=60,
            what="the scaled-down jobs cancelled",
        )
        time.sleep(1)  # the last replica serves the trickle
    finally:
        if step is not None:
            step.finish()
        trickle.finish()

    failures = trickle.failures + (step.failures if step else [])
    assert failures == [], failures[:5]
    assert step is not None and step.ok > 40 and trickle.ok > 10, (step.ok, trickle.ok)
    assert max(serving) == 3 and serving[-1] == 1
    spec = ManagedSpec.objects.get(model=model)
    assert spec.autoscale_replicas == 1
    assert spec.autoscale_message.startswith("1 replica: "), spec.autoscale_message
    model_jobs = [j for j, (name, _) in squeue(env.prefix).items() if "e2e-autoscale" in name]
    assert len(model_jobs) == 1, squeue(env.prefix)
    print(
        f"autoscale e2e: 1 -> 3 replicas {scaled_up_in:.0f} s after the step to 40 clients, "
        f"back to 1 {scaled_down_in:.0f} s after it ended; "
        f"{step.ok + trickle.ok} requests ok, 0 failed"
    )


@pytest.mark.timeout(10 * 60)
def test_a_model_scaled_to_zero_wakes_on_a_request_and_serves_it(
    provisioner_env: ProvisionerEnv,
    gateway_factory: Any,  # noqa: F811
    settings: Any,
) -> None:
    env = provisioner_env
    settings.OBLETH_PROVISIONER_DRAIN_SECS = 2
    gw = gateway_factory(OBLETH_GATEWAY_WAKE_HOLD_SECS="180")
    model = env.deploy(
        "e2e-wake",
        replicas=1,
        min_replicas=0,
        max_replicas=1,
        scale_up_delay_secs=0,
        scale_to_zero_after_secs=600,  # not while its first replica starts
    )
    env.passes_until(lambda: len(env.healthy(model)) == 1, timeout=180, what="first replica")
    first = env.healthy(model)[0]
    ManagedSpec.objects.filter(model=model).update(scale_to_zero_after_secs=5)
    # no request: idle for 5 s, then zero replicas (drained, cancelled, row gone)
    env.passes_until(
        lambda: (
            ManagedSpec.objects.get(model=model).autoscale_replicas == 0
            and not Replica.objects.filter(model_id=model.pk).exists()
        ),
        timeout=120,
        what="scaled to zero",
    )
    assert Launch.objects.get(pk=first.pk).end_state == "cancelled:scale-down"
    assert not [name for name, _ in squeue(env.prefix).values() if "e2e-wake" in name]
    gw.settle()

    outcome: dict[str, Any] = {}

    def ask() -> None:
        started = time.monotonic()
        try:
            r = httpx.post(
                gw.url + "/v1/chat/completions", json={**BODY, "model": "e2e-wake"}, timeout=200
            )
            outcome["status"], outcome["body"] = r.status_code, r.text[:300]
        except httpx.HTTPError as exc:
            outcome["status"], outcome["body"] = 0, f"{type(exc).__name__}: {exc}"
        outcome["secs"] = time.monotonic() - started

    asked_at = time.time()
    request = threading.Thread(target=ask, daemon=True)
    request.start()
    env.passes_until(
        lambda: not request.is_alive(), timeout=200, interval=0.5, what="the held request"
    )
    request.join()
    assert outcome["status"] == 200, outcome
    woken = env.healthy(model)
    assert len(woken) == 1 and woken[0].pk != first.pk
    spec = ManagedSpec.objects.get(model=model)
    assert spec.autoscale_replicas == 1
    assert spec.autoscale_changed_at is not None and spec.autoscale_changed_at.timestamp() >= (
        asked_at - 1
    )
    launch = Launch.objects.get(pk=woken[0].pk)
    assert launch.healthy_at is not None and launch.submitted_at.timestamp() >= asked_at - 1
    print(f"wake e2e: the request at zero was served after {outcome['secs']:.1f} s")
