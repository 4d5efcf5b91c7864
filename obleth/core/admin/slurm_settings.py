"""The admin page of the Slurm settings singleton: the slurmrestd connection with its write-only
JWT, the cluster defaults with the write-only Hugging Face token, the node address overrides,
"Test connection", and the confirmation before Slurm is turned off while replicas run
(``obleth.core.admin_slurm_off``)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.safestring import SafeString

from obleth.core import services
from obleth.core import validators as v
from obleth.core.admin.helpers import (
    KEEP_SECRET_HELP,
    KEEP_SECRET_LABEL,
    KeepSecretAdminMixin,
    KeepSecretFormMixin,
    actor_of,
    provisioner_badge,
    secret_field,
    secret_status,
)
from obleth.core.admin_slurm_off import ConfirmSlurmOffMixin
from obleth.core.models import SlurmSettings


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
