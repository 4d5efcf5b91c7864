"""Managed specs: the validated upsert (PUT replaces, PATCH changes), deletion, and the
provision-error banner (set or dismissed)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models, transaction
from django.utils import timezone

from obleth.core.choices import HostingMode
from obleth.core.models import ManagedSpec, Model
from obleth.core.services.audit import action_done, logger


def require_slurm_model(model: Model) -> None:
    if model.hosting_mode != HostingMode.SLURM:
        raise ValidationError(
            {
                "hosting_mode": (
                    f"Model {model.name!r} hosts static endpoints; only a model created with "
                    "hosting_mode 'slurm' takes a managed spec. Create a Slurm-provisioned model."
                )
            }
        )


_STRIPPED_SPEC_FIELDS = frozenset(
    {"partition", "gres", "constraints", "exclude", "account", "qos", "time_limit", "mem"}
)


def _field_default(model: type[models.Model], name: str) -> Any:
    field = model._meta.get_field(name)
    return field.get_default() if isinstance(field, models.Field) else None


def spec_editable_fields() -> list[str]:
    return [
        f.name
        for f in ManagedSpec._meta.concrete_fields
        if f.editable and f.name not in {"model", "created_at", "updated_at"}
    ]


def upsert_managed_spec(
    model: Model,
    values: Mapping[str, Any],
    *,
    partial: bool = False,
    actor: str = "admin",
) -> tuple[ManagedSpec, bool]:
    """Create or replace a model's managed spec after full validation.

    ``partial=False`` (PUT) replaces the spec: fields not given return to their defaults.
    ``partial=True`` (PATCH) changes only the given fields. Raises ``ValidationError`` naming the
    field. The provision-error banner is kept.
    """
    require_slurm_model(model)
    with transaction.atomic():
        spec = ManagedSpec.objects.select_for_update().filter(model=model).first()
        created = spec is None
        if spec is None:
            spec = ManagedSpec(model=model)
        if not partial:
            for name in spec_editable_fields():
                if name not in values:
                    setattr(spec, name, _field_default(ManagedSpec, name))
        for name, value in values.items():
            if name in _STRIPPED_SPEC_FIELDS and isinstance(value, str):
                value = value.strip()
            setattr(spec, name, value)
        # A blank partition: the model's clean() gives the helpful message, not "cannot be
        # blank". Any other partition goes through its validator like every other field.
        exclude = ["model"] if str(spec.partition or "").strip() else ["model", "partition"]
        spec.full_clean(exclude=exclude, validate_unique=False)
        spec.save()
    logger.info(
        "audit: %s %s the managed spec of %s (fields: %s)",
        actor,
        "created" if created else "updated",
        model.name,
        ", ".join(sorted(values)) or "none",
    )
    return spec, created


def delete_managed_spec(model: Model, *, actor: str = "admin") -> bool:
    """Stop launching a model: its replicas are drained by the provisioner's next pass."""
    count, _ = ManagedSpec.objects.filter(model=model).delete()
    if count:
        logger.info("audit: %s deleted the managed spec of %s", actor, model.name)
    return bool(count)


def set_provision_error(
    spec: ManagedSpec, error: str | None, *, actor: str = "admin"
) -> ManagedSpec:
    """``None`` (or blank) dismisses the last refused-job message; a string records one."""
    text = (error or "").strip()
    spec.last_provision_error = text
    spec.last_provision_error_at = timezone.now() if text else None
    spec.save(update_fields=["last_provision_error", "last_provision_error_at", "updated_at"])
    logger.info(
        "audit: %s %s the provision error of %s",
        actor,
        "set" if text else "dismissed",
        spec.model_id,
    )
    action_done.send(
        ManagedSpec,
        action="set_provision_error" if text else "dismiss_error",
        model="managedspec",
        object_id=spec.model_id,
        object_repr=str(spec),
        detail=text[:200],
    )
    return spec


def dismiss_provision_error(spec: ManagedSpec, *, actor: str = "admin") -> ManagedSpec:
    return set_provision_error(spec, None, actor=actor)
