"""The admin pages of replicas and launches. Replica rows belong to the provisioner: every field
is read-only and the only actions are "Restart replica" and "Clear lost". Launch history is view
only and never deleted."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils.safestring import SafeString

from obleth.core import services
from obleth.core.admin.helpers import ActionPermissions, actor_of, badge
from obleth.core.choices import ReplicaState
from obleth.core.models import Launch, Replica, SlurmSettings

REPLICA_FIELDS = (
    "id",
    "model_id",
    "model_name",
    "state_badge",
    "job_id",
    "job_name",
    "nodes",
    "port_base",
    "port",
    "endpoint_id",
    "identity",
    "cancel_requested",
    "last_message",
    "last_probe",
    "last_probe_at",
    "slurm_state",
    "slurm_reason",
    "expected_start_at",
    "probe_failures",
    "excluded_nodes",
    "submitted_at",
    "started_at",
    "healthy_at",
    "created_at",
    "updated_at",
)


@admin.register(Replica)
class ReplicaAdmin(ActionPermissions, admin.ModelAdmin):
    """Read-only: the provisioner owns these rows. Restart and clear-lost are the actions."""

    list_display = (
        "model_name",
        "state_badge",
        "job_id",
        "nodes",
        "port",
        "identity",
        "cancel_requested",
        "last_message",
        "created_at",
    )
    list_filter = ("state", "cancel_requested", "model_name")
    search_fields = ("model_name", "job_id", "job_name", "nodes", "last_message")
    fields = REPLICA_FIELDS
    readonly_fields = REPLICA_FIELDS
    actions = ("restart_selected", "clear_lost_selected")
    ordering = ("model_name", "created_at")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Replica | None = None) -> bool:
        return False

    @admin.display(description="state", ordering="state")
    def state_badge(self, obj: Replica) -> SafeString:
        return badge(obj.state, obj.get_state_display())

    @admin.display(description="identity", ordering="identity_check")
    def identity(self, obj: Replica) -> str:
        """Whether the probe proves the server is this replica's (never the key itself)."""
        return "proven (replica key)" if obj.identity_proven else "identity not proven"

    @admin.action(
        description="Restart replica (cancel its job; a new one is launched)",
        permissions=["restart_replica"],
    )
    def restart_selected(self, request: HttpRequest, queryset: QuerySet[Replica]) -> None:
        count = services.restart_replicas(
            queryset.values_list("pk", flat=True), actor=actor_of(request)
        )
        self.message_user(
            request,
            f"Asked the provisioner to restart {count} replica(s) on its next pass.",
            messages.SUCCESS,
        )

    @admin.action(
        description="Clear lost replicas of the selected replicas' models",
        permissions=["clear_lost"],
    )
    def clear_lost_selected(self, request: HttpRequest, queryset: QuerySet[Replica]) -> None:
        model_ids = set(queryset.values_list("model_id", flat=True))
        cleared = sum(services.clear_lost(mid, actor=actor_of(request)) for mid in model_ids)
        self.message_user(request, f"Cleared {cleared} lost replica(s).", messages.SUCCESS)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        context = dict(extra_context or {})
        context["provisioner"] = services.provisioner_view()
        context["slurm_enabled"] = bool(
            SlurmSettings.objects.filter(pk=1).values_list("enabled", flat=True).first()
        )
        context["lost_state"] = ReplicaState.LOST
        return super().changelist_view(request, extra_context=context)


# --------------------------------------------------------------------------------------- launches


@admin.register(Launch)
class LaunchAdmin(admin.ModelAdmin):
    """Launch history: view only, never deleted."""

    list_display = (
        "model_name",
        "job_id",
        "partition",
        "nodes",
        "submitted_at",
        "healthy_at",
        "ended_at",
        "end_state",
        "end_reason",
    )
    list_filter = ("end_state", "partition")
    search_fields = ("model_name", "job_id", "job_name", "nodes", "end_reason")
    date_hierarchy = "submitted_at"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Launch | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Launch | None = None) -> bool:
        return False
