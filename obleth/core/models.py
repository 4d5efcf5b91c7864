"""obleth's data model: models and their endpoints, the Slurm connection, managed specs,
replicas, launches, recipes, and the provisioner's status and alerts."""

from __future__ import annotations

import uuid
from typing import Any, ClassVar

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django_cryptography.fields import encrypt

from obleth.core import validators as v
from obleth.core.choices import (
    HealthStatus,
    HostingMode,
    IdentityCheck,
    ModelType,
    PassStatus,
    ReplicaState,
)


class TimestampedModel(models.Model):
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True


def mask_secret(value: str | None) -> dict[str, Any]:
    """The only view of a secret any answer gets: whether it is set and its last four characters."""
    value = value or ""
    return {"set": bool(value), "last4": value[-4:] if len(value) >= 8 else ""}


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


class Replica(models.Model):
    """One Slurm job that serves (or will serve) a model. Owned by the provisioner.

    model_id is a plain UUID, not a foreign key, so the row outlives its model and the drain can
    still cancel the job.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    model_id = models.UUIDField(db_index=True)
    model_name = models.CharField(max_length=200)
    state = models.CharField(
        max_length=16, choices=ReplicaState.choices, default=ReplicaState.PENDING
    )
    job_id = models.CharField(max_length=40, blank=True, db_index=True)
    job_name = models.CharField(max_length=300)
    nodes = models.CharField(max_length=500, blank=True)
    port_base = models.PositiveIntegerField(null=True, blank=True)
    port = models.PositiveIntegerField(null=True, blank=True)
    endpoint_id = models.UUIDField(null=True, blank=True)
    cancel_requested = models.BooleanField(default=False)
    last_message = models.CharField(max_length=500, blank=True)
    probe_failures = models.PositiveIntegerField(default=0)
    excluded_nodes = models.CharField(max_length=500, blank=True)
    submitted_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    healthy_at = models.DateTimeField(null=True, blank=True)
    # When it was marked lost (its job ended or vanished): retention and the failed-launch
    # breaker's window count from here, not from the row's creation.
    lost_at = models.DateTimeField(null=True, blank=True, editable=False)
    # Walltime handover: the serving replica this one was submitted to replace before its end.
    successor_of = models.UUIDField(null=True, blank=True, editable=False)
    # Fingerprint of the spec fields that shaped this replica's job
    # (provisioner/spec_fingerprint.py); a spec edit that changes it rolls the model out
    # make-before-break. "" = from before fingerprints.
    spec_fingerprint = models.CharField(max_length=64, blank=True, editable=False)
    # A handed-over replica out of routing whose job still runs for in-flight requests: its job
    # is cancelled at this time. Null: not draining that way.
    drain_deadline = models.DateTimeField(null=True, blank=True, editable=False)
    # When the replica's job reported Slurm's warning signal (its end or a preemption is near,
    # POST /api/v1/replicas/<id>/drain-signal with the replica's key): the plan starts a successor.
    drain_signal_at = models.DateTimeField(null=True, blank=True, editable=False)
    # The replica's own secret: its job gets it in the environment (OBLETH_REPLICA_API_KEY), its
    # engine demands it, the probe proves the port is ours with it and the endpoint sends it.
    # Generated when the row is written; never shown or logged.
    api_key = encrypt(models.TextField(blank=True, default="", editable=False))
    identity_check = models.CharField(
        max_length=16,
        choices=IdentityCheck.choices,
        blank=True,
        default="",
        editable=False,
        help_text="How the probe proves the server on the port is this replica's.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    # What the last pass saw (provisioner.observed): the probe's outcome in words and Slurm's
    # own view of the job (state, pending reason, expected start).
    last_probe = models.CharField(
        max_length=500, blank=True, help_text="The last health probe's outcome, in words."
    )
    last_probe_at = models.DateTimeField(null=True, blank=True)
    slurm_state = models.CharField(max_length=40, blank=True)
    slurm_reason = models.CharField(max_length=200, blank=True)
    expected_start_at = models.DateTimeField(
        null=True, blank=True, help_text="Slurm's expected start of a pending job, if it gave one."
    )

    class Meta:
        ordering: ClassVar[list[str]] = ["model_name", "created_at"]
        permissions = (
            ("restart_replica", "Can restart a replica"),
            ("clear_lost", "Can clear a model's lost replicas"),
            ("read_job_log", "Can read job logs (they may hold secrets)"),
        )

    def __str__(self) -> str:
        return f"{self.model_name} job {self.job_id or '(not submitted)'}"

    @property
    def identity_proven(self) -> bool:
        """True when the probe checks this replica with its own key (refused without it,
        accepted with it). Model-name checks (Ollama) and rows made before keys are not proof."""
        return self.identity_check == IdentityCheck.KEY and bool(self.api_key)


class Launch(models.Model):
    """History: one row per replica ever submitted, with a snapshot of what was sent.

    Never deleted.
    """

    id = models.UUIDField(primary_key=True, editable=False)  # the replica's id
    model_id = models.UUIDField(db_index=True)
    model_name = models.CharField(max_length=200)
    recipe_id = models.UUIDField(null=True, blank=True, db_index=True)
    job_id = models.CharField(max_length=40, blank=True)
    job_name = models.CharField(max_length=300)
    partition = models.CharField(max_length=200, blank=True)
    account = models.CharField(max_length=200, blank=True)
    qos = models.CharField(max_length=200, blank=True)
    time_limit = models.CharField(max_length=40, blank=True)
    gres = models.CharField(max_length=200, blank=True)
    nodes_requested = models.PositiveIntegerField(default=1)
    cpus_per_task = models.PositiveIntegerField(null=True, blank=True)
    mem = models.CharField(max_length=40, blank=True)
    exclude = models.CharField(max_length=500, blank=True)
    constraints = models.CharField(max_length=500, blank=True)
    submission = models.JSONField(default=dict, help_text="What was sent to Slurm (no secrets).")
    stdout_path = models.CharField(max_length=500, blank=True)
    stderr_path = models.CharField(max_length=500, blank=True)
    nodes = models.CharField(max_length=500, blank=True)
    submitted_at = models.DateTimeField(auto_now_add=True, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    healthy_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    end_state = models.CharField(max_length=60, blank=True)
    end_reason = models.CharField(max_length=500, blank=True)
    exit_code = models.IntegerField(null=True, blank=True, help_text="As Slurm reported it.")
    # False: churn (it served, then was preempted, cancelled by someone else or timed out);
    # None: not ended, or ended by the provisioner itself.
    failed_launch = models.BooleanField(null=True, blank=True)
    slurm_answer = models.TextField(
        blank=True, help_text="The whole answer slurmrestd gave when it refused the submit."
    )
    refusal_hint = models.CharField(max_length=500, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering: ClassVar[list[str]] = ["-submitted_at"]
        indexes: ClassVar[list[Any]] = [
            models.Index(fields=["model_id", "-submitted_at"], name="launch_model_recent"),
            models.Index(fields=["recipe_id", "-submitted_at"], name="launch_recipe_recent"),
        ]

    def __str__(self) -> str:
        return f"{self.model_name} job {self.job_id or '?'}"


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
