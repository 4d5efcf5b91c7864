"""A gateway's wake asks the provisioner loop for a pass at once (provisioner/trigger.py).

Real Redis pub/sub and the real loop (provisioner.services.run_loop) with no fast passes and a
one-hour interval, so only the trigger can start a second pass. The pass itself is replaced by a
recorder (``reconcile.run_pass``): what runs in it is tested elsewhere; here only when it runs.
"""

from __future__ import annotations

import threading
import time

import pytest
import redis
from django.conf import settings

from obleth.gateway.inflight import TRIGGER
from provisioner import reconcile
from provisioner.reconcile import PassReport
from provisioner.services import StopFlag, run_loop
from provisioner.trigger import PassTrigger


def test_a_published_wake_runs_a_pass_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    passes: list[float] = []
    monkeypatch.setattr(
        reconcile,
        "run_pass",
        lambda **kwargs: passes.append(time.monotonic()) or PassReport(status="ok"),
    )
    monkeypatch.setattr(settings, "OBLETH_MODEL_HEALTH_ENABLED", False)
    stop = StopFlag()
    trigger = PassTrigger()
    loop = threading.Thread(
        target=run_loop,
        kwargs={"interval": 3600, "fast_interval": 0, "stop": stop, "trigger": trigger},
        daemon=True,
    )
    loop.start()
    publisher = redis.Redis.from_url(settings.REDIS_URL)
    try:
        deadline = time.monotonic() + 10
        while not passes and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(passes) == 1  # the first pass, then a sleep of an hour
        # the listener subscribes in its own thread: publish until someone hears it
        while publisher.publish(TRIGGER, "model-id") == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        sent = time.monotonic()
        while len(passes) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(passes) == 2, "the trigger did not start a pass"
        assert passes[1] - sent < 1.5
        assert trigger.received >= 1
    finally:
        stop.event.set()
        loop.join(timeout=5)
        publisher.close()
    assert not loop.is_alive()


def test_without_redis_the_loop_keeps_its_interval() -> None:
    trigger = PassTrigger(url="redis://127.0.0.1:1/0").start()
    stop = threading.Event()
    started = time.monotonic()
    assert trigger.wait(stop, 0.6) is False
    assert time.monotonic() - started >= 0.55
    stop.set()
    assert trigger.wait(stop, 10) is False  # the stop flag ends a wait at once
    trigger.close()


def test_a_wait_ends_early_on_a_request() -> None:
    trigger = PassTrigger(url="redis://127.0.0.1:1/0")
    trigger.event.set()
    started = time.monotonic()
    assert trigger.wait(threading.Event(), 5) is True
    assert time.monotonic() - started < 0.5
