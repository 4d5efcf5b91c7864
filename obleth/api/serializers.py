"""Management API serializers: input validation and the shape of answers.

Secrets are write-only everywhere: answers say ``*_set`` and ``*_last4``, never the value.
"""

from __future__ import annotations

import datetime as dt
import difflib
from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from obleth.core import services
from obleth.core import validators as v
from obleth.core.models import (
    Alert,
    Endpoint,
    Launch,
    ManagedSpec,
    Model,
    Recipe,
    Replica,
    SlurmSettings,
    mask_secret,
)
from obleth.core.validators import validate_node_addresses

# ------------------------------------------------------------------------------------ strictness


def unknown_field_errors(data: Any, known: Mapping[str, Any]) -> dict[str, list[str]]:
    """One message per field of ``data`` the serializer does not have, with a close match."""
    if not isinstance(data, Mapping):
        return {}
    errors: dict[str, list[str]] = {}
    for name in data:
        if name in known:
            continue
        text = str(name)
        close = difflib.get_close_matches(text, [str(k) for k in known], n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        errors[text] = [
            f"{text!r} is not a field of this request, so it would be ignored.{hint} "
            f"Known fields: {', '.join(sorted(str(k) for k in known))}."
        ]
    return errors


def refuse_any_body_field(data: Any) -> None:
    """For actions that take no body (restart, clear-lost, the connection test): any field sent
    is unknown, and a 400 says so rather than ignoring it."""
    if isinstance(data, Mapping) and data:
        raise serializers.ValidationError(
            {
                str(name): [f"{name!r}: this action takes no fields; send an empty body."]
                for name in data
            }
        )


class StrictFieldsMixin:
    """Unknown JSON fields are a 400 naming them, not silently dropped (a typo such as
    ``replica`` for ``target_replicas`` would otherwise be lost with a 200)."""

    fields: Any
    initial_data: Any

    def to_internal_value(self, data: Any) -> Any:
        errors = unknown_field_errors(data, self.fields)
        if errors:
            raise serializers.ValidationError(errors)
        return super().to_internal_value(data)  # type: ignore[misc]


def may_keep_secret(serializer: serializers.BaseSerializer[Any]) -> bool:
    request = serializer.context.get("request")
    return services.may_keep_secret(getattr(request, "user", None))


KEEP_SECRET_HELP = (
    "Admins only. With a changed URL, keep the stored secret for the new URL; without it, "
    "changing the URL removes the stored secret unless the same request sends it again."
)

# ------------------------------------------------------------------------------------------ models


def unique_name(
    model: type[Model] | type[Recipe],
    value: str,
    instance: Any,
    *,
    empty: str,
    taken: str,
) -> str:
    """A trimmed, non-empty name no other row of ``model`` uses."""
    value = value.strip()
    if not value:
        raise serializers.ValidationError(empty)
    clash = model.objects.filter(name=value)
    if instance is not None:
        clash = clash.exclude(pk=instance.pk)
    if clash.exists():
        raise serializers.ValidationError(taken.format(name=value))
    return value


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


# ---------------------------------------------------------------------------------------- recipes


class RecipeSerializer(StrictFieldsMixin, serializers.ModelSerializer[Recipe]):
    name = serializers.CharField(max_length=200, validators=[v.validate_name_text])

    class Meta:
        model = Recipe
        fields = ["id", "name", "body", "author", "created_at", "updated_at"]
        read_only_fields = ["created_at", "updated_at"]

    def validate_name(self, value: str) -> str:
        return unique_name(
            Recipe,
            value,
            self.instance,
            empty="Give the recipe a name.",
            taken="A recipe named {name!r} already exists: pick another name or edit that one.",
        )


class LibraryRecipeSerializer(serializers.Serializer[Any]):
    slug = serializers.CharField(help_text="The file name without .recipe.")
    name = serializers.CharField()
    path = serializers.CharField()
    body = serializers.CharField(help_text="The whole recipe document.")
    header = serializers.DictField(allow_empty=True)
    error = serializers.CharField(allow_null=True, allow_blank=True)


# ---------------------------------------------------------------------------------- provisioner


@extend_schema_field({"type": "object", "additionalProperties": {"type": "string"}})
class StringMapField(serializers.JSONField):
    """A JSON object of string -> string (validated by the model/services, which name the
    entry at fault)."""


class ProvisionerStatusSerializer(serializers.Serializer[Any]):
    state = serializers.ChoiceField(choices=["running", "failing", "not_running"])
    label = serializers.CharField(  # type: ignore[assignment]  # a field, not Field.label
        help_text="'running', 'running but failing since <time>' or 'not running'."
    )
    running = serializers.BooleanField(help_text="A heartbeat within the last 60 seconds.")
    failing = serializers.BooleanField(help_text="Running, but its passes fail: states frozen.")
    failing_since = serializers.DateTimeField(allow_null=True)
    held_secs = serializers.IntegerField(allow_null=True)
    last_seen_at = serializers.DateTimeField(allow_null=True)
    last_seen_secs = serializers.IntegerField(allow_null=True)
    version = serializers.CharField()
    host = serializers.CharField()
    last_pass_status = serializers.CharField()
    last_pass_detail = serializers.CharField()
    last_pass_at = serializers.DateTimeField(allow_null=True)
    last_pass_ms = serializers.IntegerField(allow_null=True)
    last_ok_at = serializers.DateTimeField(allow_null=True)
    held_alert_active = serializers.BooleanField()


class AlertSerializer(serializers.ModelSerializer[Alert]):
    class Meta:
        model = Alert
        fields = ["id", "key", "title", "detail", "severity", "channels", "created_at"]
        read_only_fields = fields


# -------------------------------------------------------------------------------- Slurm settings


class SlurmSettingsSerializer(StrictFieldsMixin, serializers.ModelSerializer[SlurmSettings]):
    """The Slurm connection and cluster defaults, secrets write-only."""

    jwt = serializers.CharField(
        write_only=True,
        required=False,
        allow_blank=True,
        trim_whitespace=True,
        validators=[v.validate_jwt],
        style={"input_type": "password"},
        help_text="Write-only. Empty or omitted keeps the stored JWT; send jwt_clear to remove it. "
        "A changed slurmrestd_url removes the stored JWT and Hugging Face token unless they are "
        "sent again (or an admin sends keep_secret).",
    )
    jwt_clear = serializers.BooleanField(write_only=True, required=False, default=False)
    hf_token = serializers.CharField(
        write_only=True,
        required=False,
        allow_blank=True,
        trim_whitespace=True,
        validators=[v.validate_hf_token],
        style={"input_type": "password"},
        help_text="Write-only Hugging Face token. Empty or omitted keeps it; hf_token_clear "
        "removes it.",
    )
    hf_token_clear = serializers.BooleanField(write_only=True, required=False, default=False)
    keep_secret = serializers.BooleanField(
        write_only=True, required=False, default=False, help_text=KEEP_SECRET_HELP
    )
    images = StringMapField(
        required=False, help_text='Engine name -> image path, e.g. {"vllm": "vllm.sif"}.'
    )
    node_addresses = StringMapField(
        required=False,
        validators=[validate_node_addresses],
        help_text='Hostname -> IP literal, e.g. {"gpu-node-01": "10.0.0.24"}. Endpoints and '
        "probes use these instead of DNS; a hostname as the address is refused.",
    )
    jwt_set = serializers.SerializerMethodField()
    jwt_last4 = serializers.SerializerMethodField()
    jwt_expires_at = serializers.SerializerMethodField()
    jwt_expired = serializers.SerializerMethodField()
    hf_token_set = serializers.SerializerMethodField()
    hf_token_last4 = serializers.SerializerMethodField()
    provisioner = serializers.SerializerMethodField()

    class Meta:
        model = SlurmSettings
        fields = [
            "enabled",
            "slurmrestd_url",
            "api_version",
            "user",
            "jwt",
            "jwt_clear",
            "jwt_set",
            "jwt_last4",
            "jwt_expires_at",
            "jwt_expired",
            "hf_token",
            "hf_token_clear",
            "keep_secret",
            "hf_token_set",
            "hf_token_last4",
            "cache_dir",
            "images_dir",
            "log_dir",
            "setup",
            "images",
            "node_addresses",
            "detected_api_version",
            "detected_release",
            "updated_at",
            "provisioner",
        ]
        read_only_fields = ["detected_api_version", "detected_release", "updated_at"]

    def get_jwt_set(self, obj: SlurmSettings) -> bool:
        return bool(obj.jwt)

    def get_jwt_last4(self, obj: SlurmSettings) -> str:
        return str(mask_secret(obj.jwt)["last4"])

    def get_jwt_expires_at(self, obj: SlurmSettings) -> dt.datetime | None:
        return services.jwt_expiry(obj.jwt)

    def get_jwt_expired(self, obj: SlurmSettings) -> bool | None:
        expired: bool | None = services.jwt_view(obj.jwt)["expired"]
        return expired

    def get_hf_token_set(self, obj: SlurmSettings) -> bool:
        return bool(obj.hf_token)

    def get_hf_token_last4(self, obj: SlurmSettings) -> str:
        return str(mask_secret(obj.hf_token)["last4"])

    @extend_schema_field(ProvisionerStatusSerializer)
    def get_provisioner(self, obj: SlurmSettings) -> dict[str, Any]:
        view = services.provisioner_view(slurm_enabled=obj.enabled)
        return dict(ProvisionerStatusSerializer(view.as_dict()).data)

    def validate_slurmrestd_url(self, value: str) -> str:
        return value.strip().rstrip("/")

    def validate_user(self, value: str) -> str:
        return value.strip()

    def validate_api_version(self, value: str) -> str:
        return value.strip()

    def validate_images(self, value: Any) -> Any:
        try:
            services.validate_images(value)
        except DjangoValidationError as exc:
            raise serializers.ValidationError(exc.messages) from None
        return value or {}

    def validate_node_addresses(self, value: Any) -> Any:
        return value or {}

    def update(self, instance: SlurmSettings, validated_data: dict[str, Any]) -> SlurmSettings:
        data = dict(validated_data)
        keep = bool(data.pop("keep_secret", False))
        if keep and not may_keep_secret(self):
            raise services.refuse_keep_secret("keep_secret")
        secrets = {
            "jwt": data.pop("jwt", None),
            "jwt_clear": bool(data.pop("jwt_clear", False)),
            "hf_token": data.pop("hf_token", None),
            "hf_token_clear": bool(data.pop("hf_token_clear", False)),
            "keep_secret": keep,
        }
        return services.update_slurm_settings(
            data, actor=self.context.get("actor", "admin"), **secrets
        )


class JwtStatusSerializer(serializers.Serializer[Any]):
    set = serializers.BooleanField()
    last4 = serializers.CharField()
    expires_at = serializers.DateTimeField(allow_null=True)
    expired = serializers.BooleanField(allow_null=True)


class SlurmTestResultSerializer(serializers.Serializer[Any]):
    ok = serializers.BooleanField(help_text="slurmrestd answered the ping.")
    latency_ms = serializers.FloatField(allow_null=True)
    api_version = serializers.CharField(help_text="The API version the ping used.")
    detected_api_version = serializers.CharField(help_text="Newest supported version served.")
    slurm_release = serializers.CharField()
    detail = serializers.CharField(help_text="Why it failed, or warnings.")
    jwt = JwtStatusSerializer()


class SlurmResourcesSerializer(serializers.Serializer[Any]):
    partitions = serializers.ListField(child=serializers.DictField())
    nodes = serializers.ListField(child=serializers.DictField())
    accounts = serializers.ListField(child=serializers.JSONField())
    qos = serializers.ListField(child=serializers.JSONField())
    associations = serializers.ListField(child=serializers.DictField())
    api_version = serializers.CharField(help_text="The slurmrestd API version used.")
    reason = serializers.CharField(help_text="Why the answer is empty or partial ('' if not).")
    errors = serializers.DictField(  # type: ignore[assignment]  # a field (DRF pops it)
        child=serializers.CharField(), help_text="Part name -> why it could not be read."
    )
