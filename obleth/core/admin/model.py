"""The admin page of a model (``ModelAdmin``) with its inlines: the endpoints and, for a
Slurm-provisioned model, the managed spec. Its extra views dismiss the last refused launch and
"Try once more" (clear the lost replicas and the tripped breaker); the cockpit's URLs and context
come from ``obleth.core.admin_cockpit``."""

from __future__ import annotations

import uuid
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import Count, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import URLPattern, path, reverse
from django.utils.safestring import SafeString

from obleth.core import services
from obleth.core.admin.helpers import (
    AUTOSCALE_FIELDS,
    PLACEMENT_FIELDS,
    SERVICE_FIELDS,
    ActionPermissions,
    actor_of,
    badge,
    may_deploy,
    shell_readonly,
)
from obleth.core.admin_cockpit import cockpit_context, cockpit_urls
from obleth.core.choices import HostingMode
from obleth.core.models import Endpoint, ManagedSpec, Model


class EndpointInlineForm(forms.ModelForm):
    """The inline edits api_base without the key fields: a changed api_base drops the stored
    key (services.secret_for_destination), as everywhere else."""

    class Meta:
        model = Endpoint
        fields = ("name", "api_base", "priority", "weight", "enabled")

    def save(self, commit: bool = True) -> Endpoint:
        instance: Endpoint = super().save(commit=False)
        bound = services.endpoint_api_key(instance, None, new_api_base=instance.api_base)
        instance.api_key = bound.value
        if commit:
            instance.save()
        return instance


class EndpointInline(admin.TabularInline):
    model = Endpoint
    form = EndpointInlineForm
    extra = 0
    fields = ("name", "api_base", "priority", "weight", "enabled", "health", "replica_id")
    readonly_fields = ("health", "replica_id")
    show_change_link = True

    def get_queryset(self, request: HttpRequest) -> QuerySet[Endpoint]:
        return super().get_queryset(request).select_related("model")  # __str__ reads the model

    @admin.display(description="health")
    def health(self, obj: Endpoint) -> SafeString:
        return badge(obj.health_status)


class ManagedSpecInline(admin.StackedInline):
    model = ManagedSpec
    extra = 0
    max_num = 1
    can_delete = True
    verbose_name = "managed spec (Slurm launch)"
    readonly_fields = ("last_provision_error", "last_provision_error_at", "autoscale_message")
    fieldsets = (
        (None, {"fields": ("enabled", "target_replicas", "min_replicas", "max_job_failures")}),
        ("Autoscaling", {"fields": AUTOSCALE_FIELDS}),
        ("Placement", {"fields": PLACEMENT_FIELDS}),
        ("Service", {"fields": SERVICE_FIELDS}),
        ("Last refused launch", {"fields": ("last_provision_error", "last_provision_error_at")}),
    )

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [*self.readonly_fields, *shell_readonly(request)]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return super().has_add_permission(request, obj) and may_deploy(request)


@admin.register(Model)
class ModelAdmin(ActionPermissions, admin.ModelAdmin):
    list_display = (
        "name",
        "hosting_mode",
        "model_type",
        "enabled",
        "health",
        "endpoint_count",
        "managed",
        "launching",
        "updated_at",
    )
    list_filter = ("hosting_mode", "model_type", "enabled", "health_status")
    search_fields = ("name", "upstream_model")
    list_select_related = ("managed_spec",)
    readonly_fields = (
        "health",
        "health_message",
        "health_consecutive_failures",
        "health_checked_at",
        "created_at",
        "updated_at",
    )
    actions = ("dismiss_provision_errors",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Model]:
        return (
            super()
            .get_queryset(request)
            .select_related("managed_spec")
            .annotate(_endpoint_count=Count("endpoints"))
        )

    def get_fields(self, request: HttpRequest, obj: Model | None = None) -> tuple[str, ...]:
        fields: tuple[str, ...] = (
            "name",
            "hosting_mode",
            "upstream_model",
            "model_type",
            "enabled",
        )
        if obj is not None:
            fields += tuple(self.readonly_fields)
        return fields

    def get_readonly_fields(self, request: HttpRequest, obj: Model | None = None) -> list[str]:
        fields = list(self.readonly_fields)
        if obj is not None:
            fields.insert(0, "hosting_mode")  # fixed at creation
        return fields

    def get_inlines(self, request: HttpRequest, obj: Model | None) -> list[Any]:
        if obj is None:
            return []
        if obj.hosting_mode == HostingMode.SLURM:
            return [ManagedSpecInline, EndpointInline]
        return [EndpointInline]

    @admin.display(description="health", ordering="health_status")
    def health(self, obj: Model) -> SafeString:
        return badge(obj.health_status)

    @admin.display(description="endpoints", ordering="_endpoint_count")
    def endpoint_count(self, obj: Model) -> int:
        return int(getattr(obj, "_endpoint_count", 0))

    @admin.display(description="managed", boolean=True)
    def managed(self, obj: Model) -> bool:
        return hasattr(obj, "managed_spec")

    @admin.display(description="launching")
    def launching(self, obj: Model) -> str:
        """Whether the provisioner launches replicas: the failed-launch breaker, the storm guard."""
        spec = getattr(obj, "managed_spec", None)
        if spec is None:
            return ""
        if spec.breaker_message:
            return "STOPPED after failed launches: open the model and press Try once more"
        if spec.storm_message:
            return "slowed: replacement storm"
        return "yes" if spec.enabled else "off"

    @admin.action(
        description="Dismiss the provision error of the selected models",
        permissions=["dismiss_error"],
    )
    def dismiss_provision_errors(self, request: HttpRequest, queryset: QuerySet[Model]) -> None:
        specs = ManagedSpec.objects.filter(model__in=queryset).exclude(last_provision_error="")
        count = 0
        for spec in specs:
            services.dismiss_provision_error(spec, actor=actor_of(request))
            count += 1
        self.message_user(request, f"Dismissed {count} provision error(s).", messages.SUCCESS)

    def get_urls(self) -> list[URLPattern]:
        extra = [
            path(
                "<uuid:object_id>/dismiss-provision-error/",
                self.admin_site.admin_view(self.dismiss_provision_error_view),
                name="core_model_dismiss_provision_error",
            ),
            path(
                "<uuid:object_id>/try-once-more/",
                self.admin_site.admin_view(self.try_once_more_view),
                name="core_model_try_once_more",
            ),
            *cockpit_urls(self),
        ]
        return extra + super().get_urls()

    def try_once_more_view(self, request: HttpRequest, object_id: uuid.UUID) -> HttpResponse:
        """Clear the lost replicas (and the tripped breaker) so the next pass launches again."""
        model = get_object_or_404(Model, pk=object_id)
        change_url = reverse("admin:core_model_change", args=[model.pk])
        if request.method != "POST" or not request.user.has_perm("core.clear_lost"):
            return HttpResponseRedirect(change_url)
        cleared = services.clear_lost(model.pk, actor=actor_of(request))
        self.message_user(
            request,
            f"Cleared {cleared} lost replica(s): the next pass launches again. It stops again if "
            "the limit of failed launches is reached again.",
            messages.SUCCESS,
        )
        return HttpResponseRedirect(change_url)

    def dismiss_provision_error_view(
        self, request: HttpRequest, object_id: uuid.UUID
    ) -> HttpResponse:
        model = get_object_or_404(Model, pk=object_id)
        change_url = reverse("admin:core_model_change", args=[model.pk])
        if request.method != "POST" or not self.has_dismiss_error_permission(request):
            return HttpResponseRedirect(change_url)
        spec = ManagedSpec.objects.filter(model=model).first()
        if spec is not None and spec.last_provision_error:
            services.dismiss_provision_error(spec, actor=actor_of(request))
            self.message_user(
                request,
                "Dismissed. It comes back if the next launch is refused too.",
                messages.SUCCESS,
            )
        return HttpResponseRedirect(change_url)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        context = dict(extra_context or {})
        try:
            spec = ManagedSpec.objects.filter(model_id=uuid.UUID(str(object_id))).first()
        except ValueError:
            spec = None  # not an id: the admin answers "does not exist" itself
        if spec is not None:
            context.update(cockpit_context(request, spec.model_id))
        if spec is not None and spec.last_provision_error:
            context["provision_error"] = spec.last_provision_error
            context["provision_error_at"] = spec.last_provision_error_at
            if self.has_dismiss_error_permission(request):
                context["dismiss_url"] = reverse(
                    "admin:core_model_dismiss_provision_error", args=[spec.model_id]
                )
        if spec is not None and spec.breaker_message:
            context["breaker_message"] = spec.breaker_message
            context["breaker_tripped_at"] = spec.breaker_tripped_at
            context["try_once_more_url"] = reverse(
                "admin:core_model_try_once_more", args=[spec.model_id]
            )
        if spec is not None and spec.storm_message:
            context["storm_message"] = spec.storm_message
            context["storm_since"] = spec.storm_since
        return super().change_view(request, object_id, form_url, extra_context=context)
