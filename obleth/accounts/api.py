"""Management API routes of this app: personal API tokens (/api/v1/tokens) and the audit log
(/api/v1/audit). Thin: the rules are in :mod:`obleth.accounts.services`."""

from __future__ import annotations

from typing import Any

import django_filters
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import exceptions, mixins, serializers, status, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from obleth.accounts import services
from obleth.accounts.models import ApiToken, AuditEntry
from obleth.api.auth import IsStaff
from obleth.api.filters import BoundedIsoDateTimeFilter

UUID_RE = r"[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}"


class StrictSerializer(serializers.Serializer[Any]):
    """Unknown JSON fields are a 400 naming them (a typo is never silently ignored)."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError(
                    {
                        name: [f"Unknown field. Use: {', '.join(sorted(self.fields))}."]
                        for name in unknown
                    }
                )
        return super().to_internal_value(data)


class ApiTokenSerializer(serializers.ModelSerializer[ApiToken]):
    user = serializers.CharField(source="user.username", read_only=True)
    active = serializers.BooleanField(read_only=True)
    hint = serializers.SerializerMethodField(help_text="The token's visible start (no secret).")

    class Meta:
        model = ApiToken
        fields = [
            "id",
            "name",
            "user",
            "hint",
            "prefix",
            "created_at",
            "expires_at",
            "last_used_at",
            "last_used_from",
            "revoked_at",
            "active",
        ]
        read_only_fields = fields

    def get_hint(self, obj: ApiToken) -> str:
        return f"{services.TOKEN_SCHEME}_{obj.prefix}_…"


class NewTokenRequestSerializer(StrictSerializer):
    name = serializers.CharField(max_length=100, help_text="What uses the token.")
    expires_in_days = serializers.IntegerField(
        required=False,
        min_value=1,
        max_value=services.MAX_DAYS,
        help_text=f"1 to {services.MAX_DAYS}; default {services.DEFAULT_DAYS}.",
    )


class NewTokenSerializer(ApiTokenSerializer):
    token = serializers.CharField(
        read_only=True, help_text="The whole token. Shown this once: it is stored hashed."
    )

    class Meta(ApiTokenSerializer.Meta):
        fields = [*ApiTokenSerializer.Meta.fields, "token"]
        read_only_fields = fields


@extend_schema_view(
    list=extend_schema(summary="List your API tokens (admins: everybody's, ?user=)"),
    retrieve=extend_schema(summary="Get one of your API tokens"),
    create=extend_schema(
        summary="Create an API token for yourself (the token is in this answer only)",
        request=NewTokenRequestSerializer,
        responses={201: NewTokenSerializer},
    ),
    destroy=extend_schema(
        summary="Revoke an API token (it stops working at once; the row stays)",
        responses={204: OpenApiResponse(description="Revoked.")},
    ),
)
class ApiTokenViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet[ApiToken],
):
    """Every staff member manages their own tokens; a token acts with its owner's role."""

    permission_classes = [IsStaff]
    serializer_class = ApiTokenSerializer
    filter_backends: list[Any] = []
    lookup_value_regex = UUID_RE

    def get_queryset(self) -> QuerySet[ApiToken]:
        if getattr(self, "swagger_fake_view", False):
            return ApiToken.objects.none()
        qs = services.visible_tokens(self.request.user)
        username = self.request.query_params.get("user")
        if username:
            qs = qs.filter(user__username=username)
        return qs.order_by("-created_at")

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        if isinstance(request.auth, ApiToken):
            raise exceptions.PermissionDenied(
                "A token cannot create tokens: log in (the admin's API tokens page, or a "
                "session) to make one."
            )
        if getattr(request.user, "pk", None) is None:
            raise exceptions.PermissionDenied(
                "A personal token belongs to a user: log in as yourself (the bootstrap admin "
                "token has no user to own one)."
            )
        body = NewTokenRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            made = services.create_token(
                request.user,
                body.validated_data["name"],
                expires_in_days=body.validated_data.get("expires_in_days"),
            )
        except DjangoPermissionDenied as exc:
            raise exceptions.PermissionDenied(str(exc)) from None
        data = dict(NewTokenSerializer(made.token).data)
        data["token"] = made.secret
        return Response(data, status=status.HTTP_201_CREATED)

    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        token = self.get_object()
        try:
            services.revoke_token(request.user, token)
        except DjangoPermissionDenied as exc:
            raise exceptions.PermissionDenied(str(exc)) from None
        return Response(status=status.HTTP_204_NO_CONTENT)


# ------------------------------------------------------------------------------------- audit log


class AuditEntrySerializer(serializers.ModelSerializer[AuditEntry]):
    class Meta:
        model = AuditEntry
        fields = [
            "id",
            "at",
            "actor_name",
            "via",
            "token_prefix",
            "client_address",
            "action",
            "app_label",
            "model",
            "object_id",
            "object_repr",
            "changed_fields",
            "before",
            "after",
            "detail",
        ]
        read_only_fields = fields


class AuditFilter(django_filters.FilterSet):
    actor = django_filters.CharFilter(field_name="actor_name", help_text="Username (exact).")
    since = BoundedIsoDateTimeFilter(field_name="at", lookup_expr="gte")
    until = BoundedIsoDateTimeFilter(field_name="at", lookup_expr="lte")

    class Meta:
        model = AuditEntry
        fields = ["actor", "via", "action", "app_label", "model", "object_id", "since", "until"]


@extend_schema_view(
    list=extend_schema(
        summary="The audit log, newest first",
        description="Filters: ?actor=, ?via=, ?action=, ?app_label=, ?model=, ?object_id=, "
        "?since=, ?until= (ISO 8601). Secrets appear as {set, changed} only.",
    ),
    retrieve=extend_schema(summary="Get an audit entry"),
)
class AuditEntryViewSet(viewsets.ReadOnlyModelViewSet[AuditEntry]):
    queryset = AuditEntry.objects.order_by("-at", "-id")
    serializer_class = AuditEntrySerializer
    filterset_class = AuditFilter
