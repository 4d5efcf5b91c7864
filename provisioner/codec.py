"""Actions to JSON and back, so a pass can hand a model's actions to a Celery task."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import typing
import uuid
from typing import Any

from provisioner import domain

ACTION_TYPES: dict[str, type[Any]] = {
    cls.__name__: cls
    for cls in (
        domain.Submit,
        domain.Adopt,
        domain.Promote,
        domain.MarkLost,
        domain.SettleLoss,
        domain.Cancel,
        domain.CancelOrphan,
        domain.DeleteReplica,
        domain.DeleteEndpoint,
        domain.UpdateMessage,
        domain.SetGuard,
        domain.Retire,
        domain.SetTransition,
        domain.SetAutoscale,
    )
}


def _encode(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, tuple | list):
        return [_encode(v) for v in value]
    return value


def encode_action(action: domain.Action) -> dict[str, Any]:
    data = {f.name: _encode(getattr(action, f.name)) for f in dataclasses.fields(action)}
    data["type"] = type(action).__name__
    return data


def _decode(hint: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        inner = [a for a in args if a is not type(None)]
        return _decode(inner[0], value) if inner else value
    if origin is tuple:
        return tuple(_decode(args[0], v) for v in value) if args else tuple(value)
    if hint is uuid.UUID:
        return uuid.UUID(value)
    if hint is dt.datetime:
        return dt.datetime.fromisoformat(value)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint(value)
    return value


def decode_action(data: dict[str, Any]) -> domain.Action:
    cls = ACTION_TYPES[data["type"]]
    hints = typing.get_type_hints(cls, vars(domain))
    kwargs = {
        f.name: _decode(hints[f.name], data[f.name])
        for f in dataclasses.fields(cls)
        if f.name in data
    }
    action: domain.Action = cls(**kwargs)
    return action
