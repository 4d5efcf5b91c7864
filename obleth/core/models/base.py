"""The shared base of obleth's models: the created/updated timestamps, and mask_secret, the one
view of a secret any answer gets."""

from __future__ import annotations

from typing import Any

from django.db import models


class TimestampedModel(models.Model):
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True


def mask_secret(value: str | None) -> dict[str, Any]:
    """The only view of a secret any answer gets: whether it is set and its last four characters."""
    value = value or ""
    return {"set": bool(value), "last4": value[-4:] if len(value) >= 8 else ""}
