"""Gateway keys: the credentials clients send to /v1, stored as database rows.

A key's secret is shown once, when it is created, and never stored: the row keeps its SHA-256
digest (to recognise it) and a short public prefix (to name it in lists and logs). See
docs/gateway-keys.md.
"""

from __future__ import annotations

import uuid

from django.db import models
from django.utils import timezone

from obleth.core.models import Model


class GatewayKey(models.Model):
    """One client credential for the OpenAI-compatible gateway."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(
        max_length=200, help_text="Who or what uses this key (a team, an application)."
    )
    prefix = models.CharField(
        max_length=16,
        unique=True,
        editable=False,
        help_text="The start of the secret: names the key without revealing it.",
    )
    digest = models.CharField(
        max_length=64, unique=True, editable=False, help_text="SHA-256 of the secret (hex)."
    )
    allowed_models = models.ManyToManyField(
        Model,
        blank=True,
        related_name="gateway_keys",
        help_text="The models this key may call (none selected: all).",
    )
    models_limited = models.BooleanField(
        default=False,
        editable=False,
        help_text="Limited to its models (if they are all deleted: to none).",
    )
    expires_at = models.DateTimeField(
        null=True, blank=True, help_text="After this time the key is refused. Empty: never."
    )
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_used_at = models.DateTimeField(
        null=True, blank=True, editable=False, help_text="Updated at most once a minute."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.CharField(max_length=200, blank=True, editable=False)

    class Meta:
        ordering = ["name", "created_at"]
        verbose_name = "gateway key"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None

    @property
    def expired(self) -> bool:
        return self.expires_at is not None and self.expires_at <= timezone.now()

    @property
    def active(self) -> bool:
        return not self.revoked and not self.expired
