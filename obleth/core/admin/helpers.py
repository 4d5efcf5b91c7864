"""What the admin pages of ``obleth.core.admin`` share: the managed spec's field groups (the same
inline on a model and on the spec's own page), the state badges, the explicit permissions of the
operator actions, and the write-only secret fields with the "keep the stored token for the new
URL" mixins. Secrets are never rendered back: blank keeps the stored value."""

from __future__ import annotations

from typing import Any

from django import forms
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString

from obleth.core import services
from obleth.core.choices import STATE_COLOURS
from obleth.core.models import mask_secret

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


def provisioner_badge(view: services.ProvisionerView) -> SafeString:
    colour = {"running": "ok", "failing": "error", "not_running": "unknown"}[view.state]
    extra = ""
    if view.last_pass_detail and view.failing:
        extra = view.last_pass_detail[:240]
    version = f" v{view.version}" if view.version else ""
    return format_html("{}{} <span>{}</span>", badge(colour, view.label), version, extra)


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
