"""In-flight counts shared through Redis across gateway processes (obleth/gateway/inflight.py),
and the provisioner's one read of them (provisioner/observe.py ``gateway_load``).

Real Redis (the test settings' REDIS_URL); two counters with distinct process names stand for
two gateway processes. Nothing is faked.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator

import pytest
import redis
from django.conf import settings

from obleth.gateway import inflight
from obleth.gateway.inflight import InflightCounter, LoadReading, ModelCount, parse_reading
from provisioner.observe_load import gateway_load

A = str(uuid.UUID(int=0xA1))
B = str(uuid.UUID(int=0xB2))


@pytest.fixture
def clean_redis() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(settings.REDIS_URL)

    def wipe() -> None:
        keys = list(client.smembers(inflight.PROCESSES)) + list(
            client.scan_iter(inflight.PROCESS_PREFIX + "*")
        )
        client.delete(inflight.PROCESSES, inflight.WAKES, *keys)

    wipe()
    yield client
    wipe()


def test_parse_sums_processes_and_keeps_the_latest_arrival() -> None:
    raw = [
        [
            b"obleth:gw:load:p1",
            [A.encode(), b"3 100.5", B.encode(), b"0 90.0", b"-", b"0 -"],
            b"obleth:gw:load:p2",
            [A.encode(), b"4 120.25", b"junk", b"not numbers"],
        ],
        [A.encode(), b"130.0", b"bad", b"x"],
    ]
    assert parse_reading(raw) == LoadReading(
        processes=2,
        models={A: ModelCount(7, 120.25), B: ModelCount(0, 90.0)},
        wakes={A: 130.0},
    )
    assert parse_reading([[], []]) == LoadReading(0, {}, {})


def test_two_gateway_processes_are_summed_in_one_read_and_a_dead_one_drops_out(
    clean_redis: redis.Redis,
) -> None:
    async def scenario() -> None:
        one = InflightCounter(process="test-one", ttl_secs=1)
        two = InflightCounter(process="test-two", ttl_secs=30)
        with one.track(A), one.track(A), two.track(A), two.track(B):
            assert await one.flush() and await two.flush()
            reading = inflight.read_load()
            assert reading.processes == 2
            assert reading.models[A].in_flight == 3
            assert reading.models[B].in_flight == 1
            assert reading.models[A].last_request_at == pytest.approx(time.time(), abs=5)
        # the requests ended; process one dies without a word (no more flushes)
        assert await two.flush()
        await asyncio.sleep(1.6)  # past process one's TTL
        reading = inflight.read_load()
        assert reading.processes == 1
        assert reading.models[A].in_flight == 0 and reading.models[B].in_flight == 0
        assert clean_redis.smembers(inflight.PROCESSES) == {b"obleth:gw:load:test-two"}
        await two.close()  # a clean shutdown takes its counts out at once
        assert inflight.read_load().processes == 0
        await one.close()

    asyncio.run(scenario())


def test_a_wake_signal_is_written_published_and_counted(clean_redis: redis.Redis) -> None:
    pubsub = clean_redis.pubsub()
    pubsub.subscribe(inflight.TRIGGER)
    assert pubsub.get_message(timeout=2)["type"] == "subscribe"  # type: ignore[index]

    async def scenario() -> None:
        counter = InflightCounter(process="test-wake")
        with counter.track(A):
            assert await counter.wake(A)
        await counter.close()

    before = time.time()
    asyncio.run(scenario())
    message = pubsub.get_message(timeout=2)
    assert message is not None and message["data"] == A.encode()
    at = float(clean_redis.hget(inflight.WAKES, A))  # type: ignore[arg-type]
    assert before - 1 <= at <= time.time() + 1
    pubsub.close()


def test_the_provisioner_reads_load_per_model_or_says_why_it_cannot(
    clean_redis: redis.Redis, settings: object
) -> None:
    loads, why = gateway_load()
    assert loads is None and "no gateway process" in why

    async def scenario() -> None:
        counter = InflightCounter(process="test-observe")
        with counter.track(A), counter.track(A):
            await counter.wake(A)
            loads, why = gateway_load()
            assert why == ""
            assert loads is not None
            load = loads[uuid.UUID(A)]
            assert load.in_flight == 2
            assert load.woken_at is not None and load.last_request_at is not None
        await counter.close()

    asyncio.run(scenario())

    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # type: ignore[attr-defined]
    loads, why = gateway_load()
    assert loads is None and why.startswith("Redis unreadable")


def test_redis_down_never_fails_counting() -> None:
    async def scenario() -> None:
        counter = InflightCounter(url="redis://127.0.0.1:1/0", process="test-down")
        with counter.track(A):
            assert counter.in_flight(A) == 1
            assert not await counter.flush()
            assert not await counter.wake(A)
        assert counter.in_flight(A) == 0
        await counter.close()

    asyncio.run(scenario())
