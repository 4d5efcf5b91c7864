"""Execute: carry out one model's planned actions against the database and slurmrestd.

Each action stands alone: a failure is logged and recorded, and the rest still run. Every
controller-owned field is changed with a filtered UPDATE (compare-and-set), never read-modify-save,
so an operator's concurrent edit or a second worker is never overwritten silently.

Order of side effects is chosen so that a worker killed at any point leaves nothing the next pass
cannot repair: the replica row (with its job name) is written before the submit, an endpoint is
removed before its job is cancelled, and an endpoint is created before its replica is marked
healthy.

The actions are carried out by groups of methods in sibling modules: ``execute_submit`` (submit,
adopt), ``execute_replica`` (promote, lost, update), ``execute_stop`` (retire, cancel) and
``execute_model`` (guard, transition, autoscale); ``execute_common`` holds what they share.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import uuid
from collections.abc import Callable, Sequence

from celery.exceptions import SoftTimeLimitExceeded
from django.utils import timezone

from obleth.core.models import Endpoint, Launch, ManagedSpec, Replica, SlurmSettings
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
from provisioner.execute_common import LIVE_STATES as LIVE_STATES
from provisioner.execute_common import WarmupDispatch
from provisioner.execute_common import fault_point as fault_point
from provisioner.execute_model import ModelActions
from provisioner.execute_replica import ReplicaActions
from provisioner.execute_stop import StopActions
from provisioner.execute_submit import SubmitActions
from provisioner.slurm.client import SlurmClient

log = logging.getLogger(__name__)


@dataclasses.dataclass
class ActionResult:
    action: str
    replica_id: str
    ok: bool
    detail: str = ""


@dataclasses.dataclass
class Executor(SubmitActions, ReplicaActions, StopActions, ModelActions):
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
