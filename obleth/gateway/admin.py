"""Admin of gateway keys: create (the secret is shown once, on the page that answers the form),
list (prefix, models, expiry, last use, revoked), edit name/models/expiry, revoke."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from obleth.gateway import keys
from obleth.gateway.models import GatewayKey


class GatewayKeyForm(forms.ModelForm):
    class Meta:
        model = GatewayKey
        fields = ["name", "allowed_models", "expires_at"]

    def clean_name(self) -> str:
        return keys.validate_key_name(self.cleaned_data.get("name"))

    def clean_expires_at(self) -> Any:
        value = self.cleaned_data.get("expires_at")
        if "expires_at" in self.changed_data:
            keys.validate_expiry(value)
        return value


@admin.register(GatewayKey)
class GatewayKeyAdmin(admin.ModelAdmin):
    form = GatewayKeyForm
    list_display = ("name", "prefix_shown", "models_shown", "expires_at", "last_used_at", "status")
    list_filter = ("revoked_at", "expires_at")
    search_fields = ("name", "prefix")
    filter_horizontal = ("allowed_models",)
    readonly_fields = ("prefix_shown", "status", "last_used_at", "created_at", "created_by")
    actions = ["revoke_selected"]

    def get_fields(self, request: HttpRequest, obj: GatewayKey | None = None) -> tuple[str, ...]:
        if obj is None:
            return ("name", "allowed_models", "expires_at")
        return (
            "name",
            "prefix_shown",
            "status",
            "allowed_models",
            "expires_at",
            "last_used_at",
            "created_at",
            "created_by",
        )

    def get_queryset(self, request: HttpRequest) -> QuerySet[GatewayKey]:
        return super().get_queryset(request).prefetch_related("allowed_models")

    @admin.display(description="key", ordering="prefix")
    def prefix_shown(self, obj: GatewayKey) -> str:
        return f"{obj.prefix}…" if obj.prefix else "-"

    @admin.display(description="models")
    def models_shown(self, obj: GatewayKey) -> str:
        names = sorted(m.name for m in obj.allowed_models.all())
        if not obj.models_limited:
            return "all models"
        return ", ".join(names) if names else "none (its models were deleted)"

    @admin.display(description="status")
    def status(self, obj: GatewayKey) -> str:
        if obj.revoked_at is not None:
            return f"revoked {obj.revoked_at:%Y-%m-%d %H:%M}"
        if obj.expired:
            return "expired"
        return "active"

    def save_model(self, request: HttpRequest, obj: GatewayKey, form: Any, change: bool) -> None:
        if not change:
            obj.created_by = str(getattr(request.user, "username", ""))[:200]
            request._gateway_key_secret = keys.issue_secret(obj)  # type: ignore[attr-defined]
        super().save_model(request, obj, form, change)

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        super().save_related(request, form, formsets, change)
        keys.set_models(form.instance, form.cleaned_data.get("allowed_models") or [])

    def response_add(
        self, request: HttpRequest, obj: GatewayKey, post_url_continue: str | None = None
    ) -> HttpResponse:
        secret = getattr(request, "_gateway_key_secret", None)
        if not secret:
            return super().response_add(request, obj, post_url_continue)
        host = request.get_host()
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Gateway key created",
            "key": obj,
            "secret": secret,
            "base_url": f"{request.scheme}://{host}/v1",
        }
        response = TemplateResponse(request, "admin/gateway/gatewaykey/created.html", context)
        response["Cache-Control"] = "no-store"
        return response

    @admin.action(description="Revoke selected gateway keys (for good)", permissions=["change"])
    def revoke_selected(self, request: HttpRequest, queryset: QuerySet[GatewayKey]) -> None:
        actor = str(getattr(request.user, "username", ""))
        done = sum(keys.revoke_key(key, actor) for key in queryset)
        self.message_user(request, f"Revoked {done} gateway key(s).", messages.SUCCESS)
