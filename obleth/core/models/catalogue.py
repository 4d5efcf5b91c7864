"""The model catalogue clients call: a model route (Model) and its upstream servers (Endpoint)."""

from __future__ import annotations

import uuid
from typing import Any, ClassVar

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django_cryptography.fields import encrypt

from obleth.core import validators as v
from obleth.core.choices import HealthStatus, HostingMode, ModelType
from obleth.core.models.base import TimestampedModel


class Model(TimestampedModel):
    """A model route clients call by name. Static models have endpoints added by hand; Slurm
    models get theirs from the provisioner."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(
        max_length=200,
        unique=True,
        validators=[v.validate_name_text],
        help_text="The name clients send in the 'model' field.",
    )
    hosting_mode = models.CharField(
        max_length=16,
        choices=HostingMode.choices,
        default=HostingMode.STATIC,
        help_text="Chosen at creation; it cannot change later.",
    )
    upstream_model = models.CharField(
        max_length=200,
        blank=True,
        validators=[v.validate_upstream_model],
        help_text="Model name forwarded upstream (blank: the same name).",
    )
    model_type = models.CharField(max_length=16, choices=ModelType.choices, default=ModelType.CHAT)
    enabled = models.BooleanField(default=True)
    health_status = models.CharField(
        max_length=16, choices=HealthStatus.choices, default=HealthStatus.UNKNOWN, editable=False
    )
    health_message = models.CharField(max_length=500, blank=True, editable=False)
    health_consecutive_failures = models.PositiveIntegerField(default=0, editable=False)
    health_checked_at = models.DateTimeField(null=True, blank=True, editable=False)
    health_next_check_at = models.DateTimeField(null=True, blank=True, editable=False)
    # Down/recovery alerts: since when a model that served has had no serving endpoint, and
    # whether the down alert went out (so its recovery is announced once).
    health_down_since = models.DateTimeField(null=True, blank=True, editable=False)
    health_down_alerted = models.BooleanField(default=False, editable=False)

    class Meta:
        ordering: ClassVar[list[str]] = ["name"]

    def __str__(self) -> str:
        return self.name

    def save(self, *args: Any, **kwargs: Any) -> None:
        self.check_hosting_mode_unchanged()
        super().save(*args, **kwargs)

    @property
    def forwarded_name(self) -> str:
        return self.upstream_model or self.name

    def clean(self) -> None:
        super().clean()
        self.check_hosting_mode_unchanged()

    def check_hosting_mode_unchanged(self) -> None:
        """The one place the rule lives: forms, the API and plain saves all end up here."""
        if self._state.adding:
            return
        stored = Model.objects.filter(pk=self.pk).values_list("hosting_mode", flat=True).first()
        if stored is not None and stored != self.hosting_mode:
            raise ValidationError(
                {
                    "hosting_mode": (
                        f"The hosting mode is fixed at creation (this model is {stored!r}). "
                        "Create a new model to host it another way."
                    )
                }
            )


class Endpoint(TimestampedModel):
    """One upstream server of a model (OpenAI-compatible, api_base ends in /v1)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    model = models.ForeignKey(Model, on_delete=models.CASCADE, related_name="endpoints")
    name = models.CharField(max_length=300, validators=[v.validate_name_text])
    api_base = models.CharField(
        max_length=500,
        validators=[v.validate_api_base],
        help_text="The server's OpenAI root, e.g. http://gpu-node-01:8000/v1. Changing it clears "
        "the stored API key unless the key is given again.",
    )
    api_key = encrypt(models.TextField(blank=True, default="", validators=[v.validate_api_key]))
    priority = models.PositiveIntegerField(
        default=100, validators=[MaxValueValidator(1_000_000)], help_text="Lower wins in failover."
    )
    weight = models.PositiveIntegerField(
        default=100,
        validators=[MinValueValidator(1), MaxValueValidator(1_000_000)],
        help_text="Share of traffic in load balance.",
    )
    enabled = models.BooleanField(default=True)
    replica_id = models.UUIDField(
        null=True, blank=True, editable=False, help_text="Set when the provisioner registered it."
    )
    health_status = models.CharField(
        max_length=16, choices=HealthStatus.choices, default=HealthStatus.UNKNOWN, editable=False
    )
    consecutive_failures = models.PositiveIntegerField(default=0, editable=False)
    last_checked_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_latency_ms = models.PositiveIntegerField(null=True, blank=True, editable=False)
    last_http_status = models.PositiveIntegerField(null=True, blank=True, editable=False)
    last_message = models.CharField(max_length=500, blank=True, editable=False)
    next_check_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering: ClassVar[list[str]] = ["model__name", "priority", "name"]
        constraints: ClassVar[list[Any]] = [
            models.UniqueConstraint(fields=["model", "name"], name="endpoint_name_unique_per_model")
        ]

    def __str__(self) -> str:
        return f"{self.model.name} / {self.name}"
