"""Why a model has no routable endpoint, in the words its 503 answer uses (pure).

The gateway holds one :class:`ModelState` per model in its routing table (loaded with it, a few
queries for all models: :func:`obleth.gateway.routing.build_route_table`) and decides the answer
with :func:`explain` when the model has no endpoint to send a request to. No database, no clock
read: ``now`` is given, so every state is table-tested (tests/gateway/test_availability.py).

The states, most telling first (code; Retry-After):

- the model or its provisioning is disabled: ``model_disabled``; none, an operator must act;
- a static model without an enabled endpoint: ``no_endpoint``; none;
- a job running, its engine loading (for how long, the last probe): ``model_starting``; 30 s;
- a job waiting in the Slurm queue (Slurm's reason in words, its expected start):
  ``model_pending``; until the expected start (30 s to 1 h), else 60 s;
- the failed-launch breaker tripped (how to resume): ``model_stopped``; none;
- Slurm refused the last submit: ``model_refused``; none, the managed spec must change;
- scaled to 0 replicas: ``model_scaled_to_zero``; none;
- Slurm provisioning switched off: ``slurm_disabled``; none;
- a replica just promoted, its endpoint not routable yet: ``no_replica_ready``; 5 s;
- nothing launched yet: ``no_replica_ready``; 30 s.

A starting or pending replica wins over the breaker and a refused submit: a retry can still be
answered by it. Client-facing sentences never carry node names or ports (Slurm's extra detail
and the probe's raw text stay in the admin).
"""

from __future__ import annotations

import dataclasses
import datetime as dt

from provisioner.reasons import explain_pending, explain_probe

STARTING_RETRY_SECS = 30
PENDING_RETRY_SECS = 60
PENDING_RETRY_MIN_SECS = 30
PENDING_RETRY_MAX_SECS = 3600
REGISTERING_RETRY_SECS = 5
NOT_LAUNCHED_RETRY_SECS = 30


@dataclasses.dataclass(frozen=True, slots=True)
class ReplicaFacts:
    """The one replica a 503 talks about (the most advanced of its state)."""

    job_id: str = ""
    since: dt.datetime | None = None  # pending: submitted; starting: the job started
    slurm_reason: str = ""
    expected_start: dt.datetime | None = None
    last_probe: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class ModelState:
    """What the gateway knows of a model besides its endpoints. The default is a static model."""

    enabled: bool = True  # Model.enabled
    managed: bool = False  # has a managed spec (Slurm hosted)
    spec_enabled: bool = True
    slurm_enabled: bool = True  # the Slurm master switch (Settings -> Slurm)
    target: int = 0
    breaker: str = ""  # why the provisioner stopped launching ("" = it did not)
    refusal: str = ""  # Slurm's refusal of the last submit ("" = none)
    serving: int = 0  # replicas the provisioner promoted (their endpoint may not be routable yet)
    starting: ReplicaFacts | None = None
    pending: ReplicaFacts | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Unavailable:
    """The 503 answer: an OpenAI error ``code``, the ``message``, and ``Retry-After`` seconds
    (None: retrying cannot help until someone acts)."""

    code: str
    message: str
    retry_after: int | None
    status: int = 503


def duration_words(secs: float) -> str:
    """``42 s``, ``3 min 05 s``, ``2 h 10 min``, ``3 d 4 h``."""
    s = max(0, int(secs))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


def _job(facts: ReplicaFacts) -> str:
    return f"job {facts.job_id}" if facts.job_id else "its job"


def _starting(name: str, facts: ReplicaFacts, now: dt.datetime) -> Unavailable:
    running = f" for {duration_words((now - facts.since).total_seconds())}" if facts.since else ""
    probe = explain_probe(facts.last_probe, with_detail=False)
    seen = (
        f" The last health probe: {probe.sentence}"
        if facts.last_probe
        else " Its server has not been probed yet."
    )
    return Unavailable(
        "model_starting",
        f"Model '{name}' is starting: {_job(facts)} has been running{running} and its server "
        f"does not take requests yet.{seen} Retry in {STARTING_RETRY_SECS} s.",
        STARTING_RETRY_SECS,
    )


def _pending(name: str, facts: ReplicaFacts, now: dt.datetime) -> Unavailable:
    if not facts.job_id:
        return Unavailable(
            "model_pending",
            f"Model '{name}' has no replica ready: its job is being submitted to Slurm. "
            f"Retry in {NOT_LAUNCHED_RETRY_SECS} s.",
            NOT_LAUNCHED_RETRY_SECS,
        )
    why = explain_pending(
        facts.slurm_reason, expected_start=facts.expected_start, now=now, with_detail=False
    )
    waited = f" for {duration_words((now - facts.since).total_seconds())}" if facts.since else ""
    retry = PENDING_RETRY_SECS
    if why.expected_start is not None:
        until = (why.expected_start - now).total_seconds()
        retry = int(min(max(until, PENDING_RETRY_MIN_SECS), PENDING_RETRY_MAX_SECS))
    return Unavailable(
        "model_pending",
        f"Model '{name}' has no replica ready: {_job(facts)} has been waiting in the Slurm "
        f"queue{waited}. {why.sentence} Retry in {retry} s.",
        retry,
    )


def explain(name: str, state: ModelState, now: dt.datetime, model_id: str = "") -> Unavailable:
    """The answer for a request to ``name`` when it has no endpoint to try."""
    if not state.enabled or (state.managed and not state.spec_enabled):
        what = "the model" if not state.enabled else "its provisioning"
        return Unavailable(
            "model_disabled",
            f"Model '{name}' is disabled: an operator turned {what} off, so no replica serves "
            "it. Ask an operator to enable it.",
            None,
        )
    if not state.managed:
        return Unavailable(
            "no_endpoint",
            f"Model '{name}' has no enabled endpoint: an operator must add or enable one "
            "(admin, the model's endpoints).",
            None,
        )
    if state.starting is not None:
        return _starting(name, state.starting, now)
    if state.pending is not None:
        return _pending(name, state.pending, now)
    if state.breaker:
        hint = state.breaker.replace("<id>", model_id) if model_id else state.breaker
        return Unavailable("model_stopped", f"Model '{name}' has no replica: {hint}", None)
    if state.refusal:
        return Unavailable(
            "model_refused",
            f"Model '{name}' has no replica: {state.refusal.rstrip('.')}. An operator must fix "
            "its managed spec; retrying will not help until then.",
            None,
        )
    if state.target <= 0:
        return Unavailable(
            "model_scaled_to_zero",
            f"Model '{name}' is scaled to 0 replicas, so nothing serves it. Ask an operator to "
            "scale it up.",
            None,
        )
    if not state.slurm_enabled:
        return Unavailable(
            "slurm_disabled",
            f"Model '{name}' has no replica: Slurm provisioning is switched off (Settings -> "
            "Slurm), so none is launched. Ask an operator to enable it.",
            None,
        )
    if state.serving:
        return Unavailable(
            "no_replica_ready",
            f"Model '{name}' has a replica that just became ready; its endpoint is not routable "
            f"yet. Retry in {REGISTERING_RETRY_SECS} s.",
            REGISTERING_RETRY_SECS,
        )
    return Unavailable(
        "no_replica_ready",
        f"Model '{name}' has no replica ready yet: the provisioner has not launched one (it does "
        f"within a pass). Retry in {NOT_LAUNCHED_RETRY_SECS} s.",
        NOT_LAUNCHED_RETRY_SECS,
    )
