"""The audit log: who wrote what through the API or the admin, before and after, secrets masked.

A request to the Management API or the admin runs inside :func:`request_context` (set by
:class:`obleth.accounts.middleware.AuditContextMiddleware`). Model saves and deletes made while
an authenticated person's write request runs are recorded by the signal handlers in
:mod:`obleth.accounts.signals`; operator actions (restart, clear lost, dismiss) are recorded by
:func:`record_action`. Outside such a request (the provisioner, Celery, management commands)
nothing is recorded: those are not a person's writes.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import datetime as dt
import decimal
import json
import logging
import uuid
from collections.abc import Iterator
from typing import Any

from django.db import models

logger = logging.getLogger("obleth.audit")

#: Requests under these path prefixes are a person's (the API and the admin console).
AUDITED_PATHS = ("/api/", "/admin/")
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})

#: Models whose rows the provisioner or Django itself writes; never audited as user writes.
NOT_AUDITED = frozenset(
    {
        "accounts.auditentry",
        "admin.logentry",
        "auth.permission",
        "contenttypes.contenttype",
        "sessions.session",
        "core.replica",
        "core.launch",
        "core.alert",
        "core.lease",
        "core.provisionerstatus",
        "core.authfailurewindow",
    }
)
#: Fields whose change alone is no user write (bookkeeping).
IGNORED_FIELDS = frozenset({"last_login", "updated_at", "last_used_at", "last_used_from"})
#: Field names (or name endings) that hold secrets, besides every encrypted field.
SECRET_NAMES = frozenset(
    {"password", "jwt", "hf_token", "api_key", "token_hash", "key_hash", "digest", "hash", "secret"}
)
SECRET_SUFFIXES = ("_hash", "_digest", "_secret", "_password", "_token", "_jwt", "api_key")
MAX_TEXT = 20_000

_request: contextvars.ContextVar[Any] = contextvars.ContextVar("obleth_audit_request", default=None)


@dataclasses.dataclass(frozen=True)
class Actor:
    user: Any  # a User, or None for the bootstrap admin token
    name: str
    via: str  # "api", "token" (a personal API token), "admin"
    token_prefix: str
    address: str


@contextlib.contextmanager
def request_context(request: Any) -> Iterator[None]:
    token = _request.set(request)
    try:
        yield
    finally:
        _request.reset(token)


def current_actor() -> Actor | None:
    """The person behind the write being made now, or None (not a user write)."""
    request = _request.get()
    if request is None:
        return None
    if str(getattr(request, "method", "GET")).upper() in SAFE_METHODS:
        return None
    return actor_of(request)


def actor_of(request: Any) -> Actor | None:
    path = str(getattr(request, "path", "") or "")
    if not path.startswith(AUDITED_PATHS):
        return None
    user = getattr(request, "user", None)
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    from obleth.accounts.models import ApiToken
    from obleth.core.limits import client_address

    auth = getattr(request, "auth", None)
    prefix = auth.prefix if isinstance(auth, ApiToken) else ""
    via = "admin" if path.startswith("/admin/") else ("token" if prefix else "api")
    real_user = user if getattr(user, "pk", None) is not None else None
    name = str(getattr(user, "get_username", lambda: str(user))() or user)
    return Actor(real_user, name[:150], via, prefix, client_address(request))


# ------------------------------------------------------------------------------------ snapshots


def label_of(model: type[models.Model]) -> str:
    return f"{model._meta.app_label}.{model._meta.model_name}"


def is_audited(model: type[models.Model]) -> bool:
    if getattr(model, "audit_exempt", False):
        return False
    return label_of(model) not in NOT_AUDITED and not model._meta.auto_created


def is_secret_field(field: models.Field[Any, Any]) -> bool:
    from django_cryptography.fields import EncryptedMixin

    name = field.name.lower()
    return (
        isinstance(field, EncryptedMixin)
        or name in SECRET_NAMES
        or name.endswith(SECRET_SUFFIXES)
        or bool(getattr(field, "audit_secret", False))
    )


def masked(value: Any, *, changed: bool | None = None) -> dict[str, Any]:
    """What the log keeps of a secret: whether it is set (and in a diff, whether it changed)."""
    out: dict[str, Any] = {"set": bool(value)}
    if changed is not None:
        out["changed"] = changed
    return out


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return value if len(value) <= MAX_TEXT else value[:MAX_TEXT] + f"… ({len(value)} chars)"
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, uuid.UUID | decimal.Decimal | dt.timedelta):
        return str(value)
    if isinstance(value, dict | list | tuple):
        try:
            text = json.dumps(value, default=str)
        except (TypeError, ValueError):
            return str(value)[:MAX_TEXT]
        return value if len(text) <= MAX_TEXT else text[:MAX_TEXT] + "…"
    if isinstance(value, bytes | memoryview):
        return f"<{len(bytes(value))} bytes>"
    return str(value)[:MAX_TEXT]


def raw_values(instance: models.Model) -> dict[str, Any]:
    """Field name -> stored value (secrets included: never written out as they are)."""
    return {f.name: f.value_from_object(instance) for f in instance._meta.concrete_fields}


def snapshot(
    model: type[models.Model], raw: dict[str, Any] | None, other: dict[str, Any] | None = None
) -> dict[str, Any] | None:
    """A JSON view of ``raw`` with every secret masked (``other``: the other side of a diff)."""
    if raw is None:
        return None
    out: dict[str, Any] = {}
    for field in model._meta.concrete_fields:
        if field.name not in raw:
            continue
        value = raw[field.name]
        if is_secret_field(field):
            changed = None if other is None else other.get(field.name) != value
            out[field.name] = masked(value, changed=changed)
        else:
            out[field.name] = _jsonable(value)
    return out


def changed_fields(before: dict[str, Any] | None, after: dict[str, Any] | None) -> list[str]:
    if before is None or after is None:
        return sorted((before or after or {}).keys())
    return sorted(k for k in after if before.get(k) != after.get(k))


# ------------------------------------------------------------------------------------- records


def write(
    actor: Actor,
    *,
    action: str,
    app_label: str,
    model: str,
    object_id: Any = "",
    object_repr: str = "",
    fields: list[str] | None = None,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    detail: str = "",
) -> Any:
    from obleth.accounts.models import AuditEntry

    entry = AuditEntry.objects.create(
        actor=actor.user,
        actor_name=actor.name,
        via=actor.via,
        token_prefix=actor.token_prefix,
        client_address=actor.address,
        action=action,
        app_label=app_label,
        model=model,
        object_id=str(object_id or "")[:64],
        object_repr=str(object_repr or "")[:200],
        changed_fields=fields or [],
        before=before,
        after=after,
        detail=detail[:500],
    )
    logger.info(
        "audit: %s (%s) %s %s.%s %s",
        actor.name,
        actor.via,
        action,
        app_label,
        model,
        entry.object_id or "-",
    )
    return entry


def record_change(
    instance: models.Model,
    action: str,
    before_raw: dict[str, Any] | None,
    after_raw: dict[str, Any] | None,
) -> Any:
    """Record a create/update/delete of ``instance`` when a person is writing now."""
    actor = current_actor()
    model = type(instance)
    if actor is None or not is_audited(model):
        return None
    fields = changed_fields(before_raw, after_raw)
    if action == "update":
        fields = [f for f in fields if f not in IGNORED_FIELDS]
        if not fields:
            return None
    return write(
        actor,
        action=action,
        app_label=model._meta.app_label,
        model=str(model._meta.model_name),
        object_id=instance.pk,
        object_repr=_repr(instance),
        fields=fields,
        before=snapshot(model, before_raw, after_raw),
        after=snapshot(model, after_raw, before_raw),
    )


def record_action(
    action: str,
    *,
    app_label: str,
    model: str,
    object_id: Any = "",
    object_repr: str = "",
    detail: str = "",
) -> Any:
    """Record an operator action (restart, clear lost, dismiss) made by the current person."""
    actor = current_actor()
    if actor is None:
        return None
    return write(
        actor,
        action=action,
        app_label=app_label,
        model=model,
        object_id=object_id,
        object_repr=object_repr,
        detail=detail,
    )


def _repr(instance: models.Model) -> str:
    try:
        return str(instance)[:200]
    except Exception:  # noqa: BLE001 - a __str__ reading a gone relation must not break a write
        return f"{type(instance).__name__} {instance.pk}"
