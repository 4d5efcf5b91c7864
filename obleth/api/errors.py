"""Errors in one shape: {"error": "...", "fields": {"field": ["message"]}}.

Django model ValidationErrors (raised by model.clean/save) become 400s naming the field.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, DjangoValidationError):
        detail: Any = (
            exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
        )
        exc = exceptions.ValidationError(detail)
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    data = response.data
    if response.status_code == status.HTTP_400_BAD_REQUEST and isinstance(data, dict):
        fields = {k: v for k, v in data.items() if k not in {"detail", "non_field_errors"}}
        first = next(iter(fields.items()), None)
        if first is not None:
            name, messages = first
            text = messages[0] if isinstance(messages, list) and messages else messages
            summary = f"{name}: {text}"
        else:
            summary = str(data.get("detail") or data.get("non_field_errors") or "Invalid request.")
        response.data = {"error": summary, "fields": data}
    elif isinstance(data, dict) and "detail" in data:
        response.data = {"error": str(data["detail"])}
    return response
