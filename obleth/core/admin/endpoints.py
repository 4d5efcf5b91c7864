"""The admin page of an endpoint: its write-only API key (a changed api_base drops the stored
key unless an admin keeps it) and the "Restart the replica behind the endpoint" action."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.safestring import SafeString

from obleth.core import services
from obleth.core import validators as v
from obleth.core.admin.helpers import (
    KEEP_SECRET_HELP,
    KEEP_SECRET_LABEL,
    ActionPermissions,
    KeepSecretAdminMixin,
    KeepSecretFormMixin,
    actor_of,
    badge,
    secret_field,
    secret_status,
)
from obleth.core.models import Endpoint


class EndpointAdminForm(KeepSecretFormMixin, forms.ModelForm):
    new_api_key = secret_field(
        "API key",
        "Write-only. Leave blank to keep the stored key; tick 'Clear API key' to remove it. "
        "Changing api_base removes the stored key unless you paste it again (or an admin ticks "
        "'Keep the stored token for the new URL').",
        validators=[v.validate_api_key],
    )
    clear_api_key = forms.BooleanField(label="Clear API key", required=False)
    keep_secret_for_new_url = forms.BooleanField(
        label=KEEP_SECRET_LABEL, required=False, help_text=KEEP_SECRET_HELP
    )
    secret_dropped = False

    class Meta:
        model = Endpoint
        fields = ("model", "name", "api_base", "priority", "weight", "enabled")

    def save(self, commit: bool = True) -> Endpoint:
        instance = super().save(commit=False)
        bound = services.endpoint_api_key(
            instance,
            self.cleaned_data.get("new_api_key"),
            new_api_base=instance.api_base,
            clear=bool(self.cleaned_data.get("clear_api_key")),
            keep_secret=bool(self.cleaned_data.get("keep_secret_for_new_url"))
            and self.allow_keep_secret,
        )
        instance.api_key = bound.value
        self.secret_dropped = bound.dropped
        if commit:
            instance.save()
        return instance


@admin.register(Endpoint)
class EndpointAdmin(ActionPermissions, KeepSecretAdminMixin, admin.ModelAdmin):
    form = EndpointAdminForm
    list_display = (
        "name",
        "model",
        "api_base",
        "priority",
        "weight",
        "enabled",
        "health",
        "api_key_status",
        "from_replica",
    )
    list_filter = ("enabled", "health_status", "model__hosting_mode")
    search_fields = ("name", "api_base", "model__name")
    list_select_related = ("model",)
    actions = ("restart_replica",)
    readonly_fields = (
        "api_key_status",
        "replica_id",
        "health",
        "consecutive_failures",
        "last_checked_at",
        "last_latency_ms",
        "last_http_status",
        "last_message",
        "next_check_at",
        "created_at",
        "updated_at",
    )
    fieldsets = (
        (None, {"fields": ("model", "name", "api_base", "priority", "weight", "enabled")}),
        (
            "API key",
            {
                "fields": (
                    "api_key_status",
                    "new_api_key",
                    "clear_api_key",
                    "keep_secret_for_new_url",
                )
            },
        ),
        (
            "Health",
            {
                "fields": (
                    "health",
                    "consecutive_failures",
                    "last_checked_at",
                    "last_latency_ms",
                    "last_http_status",
                    "last_message",
                    "next_check_at",
                )
            },
        ),
        ("Provenance", {"fields": ("replica_id", "created_at", "updated_at")}),
    )

    @admin.display(description="health", ordering="health_status")
    def health(self, obj: Endpoint) -> SafeString:
        return badge(obj.health_status)

    def save_model(
        self, request: HttpRequest, obj: Endpoint, form: forms.ModelForm, change: bool
    ) -> None:
        super().save_model(request, obj, form, change)
        if getattr(form, "secret_dropped", False):
            self.message_user(
                request,
                "api_base changed: the stored API key was removed (it was given for the old "
                "address). Paste the key for the new address if it needs one.",
                messages.WARNING,
            )

    @admin.action(
        description="Restart the replica behind the endpoint (Slurm endpoints)",
        permissions=["restart_replica"],
    )
    def restart_replica(self, request: HttpRequest, queryset: QuerySet[Endpoint]) -> None:
        ids = [rid for rid in queryset.values_list("replica_id", flat=True) if rid is not None]
        count = services.restart_replicas(ids, actor=actor_of(request))
        skipped = queryset.count() - len(ids)
        text = f"Asked the provisioner to restart {count} replica(s) on its next pass."
        if skipped:
            text += f" {skipped} static endpoint(s) skipped: they have no replica."
        self.message_user(request, text, messages.SUCCESS)

    @admin.display(description="API key")
    def api_key_status(self, obj: Endpoint) -> str:
        return secret_status(obj.api_key)

    @admin.display(description="from a replica", boolean=True)
    def from_replica(self, obj: Endpoint) -> bool:
        return obj.replica_id is not None
