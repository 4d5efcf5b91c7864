"""Replica actions: restarting one or several replicas and clearing a model's lost replicas
("Try once more"), each audited and told to the gateways."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from django.utils import timezone

from obleth.core.choices import ReplicaState
from obleth.core.models import ManagedSpec, Model, Replica
from obleth.core.services.audit import action_done, logger


def _gateway_changed() -> None:
    """A write with QuerySet.update (no signal) changed what a model's 503 says: tell the
    gateways (obleth.gateway.signals covers saves and deletes)."""
    from obleth.gateway.table import publish_change

    publish_change("replicas")


def restart_replica(replica_id: uuid.UUID | str, *, actor: str = "admin") -> Replica:
    """Ask the provisioner to cancel this replica's job and launch a fresh one.

    Raises ``Replica.DoesNotExist`` when there is no such replica.
    """
    updated = Replica.objects.filter(pk=replica_id).update(
        cancel_requested=True, updated_at=timezone.now()
    )
    if not updated:
        raise Replica.DoesNotExist(f"No replica {replica_id}.")
    _gateway_changed()
    replica = Replica.objects.get(pk=replica_id)
    logger.info(
        "audit: %s asked to restart replica %s of %s (job %s)",
        actor,
        replica.pk,
        replica.model_name,
        replica.job_id or "not submitted",
    )
    action_done.send(
        Replica,
        action="restart_replica",
        model="replica",
        object_id=replica.pk,
        object_repr=str(replica),
        detail=f"model {replica.model_name}",
    )
    return replica


def restart_replicas(replica_ids: Iterable[uuid.UUID | str], *, actor: str = "admin") -> int:
    """Restart several replicas at once; returns how many were flagged."""
    ids = list(replica_ids)
    rows = list(Replica.objects.filter(pk__in=ids))
    count = Replica.objects.filter(pk__in=[r.pk for r in rows]).update(
        cancel_requested=True, updated_at=timezone.now()
    )
    if count:
        _gateway_changed()
    logger.info("audit: %s asked to restart %d replica(s)", actor, count)
    for replica in rows:
        action_done.send(
            Replica,
            action="restart_replica",
            model="replica",
            object_id=replica.pk,
            object_repr=str(replica),
            detail=f"model {replica.model_name}",
        )
    return count


def clear_lost(model_id: uuid.UUID | str, *, actor: str = "admin") -> int:
    """Delete a model's lost replicas now (they no longer count against max_job_failures):
    "Try once more". A tripped failed-launch breaker is cleared at once (banner, API, gateway);
    the next pass launches again, and trips it again if the limit is reached again."""
    count, _ = Replica.objects.filter(model_id=model_id, state=ReplicaState.LOST).delete()
    ManagedSpec.objects.filter(model_id=model_id).exclude(breaker_message="").update(
        breaker_message="", breaker_tripped_at=None
    )
    _gateway_changed()  # its 503 no longer says "stopped"
    logger.info("audit: %s cleared %d lost replica(s) of model %s", actor, count, model_id)
    action_done.send(
        Model,
        action="clear_lost",
        model="model",
        object_id=model_id,
        object_repr=str(Model.objects.filter(pk=model_id).first() or model_id),
        detail=f"cleared {count} lost replica(s)",
    )
    return count
