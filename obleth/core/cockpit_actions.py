"""The model page's actions: Restart a replica, Scale, Disable/Enable, Try once more.

Each checks the user's permissions first (the same the Management API names) and raises
``PermissionDenied`` naming the missing one, or ``ValidationError`` naming the field and the fix.
Saves go through the models (so the audit log records them) or ``obleth.core.services``.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction

from obleth.core import services
from obleth.core.models import ManagedSpec, Model, Replica

logger = logging.getLogger("obleth.audit")

ACTIONS = ("restart", "scale", "disable", "enable", "try_again")
MAX_REPLICAS = 1000


def _require(user: Any, *perms: str) -> None:
    missing = [p for p in perms if not user.has_perm(p)]
    if missing:
        raise PermissionDenied(
            f"Your role does not allow this: it needs the permission {', '.join(missing)}. "
            "Ask an admin for a role (viewer, operator, admin) that has it."
        )


def _actor(user: Any) -> str:
    return str(getattr(user, "username", "") or "admin")


def restart(model: Model, user: Any, replica_id: str) -> str:
    _require(user, "core.restart_replica")
    try:
        rid = uuid.UUID(str(replica_id))
    except ValueError as exc:
        raise ValidationError({"replica": "Give the id of one of this model's replicas."}) from exc
    if not Replica.objects.filter(pk=rid, model_id=model.pk).exists():
        raise ValidationError({"replica": "This model has no such replica (it may be gone)."})
    replica = services.restart_replica(rid, actor=_actor(user))
    return (
        f"Restarting job {replica.job_id or '(not submitted)'}: the next pass cancels it and "
        "launches a fresh one."
    )


def parse_count(value: object) -> int:
    text = str(value if value is not None else "").strip()
    if not text.isdigit():
        raise ValidationError(
            {"target_replicas": f"Give a whole number of replicas from 0 to {MAX_REPLICAS}."}
        )
    count = int(text)
    if count > MAX_REPLICAS:
        raise ValidationError({"target_replicas": f"At most {MAX_REPLICAS} replicas."})
    return count


def scale(model: Model, user: Any, value: object) -> str:
    _require(user, "core.change_managedspec")
    count = parse_count(value)
    spec = ManagedSpec.objects.filter(model=model).first()
    if spec is None:
        raise ValidationError({"target_replicas": "This model has no managed spec to scale."})
    if spec.autoscaled:
        raise ValidationError(
            {
                "target_replicas": (
                    f"Autoscaling sets this model's count (between min_replicas "
                    f"{spec.min_replicas} and max_replicas {spec.max_replicas}): change those "
                    "in the managed spec, or empty max_replicas to set the count by hand."
                )
            }
        )
    changes: dict[str, Any] = {"target_replicas": count}
    if spec.min_replicas > count > 0:
        changes["min_replicas"] = count  # scaling below the minimum lowers it with it
    services.upsert_managed_spec(model, changes, partial=True, actor=_actor(user))
    return f"Scaled to {count} replica(s): the next pass launches or cancels jobs to match."


def set_enabled(model: Model, user: Any, enabled: bool) -> str:
    _require(user, "core.change_model", "core.change_managedspec")
    with transaction.atomic():
        model.enabled = enabled
        model.save(update_fields=["enabled", "updated_at"])
        spec = ManagedSpec.objects.filter(model=model).first()
        if spec is not None and spec.enabled != enabled:
            spec.enabled = enabled
            spec.save(update_fields=["enabled", "updated_at"])
    logger.info("audit: %s %s model %s", _actor(user), "enabled" if enabled else "disabled", model)
    if enabled:
        return "Enabled: the next pass launches its replicas and the gateway routes to it."
    return "Disabled: the gateway refuses it and the next pass drains its replicas."


def try_again(model: Model, user: Any) -> str:
    """Reset the failed-launch stop: clear the lost replicas counted against it and dismiss the
    refused-launch error, so the next pass submits again."""
    _require(user, "core.clear_lost", "core.dismiss_error")
    cleared = services.clear_lost(model.pk, actor=_actor(user))
    spec = ManagedSpec.objects.filter(model=model).first()
    if spec is not None and spec.last_provision_error:
        services.dismiss_provision_error(spec, actor=_actor(user))
    return f"Trying once more: {cleared} lost replica(s) cleared; the next pass launches again."


def perform(model: Model, user: Any, action: str, data: Any) -> str:
    """Run one action by name with the posted ``data`` (a mapping)."""
    if action == "restart":
        return restart(model, user, str(data.get("replica", "")))
    if action == "scale":
        return scale(model, user, data.get("target_replicas"))
    if action == "disable":
        return set_enabled(model, user, False)
    if action == "enable":
        return set_enabled(model, user, True)
    if action == "try_again":
        return try_again(model, user)
    raise ValidationError({"action": f"Unknown action; use one of {', '.join(ACTIONS)}."})
