"""The admin console: models and endpoints, the Slurm connection, managed specs, replicas,
launches, recipes, the provisioner's status and the alert log.

Operator actions call ``obleth.core.services``. Replica rows belong to the provisioner: every
field is read-only here and the only actions are "Restart replica" and "Clear lost". Secrets
are write-only form fields: blank keeps the stored value and nothing renders it back.
"""

from __future__ import annotations

import uuid
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import Count, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from obleth.core import services
from obleth.core import validators as v
from obleth.core.admin_cockpit import cockpit_context, cockpit_urls
from obleth.core.admin_slurm_off import ConfirmSlurmOffMixin
from obleth.core.choices import STATE_COLOURS, HostingMode, ReplicaState
from obleth.core.models import (
    Alert,
    AuthFailureWindow,
    Endpoint,
    Launch,
    Lease,
    ManagedSpec,
    Model,
    ProvisionerStatus,
    Replica,
    SlurmSettings,
    mask_secret,
)

admin.site.site_header = "obleth administration"
admin.site.site_title = "obleth"
admin.site.index_title = "Models, Slurm replicas and launches"


# The managed spec's placement fields, shown the same way inline on a model and on its own page.
PLACEMENT_FIELDS = (
    "partition",
    "account",
    "qos",
    "time_limit",
    "nodes",
    "gres",
    "cpus_per_task",
    "mem",
    "constraints",
    "exclude",
)
# ... and how it is launched.
# Autoscaling: the count follows the gateway's in-flight requests (empty max_replicas: off).
AUTOSCALE_FIELDS = (
    "max_replicas",
    "target_in_flight",
    "scale_up_delay_secs",
    "scale_down_delay_secs",
    "scale_to_zero_after_secs",
    "autoscale_message",
)
SERVICE_FIELDS = (
    "serving_port",
    "health_path",
    "image",
    "preamble",
    "launch_command",
    "script_body",
    "log_output_dir",
    "recipe",
    "launcher_spec",
)


def badge(value: str, label: str | None = None) -> SafeString:
    """A coloured pill for a state (replica state, health, pass status)."""
    colour = STATE_COLOURS.get(value or "", "#6e7781")
    return format_html(
        '<span class="obleth-badge" style="background:{};color:#fff;padding:1px 7px;'
        'border-radius:9px;font-size:11px;white-space:nowrap">{}</span>',
        colour,
        label or value or "—",
    )


def secret_status(value: str | None) -> str:
    masked = mask_secret(value)
    if not masked["set"]:
        return "not set"
    return f"set (ends in …{masked['last4']})" if masked["last4"] else "set"


def actor_of(request: HttpRequest) -> str:
    return str(getattr(request.user, "username", "") or "admin")


class ActionPermissions:
    """The explicit permissions of the operator actions, the same the Management API checks
    (obleth.api.permissions): a view-only user sees no Restart, Clear lost or Dismiss."""

    def has_restart_replica_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm("core.restart_replica"))

    def has_clear_lost_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm("core.clear_lost"))

    def has_dismiss_error_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm("core.dismiss_error"))


def shell_readonly(request: HttpRequest) -> tuple[str, ...]:
    """The spec's shell fields are read-only without core.change_launch_script."""
    from obleth.accounts.roles import SHELL_SPEC_FIELDS

    return () if request.user.has_perm("core.change_launch_script") else SHELL_SPEC_FIELDS


def may_deploy(request: HttpRequest) -> bool:
    return bool(request.user.has_perm("core.deploy"))


class SecretInput(forms.PasswordInput):
    """Never renders a value back into the page."""

    def __init__(self, attrs: dict[str, Any] | None = None) -> None:
        super().__init__(
            attrs={"autocomplete": "new-password", **(attrs or {})}, render_value=False
        )


def secret_field(
    label: str, help_text: str, validators: list[Any] | None = None
) -> forms.CharField:
    return forms.CharField(
        label=label,
        required=False,
        strip=True,
        widget=SecretInput(),
        help_text=help_text,
        validators=validators or [],
    )


KEEP_SECRET_LABEL = "Keep the stored token for the new URL"
KEEP_SECRET_HELP = (
    "Admins only. Without it, changing the URL removes the stored secret (it was given for the "
    "old host) unless you paste it again above."
)


class KeepSecretFormMixin:
    """The "keep the stored token for the new URL" checkbox: only an admin may tick it."""

    allow_keep_secret = False  # set per request by the ModelAdmin's get_form
    cleaned_data: dict[str, Any]

    def clean(self) -> dict[str, Any]:
        data: dict[str, Any] = super().clean()  # type: ignore[misc]
        if data.get("keep_secret_for_new_url") and not self.allow_keep_secret:
            self.add_error(  # type: ignore[attr-defined]
                "keep_secret_for_new_url",
                "Only an admin may keep a stored secret for a new URL: paste the secret again "
                "for the new URL, or untick this box (the stored one is then removed).",
            )
        return data


class KeepSecretAdminMixin:
    """Tells the form whether the user may keep a secret for a new URL."""

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> Any:
        form = super().get_form(request, obj, change=change, **kwargs)  # type: ignore[misc]
        form.allow_keep_secret = services.may_keep_secret(request.user)
        return form


# ------------------------------------------------------------------------------------------ models


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


# --------------------------------------------------------------------------------------- endpoints


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


# ---------------------------------------------------------------------------------- managed specs


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


# --------------------------------------------------------------------------------------- replicas

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


# ---------------------------------------------------------------------------------- Slurm settings


class SlurmSettingsForm(KeepSecretFormMixin, forms.ModelForm):
    new_jwt = secret_field(
        "New JWT",
        "Write-only. Paste the raw token from `scontrol token`; leave blank to keep the stored "
        "one. Changing the slurmrestd URL removes the stored JWT and Hugging Face token unless "
        "you paste them again (or an admin ticks 'Keep the stored token for the new URL').",
        validators=[v.validate_jwt],
    )
    clear_jwt = forms.BooleanField(label="Clear the JWT", required=False)
    keep_secret_for_new_url = forms.BooleanField(
        label=KEEP_SECRET_LABEL, required=False, help_text=KEEP_SECRET_HELP
    )
    new_hf_token = secret_field(
        "New Hugging Face token",
        "Write-only. Leave blank to keep the stored token.",
        validators=[v.validate_hf_token],
    )
    clear_hf_token = forms.BooleanField(label="Clear the Hugging Face token", required=False)

    class Meta:
        model = SlurmSettings
        fields = services.SETTINGS_FIELDS

    def clean_images(self) -> Any:
        value = self.cleaned_data.get("images") or {}
        services.validate_images(value)
        return value

    def clean_node_addresses(self) -> Any:
        return self.cleaned_data.get("node_addresses") or {}


@admin.register(SlurmSettings)
class SlurmSettingsAdmin(ConfirmSlurmOffMixin, KeepSecretAdminMixin, admin.ModelAdmin):
    """A singleton: the list goes straight to the one row; no add, no delete."""

    form = SlurmSettingsForm
    readonly_fields = (
        "jwt_status",
        "hf_token_status",
        "detected_api_version",
        "detected_release",
        "provisioner_status",
        "updated_at",
    )
    fieldsets = (
        (
            "Connection",
            {
                "fields": (
                    "enabled",
                    "slurmrestd_url",
                    "api_version",
                    "user",
                    "jwt_status",
                    "new_jwt",
                    "clear_jwt",
                    "keep_secret_for_new_url",
                )
            },
        ),
        (
            "Cluster defaults",
            {
                "fields": (
                    "cache_dir",
                    "images_dir",
                    "log_dir",
                    "setup",
                    "images",
                    "hf_token_status",
                    "new_hf_token",
                    "clear_hf_token",
                )
            },
        ),
        (
            "Node address overrides",
            {
                "fields": ("node_addresses",),
                "description": 'Hostname → IP literal, e.g. {"gpu-node-01": "10.0.0.24"}. '
                "A hostname as the address is refused.",
            },
        ),
        (
            "Status",
            {
                "fields": (
                    "provisioner_status",
                    "detected_api_version",
                    "detected_release",
                    "updated_at",
                )
            },
        ),
    )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: SlurmSettings | None = None) -> bool:
        return False

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        obj = SlurmSettings.load()
        return HttpResponseRedirect(reverse("admin:core_slurmsettings_change", args=[obj.pk]))

    def get_urls(self) -> list[URLPattern]:
        extra = [
            path(
                "test-connection/",
                self.admin_site.admin_view(self.test_connection_view),
                name="core_slurmsettings_test",
            )
        ]
        return extra + super().get_urls()

    def test_connection_view(self, request: HttpRequest) -> HttpResponse:
        obj = SlurmSettings.load()
        change_url = reverse("admin:core_slurmsettings_change", args=[obj.pk])
        if request.method != "POST" or not self.has_change_permission(request, obj):
            return HttpResponseRedirect(change_url)
        try:
            result = services.check_slurm_connection(obj)
        except ValidationError as exc:
            for text in exc.messages:
                self.message_user(request, text, messages.ERROR)
            return HttpResponseRedirect(change_url)
        jwt = result["jwt"]
        expiry = (
            f"JWT expires {timezone.localtime(jwt['expires_at']):%Y-%m-%d %H:%M %Z}"
            + (" (EXPIRED)" if jwt["expired"] else "")
            if jwt["expires_at"]
            else "JWT expiry unknown"
        )
        if result["ok"]:
            self.message_user(
                request,
                f"slurmrestd answered in {result['latency_ms']} ms (API {result['api_version']}"
                f"{', Slurm ' + result['slurm_release'] if result['slurm_release'] else ''}). "
                f"{expiry}.",
                messages.SUCCESS,
            )
        else:
            self.message_user(
                request,
                f"Ping failed: {result['detail'] or 'no answer'}. {expiry}.",
                messages.ERROR,
            )
        return HttpResponseRedirect(change_url)

    def save_model(
        self, request: HttpRequest, obj: SlurmSettings, form: forms.ModelForm, change: bool
    ) -> None:
        values = {name: form.cleaned_data[name] for name in services.SETTINGS_FIELDS}
        had_jwt = bool(obj.jwt)  # the form never sets the secret fields of the instance
        saved = services.update_slurm_settings(
            values,
            jwt=form.cleaned_data.get("new_jwt"),
            jwt_clear=bool(form.cleaned_data.get("clear_jwt")),
            hf_token=form.cleaned_data.get("new_hf_token"),
            hf_token_clear=bool(form.cleaned_data.get("clear_hf_token")),
            keep_secret=bool(form.cleaned_data.get("keep_secret_for_new_url"))
            and services.may_keep_secret(request.user),
            actor=actor_of(request),
        )
        obj.jwt, obj.hf_token = saved.jwt, saved.hf_token
        if had_jwt and not saved.jwt and not form.cleaned_data.get("clear_jwt"):
            self.message_user(
                request,
                "The slurmrestd URL changed: the stored JWT and Hugging Face token were removed "
                "(they were given for the old host). Paste the tokens for the new host.",
                messages.WARNING,
            )

    @admin.display(description="Stored JWT")
    def jwt_status(self, obj: SlurmSettings) -> str:
        view = services.jwt_view(obj.jwt)
        text = secret_status(obj.jwt)
        if view["expires_at"] is not None:
            when = timezone.localtime(view["expires_at"])
            text += f"; {'EXPIRED' if view['expired'] else 'expires'} {when:%Y-%m-%d %H:%M %Z}"
        return text

    @admin.display(description="Stored Hugging Face token")
    def hf_token_status(self, obj: SlurmSettings) -> str:
        return secret_status(obj.hf_token)

    @admin.display(description="provisioner")
    def provisioner_status(self, obj: SlurmSettings) -> SafeString:
        return provisioner_badge(services.provisioner_view(slurm_enabled=obj.enabled))


def provisioner_badge(view: services.ProvisionerView) -> SafeString:
    colour = {"running": "ok", "failing": "error", "not_running": "unknown"}[view.state]
    extra = ""
    if view.last_pass_detail and view.failing:
        extra = view.last_pass_detail[:240]
    version = f" v{view.version}" if view.version else ""
    return format_html("{}{} <span>{}</span>", badge(colour, view.label), version, extra)


# ---------------------------------------------------------------------- provisioner status, alerts


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


# The Health page of a model and the HealthEvent list (obleth/core/admin_health.py).
from obleth.core import admin_health  # noqa: E402, F401
