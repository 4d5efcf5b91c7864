"""Errors in one shape: {"error": "...", "fields": {"field": ["message"]}}.

Django model ValidationErrors (raised by model.clean/save) become 400s naming the field.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import SuspiciousOperation
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views.defaults import bad_request as django_bad_request
from django.views.defaults import page_not_found
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
            general = data.get("detail") or data.get("non_field_errors") or "Invalid request."
            if isinstance(general, list):
                general = " ".join(str(item) for item in general) or "Invalid request."
            summary = str(general)
        if set(data) == {"detail"}:
            response.data = {"error": summary}  # a parse error: no field to name
        else:
            response.data = {"error": summary, "fields": data}
    elif isinstance(data, dict) and "detail" in data:
        response.data = {"error": str(data["detail"])}
    elif isinstance(data, list):
        response.data = {"error": " ".join(str(item) for item in data) or "Request refused."}
    return response


def _is_operator(request: HttpRequest) -> bool:
    """Whether the request carries the credentials the API takes (token or staff session)."""
    from rest_framework.request import Request
    from rest_framework.views import APIView

    drf_request = Request(request, authenticators=APIView().get_authenticators())
    try:
        user = drf_request.user
    except exceptions.APIException:
        return False
    return bool(user and getattr(user, "is_authenticated", False) and user.is_staff)


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """handler404: under /api/ a 404 is JSON in the one error shape (the schema says so), not
    Django's HTML page, and without credentials it is a 401 like every route (nobody learns
    which routes exist without them). Elsewhere Django's own page."""
    if request.path.startswith("/api/"):
        if not _is_operator(request):
            response = JsonResponse(
                {"error": "Authenticate with 'Authorization: Bearer <token>' or a staff session."},
                status=401,
            )
            response["WWW-Authenticate"] = 'Bearer realm="obleth"'
            return response
        return JsonResponse(
            {
                "error": f"No such route or object: {request.path[:200]}. The routes are listed "
                "at /api/docs/; ids are UUIDs."
            },
            status=404,
        )
    return page_not_found(request, exception or Http404())


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """handler400 (a body over DATA_UPLOAD_MAX_MEMORY_SIZE, too many fields, a bad Host...):
    JSON in the one error shape under /api/, Django's page elsewhere."""
    if not request.path.startswith("/api/"):
        return django_bad_request(request, exception or SuspiciousOperation())
    from django.conf import settings
    from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent

    if isinstance(exception, RequestDataTooBig):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE or 0
        message = (
            f"The request body is larger than the {limit // 1024} KiB the API takes "
            "(DATA_UPLOAD_MAX_MEMORY_SIZE): send smaller values."
        )
    elif isinstance(exception, TooManyFieldsSent):
        message = "The request has too many fields: send only the fields you change."
    else:
        message = "Bad request: the server could not read it."
    return JsonResponse({"error": message}, status=400)
