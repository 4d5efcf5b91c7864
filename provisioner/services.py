"""Provisioner services called by tasks and commands (warm-up, the loop)."""

from __future__ import annotations

import logging
import signal
import threading
import time
from types import FrameType
from typing import Any

from django.conf import settings
from django.db import connections

from provisioner.trigger import PassTrigger

log = logging.getLogger(__name__)


def warm_up_replica(replica_id: str, api_base: str, model_type: str = "chat") -> dict[str, Any]:
    """Pay a promoted replica's cold first request so the first user does not. The request
    carries the replica's key (its engine refuses /v1 without it)."""
    from obleth.core.models import Replica
    from provisioner.warmup import warm_up

    api_key = Replica.objects.filter(pk=replica_id).values_list("api_key", flat=True).first() or ""
    result = warm_up(
        api_base,
        timeout=float(settings.OBLETH_PROVISIONER_WARMUP_TIMEOUT_SECS),
        model_type=model_type,
        api_key=api_key,
    )
    if result.ok:
        log.info("warm-up of replica %s at %s done", replica_id, api_base)
    else:
        log.warning("warm-up of replica %s at %s failed: %s", replica_id, api_base, result.detail)
    return {"replica_id": replica_id, "ok": result.ok, "detail": result.detail}


class StopFlag:
    """SIGTERM/SIGINT never interrupt a pass: they end the loop at the next sleep."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._handle)
        signal.signal(signal.SIGINT, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        log.info("signal %s: finishing the pass in progress, then stopping", signum)
        self.event.set()


def _drop_dead_connections() -> None:
    """Django's close_old_connections, minus connections inside a transaction (a test's): the
    loop itself never runs a pass inside one."""
    for conn in connections.all(initialized_only=True):
        if not conn.in_atomic_block:
            conn.close_if_unusable_or_obsolete()


def run_loop(
    *,
    interval: float,
    fast_interval: float | None = None,
    once_hook: Any = None,
    stop: StopFlag | None = None,
    trigger: PassTrigger | None = None,
) -> None:
    """The provisioner without Celery, for small sites: a full pass every ``interval`` seconds,
    fast passes every ``fast_interval`` seconds in between (0 or None: none), a fast pass at once
    when a gateway asks for one (a request woke a model at zero: ``provisioner/trigger.py``), and
    due endpoint checks. Stops cleanly on SIGTERM after the pass in progress."""
    from provisioner.reconcile import run_pass

    stop = stop or StopFlag()
    trigger = trigger or PassTrigger()
    trigger.start()
    try:
        _loop(run_pass, interval, fast_interval, once_hook, stop, trigger)
    finally:
        trigger.close()


def _loop(
    run_pass: Any,
    interval: float,
    fast_interval: float | None,
    once_hook: Any,
    stop: StopFlag,
    trigger: PassTrigger,
) -> None:
    fast_every = (
        fast_interval
        if fast_interval is not None
        else float(settings.OBLETH_PROVISIONER_FAST_INTERVAL_SECS)
    )
    last_reason = None
    next_full = time.monotonic()
    while not stop.event.is_set():
        now = time.monotonic()
        full = now >= next_full or not fast_every
        # A long-lived process: drop a database connection that died (PostgreSQL restarted or
        # unreachable) or outlived CONN_MAX_AGE, as Django does around each request. Without
        # it, every pass after an outage fails on "the connection is closed", forever.
        _drop_dead_connections()
        try:
            report = run_pass(dispatch="inline", fast=not full)
        except Exception:  # noqa: BLE001 - a database blip must not end the loop
            log.exception("pass could not run (database unreachable?); trying again")
            stop.event.wait(max(1.0, fast_every or interval))
            continue
        if full:
            next_full = now + interval
            if settings.OBLETH_MODEL_HEALTH_ENABLED:
                try:
                    from obleth.gateway.health import run_due_checks

                    run_due_checks()
                except Exception:  # noqa: BLE001 - health checks must not stop the loop
                    log.exception("endpoint checks failed")
        if report.status == "idle":
            if report.detail != last_reason:
                log.info("provisioner idle: %s", report.detail)
            last_reason = report.detail
        else:
            if last_reason is not None:
                log.info("provisioner active again")
            last_reason = None
            if report.status == "error":
                log.warning("pass error, holding (nothing destructive done): %s", report.detail)
        if once_hook is not None:
            once_hook(report)
        step = min(fast_every, interval) if fast_every else interval
        trigger.wait(
            stop.event,
            max(0.0, min(step - (time.monotonic() - now), next_full - time.monotonic())),
        )
