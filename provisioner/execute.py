"""Execute: carry out one model's planned actions against the database and slurmrestd.

Each action stands alone: a failure is logged and recorded, and the rest still run. Every
controller-owned field is changed with a filtered UPDATE (compare-and-set), never read-modify-save,
so an operator's concurrent edit or a second worker is never overwritten silently.

Order of side effects is chosen so that a worker killed at any point leaves nothing the next pass
cannot repair: the replica row (with its job name) is written before the submit, an endpoint is
removed before its job is cancelled, and an endpoint is created before its replica is marked
healthy.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import os
import signal
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded
from django.db import transaction
from django.utils import timezone

from obleth.core import health_history as history
from obleth.core.choices import ReplicaState
from obleth.core.models import Endpoint, HealthEvent, Launch, ManagedSpec, Replica, SlurmSettings
from provisioner import lease
from provisioner.domain import (
    Action,
    Adopt,
    Cancel,
    CancelOrphan,
    DeleteEndpoint,
    DeleteReplica,
    Knobs,
    MarkLost,
    Promote,
    Retire,
    SetAutoscale,
    SetGuard,
    SettleLoss,
    SetTransition,
    Submit,
    UpdateMessage,
)
from provisioner.identity import identity_check_for, new_replica_key
from provisioner.refusals import record_refusal
from provisioner.slurm.client import SlurmClient
from provisioner.slurm.errors import SlurmConfigError, SlurmRejected
from provisioner.spec_fingerprint import spec_fingerprint
from provisioner.submission import build_submission, submission_record

log = logging.getLogger(__name__)

LIVE_STATES = [ReplicaState.PENDING, ReplicaState.STARTING, ReplicaState.HEALTHY]

# Called after a successful promotion: (replica_id, api_base, model_type) -> None
WarmupDispatch = Callable[[uuid.UUID, str, str], None]


@dataclasses.dataclass
class ActionResult:
    action: str
    replica_id: str
    ok: bool
    detail: str = ""


def fault_point(name: str) -> None:
    """Fault injection for the crash-safety tests: OBLETH_FAULT_KILL_AT=<name> SIGKILLs the
    worker at that point. Unset in production, where this is a no-op."""
    if os.environ.get("OBLETH_FAULT_KILL_AT") == name:
        log.warning("fault injection: SIGKILL at %s", name)
        os.kill(os.getpid(), signal.SIGKILL)


@dataclasses.dataclass
class Executor:
    client: SlurmClient
    slurm: SlurmSettings
    knobs: Knobs
    specs: dict[uuid.UUID, ManagedSpec]
    model_types: dict[uuid.UUID, str]
    warmup: WarmupDispatch | None = None
    now: Callable[[], dt.datetime] = timezone.now
    # (lease name, owner) pairs this executor acts under; renewed before every action.
    leases: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    lease_ttl: float = 120.0

    def still_holds(self) -> bool:
        return all(lease.renew(name, owner, self.lease_ttl) for name, owner in self.leases)

    def run(self, actions: Sequence[Action]) -> list[ActionResult]:
        results: list[ActionResult] = []
        for index, action in enumerate(actions):
            name = type(action).__name__
            replica_id = str(getattr(action, "replica_id", "") or getattr(action, "job_id", ""))
            if self.leases and not self.still_holds():
                # Slow Slurm calls outlived a lease: another pass may act now. Stop here; the
                # next pass plans what is left from what it sees.
                left = len(actions) - index
                log.warning("lease lost; %d action(s) left for the next pass", left)
                results.append(ActionResult("lease", replica_id, False, f"lease lost; {left} left"))
                break
            try:
                detail = self.apply(action)
            except SoftTimeLimitExceeded:
                raise  # the task's time is up: stop, do not swallow it as one failed action
            except Exception as exc:  # noqa: BLE001 - one failed action must not stop the others
                log.warning("%s %s failed: %s", name, replica_id, exc)
                results.append(ActionResult(name, replica_id, False, str(exc)))
            else:
                results.append(ActionResult(name, replica_id, True, detail))
        return results

    def apply(self, action: Action) -> str:
        match action:
            case Submit():
                return self.submit(action)
            case Adopt():
                return self.adopt(action)
            case Promote():
                return self.promote(action)
            case MarkLost():
                return self.mark_lost(action)
            case SettleLoss():
                return self.settle_loss(action)
            case Cancel():
                return self.cancel(action)
            case CancelOrphan():
                return self.cancel_orphan(action)
            case DeleteReplica():
                Replica.objects.filter(pk=action.replica_id).delete()
                Launch.objects.filter(pk=action.replica_id, ended_at__isnull=True).update(
                    ended_at=self.now(), end_state="deleted", end_reason=action.why[:500]
                )
                return action.why
            case DeleteEndpoint():
                Endpoint.objects.filter(pk=action.endpoint_id, replica_id__isnull=False).delete()
                return action.why
            case UpdateMessage():
                return self.update(action)
            case SetGuard():
                return self.set_guard(action)
            case Retire():
                return self.retire(action)
            case SetTransition():
                return self.set_transition(action)
            case SetAutoscale():
                return self.set_autoscale(action)
        raise TypeError(f"unknown action {action!r}")

    # ------------------------------------------------------------------------------- submit
    def submit(self, action: Submit) -> str:
        spec = self.specs.get(action.model_id)
        if spec is None:
            raise RuntimeError("no managed spec for this model; nothing to submit")
        model_name = spec.model.name
        excluded = ",".join(action.excluded_nodes)
        # The replica's key: kept from its row on a resubmit (a job of the first submit may
        # still come up with it), fresh for a new row. It reaches the job's environment only.
        stored = (
            Replica.objects.filter(pk=action.replica_id).values_list("api_key", flat=True).first()
            if action.existing
            else None
        )
        api_key = stored or new_replica_key()
        fingerprint = spec_fingerprint(
            spec
        )  # what this job is submitted with (rollout compares it)
        identity_check = identity_check_for(spec.launcher_spec)
        submission = build_submission(
            spec=spec,
            slurm=self.slurm,
            job_name=action.job_name,
            port_base=action.port_base,
            port_span=self.knobs.port_span,
            excluded_nodes=action.excluded_nodes,
            client=self.client,
            replica_api_key=api_key,
            replica_id=str(action.replica_id),
        )
        launch_defaults: dict[str, Any] = {
            "model_id": action.model_id,
            "model_name": model_name,
            "recipe_id": spec.recipe_id or _recipe_id(spec.launcher_spec),
            "job_name": action.job_name,
            "partition": spec.partition,
            "account": spec.account,
            "qos": spec.qos,
            "time_limit": spec.time_limit,
            "gres": spec.gres,
            "nodes_requested": spec.nodes,
            "cpus_per_task": spec.cpus_per_task,
            "mem": spec.mem,
            "exclude": submission.excluded_nodes,
            "constraints": spec.constraints,
            "submission": submission_record(submission),
            "stdout_path": submission.standard_output,
            "stderr_path": submission.standard_error,
        }
        # The row (with the job name that identifies the job) and its launch record are written
        # together, before the submit: a job whose answer is lost is adopted with its history.
        with transaction.atomic():
            if action.existing:
                updated = Replica.objects.filter(pk=action.replica_id, job_id="").update(
                    submitted_at=self.now(),
                    last_message="submitting",
                    updated_at=self.now(),
                    spec_fingerprint=fingerprint,
                    **({} if stored else {"api_key": api_key, "identity_check": identity_check}),
                )
                if not updated:
                    return "row already has a job; nothing to do"
            else:
                Replica.objects.create(
                    id=action.replica_id,
                    model_id=action.model_id,
                    model_name=model_name,
                    state=ReplicaState.PENDING,
                    job_name=action.job_name,
                    port_base=action.port_base,
                    excluded_nodes=excluded,
                    submitted_at=self.now(),
                    last_message="submitting",
                    api_key=api_key,
                    identity_check=identity_check,
                    spec_fingerprint=fingerprint,
                    successor_of=action.successor_of,
                )
                Launch.objects.create(id=action.replica_id, **launch_defaults)
            if action.existing:
                Launch.objects.update_or_create(id=action.replica_id, defaults=launch_defaults)
        fault_point("after_row_before_submit")
        try:
            job_id = self.client.submit(submission)
        except (SlurmRejected, SlurmConfigError) as exc:
            # Refused (by Slurm, or by the adapter before sending): no job exists. Keep the reason
            # where the operator looks first; the next pass tries again.
            reason = exc.reason if isinstance(exc, SlurmRejected) else exc.message
            Replica.objects.filter(pk=action.replica_id, job_id="").delete()
            Launch.objects.update_or_create(
                id=action.replica_id,
                defaults={
                    **launch_defaults,
                    "end_state": "rejected",
                    "end_reason": reason[:500],
                    "ended_at": self.now(),
                },
            )
            record_refusal(self.client, action.replica_id, exc, spec.partition)  # whole answer
            spec.last_provision_error = f"Slurm refused the job: {reason}"
            ManagedSpec.objects.filter(pk=action.model_id).update(
                last_provision_error=spec.last_provision_error,
                last_provision_error_at=self.now(),
            )
            raise
        # An uncertain answer (SlurmUncertain) propagates with the row kept: the next pass adopts
        # the job by its name if Slurm created it, or submits again if it did not.
        fault_point("after_submit_before_record")
        Replica.objects.filter(pk=action.replica_id, job_id="").update(
            job_id=job_id, last_message="submitted", updated_at=self.now()
        )
        Launch.objects.filter(pk=action.replica_id).update(job_id=job_id)
        if spec.last_provision_error:
            ManagedSpec.objects.filter(pk=action.model_id).update(
                last_provision_error="", last_provision_error_at=None
            )
            spec.last_provision_error = ""
        log.debug("submitted job %s for %s (replica %s)", job_id, model_name, action.replica_id)
        return f"job {job_id}"

    def adopt(self, action: Adopt) -> str:
        Replica.objects.filter(pk=action.replica_id, job_id="").update(
            job_id=action.job_id, last_message="adopted job found by name", updated_at=self.now()
        )
        Launch.objects.filter(pk=action.replica_id, job_id="").update(job_id=action.job_id)
        return f"adopted job {action.job_id}"

    # ------------------------------------------------------------------------------ promote
    def promote(self, action: Promote) -> str:
        # The endpoint carries the replica's key: the gateway, its checks and the warm-up send it.
        replica_key = (
            Replica.objects.filter(pk=action.replica_id).values_list("api_key", flat=True).first()
            or ""
        )
        keyed: dict[str, Any] = {"api_key": replica_key} if replica_key else {}
        endpoint = None
        if action.endpoint_id is not None:
            endpoint = Endpoint.objects.filter(pk=action.endpoint_id).first()
        if endpoint is None:
            endpoint = Endpoint.objects.filter(
                model_id=action.model_id, name=action.endpoint_name
            ).first()
        if endpoint is None:
            endpoint = Endpoint.objects.create(
                model_id=action.model_id,
                name=action.endpoint_name,
                api_base=action.api_base,
                replica_id=action.replica_id,
                enabled=True,
                **keyed,
            )
        elif (
            endpoint.api_base != action.api_base
            or endpoint.replica_id != action.replica_id
            or (replica_key and endpoint.api_key != replica_key)
        ):
            # In place: keeps name, priority, weight and enabled flag; the key is the replica's.
            Endpoint.objects.filter(pk=endpoint.pk).update(
                api_base=action.api_base,
                replica_id=action.replica_id,
                updated_at=self.now(),
                **keyed,
            )
        fault_point("after_endpoint_before_healthy")
        now = self.now()
        updated = Replica.objects.filter(pk=action.replica_id, state__in=LIVE_STATES).update(
            state=ReplicaState.HEALTHY,
            nodes=action.node,
            endpoint_id=endpoint.pk,
            port=action.port,
            probe_failures=0,
            healthy_at=now,
            last_message=f"serving on {action.node}:{action.port}",
            updated_at=now,
        )
        if not updated:
            Endpoint.objects.filter(pk=endpoint.pk, replica_id=action.replica_id).delete()
            return "replica left the live states meanwhile; endpoint withdrawn"
        Launch.objects.filter(pk=action.replica_id, healthy_at__isnull=True).update(healthy_at=now)
        history.record_replica_event(
            model_id=action.model_id,
            kind=HealthEvent.Kind.PROMOTED,
            replica_id=action.replica_id,
            job_id=Replica.objects.filter(pk=action.replica_id)
            .values_list("job_id", flat=True)
            .first()
            or "",
            endpoint_id=endpoint.pk,
            endpoint_name=endpoint.name,
            outcome="promoted",
            message=f"serving on {action.node}:{action.port} ({action.api_base})",
            at=now,
        )
        if action.job_started_at is not None:  # promoted before a pass saw it starting
            started = dt.datetime.fromtimestamp(action.job_started_at, tz=dt.UTC)
            Launch.objects.filter(pk=action.replica_id, started_at__isnull=True).update(
                started_at=min(started, now), nodes=action.node
            )
        if self.warmup is not None:
            try:
                self.warmup(
                    action.replica_id,
                    action.api_base,
                    self.model_types.get(action.model_id, "chat"),
                )
            except Exception as exc:  # noqa: BLE001 - warm-up is best effort
                log.warning("could not dispatch warm-up for %s: %s", action.replica_id, exc)
        log.debug("promoted replica %s at %s", action.replica_id, action.api_base)
        return action.api_base

    # ------------------------------------------------------------------- lost / cancel / update
    def mark_lost(self, action: MarkLost) -> str:
        if action.endpoint_id is not None:
            Endpoint.objects.filter(pk=action.endpoint_id).delete()
        now = self.now()
        job_id = (
            Replica.objects.filter(pk=action.replica_id).values_list("job_id", flat=True).first()
        )
        marked = (
            Replica.objects.filter(pk=action.replica_id)
            .exclude(state=ReplicaState.LOST)
            .update(
                state=ReplicaState.LOST,
                last_message=action.message[:500],
                endpoint_id=None,
                lost_at=now,
                updated_at=now,
            )
        )
        Launch.objects.filter(pk=action.replica_id, ended_at__isnull=True).update(
            ended_at=now,
            end_state=action.end_state[:60],
            end_reason=action.end_reason[:500],
            exit_code=action.exit_code,
            failed_launch=action.failed_launch,
            **({"nodes": ",".join(action.nodes)} if action.nodes else {}),
        )
        if marked:
            history.record_replica_event(
                model_id=action.model_id,
                kind=HealthEvent.Kind.LOST,
                replica_id=action.replica_id,
                job_id=job_id or "",
                endpoint_id=action.endpoint_id,
                outcome="failed launch" if action.failed_launch else "lost",
                message=action.message,
                at=now,
            )
        if action.failed_launch:
            log.warning("replica %s: failed launch: %s", action.replica_id, action.message)
        else:
            log.debug("replica %s lost: %s", action.replica_id, action.message)
        return action.message

    def settle_loss(self, action: SettleLoss) -> str:
        settled = Launch.objects.filter(
            pk=action.replica_id, end_state__iexact="COMPLETING"
        ).update(
            end_state=action.end_state[:60],
            end_reason=action.end_reason[:500],
            exit_code=action.exit_code,
            failed_launch=action.failed_launch,
        )
        Replica.objects.filter(pk=action.replica_id, state=ReplicaState.LOST).update(
            last_message=action.message[:500], updated_at=self.now()
        )
        if settled and action.failed_launch:
            log.warning("replica %s: failed launch: %s", action.replica_id, action.message)
        return action.message

    def cancel(self, action: Cancel) -> str:
        # Leave the routing pool first, so no request goes to a dying server.
        if action.endpoint_id is not None:
            Endpoint.objects.filter(pk=action.endpoint_id).delete()
        fault_point("after_deregister_before_cancel")
        if action.job_id:
            self.client.cancel(action.job_id)
        now = self.now()
        cancelled = (
            Replica.objects.filter(pk=action.replica_id)
            .exclude(state=ReplicaState.DRAINING)
            .update(
                state=ReplicaState.DRAINING,
                last_message=action.message[:500],
                endpoint_id=None,
                cancel_requested=False,
                updated_at=now,
            )
        )
        # A handed-over row was already draining (out of routing): its drain is over now.
        Replica.objects.filter(
            pk=action.replica_id, state=ReplicaState.DRAINING, drain_deadline__isnull=False
        ).update(drain_deadline=None, last_message=action.message[:500], updated_at=now)
        Launch.objects.filter(pk=action.replica_id, ended_at__isnull=True).update(
            ended_at=now, end_state=f"cancelled:{action.reason.value}"
        )
        if cancelled:
            history.record_replica_event(
                model_id=action.model_id,
                kind=HealthEvent.Kind.RESTARTED,
                replica_id=action.replica_id,
                job_id=action.job_id,
                endpoint_id=action.endpoint_id,
                outcome=f"cancelled: {action.reason.value}"[:32],
                message=action.message,
                at=now,
            )
        log.debug(
            "cancelled job %s (replica %s): %s", action.job_id, action.replica_id, action.message
        )
        return action.message

    def set_guard(self, action: SetGuard) -> str:
        """Record the model's breaker/storm sentences; alert and warn when one starts."""
        from provisioner import alerts

        spec = self.specs.get(action.model_id)
        name = spec.model.name if spec is not None else str(action.model_id)
        now = self.now()
        fields: dict[str, Any] = {
            "breaker_message": action.breaker,
            "storm_message": action.storm,
        }
        current = ManagedSpec.objects.filter(pk=action.model_id).values(
            "breaker_message", "storm_message"
        )
        before: dict[str, Any] = dict(current.first() or {})
        if not action.breaker:
            fields["breaker_tripped_at"] = None
        elif not before.get("breaker_message"):
            fields["breaker_tripped_at"] = now
        if not action.storm:
            fields["storm_since"] = None
        elif not before.get("storm_message"):
            fields["storm_since"] = now
        ManagedSpec.objects.filter(pk=action.model_id).update(**fields)
        if action.tripped:
            log.warning("model %s: failed-launch breaker tripped: %s", name, action.breaker)
            alerts.fire(
                f"failed_launch_breaker:{action.model_id}",
                f"Model {name} stopped launching replicas (failed-launch breaker)",
                action.breaker,
                severity="critical",
            )
        elif before.get("breaker_message") and not action.breaker:
            log.info("model %s: failed-launch breaker reset; launching again", name)
        if action.storm_started:
            log.warning("model %s: replacement storm: %s", name, action.storm)
            alerts.fire(
                f"replacement_storm:{action.model_id}",
                f"Model {name}: replacement storm, replacements slowed",
                action.storm,
                severity="warning",
            )
        elif before.get("storm_message") and not action.storm:
            log.info("model %s: replacement storm over; replacing at full speed", name)
        return action.breaker or action.storm or "guard cleared"

    def retire(self, action: Retire) -> str:
        """Out of routing first (the gateway stops sending it new requests), job kept running
        until ``drain_deadline`` so in-flight streams finish; a later pass cancels it."""
        if action.endpoint_id is not None:
            Endpoint.objects.filter(pk=action.endpoint_id).delete()
        updated = Replica.objects.filter(pk=action.replica_id, state=ReplicaState.HEALTHY).update(
            state=ReplicaState.DRAINING,
            drain_deadline=action.drain_deadline,
            endpoint_id=None,
            last_message=action.message[:500],
            updated_at=self.now(),
        )
        if not updated:
            return "not serving any more; nothing to retire"
        log.info("replica %s handed over: %s", action.replica_id, action.message)
        return action.message

    def set_transition(self, action: SetTransition) -> str:
        """Record the model's handover and rollout sentences (the API and model page show them)."""
        spec = self.specs.get(action.model_id)
        name = spec.model.name if spec is not None else str(action.model_id)
        ManagedSpec.objects.filter(pk=action.model_id).update(
            handover_message=action.handover, rollout_message=action.rollout
        )
        if action.rollout.startswith("rollout stopped"):
            log.warning("model %s: %s", name, action.rollout)
        elif action.handover:
            log.info("model %s: %s", name, action.handover)
        return action.handover or action.rollout or "transition cleared"

    def set_autoscale(self, action: SetAutoscale) -> str:
        """Record what autoscaling decided (the API and the model page show the sentence);
        a change of count is logged with its reason."""
        ManagedSpec.objects.filter(pk=action.model_id).update(
            autoscale_replicas=action.replicas,
            autoscale_since=action.since,
            autoscale_changed_at=action.changed_at,
            autoscale_pending_since=action.pending_since,
            autoscale_pending_replicas=action.pending_replicas,
            autoscale_idle_since=action.idle_since,
            autoscale_message=action.message,
            autoscale_message_at=self.now() if action.message else None,
        )
        if action.change in ("up", "down", "zero", "wake"):
            spec = self.specs.get(action.model_id)
            name = spec.model.name if spec is not None else str(action.model_id)
            log.info("model %s: autoscaled %s: %s", name, action.change, action.message)
        return action.message or "autoscale cleared"

    def cancel_orphan(self, action: CancelOrphan) -> str:
        self.client.cancel(action.job_id)
        log.warning(
            "cancelled orphan job %s (%s): no replica row knows it", action.job_id, action.job_name
        )
        return f"orphan {action.job_id} cancelled"

    def update(self, action: UpdateMessage) -> str:
        fields: dict[str, Any] = {}
        if action.message is not None:
            fields["last_message"] = action.message[:500]
        if action.nodes is not None:
            fields["nodes"] = ",".join(action.nodes)
        if action.probe_failures is not None:
            fields["probe_failures"] = max(0, action.probe_failures)
        if not fields and action.state is None:
            return "nothing to update"
        query = Replica.objects.filter(pk=action.replica_id)
        now = self.now()
        if action.state is not None:
            fields["state"] = action.state.value
            if action.state.value == ReplicaState.STARTING:
                fields["started_at"] = now
                query = query.filter(state=ReplicaState.PENDING)
        fields["updated_at"] = now
        query.update(**fields)
        if action.nodes:
            Launch.objects.filter(pk=action.replica_id, started_at__isnull=True).update(
                started_at=now, nodes=",".join(action.nodes)
            )
        return "updated"


def _recipe_id(launcher_spec: Any) -> uuid.UUID | None:
    if not isinstance(launcher_spec, dict):
        return None
    recipe = launcher_spec.get("recipe")
    value = recipe.get("id") if isinstance(recipe, dict) else launcher_spec.get("recipe_id")
    if not value:
        return None
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None
