"""The provisioner's own bookkeeping: its heartbeat and last pass (ProvisionerStatus), the alerts
it fired (Alert), and the expiring locks its passes hold (Lease)."""

from __future__ import annotations

from typing import ClassVar

from django.db import models

from obleth.core.choices import PassStatus


class ProvisionerStatus(models.Model):
    """Heartbeat and the outcome of the last pass (a single row, id 1)."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1, editable=False)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    version = models.CharField(max_length=100, blank=True)
    host = models.CharField(max_length=200, blank=True)
    last_pass_status = models.CharField(max_length=8, choices=PassStatus.choices, blank=True)
    last_pass_detail = models.TextField(blank=True)
    last_pass_at = models.DateTimeField(null=True, blank=True)
    last_pass_ms = models.PositiveIntegerField(null=True, blank=True)
    non_ok_since = models.DateTimeField(null=True, blank=True)
    last_ok_at = models.DateTimeField(null=True, blank=True)
    held_alert_active = models.BooleanField(default=False)
    # Celery mode: the failed actions of model tasks, per model id ({"name", "at", "detail"}),
    # read by the next pass so they turn its outcome to error (and feed the held alert).
    model_task_failures = models.JSONField(default=dict, blank=True)
    # The last pass of each kind and how many passes of it ended how, for /metrics:
    # {"full" | "fast": {"status", "ms", "at", "outcomes": {"ok": n, "idle": n, "error": n}}}.
    passes_by_kind = models.JSONField(default=dict, blank=True, editable=False)

    class Meta:
        verbose_name = "provisioner status"
        verbose_name_plural = "provisioner status"

    def __str__(self) -> str:
        return "provisioner status"

    @classmethod
    def load(cls) -> ProvisionerStatus:
        obj, _ = cls.objects.get_or_create(pk=1)
        return obj


class Alert(models.Model):
    """Alert log: every alert fired (deduplicated by key within a cooldown)."""

    key = models.CharField(max_length=200, db_index=True)
    title = models.CharField(max_length=300)
    detail = models.TextField(blank=True)
    severity = models.CharField(max_length=16, default="warning")
    channels = models.CharField(max_length=200, blank=True, help_text="Where it was delivered.")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering: ClassVar[list[str]] = ["-created_at"]

    def __str__(self) -> str:
        return self.title


class Lease(models.Model):
    """A lock that expires if its holder dies: one pass acts on a model at a time."""

    name = models.CharField(max_length=200, primary_key=True)
    owner = models.CharField(max_length=200)
    expires_at = models.DateTimeField()

    def __str__(self) -> str:
        return self.name
