"""Autoscaling through whole passes: observe reads the gateways' counts from Redis (one read),
the plan decides, execute records the decision on the spec and submits.

Real: Redis (a gateway process's counts written by the real InflightCounter), the database, the
pass. Slurm is the in-process FakeSlurmrestd (as in tests/provisioner/test_reconcile.py; jobs
stay pending): the real cluster is in tests/e2e/test_autoscale_real_slurm.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import redis
from django.conf import settings

from obleth.core.models import ManagedSpec, Replica
from obleth.gateway import inflight
from obleth.gateway.inflight import InflightCounter
from provisioner.reconcile import run_pass
from tests.plugins.factories import make_slurm_model
from tests.provisioner.test_reconcile import Cluster, cluster  # noqa: F401


@pytest.fixture
def clean_redis() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(settings.REDIS_URL)

    def wipe() -> None:
        keys = list(client.scan_iter(inflight.PROCESS_PREFIX + "*"))
        client.delete(inflight.PROCESSES, inflight.WAKES, *keys)

    wipe()
    yield client
    wipe()


def _report(model_id: str, in_flight: int, wake: bool = False) -> None:
    """One gateway process reports ``in_flight`` requests of the model (and keeps reporting
    until its TTL runs out: 30 s)."""

    async def write() -> None:
        counter = InflightCounter(process="test-pass", ttl_secs=30)
        for _ in range(in_flight):
            counter.counts[model_id] = counter.counts.get(model_id, 0) + 1
            counter.last_request[model_id] = 0.0
        if wake:
            await counter.wake(model_id)
        assert await counter.flush()
        if counter._client is not None:
            await counter._client.aclose()

    asyncio.run(write())


def test_a_woken_model_is_scaled_from_the_gateways_counts_and_recorded(
    cluster: Cluster,  # noqa: F811
    clean_redis: redis.Redis,
) -> None:
    model = make_slurm_model(
        name="auto-pass",
        spec={"target_replicas": 0, "min_replicas": 0, "max_replicas": 3, "target_in_flight": 16},
    )
    ManagedSpec.objects.filter(model=model).update(autoscale_replicas=0)
    _report(str(model.pk), 20, wake=True)

    report = run_pass(dispatch="inline")
    assert report.status == "ok", report.detail
    spec = ManagedSpec.objects.get(model=model)
    assert spec.autoscale_replicas == 2  # ceil(20 / 16), woken at once
    assert spec.autoscale_message == (
        "2 replicas: woken by a request (20 requests in flight), target 16 per replica"
    )
    assert spec.autoscale_changed_at is not None and spec.autoscale_message_at is not None
    assert Replica.objects.filter(model_id=model.pk).count() == 2
    assert len(cluster.our_jobs()) == 2

    # the gateway goes away: load unknown, the count is kept (nothing cancelled)
    clean_redis.delete(inflight.PROCESS_PREFIX + "test-pass")
    report = run_pass(dispatch="inline")
    assert report.status == "ok", report.detail
    spec = ManagedSpec.objects.get(model=model)
    assert spec.autoscale_replicas == 2
    assert "load unknown (no gateway process reports" in spec.autoscale_message
    assert Replica.objects.filter(model_id=model.pk, state="pending").count() == 2


def test_models_without_autoscaling_never_read_redis(
    cluster: Cluster,  # noqa: F811
    settings: object,
) -> None:
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # type: ignore[attr-defined]
    model = make_slurm_model(name="fixed-pass", spec={"target_replicas": 1})
    report = run_pass(dispatch="inline")
    assert report.status == "ok", report.detail
    assert Replica.objects.filter(model_id=model.pk).count() == 1
    assert ManagedSpec.objects.get(model=model).autoscale_message == ""
