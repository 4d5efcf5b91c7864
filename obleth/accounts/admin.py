"""Admin pages: your API tokens (create: shown once; revoke) and the audit log (read only)."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from obleth.accounts import services
from obleth.accounts.models import ApiToken, AuditEntry

EXPIRY_CHOICES = [
    (7, "7 days"),
    (30, "30 days"),
    (90, "90 days"),
    (180, "180 days"),
    (366, "1 year"),
]


class NewApiTokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What uses the token, e.g. 'CI deploys'.")
    expires_in_days = forms.TypedChoiceField(
        label="Expires in", choices=EXPIRY_CHOICES, coerce=int, initial=services.DEFAULT_DAYS
    )


def _staff(request: HttpRequest) -> bool:
    user = request.user
    return bool(user.is_active and user.is_staff)


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Each staff member sees and revokes their own tokens; admins see everybody's."""

    list_display = ("name", "hint", "user", "state", "created_at", "expires_at", "last_used_at")
    list_filter = ("revoked_at",)
    search_fields = ("name", "prefix", "user__username")
    readonly_fields = (
        "name",
        "user",
        "hint",
        "created_at",
        "expires_at",
        "last_used_at",
        "last_used_from",
        "revoked_at",
    )
    fields = readonly_fields
    actions = ("revoke_selected",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[ApiToken]:
        return services.visible_tokens(request.user)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return _staff(request)

    def has_view_permission(self, request: HttpRequest, obj: ApiToken | None = None) -> bool:
        if not _staff(request):
            return False
        if obj is None or obj.user_id == request.user.pk:
            return True
        return bool(request.user.has_perm("accounts.view_apitoken"))

    def has_add_permission(self, request: HttpRequest) -> bool:
        return _staff(request)

    def has_change_permission(self, request: HttpRequest, obj: ApiToken | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: ApiToken | None = None) -> bool:
        return False

    def has_revoke_permission(self, request: HttpRequest) -> bool:
        return _staff(request)

    @admin.display(description="token")
    def hint(self, obj: ApiToken) -> str:
        return f"{services.TOKEN_SCHEME}_{obj.prefix}_…"

    @admin.display(description="state")
    def state(self, obj: ApiToken) -> str:
        if obj.revoked:
            return "revoked"
        return "expired" if obj.expired() else "active"

    @admin.action(description="Revoke the selected tokens", permissions=["revoke"])
    def revoke_selected(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        done = 0
        for token in queryset:
            try:
                services.revoke_token(request.user, token)
                done += 1
            except PermissionDenied:
                continue
        self.message_user(request, f"Revoked {done} token(s).", messages.SUCCESS)

    def add_view(
        self, request: HttpRequest, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if not self.has_add_permission(request):
            raise PermissionDenied
        form = NewApiTokenForm(request.POST or None)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": "New API token",
            "form": form,
        }
        if request.method == "POST" and form.is_valid():
            try:
                made = services.create_token(
                    request.user,
                    form.cleaned_data["name"],
                    expires_in_days=form.cleaned_data["expires_in_days"],
                )
            except ValidationError as exc:
                for text in exc.messages:
                    form.add_error(None, text)
            else:
                # Rendered into this page only: never a message, a cookie or a redirect URL.
                context.update(
                    title="API token created",
                    token=made.token,
                    secret=made.secret,
                    list_url=reverse("admin:accounts_apitoken_changelist"),
                )
                response = TemplateResponse(
                    request, "admin/accounts/apitoken/created.html", context
                )
                response["Cache-Control"] = "no-store"
                return response
        return TemplateResponse(request, "admin/accounts/apitoken/add.html", context)


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin):
    """Read only: nobody edits or deletes the log from here."""

    list_display = ("at", "actor_name", "via", "action", "model", "object_repr", "changes")
    list_filter = ("action", "via", "app_label", "model")
    search_fields = ("actor_name", "object_id", "object_repr", "detail")
    date_hierarchy = "at"
    fields = (
        "at",
        "actor_name",
        "via",
        "token_prefix",
        "client_address",
        "action",
        "app_label",
        "model",
        "object_id",
        "object_repr",
        "changed_fields",
        "before_pretty",
        "after_pretty",
        "detail",
    )
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: AuditEntry | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: AuditEntry | None = None) -> bool:
        return False

    @admin.display(description="changed")
    def changes(self, obj: AuditEntry) -> str:
        return ", ".join(obj.changed_fields or [])[:120] or (
            obj.detail[:120] if obj.detail else "—"
        )

    @admin.display(description="before")
    def before_pretty(self, obj: AuditEntry) -> SafeString:
        return _pretty(obj.before)

    @admin.display(description="after")
    def after_pretty(self, obj: AuditEntry) -> SafeString:
        return _pretty(obj.after)


def _pretty(value: Any) -> SafeString:
    if value is None:
        return format_html("{}", "—")
    return format_html(
        '<pre style="white-space:pre-wrap;max-width:80em">{}</pre>',
        json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False),
    )
