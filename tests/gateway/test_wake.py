"""Wake on request, in the gateway service itself (ASGI, in-process): a request for a model at
zero replicas writes the wake signal, is counted in flight and held, and is served once an
endpoint appears; past OBLETH_GATEWAY_WAKE_HOLD_SECS it is answered 503 with Retry-After from
the model's measured start time and Slurm's pending reason.

Real: the GatewayService ASGI app (called through httpx's ASGI transport), its routing table read
from the test database in a thread, Redis (the wake hash, the counts, the change notices that
reload the table), and the project's test engine as the replica that appears. The provisioner is
not run here (its side is tests/autoscale/test_autoscale_plan.py and the e2e test): the test
plays its part by writing the endpoint and replica rows it would write.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis
from django.conf import settings
from django.utils import timezone

from obleth.core.choices import ReplicaState
from obleth.core.models import Launch, ManagedSpec, Model, Replica, SlurmSettings
from obleth.gateway import inflight
from obleth.gateway.service import GatewayService
from obleth.gateway.table import LiveTable
from obleth.gateway.wake import retry_after_secs
from tests.gateway.conftest import Engine
from tests.plugins.factories import make_endpoint, make_slurm_model

pytestmark = pytest.mark.django_db(transaction=True)

CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


@pytest.fixture
def clean_redis() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(settings.REDIS_URL)

    def wipe() -> None:
        keys = list(client.scan_iter(inflight.PROCESS_PREFIX + "*"))
        client.delete(inflight.PROCESSES, inflight.WAKES, *keys)

    wipe()
    yield client
    wipe()


def sleepy_model(name: str) -> Model:
    """A Slurm model autoscaled with min_replicas 0, at zero replicas (no endpoint)."""
    model = make_slurm_model(
        name=name,
        spec={"target_replicas": 0, "min_replicas": 0, "max_replicas": 2},
    )
    ManagedSpec.objects.filter(model=model).update(autoscale_replicas=0)
    return model


async def _until(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = await asyncio.to_thread(check)
        if value:
            return value
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_request_at_zero_signals_a_wake_and_is_served_once_an_endpoint_appears(
    clean_redis: redis.Redis, engine: Engine, settings: Any
) -> None:
    settings.OBLETH_GATEWAY_WAKE_HOLD_SECS = 30
    model = sleepy_model("sleepy")
    model_id = str(model.pk)

    async def scenario() -> tuple[httpx.Response, float, int]:
        service = GatewayService(table=LiveTable(reload_secs=2))
        await service.startup()
        try:
            route = service.table.table.get("sleepy")  # type: ignore[union-attr]
            assert route is not None and route.wakeable and not route.endpoints
            transport = httpx.ASGITransport(app=service)
            async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
                started = time.monotonic()
                request = asyncio.create_task(
                    client.post("/v1/chat/completions", json={**CHAT, "model": "sleepy"})
                )
                # the wake signal is written, and the held request counts as in flight
                await _until(
                    lambda: clean_redis.hget(inflight.WAKES, model_id), 10, "the wake signal"
                )
                reading = await asyncio.to_thread(inflight.read_load)
                held = reading.models[model_id].in_flight
                assert not request.done(), "answered instead of held"
                await asyncio.sleep(0.5)
                assert not request.done(), "answered instead of held"
                # the provisioner's promotion: an endpoint for the woken replica
                await asyncio.to_thread(
                    make_endpoint, model, name="woken", api_base=engine.api_base
                )
                response = await asyncio.wait_for(request, timeout=20)
                return response, time.monotonic() - started, held
        finally:
            await service.shutdown()

    response, took, held = asyncio.run(scenario())
    assert response.status_code == 200, response.text
    assert response.json()["choices"], response.json()
    assert held == 1
    assert took >= 0.5
    assert engine.inference_count("/v1/chat/completions") == 1


def test_past_the_hold_bound_a_503_says_when_to_retry_and_why(
    clean_redis: redis.Redis, settings: Any
) -> None:
    settings.OBLETH_GATEWAY_WAKE_HOLD_SECS = 1
    model = sleepy_model("sleepier")
    now = timezone.now()
    # The model's measured start: its last launch took 40 s from job start to serving.
    Launch.objects.create(
        id=uuid.uuid4(),
        model_id=model.pk,
        model_name=model.name,
        job_name="x",
        started_at=now - dt.timedelta(hours=2, seconds=40),
        healthy_at=now - dt.timedelta(hours=2),
    )
    # The woken replica is pending in Slurm's queue, expected to start in about 60 s.
    Replica.objects.create(
        model_id=model.pk,
        model_name=model.name,
        state=ReplicaState.PENDING,
        job_id="4242",
        job_name="obleth-sleepier-1",
        slurm_state="PENDING",
        slurm_reason="Resources",
        expected_start_at=now + dt.timedelta(seconds=60),
    )

    async def scenario() -> tuple[httpx.Response, float]:
        service = GatewayService(table=LiveTable(reload_secs=2))
        await service.startup()
        try:
            transport = httpx.ASGITransport(app=service)
            async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
                started = time.monotonic()
                response = await client.post(
                    "/v1/chat/completions", json={**CHAT, "model": "sleepier"}
                )
                return response, time.monotonic() - started
        finally:
            await service.shutdown()

    response, took = asyncio.run(scenario())
    assert response.status_code == 503, response.text
    assert 1.0 <= took < 10
    retry = int(response.headers["Retry-After"])
    assert 90 <= retry <= 105, retry  # ~60 s in the queue + 40 s to serve
    error = json.loads(response.text)["error"]
    assert error["code"] == "model_waking"
    assert "scaled to zero" in error["message"]
    assert "pending in the Slurm queue" in error["message"]
    assert "Resources" in error["message"] or "resources" in error["message"]
    assert "40 s from job start to serving" in error["message"]
    assert clean_redis.hget(inflight.WAKES, str(model.pk)) is not None


def test_a_model_that_does_not_scale_to_zero_answers_at_once(
    clean_redis: redis.Redis, settings: Any
) -> None:
    """No hold for a model without min_replicas 0 autoscaling: the usual 503, no wake."""
    settings.OBLETH_GATEWAY_WAKE_HOLD_SECS = 30
    slurm = SlurmSettings.load()  # Slurm on: the 503 is about the model, not the switch
    slurm.enabled = True
    slurm.save()
    model = make_slurm_model(name="fixed", spec={"target_replicas": 1})

    async def scenario() -> tuple[httpx.Response, float]:
        service = GatewayService(table=LiveTable(reload_secs=2))
        await service.startup()
        try:
            transport = httpx.ASGITransport(app=service)
            async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
                started = time.monotonic()
                response = await client.post(
                    "/v1/chat/completions", json={**CHAT, "model": "fixed"}
                )
                return response, time.monotonic() - started
        finally:
            await service.shutdown()

    response, took = asyncio.run(scenario())
    assert response.status_code == 503
    assert took < 5
    assert json.loads(response.text)["error"]["code"] == "no_replica_ready"
    assert clean_redis.hget(inflight.WAKES, str(model.pk)) is None


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"start_to_serving": 40.0, "state": ""}, 40),
        ({"start_to_serving": None, "state": ""}, 60),
        ({"start_to_serving": 40.0, "state": "pending", "expected_start_in": 60.0}, 100),
        ({"start_to_serving": 40.0, "state": "pending", "expected_start_in": -5.0}, 40),
        ({"start_to_serving": 40.0, "state": "starting", "running_for": 30.0}, 10),
        ({"start_to_serving": 40.0, "state": "starting", "running_for": 90.0}, 5),
        ({"start_to_serving": 9000.0, "state": ""}, 3600),
    ],
)
def test_retry_after_from_the_measured_start(kwargs: dict[str, Any], expected: int) -> None:
    assert retry_after_secs(**kwargs) == expected
