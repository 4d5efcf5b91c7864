"""Personal API tokens and the audit log."""

from __future__ import annotations

import uuid
from typing import Any, ClassVar

from django.conf import settings
from django.db import models
from django.utils import timezone


class ApiToken(models.Model):
    """A Management API token a user made for themself; it acts with that user's permissions.

    Only the SHA-256 of the token is stored. The token reads ``obt_<prefix>_<secret>``; the
    prefix (not secret) finds the row, the hash proves the rest.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100, help_text="What the token is for (e.g. 'CI deploys').")
    prefix = models.CharField(max_length=16, unique=True, editable=False)
    token_hash = models.CharField(max_length=64, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_used_from = models.CharField(max_length=100, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering: ClassVar[list[str]] = ["-created_at"]
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.name} (obt_{self.prefix}_…)"

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None

    def expired(self, now: Any = None) -> bool:
        return self.expires_at <= (now or timezone.now())

    @property
    def active(self) -> bool:
        return not self.revoked and not self.expired()


class AuditEntry(models.Model):
    """One write by a person (through the API or the admin): who, what, before and after.

    Secrets are never stored: a secret field appears as ``{"set": bool, "changed": bool}``.
    Writes the provisioner makes on its own (replica states, health) are not recorded.
    """

    id = models.BigAutoField(primary_key=True)
    at = models.DateTimeField(default=timezone.now, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="Empty for the bootstrap admin token.",
    )
    actor_name = models.CharField(max_length=150, db_index=True)
    via = models.CharField(max_length=16, help_text="api, admin or token.")
    token_prefix = models.CharField(max_length=16, blank=True)
    client_address = models.CharField(max_length=100, blank=True)
    action = models.CharField(max_length=32, db_index=True)
    app_label = models.CharField(max_length=100)
    model = models.CharField(max_length=100, db_index=True)
    object_id = models.CharField(max_length=64, blank=True, db_index=True)
    object_repr = models.CharField(max_length=200, blank=True)
    changed_fields = models.JSONField(default=list, blank=True)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    detail = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering: ClassVar[list[str]] = ["-at", "-id"]
        verbose_name = "audit entry"
        verbose_name_plural = "audit log"
        indexes: ClassVar[list[Any]] = [
            models.Index(fields=["app_label", "model", "object_id"], name="audit_object"),
        ]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor_name} {self.action} {self.model}"
