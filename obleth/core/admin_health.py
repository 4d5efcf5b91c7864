"""The admin's Health page of a model: /admin/core/model/<id>/health/ (``core_model_health``).

A timeline, newest first and paginated: each endpoint check (verdict, HTTP status, latency,
message), each replica promotion, loss and cancel, the model's down and recovery. Staff with
``core.view_model`` only; the model's change page links to it."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import reverse

from obleth.core import health_history
from obleth.core.choices import HealthStatus
from obleth.core.models import HealthEvent, Model

PAGE_SIZE = 50
KINDS = dict(HealthEvent.Kind.choices)
# CSS class of an outcome: ok / warn / bad / info (the template colours them).
_TONE = {
    HealthStatus.HEALTHY: "ok",
    "promoted": "ok",
    "recovered": "ok",
    HealthStatus.DEGRADED: "warn",
    HealthStatus.UNKNOWN: "info",
    HealthStatus.UNHEALTHY: "bad",
    "down": "bad",
    "lost": "warn",
    "failed launch": "bad",
}


STYLES = {
    "ok": "color:#1a7f37;font-weight:600",
    "warn": "color:#9a6700;font-weight:600",
    "bad": "color:#cf222e;font-weight:600",
    "info": "color:#57606a",
}


@admin.register(HealthEvent)
class HealthEventAdmin(admin.ModelAdmin):
    """Every model's health history, read only (a model's own timeline: its Health page)."""

    list_display = ("at", "model_id", "kind", "endpoint_name", "outcome", "http_status", "message")
    list_filter = ("kind", "outcome")
    search_fields = ("endpoint_name", "job_id", "message")
    readonly_fields = (
        "model_id",
        "kind",
        "at",
        "endpoint_id",
        "endpoint_name",
        "replica_id",
        "job_id",
        "outcome",
        "http_status",
        "latency_ms",
        "message",
    )
    date_hierarchy = "at"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: HealthEvent | None = None) -> bool:
        return False


def tone(event: HealthEvent) -> str:
    if event.outcome in _TONE:
        return _TONE[event.outcome]
    return "warn" if event.kind == HealthEvent.Kind.RESTARTED else "info"


def model_health_view(request: HttpRequest, model_id: Any) -> HttpResponse:
    if not request.user.has_perm("core.view_model"):
        raise PermissionDenied("needs the permission core.view_model")
    model = get_object_or_404(Model, pk=model_id)
    events = health_history.timeline(model.pk)
    kind = request.GET.get("kind", "")
    if kind in KINDS:
        events = events.filter(kind=kind)
    else:
        kind = ""
    page = Paginator(events, PAGE_SIZE).get_page(request.GET.get("page"))
    rows = [
        {
            "event": e,
            "kind_label": KINDS.get(e.kind, e.kind),
            "tone": tone(e),
            "style": STYLES[tone(e)],
            "where": e.endpoint_name or (f"job {e.job_id}" if e.job_id else ""),
        }
        for e in page.object_list
    ]
    context = {
        **admin.site.each_context(request),
        "title": f"Health of {model.name}",
        "model": model,
        "opts": Model._meta,
        "rows": rows,
        "page": page,
        "kind": kind,
        "kinds": list(KINDS.items()),
        "change_url": reverse("admin:core_model_change", args=[model.pk]),
        "threshold": health_history.threshold_setting(),
    }
    return TemplateResponse(request, "admin/core/health_history.html", context)
