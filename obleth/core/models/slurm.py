"""How Slurm-hosted models are launched: the one Slurm connection (SlurmSettings), the recipes
saved in the database (Recipe), and each model's launch spec and replica count (ManagedSpec)."""

from __future__ import annotations

import uuid
from typing import ClassVar

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator
from django.db import models
from django_cryptography.fields import encrypt

from obleth.core import validators as v
from obleth.core.models.base import TimestampedModel
from obleth.core.models.catalogue import Model


class SlurmSettings(models.Model):
    """The one Slurm connection and its cluster defaults (a single row, id 1)."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1, editable=False)
    enabled = models.BooleanField(
        default=False, help_text="Master switch. Off: the provisioner idles and cancels nothing."
    )
    slurmrestd_url = models.CharField(
        max_length=500,
        blank=True,
        validators=[v.validate_slurmrestd_url],
        verbose_name="slurmrestd URL",
        help_text="e.g. http://slurm-head:6820. Changing it clears the stored JWT and Hugging Face "
        "token (both are sent to this host) unless they are given again.",
    )
    api_version = models.CharField(
        max_length=20,
        blank=True,
        verbose_name="API version",
        validators=[v.validate_api_version],
        help_text="Blank: detect from what slurmrestd serves (newest supported wins).",
    )
    user = models.CharField(
        max_length=100,
        blank=True,
        validators=[v.validate_slurm_user],
        help_text="Sent as X-SLURM-USER-NAME.",
    )
    jwt = encrypt(models.TextField(blank=True, default="", validators=[v.validate_jwt]))
    hf_token = encrypt(models.TextField(blank=True, default="", validators=[v.validate_hf_token]))
    cache_dir = models.CharField(max_length=500, blank=True, validators=[v.validate_cache_dir])
    images_dir = models.CharField(max_length=500, blank=True, validators=[v.validate_images_dir])
    log_dir = models.CharField(max_length=500, blank=True, validators=[v.validate_log_dir])
    setup = models.TextField(
        blank=True,
        validators=[v.validate_cluster_setup],
        help_text="Shell lines recipes insert at {{cluster.setup}}; they run as shell in every "
        "job (admin-only).",
    )
    images = models.JSONField(
        default=dict,
        blank=True,
        validators=[v.validate_images],
        help_text="Engine name -> image path.",
    )
    node_addresses = models.JSONField(
        default=dict,
        blank=True,
        validators=[v.validate_node_addresses],
        help_text="Hostname -> IP literal. Endpoints and probes use these instead of DNS.",
    )
    detected_api_version = models.CharField(max_length=20, blank=True, editable=False)
    detected_release = models.CharField(max_length=40, blank=True, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "Slurm settings"
        verbose_name_plural = "Slurm settings"

    def __str__(self) -> str:
        return "Slurm settings"

    def clean(self) -> None:
        super().clean()
        self.slurmrestd_url = self.slurmrestd_url.strip().rstrip("/")
        self.user = self.user.strip()
        errors: dict[str, str] = {}
        if self.enabled and not self.slurmrestd_url:
            errors["slurmrestd_url"] = (
                "Set the slurmrestd URL (e.g. http://slurm-head:6820) to enable Slurm."
            )
        if self.enabled and not self.user:
            errors["user"] = (
                "Set the Slurm user the JWT belongs to (X-SLURM-USER-NAME) to enable Slurm."
            )
        if errors:
            raise ValidationError(errors)

    @classmethod
    def load(cls) -> SlurmSettings:
        obj, _ = cls.objects.get_or_create(pk=1)
        return obj

    @property
    def effective_api_version(self) -> str:
        return self.api_version or self.detected_api_version


class Recipe(TimestampedModel):
    """A recipe saved in the database. Library recipes are files in OBLETH_RECIPES_DIR."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=200, unique=True, validators=[v.validate_name_text])
    body = models.TextField(
        help_text="---\\n<YAML header>\\n---\\n<batch script>",
        validators=[v.validate_recipe_body],
    )
    author = models.CharField(max_length=200, blank=True, validators=[v.validate_author])

    class Meta:
        ordering: ClassVar[list[str]] = ["name"]

    def __str__(self) -> str:
        return self.name


class ManagedSpec(TimestampedModel):
    """How a Slurm-hosted model is launched and how many replicas it keeps."""

    model = models.OneToOneField(
        Model, on_delete=models.CASCADE, primary_key=True, related_name="managed_spec"
    )
    enabled = models.BooleanField(default=True, help_text="Off: its replicas are drained.")
    partition = models.CharField(max_length=200, validators=[v.validate_partition])
    gres = models.CharField(
        max_length=200,
        blank=True,
        validators=[v.validate_gres],
        help_text="e.g. gpu:1 (sent as gres/gpu:1)",
    )
    nodes = models.PositiveIntegerField(default=1, validators=[v.validate_nodes])
    constraints = models.CharField(
        max_length=500,
        blank=True,
        validators=[v.validate_constraints],
        help_text="Slurm node features, e.g. a100&ib or [rack1|rack2].",
    )
    exclude = models.CharField(
        max_length=500,
        blank=True,
        validators=[v.validate_exclude],
        help_text="Nodes never to use, e.g. gpu01,gpu[03-05].",
    )
    account = models.CharField(max_length=200, blank=True, validators=[v.validate_account])
    qos = models.CharField(max_length=200, blank=True, validators=[v.validate_qos])
    time_limit = models.CharField(
        max_length=40,
        blank=True,
        validators=[v.validate_time_limit],
        help_text="e.g. 4:00:00 or 1-00:00 (at most 365 days, or UNLIMITED)",
    )
    cpus_per_task = models.PositiveIntegerField(
        null=True, blank=True, validators=[MaxValueValidator(v.MAX_CPUS_PER_TASK)]
    )
    mem = models.CharField(
        max_length=40,
        blank=True,
        validators=[v.validate_memory],
        help_text="e.g. 64G; 0 = whole node",
    )
    image = models.CharField(
        max_length=500,
        blank=True,
        validators=[v.validate_image],
        help_text="Apptainer image; blank = bare metal",
    )
    preamble = models.TextField(blank=True)
    launch_command = models.TextField(blank=True)
    script_body = models.TextField(
        blank=True, help_text="A full batch script; wins over the above."
    )
    log_output_dir = models.CharField(
        max_length=500, blank=True, validators=[v.validate_log_output_dir]
    )
    serving_port = models.PositiveIntegerField(validators=[v.validate_port])
    health_path = models.CharField(
        max_length=200, default="/health", validators=[v.validate_health_path]
    )
    target_replicas = models.PositiveIntegerField(
        default=2, validators=[MaxValueValidator(v.MAX_REPLICAS)]
    )
    min_replicas = models.PositiveIntegerField(
        default=1, validators=[MaxValueValidator(v.MAX_REPLICAS)]
    )
    max_job_failures = models.PositiveIntegerField(
        default=0,
        validators=[MaxValueValidator(v.MAX_JOB_FAILURES)],
        help_text="Stop after N failed launches; 0 never stops.",
    )
    launcher_spec = models.JSONField(null=True, blank=True, validators=[v.validate_launcher_spec])
    recipe = models.ForeignKey(Recipe, null=True, blank=True, on_delete=models.SET_NULL)
    last_provision_error = models.TextField(blank=True, editable=False)
    last_provision_error_at = models.DateTimeField(null=True, blank=True, editable=False)
    # Written by the provisioner (provisioner/plan/guard.py decides): why it stopped launching, and
    # whether replacements are slowed by the storm guard. "" = not tripped / no storm.
    breaker_message = models.TextField(blank=True, editable=False)
    breaker_tripped_at = models.DateTimeField(null=True, blank=True, editable=False)
    storm_message = models.TextField(blank=True, editable=False)
    storm_since = models.DateTimeField(null=True, blank=True, editable=False)
    # Walltime handover: a serving replica whose job ends within this many seconds gets a
    # successor. Empty: twice the model's measured job-start-to-serving time, at least 5 minutes
    # (provisioner/handover_window.py). 0 turns handover off.
    handover_secs = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MaxValueValidator(v.MAX_HANDOVER_SECS)],
        help_text="Seconds before a job's time limit to start its successor (empty: measured).",
    )
    # Written by the provisioner (provisioner/transitions.py decides): a handover that needs
    # attention (successor still pending...) and the make-before-break rollout. "" = none.
    handover_message = models.TextField(blank=True, editable=False)
    rollout_message = models.TextField(blank=True, editable=False)
    # Autoscaling (provisioner/autoscale.py decides in the pass): empty max_replicas keeps
    # target_replicas fixed; set, the count follows the gateway's in-flight requests between
    # min_replicas and max_replicas. min_replicas 0 lets an idle model go to zero replicas; the
    # next request wakes it (the gateway holds it meanwhile).
    max_replicas = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[v.validate_max_replicas],
        help_text="Autoscale up to this many replicas (empty: no autoscaling, target fixed).",
    )
    target_in_flight = models.PositiveIntegerField(
        default=16,
        validators=[v.validate_target_in_flight],
        help_text="Autoscaling aims at this many requests in flight per replica.",
    )
    scale_up_delay_secs = models.PositiveIntegerField(
        default=60,
        validators=[v.validate_scale_up_delay_secs],
        help_text="The load must stay above the target this long before a replica is added.",
    )
    scale_down_delay_secs = models.PositiveIntegerField(
        default=300,
        validators=[v.validate_scale_down_delay_secs],
        help_text="The load must stay below this long before a replica is removed (drained).",
    )
    scale_to_zero_after_secs = models.PositiveIntegerField(
        default=900,
        validators=[v.validate_scale_to_zero_after_secs],
        help_text="With min_replicas 0: no request for this long takes the model to zero.",
    )
    # Written by the provisioner: the count autoscaling decided (null: not decided yet), the
    # timing it decides from, and its reason in words ("3 replicas: 41 requests in flight...").
    autoscale_replicas = models.PositiveIntegerField(null=True, blank=True, editable=False)
    autoscale_since = models.DateTimeField(null=True, blank=True, editable=False)
    autoscale_changed_at = models.DateTimeField(null=True, blank=True, editable=False)
    autoscale_pending_since = models.DateTimeField(null=True, blank=True, editable=False)
    autoscale_pending_replicas = models.PositiveIntegerField(null=True, blank=True, editable=False)
    autoscale_idle_since = models.DateTimeField(null=True, blank=True, editable=False)
    autoscale_message = models.TextField(blank=True, editable=False)
    autoscale_message_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        verbose_name = "managed spec"
        # Action permissions (roles: obleth.accounts.roles). Shell = the lines a job runs.
        permissions = (
            ("deploy", "Can deploy a model (create its managed spec)"),
            ("dismiss_error", "Can dismiss a provision error"),
            ("change_launch_script", "Can change a spec's shell: script, preamble, command, image"),
        )

    def __str__(self) -> str:
        return f"spec of {self.model_id}"

    @property
    def autoscaled(self) -> bool:
        """Autoscaling is on (max_replicas set): the count follows the load."""
        return self.max_replicas is not None

    @property
    def most_replicas(self) -> int:
        """The most replicas the model may run (its port range is sized for them)."""
        top = self.max_replicas if isinstance(self.max_replicas, int) else 0
        return max(int(self.target_replicas or 0), top)

    def clean(self) -> None:
        super().clean()
        errors: dict[str, str] = {}
        if not self.partition.strip():
            errors["partition"] = "Name the Slurm partition to submit to (sinfo lists them)."
        if not self.script_body.strip() and not self.launch_command.strip():
            errors["script_body"] = (
                "Give a script_body (a recipe's batch script) or a launch_command."
            )
        if isinstance(self.serving_port, int) and isinstance(self.target_replicas, int):
            from django.conf import settings

            from obleth.core.ports import window_range_error

            window = window_range_error(
                self.serving_port, self.most_replicas, settings.OBLETH_PORT_SPAN
            )
            if window and 1 <= self.serving_port <= 65535:
                errors["serving_port"] = window
        autoscaled = isinstance(self.max_replicas, int)
        if (
            autoscaled
            and isinstance(self.min_replicas, int)
            and self.min_replicas > int(self.max_replicas or 0)
        ):
            errors["max_replicas"] = (
                f"max_replicas ({self.max_replicas}) is below min_replicas ({self.min_replicas}): "
                "raise max_replicas or lower min_replicas."
            )
        if not autoscaled and self.min_replicas > self.target_replicas and self.target_replicas > 0:
            errors["min_replicas"] = (
                f"min_replicas ({self.min_replicas}) cannot exceed target_replicas "
                f"({self.target_replicas})."
            )
        if errors:
            raise ValidationError(errors)
