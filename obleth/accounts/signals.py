"""Signal handlers that feed the audit log (see :mod:`obleth.accounts.audit`)."""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.models.signals import m2m_changed, post_delete, post_save, pre_delete, pre_save

from obleth.accounts import audit

_BEFORE = "_obleth_audit_before"


def _watching(sender: Any) -> bool:
    return (
        isinstance(sender, type) and audit.is_audited(sender) and audit.current_actor() is not None
    )


def before_save(sender: Any, instance: models.Model, raw: bool = False, **kwargs: Any) -> None:
    if raw or not _watching(sender):
        return
    stored = None
    if not instance._state.adding and instance.pk is not None:
        stored = sender._base_manager.filter(pk=instance.pk).first()
    setattr(instance, _BEFORE, audit.raw_values(stored) if stored is not None else None)


def after_save(
    sender: Any, instance: models.Model, created: bool = False, raw: bool = False, **kwargs: Any
) -> None:
    if raw or not _watching(sender):
        return
    before = getattr(instance, _BEFORE, None)
    if hasattr(instance, _BEFORE):
        delattr(instance, _BEFORE)
    action = "create" if created or before is None else "update"
    audit.record_change(
        instance, action, None if action == "create" else before, audit.raw_values(instance)
    )


def before_delete(sender: Any, instance: models.Model, **kwargs: Any) -> None:
    if _watching(sender):
        setattr(instance, _BEFORE, audit.raw_values(instance))


def after_delete(sender: Any, instance: models.Model, **kwargs: Any) -> None:
    if _watching(sender):
        audit.record_change(instance, "delete", getattr(instance, _BEFORE, None), None)


def relations_changed(
    sender: Any,
    instance: models.Model,
    action: str,
    reverse: bool,
    model: Any,
    pk_set: set[Any] | None,
    **kwargs: Any,
) -> None:
    """Group membership and permission changes (User.groups, Group.permissions, ...)."""
    if action not in {"post_add", "post_remove", "post_clear"}:
        return
    owner = type(instance)
    if not _watching(owner):
        return
    field = next(
        (f for f in owner._meta.many_to_many if getattr(f.remote_field, "through", None) is sender),
        None,
    )
    name = field.name if field is not None else sender._meta.model_name
    names = sorted(str(o) for o in model._base_manager.filter(pk__in=pk_set or ()))[:50]
    verb = {"post_add": "added", "post_remove": "removed", "post_clear": "cleared"}[action]
    audit.record_action(
        "update",
        app_label=owner._meta.app_label,
        model=str(owner._meta.model_name),
        object_id=instance.pk,
        object_repr=str(instance),
        detail=f"{name}: {verb} {', '.join(names)}".strip(),
    )


def operator_action(sender: Any, action: str, **kwargs: Any) -> None:
    """An action from obleth.core.services (restart, clear lost, dismiss)."""
    audit.record_action(
        action,
        app_label=str(kwargs.get("app_label", "core")),
        model=str(kwargs.get("model", "")),
        object_id=kwargs.get("object_id", ""),
        object_repr=str(kwargs.get("object_repr", "")),
        detail=str(kwargs.get("detail", "")),
    )


def connect() -> None:
    from obleth.core.services import action_done

    pre_save.connect(before_save, weak=False, dispatch_uid="audit-pre-save")
    post_save.connect(after_save, weak=False, dispatch_uid="audit-post-save")
    pre_delete.connect(before_delete, weak=False, dispatch_uid="audit-pre-delete")
    post_delete.connect(after_delete, weak=False, dispatch_uid="audit-post-delete")
    m2m_changed.connect(relations_changed, weak=False, dispatch_uid="audit-m2m")
    action_done.connect(operator_action, weak=False, dispatch_uid="audit-actions")
