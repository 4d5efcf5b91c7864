"""The read-only admin pages of the provisioner's heartbeat row, the alert log, the per-model
pass locks (leases) and the failed-authentication windows (deleting a lease or a window frees
it at once)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.safestring import SafeString

from obleth.core import services
from obleth.core.admin.helpers import badge, provisioner_badge
from obleth.core.models import Alert, AuthFailureWindow, Lease, ProvisionerStatus


@admin.register(ProvisionerStatus)
class ProvisionerStatusAdmin(admin.ModelAdmin):
    """The heartbeat row, read only."""

    fields = (
        "summary",
        "heartbeat_at",
        "version",
        "host",
        "last_pass_status",
        "last_pass_detail",
        "last_pass_at",
        "last_pass_ms",
        "non_ok_since",
        "last_ok_at",
        "held_alert_active",
    )
    readonly_fields = fields
    list_display = ("summary", "heartbeat_at", "last_pass_status", "last_pass_at", "last_ok_at")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(
        self, request: HttpRequest, obj: ProvisionerStatus | None = None
    ) -> bool:
        return False

    def has_delete_permission(
        self, request: HttpRequest, obj: ProvisionerStatus | None = None
    ) -> bool:
        return False

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        obj = ProvisionerStatus.load()
        return HttpResponseRedirect(reverse("admin:core_provisionerstatus_change", args=[obj.pk]))

    @admin.display(description="status")
    def summary(self, obj: ProvisionerStatus) -> SafeString:
        return provisioner_badge(services.provisioner_view(obj))


@admin.register(Alert)
class AlertAdmin(admin.ModelAdmin):
    list_display = ("created_at", "severity_badge", "key", "title", "channels")
    list_filter = ("severity", "key")
    search_fields = ("key", "title", "detail")
    readonly_fields = ("key", "title", "detail", "severity", "channels", "created_at")
    date_hierarchy = "created_at"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Alert | None = None) -> bool:
        return False

    @admin.display(description="severity", ordering="severity")
    def severity_badge(self, obj: Alert) -> SafeString:
        colour = {"critical": "error", "error": "error", "warning": "degraded", "info": "ok"}
        return badge(colour.get(obj.severity, "unknown"), obj.severity)


@admin.register(Lease)
class LeaseAdmin(admin.ModelAdmin):
    """Per-model pass locks. Deleting one frees a lock whose holder died (it expires anyway)."""

    list_display = ("name", "owner", "expires_at")
    search_fields = ("name", "owner")
    readonly_fields = ("name", "owner", "expires_at")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Lease | None = None) -> bool:
        return False


@admin.register(AuthFailureWindow)
class AuthFailureWindowAdmin(admin.ModelAdmin):
    """Failed logins, API tokens and gateway keys per address or account. Deleting a row
    unblocks that address or account at once (after an incident, or a colleague's typo)."""

    list_display = ("scope", "key", "failures", "window_started_at", "blocked_until")
    list_filter = ("scope",)
    search_fields = ("key",)
    readonly_fields = ("scope", "key", "failures", "window_started_at", "blocked_until")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(
        self, request: HttpRequest, obj: AuthFailureWindow | None = None
    ) -> bool:
        return False
