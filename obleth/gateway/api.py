"""Management API of gateway keys: /api/v1/gateway-keys.

POST creates a key and answers its secret once (field ``secret``, only in that answer); the rows
hold a SHA-256 digest, never the secret. PATCH changes the name, the models and the expiry;
POST .../revoke revokes for good; DELETE removes the row.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from obleth.api.auth import IsOperator
from obleth.api.permissions import requires
from obleth.core.models import Model
from obleth.gateway import keys
from obleth.gateway.models import GatewayKey

UUID_RE = r"[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}"


def _actor(request: Request) -> str:
    user = request.user
    return str(getattr(user, "username", "") or user or "anonymous")


class GatewayKeySerializer(serializers.ModelSerializer[GatewayKey]):
    name = serializers.CharField(max_length=keys.MAX_NAME_LEN, help_text="Who uses the key.")
    models = serializers.SlugRelatedField(
        many=True,
        slug_field="name",
        queryset=Model.objects.all(),
        source="allowed_models",
        required=False,
        help_text="Names of the models this key may call. Empty: every enabled model.",
    )
    status = serializers.SerializerMethodField(help_text="active, expired or revoked.")
    models_limited = serializers.BooleanField(
        read_only=True,
        help_text="Whether the key may call only 'models' (false: every model). A limited key "
        "whose models were all deleted may call none.",
    )

    class Meta:
        model = GatewayKey
        fields = [
            "id",
            "name",
            "prefix",
            "models",
            "models_limited",
            "expires_at",
            "status",
            "revoked_at",
            "last_used_at",
            "created_at",
            "created_by",
        ]
        read_only_fields = ["prefix", "revoked_at", "last_used_at", "created_at", "created_by"]

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = sorted(set(data) - {n for n, f in self.fields.items() if not f.read_only})
            if unknown:
                raise serializers.ValidationError(
                    {
                        name: ["Unknown field: the writable ones are name, models, expires_at."]
                        for name in unknown
                    }
                )
        return super().to_internal_value(data)

    def get_status(self, obj: GatewayKey) -> str:
        if obj.revoked:
            return "revoked"
        return "expired" if obj.expired else "active"

    def validate_name(self, value: str) -> str:
        try:
            return keys.validate_key_name(value)
        except DjangoValidationError as exc:
            raise serializers.ValidationError(exc.messages) from None

    def validate_expires_at(self, value: dt.datetime | None) -> dt.datetime | None:
        if self.instance is not None and value == self.instance.expires_at:
            return value
        try:
            return keys.validate_expiry(value)
        except DjangoValidationError as exc:
            raise serializers.ValidationError(exc.messages) from None


class CreatedGatewayKeySerializer(GatewayKeySerializer):
    secret = serializers.SerializerMethodField(
        help_text="The key to send as 'Authorization: Bearer <secret>'. Shown in this answer "
        "only: it is not stored and cannot be read again."
    )

    class Meta(GatewayKeySerializer.Meta):
        fields = [*GatewayKeySerializer.Meta.fields, "secret"]

    def get_secret(self, obj: GatewayKey) -> str:
        return str(self.context.get("secret", ""))


@extend_schema_view(
    list=extend_schema(summary="List gateway keys (prefix, models, expiry, last use)"),
    retrieve=extend_schema(summary="Get a gateway key"),
    create=extend_schema(
        summary="Create a gateway key (the answer holds its secret, once)",
        responses={201: CreatedGatewayKeySerializer},
    ),
    update=extend_schema(summary="Replace a key's name, models and expiry"),
    partial_update=extend_schema(summary="Change a key's name, models or expiry"),
    destroy=extend_schema(summary="Delete a gateway key"),
)
class GatewayKeyViewSet(viewsets.ModelViewSet[GatewayKey]):
    queryset = GatewayKey.objects.prefetch_related("allowed_models").order_by("name", "id")
    serializer_class = GatewayKeySerializer
    permission_classes = [IsOperator]
    lookup_value_regex = UUID_RE

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        created = keys.create_key(
            data["name"],
            models=data.get("allowed_models", []),
            expires_at=data.get("expires_at"),
            actor=_actor(request),
        )
        answer = CreatedGatewayKeySerializer(created.key, context={"secret": created.secret})
        return Response(answer.data, status=status.HTTP_201_CREATED, headers=_no_store())

    def perform_update(self, serializer: GatewayKeySerializer) -> None:  # type: ignore[override]
        models = serializer.validated_data.get("allowed_models")
        key = serializer.save()
        if models is not None:
            keys.set_models(key, models)

    @extend_schema(summary="Revoke a gateway key (for good)", request=None)
    @action(
        detail=True,
        methods=["post"],
        permission_classes=[
            requires("gateway.change_gatewaykey", reads=("gateway.view_gatewaykey",))
        ],
    )
    def revoke(self, request: Request, pk: str | None = None) -> Response:
        key = self.get_object()
        keys.revoke_key(key, _actor(request))
        return Response(self.get_serializer(key).data)


def _no_store() -> dict[str, str]:
    return {"Cache-Control": "no-store"}
