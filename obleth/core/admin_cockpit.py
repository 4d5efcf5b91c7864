"""Admin views behind the model page's live panel (wired in ``ModelAdmin.get_urls``):

* ``<model id>/live/``: the panel's data as JSON (``obleth.core.cockpit.model_panel``);
  needs the model's view permission.
* ``<model id>/act/<action>/``: POST Restart, Scale, Disable/Enable, Try once more; JSON
  ``{"ok", "message"}``, 403 naming the missing permission, 400 naming the field.
* ``<model id>/log/<launch id>/?stream=stdout&tail=200[&download=1]``: a job's log tail
  (JSON) or the whole file (download); needs ``core.read_job_log``.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import get_object_or_404
from django.urls import URLPattern, path, reverse

from obleth.core import cockpit, cockpit_actions, joblogs
from obleth.core.models import Launch, Model

MAX_TAIL_LINES = 5000


def _denied(text: str) -> JsonResponse:
    return JsonResponse({"ok": False, "message": text}, status=403)


def _may_view(model_admin: Any, request: HttpRequest, model: Model) -> bool:
    return bool(model_admin.has_view_or_change_permission(request, model))


def live_view(model_admin: Any, request: HttpRequest, object_id: uuid.UUID) -> HttpResponse:
    model = get_object_or_404(Model, pk=object_id)
    if not _may_view(model_admin, request, model):
        return _denied("Your role does not allow viewing this model.")
    return JsonResponse(cockpit.model_panel(model, request.user))


def action_view(
    model_admin: Any, request: HttpRequest, object_id: uuid.UUID, action: str
) -> HttpResponse:
    model = get_object_or_404(Model, pk=object_id)
    if request.method != "POST":
        return JsonResponse({"ok": False, "message": "Use POST."}, status=405)
    if not _may_view(model_admin, request, model):
        return _denied("Your role does not allow viewing this model.")
    try:
        message = cockpit_actions.perform(model, request.user, action, request.POST)
    except PermissionDenied as exc:
        return _denied(str(exc))
    except ValidationError as exc:
        errors = exc.message_dict if hasattr(exc, "error_dict") else {"detail": exc.messages}
        text = "; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items())
        return JsonResponse({"ok": False, "message": text, "errors": errors}, status=400)
    return JsonResponse({"ok": True, "message": message})


def parse_tail(value: str | None, default: int = 200) -> int:
    """``tail`` as a line count (1..MAX_TAIL_LINES); raises ValidationError naming the field."""
    if value is None or value == "":
        return default
    text = value.strip()
    if not text.isdigit() or not 1 <= int(text) <= MAX_TAIL_LINES:
        raise ValidationError(
            {"tail": f"Give a number of lines from 1 to {MAX_TAIL_LINES} (e.g. tail=200)."}
        )
    return int(text)


def parse_stream(value: str | None) -> str:
    stream = (value or "stdout").strip()
    if stream not in joblogs.STREAMS:
        raise ValidationError({"stream": "Give stream=stdout or stream=stderr."})
    return stream


def download_response(launch: Launch, stream: str) -> StreamingHttpResponse | None:
    """The whole redacted file as a download; None when it cannot be read."""
    found = joblogs.stream_file(launch, stream)
    if isinstance(found, joblogs.LogTail):
        return None
    lines, name = found
    response = StreamingHttpResponse(lines, content_type="text/plain; charset=utf-8")
    safe = "".join(ch for ch in name if ch.isalnum() or ch in "._-") or "job.log"
    response["Content-Disposition"] = f'attachment; filename="{safe}"'
    response["X-Content-Type-Options"] = "nosniff"
    return response


def log_view(
    model_admin: Any, request: HttpRequest, object_id: uuid.UUID, launch_id: uuid.UUID
) -> HttpResponseBase:
    model = get_object_or_404(Model, pk=object_id)
    if not _may_view(model_admin, request, model):
        return _denied("Your role does not allow viewing this model.")
    if not request.user.has_perm("core.read_job_log"):
        return _denied(
            "Your role does not allow reading job logs (they may hold secrets): it needs the "
            "permission core.read_job_log (operators and admins have it)."
        )
    launch = get_object_or_404(Launch, pk=launch_id, model_id=model.pk)
    try:
        stream = parse_stream(request.GET.get("stream"))
        tail = parse_tail(request.GET.get("tail"))
    except ValidationError as exc:
        return JsonResponse({"ok": False, "errors": exc.message_dict}, status=400)
    if request.GET.get("download"):
        response = download_response(launch, stream)
        if response is not None:
            return response
    view = joblogs.read_tail(launch, stream, tail)
    return JsonResponse({"ok": True, "job_id": launch.job_id, **view.as_dict()})


def cockpit_urls(model_admin: Any) -> list[URLPattern]:
    site = model_admin.admin_site

    def bound(view: Any) -> Any:
        def call(request: HttpRequest, **kwargs: Any) -> HttpResponseBase:
            return view(model_admin, request, **kwargs)

        call.__name__ = view.__name__
        return site.admin_view(call)

    return [
        path("<uuid:object_id>/live/", bound(live_view), name="core_model_live"),
        path("<uuid:object_id>/act/<str:action>/", bound(action_view), name="core_model_act"),
        path("<uuid:object_id>/log/<uuid:launch_id>/", bound(log_view), name="core_model_log"),
    ]


def cockpit_context(request: HttpRequest, model_id: uuid.UUID) -> dict[str, Any]:
    """What the change form needs to start the live panel (the data comes from live/)."""
    return {
        "cockpit": True,
        "cockpit_live_url": reverse("admin:core_model_live", args=[model_id]),
        "cockpit_act_url": reverse("admin:core_model_act", args=[model_id, "ACTION"]),
        "cockpit_log_url": reverse("admin:core_model_log", args=[model_id, uuid.UUID(int=0)]),
        "cockpit_refresh_ms": int(getattr(settings, "OBLETH_COCKPIT_REFRESH_SECS", 3)) * 1000,
        **refusal_context(model_id),
    }


def refusal_context(model_id: uuid.UUID) -> dict[str, str]:
    """The last refused launch's hint and slurmrestd's whole answer, for the error banner."""
    refused = (
        Launch.objects.filter(model_id=model_id, end_state="rejected")
        .order_by("-submitted_at")
        .only("refusal_hint", "slurm_answer")
        .first()
    )
    if refused is None:
        return {}
    return {"refusal_hint": refused.refusal_hint, "refusal_answer": refused.slurm_answer}
