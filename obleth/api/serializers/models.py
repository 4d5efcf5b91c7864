"""Serializers of models, their endpoints and their managed (Slurm-provisioned) specs.

Secrets are write-only: an endpoint's answer says ``api_key_set`` and ``api_key_last4``,
never the key.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from obleth.api.serializers.fields import (
    KEEP_SECRET_HELP,
    StrictFieldsMixin,
    may_keep_secret,
    unique_name,
)
from obleth.core import services
from obleth.core import validators as v
from obleth.core.models import Endpoint, ManagedSpec, Model, Recipe, mask_secret

# ------------------------------------------------------------------------------------------ models


class ModelSerializer(StrictFieldsMixin, serializers.ModelSerializer[Model]):
    name = serializers.CharField(
        max_length=200,
        validators=[v.validate_name_text],
        help_text="The name clients send in the 'model' field.",
    )
    managed = serializers.SerializerMethodField(
        help_text="Whether a managed spec exists (Slurm-provisioned models)."
    )

    class Meta:
        model = Model
        fields = [
            "id",
            "name",
            "hosting_mode",
            "upstream_model",
            "model_type",
            "enabled",
            "managed",
            "health_status",
            "health_message",
            "health_consecutive_failures",
            "health_checked_at",
            "health_next_check_at",
            "created_at",
            "updated_at",
        ]
        read_only_fields = [
            "health_status",
            "health_message",
            "health_consecutive_failures",
            "health_checked_at",
            "health_next_check_at",
            "created_at",
            "updated_at",
        ]
        extra_kwargs = {"hosting_mode": {"required": False}}

    def get_managed(self, obj: Model) -> bool:
        return hasattr(obj, "managed_spec")

    def validate_name(self, value: str) -> str:
        return unique_name(
            Model,
            value,
            self.instance,
            empty="Give the name clients send in the 'model' field.",
            taken="A model named {name!r} already exists: pick another name.",
        )

    def validate_hosting_mode(self, value: str) -> str:
        if self.instance is not None and value != self.instance.hosting_mode:
            raise serializers.ValidationError(
                f"The hosting mode is fixed at creation (this model is "
                f"{self.instance.hosting_mode!r}). Create a new model to host it another way."
            )
        return value


# --------------------------------------------------------------------------------------- endpoints


class EndpointSerializer(StrictFieldsMixin, serializers.ModelSerializer[Endpoint]):
    model_id = serializers.UUIDField(read_only=True)
    model_name = serializers.CharField(source="model.name", read_only=True)
    api_key = serializers.CharField(
        write_only=True,
        required=False,
        allow_blank=True,
        trim_whitespace=True,
        validators=[v.validate_api_key],
        style={"input_type": "password"},
        help_text="Write-only. Omitted or empty keeps the stored key; api_key_clear removes it. "
        "A changed api_base removes the stored key unless the key is sent again (or an admin "
        "sends keep_secret).",
    )
    api_key_clear = serializers.BooleanField(
        write_only=True, required=False, default=False, help_text="Remove the stored API key."
    )
    keep_secret = serializers.BooleanField(
        write_only=True, required=False, default=False, help_text=KEEP_SECRET_HELP
    )
    api_key_set = serializers.SerializerMethodField()
    api_key_last4 = serializers.SerializerMethodField()
    priority = serializers.IntegerField(
        required=False,
        min_value=0,
        max_value=1_000_000,
        error_messages={
            "min_value": "Use 0 or more: a lower priority wins in failover.",
            "max_value": "Use at most 1000000.",
        },
    )
    weight = serializers.IntegerField(
        required=False,
        min_value=1,
        max_value=1_000_000,
        error_messages={
            "min_value": "Use 1 or more: the weight is a share of traffic.",
            "max_value": "Use at most 1000000.",
        },
    )

    class Meta:
        model = Endpoint
        fields = [
            "id",
            "model_id",
            "model_name",
            "name",
            "api_base",
            "api_key",
            "api_key_clear",
            "keep_secret",
            "api_key_set",
            "api_key_last4",
            "priority",
            "weight",
            "enabled",
            "replica_id",
            "health_status",
            "consecutive_failures",
            "last_checked_at",
            "last_latency_ms",
            "last_http_status",
            "last_message",
            "next_check_at",
            "created_at",
            "updated_at",
        ]
        read_only_fields = [
            "replica_id",
            "health_status",
            "consecutive_failures",
            "last_checked_at",
            "last_latency_ms",
            "last_http_status",
            "last_message",
            "next_check_at",
            "created_at",
            "updated_at",
        ]

    def get_api_key_set(self, obj: Endpoint) -> bool:
        return bool(mask_secret(obj.api_key)["set"])

    def get_api_key_last4(self, obj: Endpoint) -> str:
        return str(mask_secret(obj.api_key)["last4"])

    def validate_api_base(self, value: str) -> str:
        value = value.strip()
        if not value:
            raise serializers.ValidationError(
                "Give the server's OpenAI root, e.g. http://gpu-node-01:8000/v1."
            )
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        # Secrets are write-only: omitted or empty keeps the stored key; clearing is explicit;
        # a changed api_base drops the stored key (services.secret_for_destination).
        clear = bool(attrs.pop("api_key_clear", False))
        keep = bool(attrs.pop("keep_secret", False))
        if keep and not may_keep_secret(self):
            raise services.refuse_keep_secret("keep_secret")
        supplied = attrs.pop("api_key", None)
        if self.instance is None:
            if supplied and not clear:
                attrs["api_key"] = supplied
            return super().validate(attrs)
        bound = services.endpoint_api_key(
            self.instance,
            supplied,
            new_api_base=attrs.get("api_base", self.instance.api_base),
            clear=clear,
            keep_secret=keep,
        )
        if bound.value != (self.instance.api_key or ""):
            attrs["api_key"] = bound.value
        return super().validate(attrs)

    def validate_name(self, value: str) -> str:
        value = value.strip()
        model = self.context.get("model") or (self.instance.model if self.instance else None)
        if model is not None:
            clash = Endpoint.objects.filter(model=model, name=value)
            if self.instance is not None:
                clash = clash.exclude(pk=self.instance.pk)
            if clash.exists():
                raise serializers.ValidationError(
                    f"Model {model.name!r} already has an endpoint named {value!r}: pick another "
                    "name."
                )
        return value


# ---------------------------------------------------------------------------------- managed specs


class ManagedSpecSerializer(StrictFieldsMixin, serializers.ModelSerializer[ManagedSpec]):
    model_id = serializers.UUIDField(read_only=True)
    model_name = serializers.CharField(source="model.name", read_only=True)
    partition = serializers.CharField(
        max_length=200,
        allow_blank=True,
        validators=[v.validate_partition],
        help_text="Slurm partition to submit to (sinfo lists them).",
    )
    serving_port = serializers.IntegerField(
        min_value=1,
        max_value=65535,
        error_messages={
            "min_value": "serving_port is a TCP port: use a number from 1 to 65535.",
            "max_value": "serving_port is a TCP port: use a number from 1 to 65535.",
        },
        help_text="Base of the port windows (serving_port + i × OBLETH_PORT_SPAN).",
    )
    nodes = serializers.IntegerField(
        required=False,
        min_value=1,
        max_value=v.MAX_NODES,
        error_messages={
            "min_value": "A replica needs at least 1 node.",
            "max_value": f"nodes: a replica uses at most {v.MAX_NODES} nodes.",
        },
    )
    cpus_per_task = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=0,
        max_value=v.MAX_CPUS_PER_TASK,
        error_messages={
            "min_value": "Use 0 or more CPUs per task (0 or empty: Slurm's default).",
            "max_value": f"cpus_per_task: use at most {v.MAX_CPUS_PER_TASK}.",
        },
    )
    target_replicas = serializers.IntegerField(
        required=False,
        min_value=0,
        max_value=v.MAX_REPLICAS,
        error_messages={
            "min_value": "Use 0 or more replicas (0 stops every replica).",
            "max_value": f"Use at most {v.MAX_REPLICAS} replicas.",
        },
    )
    min_replicas = serializers.IntegerField(
        required=False,
        min_value=0,
        max_value=v.MAX_REPLICAS,
        error_messages={
            "min_value": "Use 0 or more (the health floor of the model).",
            "max_value": f"Use at most {v.MAX_REPLICAS}.",
        },
    )
    max_job_failures = serializers.IntegerField(
        required=False,
        min_value=0,
        max_value=v.MAX_JOB_FAILURES,
        error_messages={
            "min_value": "Use 0 (never stop) or more failed launches.",
            "max_value": f"Use at most {v.MAX_JOB_FAILURES}.",
        },
    )
    recipe = serializers.PrimaryKeyRelatedField(
        queryset=Recipe.objects.all(), required=False, allow_null=True
    )
    handover_secs = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=0,
        max_value=v.MAX_HANDOVER_SECS,
        error_messages={
            "min_value": "handover_secs: use 0 (no walltime handover) or more seconds.",
            "max_value": f"handover_secs: use at most {v.MAX_HANDOVER_SECS} seconds.",
        },
        help_text="Seconds before a job's time limit its successor starts; empty: measured.",
    )
    max_replicas = serializers.IntegerField(
        required=False,
        allow_null=True,
        validators=[v.validate_max_replicas],
        help_text="Autoscale between min_replicas and this many replicas; null: no autoscaling.",
    )
    target_in_flight = serializers.IntegerField(
        required=False,
        validators=[v.validate_target_in_flight],
        help_text="Autoscaling aims at this many requests in flight per replica.",
    )
    scale_up_delay_secs = serializers.IntegerField(
        required=False,
        validators=[v.validate_scale_up_delay_secs],
        help_text="Seconds the load must stay above the target before a replica is added.",
    )
    scale_down_delay_secs = serializers.IntegerField(
        required=False,
        validators=[v.validate_scale_down_delay_secs],
        help_text="Seconds the load must stay below before a replica is drained and removed.",
    )
    scale_to_zero_after_secs = serializers.IntegerField(
        required=False,
        validators=[v.validate_scale_to_zero_after_secs],
        help_text="With min_replicas 0: seconds without a request before going to zero.",
    )

    class Meta:
        model = ManagedSpec
        fields = [
            "model_id",
            "model_name",
            "enabled",
            "partition",
            "gres",
            "nodes",
            "constraints",
            "exclude",
            "account",
            "qos",
            "time_limit",
            "cpus_per_task",
            "mem",
            "image",
            "preamble",
            "launch_command",
            "script_body",
            "log_output_dir",
            "serving_port",
            "health_path",
            "target_replicas",
            "min_replicas",
            "max_job_failures",
            "launcher_spec",
            "recipe",
            "last_provision_error",
            "last_provision_error_at",
            "breaker_message",
            "breaker_tripped_at",
            "storm_message",
            "storm_since",
            "handover_secs",
            "handover_message",
            "rollout_message",
            "max_replicas",
            "target_in_flight",
            "scale_up_delay_secs",
            "scale_down_delay_secs",
            "scale_to_zero_after_secs",
            "autoscale_replicas",
            "autoscale_message",
            "created_at",
            "updated_at",
        ]
        # autoscale_replicas: the count autoscaling decided (null: off or not decided yet);
        # autoscale_message: its reason ("3 replicas: 41 requests in flight for 2 min, ...").
        # handover_message: a walltime handover that needs attention (successor still pending);
        # rollout_message: a make-before-break rollout in progress or stopped ("" = none).
        # breaker_message: why the provisioner stopped launching ("" = it did not), with how to
        # resume; storm_message: replacements slowed by the storm guard ("" = no storm).
        read_only_fields = [
            "last_provision_error",
            "last_provision_error_at",
            "breaker_message",
            "breaker_tripped_at",
            "storm_message",
            "storm_since",
            "handover_message",
            "rollout_message",
            "autoscale_replicas",
            "autoscale_message",
            "created_at",
            "updated_at",
        ]

    def save(self, **kwargs: Any) -> ManagedSpec:
        model: Model = self.context["model"]
        actor: str = self.context.get("actor", "admin")
        spec, _ = services.upsert_managed_spec(
            model, dict(self.validated_data), partial=self.partial, actor=actor
        )
        self.instance = spec
        return spec


class ProvisionErrorSerializer(StrictFieldsMixin, serializers.Serializer[ManagedSpec]):
    error = serializers.CharField(
        allow_null=True,
        allow_blank=True,
        max_length=10_000,
        help_text="null (or empty) dismisses the banner; a string records a refused-job message.",
    )
