"""What runs on Slurm: the replicas the provisioner owns (Replica) and the never-deleted history
of every submitted job (Launch)."""

from __future__ import annotations

import uuid
from typing import Any, ClassVar

from django.db import models
from django_cryptography.fields import encrypt

from obleth.core.choices import IdentityCheck, ReplicaState


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
