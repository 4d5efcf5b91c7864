"""Serializers of the Slurm settings (secrets write-only: ``*_set`` and ``*_last4``, never the
value), the connection test's result and the cluster's resources.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from obleth.api.serializers.fields import (
    KEEP_SECRET_HELP,
    StrictFieldsMixin,
    StringMapField,
    may_keep_secret,
)
from obleth.api.serializers.provisioner import ProvisionerStatusSerializer
from obleth.core import services
from obleth.core import validators as v
from obleth.core.models import SlurmSettings, mask_secret
from obleth.core.validators import validate_node_addresses

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
