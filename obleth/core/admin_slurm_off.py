"""Turning Slurm off while replicas run asks first: an intermediate page says how many
replicas have live jobs and what happens to them (:mod:`obleth.core.slurm_switch`), then
re-posts the settings form as it was sent (secrets excepted: they are never written into a
page) with ``_confirm_slurm_off``. Mixed into ``SlurmSettingsAdmin``."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse

from obleth.core import slurm_switch
from obleth.core.models import SlurmSettings

__all__ = ["CONFIRM_FIELD", "ConfirmSlurmOffMixin"]

CONFIRM_FIELD = "_confirm_slurm_off"
#: Write-only fields: not carried through the confirmation page.
SECRET_FIELDS = {"new_jwt": "JWT", "new_hf_token": "Hugging Face token"}
_NOT_CARRIED = ("csrfmiddlewaretoken", CONFIRM_FIELD, *SECRET_FIELDS)


class ConfirmSlurmOffMixin:
    """For a ModelAdmin of SlurmSettings (the change form's ``enabled`` checkbox)."""

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        if (
            request.method == "POST"
            and object_id is not None
            and CONFIRM_FIELD not in request.POST
            and not request.POST.get("enabled")
        ):
            current = SlurmSettings.load()
            model_admin: Any = self
            if current.enabled and model_admin.has_change_permission(request, current):
                live = slurm_switch.live_replicas()
                if live.count:
                    return self._confirm_off(request, current, live)
        return super().changeform_view(  # type: ignore[misc]
            request, object_id, form_url, extra_context
        )

    def _confirm_off(
        self, request: HttpRequest, obj: SlurmSettings, live: slurm_switch.LiveReplicas
    ) -> HttpResponse:
        carried = [
            (name, value)
            for name, values in request.POST.lists()
            if name not in _NOT_CARRIED
            for value in values
        ]
        dropped = [label for name, label in SECRET_FIELDS.items() if request.POST.get(name)]
        context = {
            **admin.site.each_context(request),
            "title": "Turn Slurm off?",
            "opts": SlurmSettings._meta,
            "live": live,
            "carried": carried,
            "dropped_secrets": dropped,
            "confirm_field": CONFIRM_FIELD,
            "change_url": reverse("admin:core_slurmsettings_change", args=[obj.pk]),
            "replica_list_url": reverse("admin:core_replica_changelist"),
        }
        return TemplateResponse(request, "admin/deploy/slurm_off_confirm.html", context)
