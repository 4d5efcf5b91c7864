"""Counted and logged events: failed authentications per scope and key (AuthFailureWindow) and
the health history of models, endpoints and replicas (HealthEvent)."""

from __future__ import annotations

from typing import ClassVar

from django.db import models


class AuthFailureWindow(models.Model):
    """Failed authentications counted per scope and key (a client address or an account).

    Shared by every process through the database, so gunicorn workers, the gateway and the admin
    see the same counts. Rows are small and few: one per address or account that failed lately.
    """

    scope = models.CharField(max_length=32)
    key = models.CharField(max_length=300)
    failures = models.PositiveIntegerField(default=0)
    window_started_at = models.DateTimeField()
    blocked_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["scope", "key"], name="auth_failure_scope_key"),
        ]
        verbose_name = "authentication failure window"

    def __str__(self) -> str:
        return f"{self.scope} {self.key}: {self.failures}"


class HealthEvent(models.Model):
    """Health history: one endpoint check, or one promotion/loss/restart of a replica.

    Kept ``OBLETH_HEALTH_HISTORY_DAYS`` (pruned by the endpoint-check run). ``model_id`` is a
    plain UUID, like the replica's, so the history of a model outlives its endpoints and rows.
    """

    class Kind(models.TextChoices):
        CHECK = "check", "Endpoint check"
        PROMOTED = "promoted", "Replica promoted"
        LOST = "lost", "Replica lost"
        RESTARTED = "restarted", "Replica cancelled"
        DOWN = "down", "Model down"
        RECOVERED = "recovered", "Model recovered"

    id = models.BigAutoField(primary_key=True)
    model_id = models.UUIDField()
    kind = models.CharField(max_length=16, choices=Kind.choices)
    at = models.DateTimeField()
    endpoint_id = models.UUIDField(null=True, blank=True)
    endpoint_name = models.CharField(max_length=200, blank=True)
    replica_id = models.UUIDField(null=True, blank=True)
    job_id = models.CharField(max_length=40, blank=True)
    outcome = models.CharField(max_length=32, blank=True)  # verdict, or what happened
    http_status = models.PositiveIntegerField(null=True, blank=True)
    latency_ms = models.PositiveIntegerField(null=True, blank=True)
    message = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering: ClassVar[list[str]] = ["-at", "-id"]
        indexes: ClassVar[list[models.Index]] = [
            models.Index(fields=["model_id", "-at"], name="healthevent_model_at"),
            models.Index(fields=["at"], name="healthevent_at"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.outcome} at {self.at:%Y-%m-%d %H:%M:%S}"
