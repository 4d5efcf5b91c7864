"""Serializers of replicas (the live Slurm jobs of a managed model) and of their launches,
read-only."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from obleth.core.models import Launch, Replica

# --------------------------------------------------------------------------------------- replicas


class ReplicaSerializer(serializers.ModelSerializer[Replica]):
    identity_proven = serializers.BooleanField(
        read_only=True,
        help_text="False: the probe could not prove the server is this replica's (e.g. Ollama).",
    )

    class Meta:
        model = Replica
        fields = [
            "id",
            "model_id",
            "model_name",
            "state",
            "job_id",
            "job_name",
            "nodes",
            "port_base",
            "port",
            "endpoint_id",
            "cancel_requested",
            "last_message",
            "probe_failures",
            "excluded_nodes",
            "identity_check",
            "identity_proven",
            "submitted_at",
            "started_at",
            "healthy_at",
            "created_at",
            "updated_at",
            "last_probe",
            "last_probe_at",
            "slurm_state",
            "slurm_reason",
            "expected_start_at",
        ]
        read_only_fields = fields


class ClearLostSerializer(serializers.Serializer[Any]):
    cleared = serializers.IntegerField(help_text="How many lost replicas were deleted.")


# --------------------------------------------------------------------------------------- launches


class LaunchSerializer(serializers.ModelSerializer[Launch]):
    class Meta:
        model = Launch
        fields = [
            "id",
            "model_id",
            "model_name",
            "recipe_id",
            "job_id",
            "job_name",
            "partition",
            "account",
            "qos",
            "time_limit",
            "gres",
            "nodes_requested",
            "cpus_per_task",
            "mem",
            "exclude",
            "constraints",
            "submission",
            "stdout_path",
            "stderr_path",
            "nodes",
            "submitted_at",
            "started_at",
            "healthy_at",
            "ended_at",
            "end_state",
            "end_reason",
            # false: churn (it served, then was preempted, cancelled by others or timed out),
            # not counted toward "Stop after failed launches"; null: not ended or ended by us
            "exit_code",
            "failed_launch",
            "slurm_answer",
            "refusal_hint",
            "updated_at",
        ]
        read_only_fields = fields
