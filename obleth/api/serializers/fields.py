"""The pieces the management API's serializers share.

Strictness (an unknown JSON field is a 400 naming it, with a close match:
:func:`unknown_field_errors`, :class:`StrictFieldsMixin`, :func:`refuse_any_body_field` for
actions without a body), who may keep a secret across a changed URL (:func:`may_keep_secret`,
:data:`KEEP_SECRET_HELP`), a unique trimmed name (:func:`unique_name`) and the
string-to-string JSON object field (:class:`StringMapField`).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from obleth.core import services
from obleth.core.models import Model, Recipe

# ------------------------------------------------------------------------------------ strictness


def unknown_field_errors(data: Any, known: Mapping[str, Any]) -> dict[str, list[str]]:
    """One message per field of ``data`` the serializer does not have, with a close match."""
    if not isinstance(data, Mapping):
        return {}
    errors: dict[str, list[str]] = {}
    for name in data:
        if name in known:
            continue
        text = str(name)
        close = difflib.get_close_matches(text, [str(k) for k in known], n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        errors[text] = [
            f"{text!r} is not a field of this request, so it would be ignored.{hint} "
            f"Known fields: {', '.join(sorted(str(k) for k in known))}."
        ]
    return errors


def refuse_any_body_field(data: Any) -> None:
    """For actions that take no body (restart, clear-lost, the connection test): any field sent
    is unknown, and a 400 says so rather than ignoring it."""
    if isinstance(data, Mapping) and data:
        raise serializers.ValidationError(
            {
                str(name): [f"{name!r}: this action takes no fields; send an empty body."]
                for name in data
            }
        )


class StrictFieldsMixin:
    """Unknown JSON fields are a 400 naming them, not silently dropped (a typo such as
    ``replica`` for ``target_replicas`` would otherwise be lost with a 200)."""

    fields: Any
    initial_data: Any

    def to_internal_value(self, data: Any) -> Any:
        errors = unknown_field_errors(data, self.fields)
        if errors:
            raise serializers.ValidationError(errors)
        return super().to_internal_value(data)  # type: ignore[misc]


def may_keep_secret(serializer: serializers.BaseSerializer[Any]) -> bool:
    request = serializer.context.get("request")
    return services.may_keep_secret(getattr(request, "user", None))


KEEP_SECRET_HELP = (
    "Admins only. With a changed URL, keep the stored secret for the new URL; without it, "
    "changing the URL removes the stored secret unless the same request sends it again."
)


def unique_name(
    model: type[Model] | type[Recipe],
    value: str,
    instance: Any,
    *,
    empty: str,
    taken: str,
) -> str:
    """A trimmed, non-empty name no other row of ``model`` uses."""
    value = value.strip()
    if not value:
        raise serializers.ValidationError(empty)
    clash = model.objects.filter(name=value)
    if instance is not None:
        clash = clash.exclude(pk=instance.pk)
    if clash.exists():
        raise serializers.ValidationError(taken.format(name=value))
    return value


@extend_schema_field({"type": "object", "additionalProperties": {"type": "string"}})
class StringMapField(serializers.JSONField):
    """A JSON object of string -> string (validated by the model/services, which name the
    entry at fault)."""
