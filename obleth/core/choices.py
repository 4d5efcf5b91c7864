"""Choices shared by models, API and admin, with the colours the admin uses for badges."""

from __future__ import annotations

from django.db import models


class HostingMode(models.TextChoices):
    STATIC = "static", "Static endpoints"
    SLURM = "slurm", "Slurm provisioned"


class ModelType(models.TextChoices):
    CHAT = "chat", "Chat"
    COMPLETION = "completion", "Completion"
    EMBEDDING = "embedding", "Embedding"


class HealthStatus(models.TextChoices):
    UNKNOWN = "unknown", "Unknown"
    HEALTHY = "healthy", "Healthy"
    DEGRADED = "degraded", "Degraded"
    UNHEALTHY = "unhealthy", "Unhealthy"
    DISABLED = "disabled", "Disabled"


class ReplicaState(models.TextChoices):
    PENDING = "pending", "Pending"
    STARTING = "starting", "Starting"
    HEALTHY = "healthy", "Healthy"
    DRAINING = "draining", "Draining"
    LOST = "lost", "Lost"


class IdentityCheck(models.TextChoices):
    """How the provisioner tells its own replica's server from any other one on the node."""

    KEY = "key", "Replica key (proven)"
    MODEL_NAME = "model-name", "Model name only (identity not proven)"
    NONE = "", "None (made before identity checks; identity not proven)"


class PassStatus(models.TextChoices):
    OK = "ok", "OK"
    IDLE = "idle", "Idle"
    ERROR = "error", "Error"


STATE_COLOURS: dict[str, str] = {
    "pending": "#8a6d00",
    "starting": "#1f6feb",
    "healthy": "#1a7f37",
    "draining": "#6e40c9",
    "lost": "#cf222e",
    "unknown": "#6e7781",
    "degraded": "#bf8700",
    "unhealthy": "#cf222e",
    "disabled": "#6e7781",
    "ok": "#1a7f37",
    "idle": "#6e7781",
    "error": "#cf222e",
}
