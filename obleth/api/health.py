"""GET /api/v1/models/{id}/health-history: the model's health timeline, newest first, paginated
(each endpoint check, each replica promotion, loss and cancel, down and recovery). Needs
``core.view_model``. Optional filter ``?kind=check|promoted|lost|restarted|down|recovered``."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, serializers
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request

from obleth.api.permissions import requires
from obleth.core import health_history
from obleth.core.models import HealthEvent, Model

ViewModel = requires("core.view_model")


class HealthEventSerializer(serializers.ModelSerializer[HealthEvent]):
    class Meta:
        model = HealthEvent
        fields = (
            "id",
            "at",
            "kind",
            "endpoint_id",
            "endpoint_name",
            "replica_id",
            "job_id",
            "outcome",
            "http_status",
            "latency_ms",
            "message",
        )
        read_only_fields = fields


KINDS = tuple(k.value for k in HealthEvent.Kind)


class ModelHealthHistoryView(generics.ListAPIView[HealthEvent]):
    permission_classes = [ViewModel]
    serializer_class = HealthEventSerializer
    queryset = HealthEvent.objects.none()
    filter_backends: list[Any] = []

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        get_object_or_404(Model, pk=self.kwargs["model_id"])  # after authentication

    def get_queryset(self) -> QuerySet[HealthEvent]:
        events = health_history.timeline(self.kwargs["model_id"])
        kind = self.request.query_params.get("kind")
        if kind is not None:
            if kind not in KINDS:
                raise ValidationError(
                    {"kind": [f"unknown kind {kind[:40]!r}: use one of {', '.join(KINDS)}"]}
                )
            events = events.filter(kind=kind)
        return events

    @extend_schema(
        summary="A model's health history, newest first",
        parameters=[
            OpenApiParameter("model_id", str, OpenApiParameter.PATH),
            OpenApiParameter("kind", str, enum=list(KINDS), required=False),
        ],
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Any:
        return super().get(request, *args, **kwargs)
