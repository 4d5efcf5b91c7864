"""Wake on request: a request for a model scaled to zero is held while a replica comes up.

A model whose spec autoscales with ``min_replicas = 0`` (``RouteModel.wakeable``) and has no
endpoint: :meth:`Waker.ready` signals a wake (Redis, :meth:`InflightCounter.wake`; the held
request also counts as in flight), then waits for a routing-table reload that brings the model an
endpoint, and returns the fresh route. Past ``OBLETH_GATEWAY_WAKE_HOLD_SECS`` it answers 503 with
``Retry-After`` from the model's measured job-start-to-serving time and what Slurm says about the
replica (its pending reason and expected start). A client that goes away while held stops the
hold.

The hold reads no database; the 503 past the bound does (one short read in a thread, once per
timed-out request) for the replica's state and the measured start time.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.http import HttpResponse

from obleth.gateway import metrics
from obleth.gateway.inflight import InflightCounter
from obleth.gateway.proxy import openai_error
from obleth.gateway.routing import RouteModel
from obleth.gateway.table import LiveTable

log = logging.getLogger(__name__)

__all__ = ["RESIGNAL_SECS", "WakeStatus", "Waker", "retry_after_secs", "wake_status"]

RESIGNAL_SECS = 5.0  # a held request renews its wake signal this often
DEFAULT_START_SECS = 60  # a model without a measured start yet
MAX_RETRY_AFTER_SECS = 3600

Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]


@dataclass(frozen=True)
class WakeStatus:
    """What a client told "not yet" is told: when to retry and why."""

    retry_after: int
    sentence: str


def retry_after_secs(
    *,
    start_to_serving: float | None,
    state: str,
    expected_start_in: float | None = None,
    running_for: float | None = None,
) -> int:
    """Seconds until the woken replica should serve (pure).

    ``start_to_serving``: the model's measured job-start-to-serving (median, None: unmeasured);
    ``state``: its newest live replica's state ("" = none submitted yet); for a pending job,
    ``expected_start_in`` is Slurm's expected start from now, for a starting one ``running_for``
    is how long its job has run.
    """
    start = start_to_serving if start_to_serving is not None else DEFAULT_START_SECS
    if state == "starting" and running_for is not None:
        wait = start - running_for
    elif state == "pending" and expected_start_in is not None:
        wait = max(expected_start_in, 0) + start
    else:
        wait = start
    return int(min(max(round(wait), 5), MAX_RETRY_AFTER_SECS))


def wake_status(model_id: str, model_name: str, held_secs: float) -> WakeStatus:
    """The 503's Retry-After and sentence from the database (called in a thread)."""
    from django.db import close_old_connections

    from obleth.core.choices import ReplicaState
    from obleth.core.models import Replica
    from provisioner.handover_window import measured_start_to_serving
    from provisioner.reasons import explain_pending

    close_old_connections()
    try:
        key = uuid.UUID(model_id)
        measured = measured_start_to_serving([key]).get(key) or []
        start = statistics.median(measured) if measured else None
        replica = (
            Replica.objects.filter(
                model_id=model_id,
                state__in=[ReplicaState.PENDING, ReplicaState.STARTING, ReplicaState.HEALTHY],
            )
            .order_by("-created_at")
            .only("state", "job_id", "slurm_reason", "expected_start_at", "started_at")
            .first()
        )
    finally:
        close_old_connections()
    now = dt.datetime.now(tz=dt.UTC)
    state = replica.state if replica is not None else ""
    expected = replica.expected_start_at if replica is not None else None
    started = replica.started_at if replica is not None else None
    retry = retry_after_secs(
        start_to_serving=start,
        state=state,
        expected_start_in=(expected - now).total_seconds() if expected else None,
        running_for=(now - started).total_seconds() if started else None,
    )
    measured_words = (
        f"its replicas took {round(start)} s from job start to serving"
        if start is not None
        else "it has no measured start time yet"
    )
    if replica is None:
        where = "No replica has been submitted yet (is the provisioner running?)."
    elif state == ReplicaState.PENDING:
        reason = explain_pending(replica.slurm_reason or "", expected_start=expected, now=now)
        where = f"Its replica's job is pending in the Slurm queue: {reason.sentence}"
    elif state == ReplicaState.STARTING:
        where = "Its replica's job is running and the server is starting."
    else:
        where = "Its replica is being registered with the gateway."
    sentence = (
        f"Model '{model_name}' was scaled to zero and is waking up: no replica was ready within "
        f"{round(held_secs)} s. {where} The model's {measured_words}; retry in about "
        f"{retry} s."
    )
    return WakeStatus(retry, sentence)


class Waker:
    """Holds requests for a model at zero until the routing table gives it an endpoint."""

    def __init__(
        self,
        table: LiveTable,
        counter: InflightCounter,
        hold_secs: float | None = None,
        status: Callable[[str, str, float], WakeStatus] = wake_status,
    ) -> None:
        self.table = table
        self.counter = counter
        self.hold_secs = (
            float(hold_secs)
            if hold_secs is not None
            else float(getattr(settings, "OBLETH_GATEWAY_WAKE_HOLD_SECS", 120))
        )
        self._status = status
        self._reloaded = asyncio.Event()
        self.held = 0

    def table_reloaded(self) -> None:
        """Wake every held request to look at the new table."""
        event, self._reloaded = self._reloaded, asyncio.Event()
        event.set()

    def _current(self, route: RouteModel) -> RouteModel | None:
        table = self.table.table
        return table.get(route.name) if table is not None else None

    async def ready(self, route: RouteModel, receive: Receive) -> RouteModel | HttpResponse:
        """The route to forward to (with endpoints), or the answer to send instead."""
        if route.endpoints or not route.wakeable or route.state.breaker:
            return route
        started = time.monotonic()
        deadline = started + max(self.hold_secs, 0.0)
        self.held += 1
        gone = asyncio.ensure_future(receive())
        try:
            await self.counter.wake(route.id)
            signalled = time.monotonic()
            while True:
                current = self._current(route)
                if current is None or not current.wakeable:
                    return current or route  # disabled or removed meanwhile: the usual answer
                if current.endpoints:
                    metrics.HELD.labels(route.name, "served").inc()
                    log.info(
                        "gateway: %s woke; held request served after %.1f s",
                        route.name,
                        time.monotonic() - started,
                    )
                    return current
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                if time.monotonic() - signalled >= RESIGNAL_SECS:
                    await self.counter.wake(route.id)
                    signalled = time.monotonic()
                reloaded = asyncio.ensure_future(self._reloaded.wait())
                done, _ = await asyncio.wait(
                    {reloaded, gone},
                    timeout=min(left, RESIGNAL_SECS),
                    return_when=asyncio.FIRST_COMPLETED,
                )
                reloaded.cancel()
                if gone in done:
                    message = gone.result() if not gone.exception() else {}
                    if message.get("type", "http.disconnect") == "http.disconnect":
                        metrics.HELD.labels(route.name, "gone").inc()
                        return _client_gone()
                    gone = asyncio.ensure_future(receive())
        finally:
            self.held -= 1
            if not gone.done():
                gone.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await gone
        metrics.HELD.labels(route.name, "timeout").inc()
        held = time.monotonic() - started
        try:
            status = await asyncio.to_thread(self._status, route.id, route.name, held)
        except Exception as exc:  # the database is down: a plain answer, still with a retry
            log.warning("gateway: wake status of %s unavailable (%s)", route.name, exc)
            status = WakeStatus(
                DEFAULT_START_SECS,
                f"Model '{route.name}' was scaled to zero and is waking up: no replica was ready "
                f"within {round(held)} s; retry in about {DEFAULT_START_SECS} s.",
            )
        log.info("gateway: %s still waking after %.0f s: %s", route.name, held, status.sentence)
        response = openai_error(
            503,
            status.sentence,
            kind="service_unavailable",
            code="model_waking",
            headers={"Retry-After": str(status.retry_after)},
        )
        response.obleth_model = route.name  # type: ignore[attr-defined]
        return response


def _client_gone() -> HttpResponse:
    response = HttpResponse(status=499)
    response.obleth_reason = "client went away while held"  # type: ignore[attr-defined]
    return response
