"""The admin page of a managed spec (how a Slurm-provisioned model is launched): its form, the
shell fields read-only without ``core.change_launch_script``, adding only with ``core.deploy``,
and the "Dismiss the provision error" action."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from obleth.core import services
from obleth.core.admin.helpers import (
    AUTOSCALE_FIELDS,
    PLACEMENT_FIELDS,
    SERVICE_FIELDS,
    ActionPermissions,
    actor_of,
    may_deploy,
    shell_readonly,
)
from obleth.core.choices import HostingMode
from obleth.core.models import ManagedSpec, Model


class ManagedSpecAdminForm(forms.ModelForm):
    class Meta:
        model = ManagedSpec
        fields = ("model", *services.spec_editable_fields())

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if "model" in self.fields:
            field = self.fields["model"]
            if isinstance(field, forms.ModelChoiceField):
                field.queryset = Model.objects.filter(hosting_mode=HostingMode.SLURM)
                field.help_text = "Only Slurm-provisioned models take a managed spec."


@admin.register(ManagedSpec)
class ManagedSpecAdmin(ActionPermissions, admin.ModelAdmin):
    form = ManagedSpecAdminForm
    list_display = (
        "model",
        "enabled",
        "partition",
        "target_replicas",
        "min_replicas",
        "max_job_failures",
        "provision_error",
        "updated_at",
    )
    list_filter = ("enabled", "partition")
    search_fields = ("model__name", "partition", "account", "qos")
    list_select_related = ("model", "recipe")
    readonly_fields = (
        "last_provision_error",
        "last_provision_error_at",
        "autoscale_message",
        "created_at",
        "updated_at",
    )
    actions = ("dismiss_provision_errors",)
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "model",
                    "enabled",
                    "target_replicas",
                    "min_replicas",
                    "max_job_failures",
                )
            },
        ),
        ("Autoscaling", {"fields": AUTOSCALE_FIELDS}),
        ("Placement", {"fields": PLACEMENT_FIELDS}),
        ("Service", {"fields": SERVICE_FIELDS}),
        (
            "Last refused launch",
            {"fields": ("last_provision_error", "last_provision_error_at")},
        ),
        ("Timestamps", {"fields": ("created_at", "updated_at")}),
    )

    def get_readonly_fields(
        self, request: HttpRequest, obj: ManagedSpec | None = None
    ) -> list[str]:
        fields = [*self.readonly_fields, *shell_readonly(request)]
        if obj is not None:
            fields.insert(0, "model")
        return fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return super().has_add_permission(request) and may_deploy(request)

    @admin.display(description="last refused launch")
    def provision_error(self, obj: ManagedSpec) -> str:
        text = obj.last_provision_error
        return (text[:80] + "…") if len(text) > 80 else (text or "—")

    @admin.action(description="Dismiss the provision error", permissions=["dismiss_error"])
    def dismiss_provision_errors(
        self, request: HttpRequest, queryset: QuerySet[ManagedSpec]
    ) -> None:
        count = 0
        for spec in queryset.exclude(last_provision_error=""):
            services.dismiss_provision_error(spec, actor=actor_of(request))
            count += 1
        self.message_user(request, f"Dismissed {count} provision error(s).", messages.SUCCESS)
