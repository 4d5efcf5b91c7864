"""One provisioner pass: observe -> plan -> execute -> record.

``run_pass`` is what the Celery beat task, ``manage.py reconcile`` and the loop all call. A pass
holds a lease so two beat processes started by mistake never run two passes at once; each model's
actions run under that model's own lease, so exactly one pass acts on a model at a time, even with
several workers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any, Literal, cast

from django.conf import settings
from django.utils import timezone

from obleth.core.models import Replica, SlurmSettings
from obleth.gateway.table import publish_change
from obleth.logging import bound, new_pass_id, pass_id
from provisioner import lease, status
from provisioner.codec import decode_action, encode_action
from provisioner.domain import Action, CancelOrphan
from provisioner.execute import ActionResult, Executor, WarmupDispatch
from provisioner.observe import (
    HoldPass,
    ListingFailed,
    fingerprint,
    knobs_from_settings,
    observe,
    observe_held,
)
from provisioner.observed import record_observation
from provisioner.plan import plan, promotions_while_held
from provisioner.resolve import get_resolver
from provisioner.slurm.client import SlurmClient

log = logging.getLogger(__name__)

PASS_LEASE = "provisioner:pass"
EMPTY_FINGERPRINT = fingerprint([])
MODEL_LEASE = "provisioner:model:"


@dataclasses.dataclass
class PassReport:
    status: str  # ok | idle | error | skipped
    detail: str = ""
    planned: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    results: list[ActionResult] = dataclasses.field(default_factory=list)
    dispatched_models: int = 0
    duration_ms: int = 0
    slurm_requests: int = 0
    # The pass could not reconcile (listing failed, an exception): not merely failed actions.
    held: bool = False

    def as_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["failed"] = sum(1 for r in self.results if not r.ok)
        return data


# slurmrestd URL -> (detected API version, when). Detection costs a request; a pass that holds
# forgets it, so an upgraded cluster is detected again.
_detected: dict[str, tuple[str, float]] = {}
DETECTION_TTL_SECS = 600.0


def slurm_client_for(slurm: SlurmSettings) -> SlurmClient:
    version = slurm.api_version or None
    if version is None:
        cached = _detected.get(slurm.slurmrestd_url)
        if cached and time.monotonic() - cached[1] < DETECTION_TTL_SECS:
            version = cached[0]
    return SlurmClient(
        slurm.slurmrestd_url,
        slurm.user,
        slurm.jwt or "",
        version,
        timeout=float(settings.OBLETH_SLURM_TIMEOUT_SECS),
    )


def _remember_version(slurm: SlurmSettings, client: SlurmClient, held: bool) -> None:
    if slurm.api_version:
        return
    if held:
        _detected.pop(slurm.slurmrestd_url, None)
        return
    version = getattr(client, "api_version", None)
    cached = _detected.get(slurm.slurmrestd_url)
    if version and (cached is None or time.monotonic() - cached[1] >= DETECTION_TTL_SECS):
        _detected[slurm.slurmrestd_url] = (version, time.monotonic())
        if slurm.detected_api_version != version:
            SlurmSettings.objects.filter(pk=slurm.pk).update(detected_api_version=version)


def idle_reason(slurm: SlurmSettings) -> str | None:
    if not slurm.enabled:
        return "slurm disabled in settings"
    if not slurm.slurmrestd_url.strip():
        return "slurm enabled but slurmrestd_url is empty"
    if not slurm.user.strip():
        return "slurm enabled but no slurm user is set"
    if not (slurm.jwt or "").strip():
        return "slurm enabled but no JWT is set"
    return None


def default_warmup_dispatch(mode: str | None = None) -> WarmupDispatch | None:
    """Warm-ups run off the pass: a Celery task, or (inline mode) a thread of their own that a
    one-off command waits for before it exits."""
    if settings.OBLETH_PROVISIONER_WARMUP_TIMEOUT_SECS <= 0:
        return None
    chosen = mode or settings.OBLETH_PROVISIONER_DISPATCH

    def dispatch(replica_id: uuid.UUID, api_base: str, model_type: str) -> None:
        from provisioner.tasks import warmup_replica

        if chosen == "inline" and not settings.CELERY_TASK_ALWAYS_EAGER:
            import threading

            threading.Thread(
                target=warmup_replica.run,
                args=(str(replica_id), api_base, model_type),
                name=f"warmup-{replica_id}",
            ).start()
        else:
            warmup_replica.delay(str(replica_id), api_base, model_type)

    return dispatch


# Action class -> the verb of the pass's summary line, in the line's order.
_VERBS = {
    "Submit": "submitted",
    "Adopt": "adopted",
    "Promote": "promoted",
    "MarkLost": "lost",
    "Cancel": "cancelled",
    "CancelOrphan": "orphans cancelled",
    "DeleteEndpoint": "endpoints removed",
    "DeleteReplica": "rows removed",
    "SetGuard": "guard changes",
}
_NO_OP_DETAILS = ("row already has a job", "nothing to update")


def summarize(results: list[ActionResult]) -> str:
    """``submitted 1, promoted 1, lost 2 (1 churn), 1 failed`` for what changed; "" if nothing
    did (annotations of replica messages alone are not a change worth an INFO line)."""
    counts: dict[str, int] = defaultdict(int)
    churn = failed = 0
    for r in results:
        if not r.ok:
            failed += 1
            continue
        verb = _VERBS.get(r.action)
        if verb is None or r.detail.startswith(_NO_OP_DETAILS):
            continue
        counts[verb] += 1
        if r.action == "MarkLost" and "churn" in r.detail:
            churn += 1
    parts = []
    for verb in _VERBS.values():
        if counts.get(verb):
            text = f"{verb} {counts[verb]}"
            if verb == "lost" and churn:
                text += f" ({churn} churn)"
            parts.append(text)
    if failed:
        parts.append(f"{failed} failed")
    return ", ".join(parts)


def publish_if_changed(results: Sequence[ActionResult], observed: int = 0) -> bool:
    """Tell the gateways to reload when rows changed (a replica submitted, starting, lost, a
    breaker tripped, or ``observed`` rows with a new Slurm reason or probe outcome): those are
    ``QuerySet.update`` writes, which send no signal, and a model's 503 says what they hold."""
    changed = observed > 0 or any(
        r.ok and r.action != "model" and not r.detail.startswith(_NO_OP_DETAILS) for r in results
    )
    if changed:
        publish_change("replicas")
    return changed


def log_outcome(what: str, results: list[ActionResult], duration_ms: int | None = None) -> None:
    """One INFO line when something changed, DEBUG otherwise."""
    summary = summarize(results)
    took = f" in {duration_ms} ms" if duration_ms is not None else ""
    if summary:
        log.info("%s%s: %s", what, took, summary)
    else:
        log.debug("%s%s: nothing changed (%d action(s))", what, took, len(results))


def run_pass(
    *,
    dry_run: bool = False,
    dispatch: str | None = None,
    warmup: WarmupDispatch | None | bool = True,
    client_factory: Callable[[SlurmSettings], SlurmClient] = slurm_client_for,
    fast: bool = False,
) -> PassReport:
    """Run one pass; every line it logs carries its pass id. ``dispatch`` is "inline" (execute
    here) or "celery" (one task per model).

    A fast pass (``fast=True``) is the same pass without probing replicas that already serve:
    one job listing and a few queries, cheap enough to run every second so that ended jobs are
    replaced and ready replicas promoted within about a second. Full passes, on the normal
    interval, also probe serving replicas (zombie detection).
    """
    with bound(pass_id, new_pass_id()):
        report = _run_pass(
            dry_run=dry_run,
            dispatch=dispatch,
            warmup=warmup,
            client_factory=client_factory,
            fast=fast,
        )
        kind = "fast pass" if fast else "pass"
        if report.status == "ok" and not dry_run:
            log_outcome(kind, report.results, report.duration_ms)
            if report.dispatched_models:
                log.debug("%s: %d model task(s) dispatched", kind, report.dispatched_models)
        elif report.results and not dry_run:  # failed actions, or a held pass that promoted
            label = f"held {kind}" if report.held else kind
            log_outcome(label, report.results, report.duration_ms)
        return report


def _run_pass(
    *,
    dry_run: bool,
    dispatch: str | None,
    warmup: WarmupDispatch | None | bool,
    client_factory: Callable[[SlurmSettings], SlurmClient],
    fast: bool,
) -> PassReport:
    started = time.monotonic()
    dispatch = dispatch or settings.OBLETH_PROVISIONER_DISPATCH
    warmup_dispatch = default_warmup_dispatch(dispatch) if warmup is True else (warmup or None)
    if not dry_run:
        status.heartbeat()
    slurm = SlurmSettings.load()
    reason = idle_reason(slurm)
    if reason:
        report = PassReport(status="idle", detail=reason)
        return _finish(report, started, dry_run, fast)

    owner = lease.make_owner()
    ttl = settings.OBLETH_PROVISIONER_LOCK_TTL_SECS
    # A dry run changes nothing, so it needs no lease (and must not make a real pass skip).
    guard = contextlib.nullcontext(True) if dry_run else lease.held(PASS_LEASE, ttl, owner=owner)
    with guard as got:
        if not got:
            return PassReport(status="skipped", detail="another pass is running")
        client: SlurmClient | None = None
        try:
            client = client_factory(slurm)
            report = _pass(
                client,
                slurm,
                dry_run=dry_run,
                dispatch=dispatch,
                warmup=warmup_dispatch,
                fast=fast,
                pass_lease=(PASS_LEASE, owner),
            )
        except HoldPass as exc:
            log.warning("pass held, nothing destructive done: %s", exc)
            report = PassReport(status="error", detail=str(exc), held=True)
        except Exception as exc:  # noqa: BLE001 - recorded as the pass outcome
            log.exception("pass failed")
            report = PassReport(status="error", detail=f"{type(exc).__name__}: {exc}", held=True)
        else:
            if not dry_run:
                _remember_version(slurm, client, held=False)
        finally:
            if client is not None:
                client.close()
        if client is None:
            return _finish(report, started, dry_run, fast)
        if report.held:
            _remember_version(slurm, client, held=True)
        report.slurm_requests = getattr(client, "request_count", 0)
    return _finish(report, started, dry_run, fast)


def _finish(report: PassReport, started: float, dry_run: bool, fast: bool) -> PassReport:
    report.duration_ms = int((time.monotonic() - started) * 1000)
    if not dry_run and report.status in ("ok", "idle", "error"):
        outcome = cast(Literal["ok", "idle", "error"], report.status)
        kind: Literal["full", "fast"] = "fast" if fast else "full"
        status.record_pass(outcome, report.detail, report.duration_ms, kind=kind)
    return report


def _pass(
    client: SlurmClient,
    slurm: SlurmSettings,
    *,
    dry_run: bool,
    dispatch: str,
    warmup: WarmupDispatch | None,
    fast: bool = False,
    pass_lease: tuple[str, str] | None = None,
) -> PassReport:
    knobs = knobs_from_settings()
    now = timezone.now()
    busy = {uuid.UUID(name.removeprefix(MODEL_LEASE)) for name in lease.held_names(MODEL_LEASE)}
    try:
        observation = observe(
            client=client,
            slurm=slurm,
            knobs=knobs,
            now=now,
            resolver=get_resolver(),
            health_timeout=float(settings.OBLETH_PROVISIONER_HEALTH_TIMEOUT_SECS),
            probe_concurrency=settings.OBLETH_PROVISIONER_PROBE_CONCURRENCY,
            probe_healthy=not fast,
            submit_backoff_secs=float(settings.OBLETH_PROVISIONER_INTERVAL_SECS),
        )
    except ListingFailed as exc:
        if dry_run:
            raise
        return _held_pass(exc, client, slurm, knobs, now, busy, warmup, pass_lease)
    actions = plan(observation.snapshot)
    report = PassReport(status="ok", planned=[encode_action(a) for a in actions])
    if dry_run:
        report.detail = f"dry run: {len(actions)} action(s) planned"
        return report
    # probe outcomes and Slurm reasons, for the admin and the gateway's 503
    observed = record_observation(observation, now)

    by_model: dict[uuid.UUID, list[Action]] = defaultdict(list)
    orphans: list[Action] = []
    for action in actions:
        if isinstance(action, CancelOrphan):
            orphans.append(action)
        else:
            by_model[action.model_id].append(action)

    executor = Executor(
        client=client,
        slurm=slurm,
        knobs=knobs,
        specs=observation.specs,
        model_types=observation.model_types,
        warmup=warmup,
        leases=[pass_lease] if pass_lease else [],
        lease_ttl=float(settings.OBLETH_PROVISIONER_LOCK_TTL_SECS),
    )
    skipped = 0
    for model_id, model_actions in by_model.items():
        if model_id in busy:
            skipped += 1  # a previous pass is still acting on it; plan it again next pass
            continue
        if dispatch == "celery":
            from provisioner.tasks import reconcile_model

            reconcile_model.delay(
                str(model_id),
                [encode_action(a) for a in model_actions],
                observation.fingerprints.get(model_id, EMPTY_FINGERPRINT),
                now.isoformat(),
                pass_id=pass_id.get(),
            )
            report.dispatched_models += 1
        else:
            report.results += execute_model(
                model_id,
                model_actions,
                observation.fingerprints.get(model_id, EMPTY_FINGERPRINT),
                executor,
            )
    report.results += executor.run(orphans)
    publish_if_changed(report.results, observed)
    failed = [r for r in report.results if not r.ok]
    # Celery mode: model tasks record their failed actions; those not yet followed by a success
    # make this pass an error too, as an inline pass's own failures do.
    task_failures = status.recent_model_task_failures() if dispatch == "celery" else []
    parts = [f"{len(actions)} action(s)"]
    if report.dispatched_models:
        parts.append(f"{report.dispatched_models} model task(s) dispatched")
    if failed:
        parts.append(
            f"{len(failed)} failed: " + "; ".join(f"{r.action}: {r.detail}" for r in failed[:3])
        )
    if task_failures:
        parts.append("model task(s) failed: " + "; ".join(task_failures[:3]))
    if failed or task_failures:
        report.status = "error"
    if skipped:
        parts.append(f"{skipped} model(s) busy, left for the next pass")
    report.detail = ", ".join(parts)
    return report


def _held_pass(
    exc: ListingFailed,
    client: SlurmClient,
    slurm: SlurmSettings,
    knobs: Any,
    now: Any,
    busy: set[uuid.UUID],
    warmup: WarmupDispatch | None,
    pass_lease: tuple[str, str] | None,
) -> PassReport:
    """The job listing failed: hold (nothing destructive), but promote replicas already seen
    running whose server answers, so a replacement that started just before a slurmrestd outage
    serves now rather than when slurmrestd is back."""
    log.warning("pass held, nothing destructive done: %s", exc)
    report = PassReport(status="error", detail=str(exc), held=True)
    try:
        observation = observe_held(
            slurm=slurm,
            knobs=knobs,
            now=now,
            resolver=get_resolver(),
            health_timeout=float(settings.OBLETH_PROVISIONER_HEALTH_TIMEOUT_SECS),
            probe_concurrency=settings.OBLETH_PROVISIONER_PROBE_CONCURRENCY,
        )
    except HoldPass as held:
        log.warning("no promotions while held: %s", held)
        return report
    actions = promotions_while_held(observation.snapshot)
    if not actions:
        return report
    executor = Executor(
        client=client,
        slurm=slurm,
        knobs=knobs,
        specs=observation.specs,
        model_types=observation.model_types,
        warmup=warmup,
        leases=[pass_lease] if pass_lease else [],
        lease_ttl=float(settings.OBLETH_PROVISIONER_LOCK_TTL_SECS),
    )
    by_model: dict[uuid.UUID, list[Action]] = defaultdict(list)
    for promote in actions:
        by_model[promote.model_id].append(promote)
    for model_id, model_actions in by_model.items():
        if model_id in busy:
            continue
        expected = observation.fingerprints.get(model_id, EMPTY_FINGERPRINT)
        report.results += execute_model(model_id, model_actions, expected, executor)
    report.planned = [encode_action(a) for a in actions]
    publish_if_changed(report.results)
    promoted = sum(1 for r in report.results if r.ok and r.action == "Promote")
    if promoted:
        report.detail += f"; meanwhile promoted {promoted} replica(s) already seen running"
    return report


def execute_model(
    model_id: uuid.UUID, actions: list[Action], expected: str, executor: Executor
) -> list[ActionResult]:
    """Run one model's actions under its lease, only if its rows are as the plan saw them."""
    name = f"{MODEL_LEASE}{model_id}"
    owner = lease.make_owner()
    with lease.held(name, settings.OBLETH_PROVISIONER_LOCK_TTL_SECS, owner=owner) as got:
        if not got:
            return [ActionResult("model", str(model_id), True, "busy: another pass acts on it")]
        current = fingerprint(Replica.objects.filter(model_id=model_id))
        if current != expected:
            return [
                ActionResult(
                    "model",
                    str(model_id),
                    True,
                    "rows changed since observed; re-planned next pass",
                )
            ]
        executor.leases.append((name, owner))
        try:
            return executor.run(actions)
        finally:
            executor.leases.remove((name, owner))


def run_model_task(
    model_id: str,
    payload: list[dict[str, Any]],
    expected: str,
    planned_at: str,
    planned_by: str = "",
) -> dict[str, Any]:
    """Body of the per-model Celery task (kept here so the task stays thin). Its lines carry the
    id of the pass that planned it."""
    with bound(pass_id, planned_by or new_pass_id()):
        outcome = _run_model_task(model_id, payload, expected, planned_at)
        results = [ActionResult(**r) for r in outcome.get("results", [])]
        if results:
            log_outcome(f"model {outcome.get('model_name') or model_id}", results)
        return outcome


def _run_model_task(
    model_id: str, payload: list[dict[str, Any]], expected: str, planned_at: str
) -> dict[str, Any]:
    import datetime as dt

    age = (timezone.now() - dt.datetime.fromisoformat(planned_at)).total_seconds()
    if age > 2 * settings.OBLETH_PROVISIONER_INTERVAL_SECS + 30:
        return {"model_id": model_id, "skipped": f"plan is {age:.0f}s old"}
    slurm = SlurmSettings.load()
    if idle_reason(slurm):
        return {"model_id": model_id, "skipped": idle_reason(slurm)}
    from obleth.core.models import ManagedSpec

    mid = uuid.UUID(model_id)
    specs = {
        s.model_id: s for s in ManagedSpec.objects.select_related("model").filter(model_id=mid)
    }
    client = slurm_client_for(slurm)
    try:
        executor = Executor(
            client=client,
            slurm=slurm,
            knobs=knobs_from_settings(),
            specs=specs,
            model_types={k: v.model.model_type for k, v in specs.items()},
            warmup=default_warmup_dispatch(),
        )
        results = execute_model(mid, [decode_action(a) for a in payload], expected, executor)
    finally:
        client.close()
    publish_if_changed(results)
    name = specs[mid].model.name if mid in specs else ""
    # The pass that dispatched this task has already recorded its outcome: leave this one where
    # the next pass reads it, so failed actions turn the pass to error (and the held alert).
    status.record_model_task(
        model_id, name, [f"{r.action}: {r.detail}" for r in results if not r.ok]
    )
    return {
        "model_id": model_id,
        "model_name": name,
        "results": [dataclasses.asdict(r) for r in results],
    }
