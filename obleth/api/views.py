"""Management API views. Thin: validation in serializers, rules in ``obleth.core.services``."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response

from obleth.api import filters, permissions, serializers
from obleth.core import services
from obleth.core.models import (
    Alert,
    Endpoint,
    Launch,
    ManagedSpec,
    Model,
    Recipe,
    Replica,
    SlurmSettings,
)

UUID_RE = r"[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}"

MODEL_ID = OpenApiParameter(
    "model_id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="The model's id."
)


def actor_of(request: Request) -> str:
    """Who is acting, for audit lines: the staff username or 'admin-token'."""
    user = request.user
    return str(getattr(user, "username", "") or user or "anonymous")


def no_spec_response(model: Model) -> Response:
    return Response(
        {
            "error": f"Model {model.name!r} has no managed spec: PUT "
            f"/api/v1/models/{model.pk}/managed to have obleth launch it on Slurm."
        },
        status=status.HTTP_404_NOT_FOUND,
    )


class ActorContextMixin:
    def get_serializer_context(self) -> dict[str, Any]:
        context: dict[str, Any] = super().get_serializer_context()  # type: ignore[misc]
        request = getattr(self, "request", None)
        context["actor"] = actor_of(request) if request is not None else "admin"
        return context


# ------------------------------------------------------------------------------------------ models


@extend_schema_view(
    list=extend_schema(summary="List models"),
    create=extend_schema(summary="Create a model (hosting_mode is fixed from then on)"),
    retrieve=extend_schema(summary="Get a model"),
    update=extend_schema(summary="Replace a model (hosting_mode cannot change)"),
    partial_update=extend_schema(summary="Change a model (hosting_mode cannot change)"),
    destroy=extend_schema(
        summary="Delete a model",
        description="Its endpoints and managed spec go with it; its replicas are drained.",
    ),
)
class ModelViewSet(ActorContextMixin, viewsets.ModelViewSet[Model]):
    queryset = Model.objects.select_related("managed_spec").order_by("name")
    serializer_class = serializers.ModelSerializer
    filterset_class = filters.ModelFilter
    lookup_value_regex = UUID_RE


class _ModelScopedMixin:
    """Views under /models/{model_id}/: the model must exist (checked after authentication)."""

    kwargs: dict[str, Any]
    _model: Model | None = None

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)  # type: ignore[misc]
        self._model = get_object_or_404(Model, pk=self.kwargs["model_id"])

    @property
    def scoped_model(self) -> Model:
        if self._model is None:
            self._model = get_object_or_404(Model, pk=self.kwargs["model_id"])
        return self._model


# --------------------------------------------------------------------------------------- endpoints


@extend_schema_view(
    list=extend_schema(summary="List a model's endpoints", parameters=[MODEL_ID]),
    create=extend_schema(summary="Add an endpoint to a model", parameters=[MODEL_ID]),
    retrieve=extend_schema(summary="Get an endpoint", parameters=[MODEL_ID]),
    update=extend_schema(
        summary="Replace an endpoint",
        description="api_key omitted keeps the stored key; an empty string clears it.",
        parameters=[MODEL_ID],
    ),
    partial_update=extend_schema(summary="Change an endpoint", parameters=[MODEL_ID]),
    destroy=extend_schema(summary="Delete an endpoint", parameters=[MODEL_ID]),
)
class ModelEndpointViewSet(_ModelScopedMixin, ActorContextMixin, viewsets.ModelViewSet[Endpoint]):
    serializer_class = serializers.EndpointSerializer
    lookup_value_regex = UUID_RE
    filter_backends: list[Any] = []

    def get_queryset(self) -> QuerySet[Endpoint]:
        return Endpoint.objects.filter(model_id=self.kwargs["model_id"]).select_related("model")

    def get_serializer_context(self) -> dict[str, Any]:
        context = super().get_serializer_context()
        if "model_id" in self.kwargs and not getattr(self, "swagger_fake_view", False):
            context["model"] = self.scoped_model
        return context

    def perform_create(self, serializer: Any) -> None:
        serializer.save(model=self.scoped_model)


@extend_schema_view(
    list=extend_schema(summary="List every endpoint (?model_id= filters)"),
    retrieve=extend_schema(summary="Get an endpoint"),
)
class EndpointViewSet(viewsets.ReadOnlyModelViewSet[Endpoint]):
    queryset = Endpoint.objects.select_related("model")
    serializer_class = serializers.EndpointSerializer
    filterset_class = filters.EndpointFilter
    lookup_value_regex = UUID_RE


# ---------------------------------------------------------------------------------- managed specs


class ManagedSpecView(ActorContextMixin, GenericAPIView[ManagedSpec]):
    """A model's Slurm spec: GET (404 when unmanaged), PUT/PATCH (upsert), DELETE."""

    permission_classes = [permissions.ManagedSpecPermission]
    serializer_class = serializers.ManagedSpecSerializer
    queryset = ManagedSpec.objects.select_related("model")
    filter_backends: list[Any] = []

    def _model(self) -> Model:
        return get_object_or_404(Model, pk=self.kwargs["model_id"])

    def get_object(self) -> ManagedSpec:
        """The model's spec (OPTIONS describes PUT with it); 404 when there is none."""
        return get_object_or_404(self.get_queryset(), model=self._model())

    def get_serializer_context(self) -> dict[str, Any]:
        context = super().get_serializer_context()
        if "model_id" in self.kwargs and not getattr(self, "swagger_fake_view", False):
            context["model"] = self._model()
        return context

    @extend_schema(
        summary="Get a model's managed spec",
        description="404 when the model has no managed spec (PUT one to manage it).",
        parameters=[MODEL_ID],
        responses={
            200: OpenApiResponse(serializers.ManagedSpecSerializer, description="The spec.")
        },
    )
    def get(self, request: Request, model_id: str) -> Response:
        model = self._model()
        spec = self.get_queryset().filter(model=model).first()
        if spec is None:
            return no_spec_response(model)
        return Response(self.get_serializer(spec).data)

    def _save(self, request: Request, *, partial: bool) -> Response:
        model = self._model()
        services.require_slurm_model(model)
        existing = self.get_queryset().filter(model=model).first()
        serializer = self.get_serializer(existing, data=request.data, partial=partial)
        serializer.is_valid(raise_exception=True)
        spec = serializer.save()
        spec = self.get_queryset().get(pk=spec.pk)
        code = status.HTTP_201_CREATED if existing is None else status.HTTP_200_OK
        return Response(self.get_serializer(spec).data, status=code)

    @extend_schema(
        summary="Create or replace a model's managed spec",
        description=(
            "Slurm-provisioned models only. Fields left out return to their defaults. "
            "Validated in full: partition, serving_port 1-65535, time_limit and mem formats, "
            "nodes >= 1, replica counts, and a script_body or a launch_command."
        ),
        parameters=[MODEL_ID],
        responses={200: serializers.ManagedSpecSerializer, 201: serializers.ManagedSpecSerializer},
    )
    def put(self, request: Request, model_id: str) -> Response:
        return self._save(request, partial=False)

    @extend_schema(
        summary="Change some fields of a model's managed spec",
        parameters=[MODEL_ID],
        responses={200: serializers.ManagedSpecSerializer, 201: serializers.ManagedSpecSerializer},
    )
    def patch(self, request: Request, model_id: str) -> Response:
        return self._save(request, partial=True)

    @extend_schema(
        summary="Stop launching a model",
        description="Deletes the spec; the provisioner drains the model's replicas.",
        parameters=[MODEL_ID],
        responses={204: None},
    )
    def delete(self, request: Request, model_id: str) -> Response:
        model = self._model()
        if not services.delete_managed_spec(model, actor=actor_of(request)):
            return no_spec_response(model)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ProvisionErrorView(ActorContextMixin, GenericAPIView[ManagedSpec]):
    permission_classes = [permissions.DismissError]
    serializer_class = serializers.ProvisionErrorSerializer
    queryset = ManagedSpec.objects.select_related("model")
    filter_backends: list[Any] = []

    @extend_schema(
        summary="Dismiss (error: null) or set the last refused-job message",
        parameters=[MODEL_ID],
        request=serializers.ProvisionErrorSerializer,
        responses={200: serializers.ManagedSpecSerializer},
    )
    def patch(self, request: Request, model_id: str) -> Response:
        model = get_object_or_404(Model, pk=model_id)
        spec = self.get_queryset().filter(model=model).first()
        if spec is None:
            return no_spec_response(model)
        body = self.get_serializer(data=request.data)
        body.is_valid(raise_exception=True)
        services.set_provision_error(spec, body.validated_data["error"], actor=actor_of(request))
        return Response(serializers.ManagedSpecSerializer(spec).data)


@extend_schema_view(list=extend_schema(summary="List every managed spec"))
class ManagedSpecListViewSet(mixins.ListModelMixin, viewsets.GenericViewSet[ManagedSpec]):
    queryset = ManagedSpec.objects.select_related("model").order_by("model__name")
    serializer_class = serializers.ManagedSpecSerializer
    filterset_class = filters.ManagedSpecFilter


# --------------------------------------------------------------------------------------- replicas


@extend_schema_view(
    list=extend_schema(summary="List replicas (?model_id=, ?state=)"),
    retrieve=extend_schema(summary="Get a replica"),
)
class ReplicaViewSet(viewsets.ReadOnlyModelViewSet[Replica]):
    """Replicas are owned by the provisioner: read-only here, except the restart request."""

    queryset = Replica.objects.all()
    serializer_class = serializers.ReplicaSerializer
    filterset_class = filters.ReplicaFilter
    lookup_value_regex = UUID_RE

    @extend_schema(
        summary="Restart a replica",
        description=(
            "Sets cancel_requested: the provisioner cancels the job (its endpoint leaves the "
            "pool first) and submits a replacement on its next pass."
        ),
        request=None,
        responses={200: serializers.ReplicaSerializer},
    )
    @action(detail=True, methods=["post"], permission_classes=[permissions.RestartReplica])
    def restart(self, request: Request, pk: str) -> Response:
        serializers.refuse_any_body_field(request.data)
        try:
            replica = services.restart_replica(pk, actor=actor_of(request))
        except Replica.DoesNotExist:
            return Response({"error": f"No replica {pk}."}, status=status.HTTP_404_NOT_FOUND)
        return Response(self.get_serializer(replica).data)


@extend_schema_view(list=extend_schema(summary="List a model's replicas", parameters=[MODEL_ID]))
class ModelReplicaViewSet(mixins.ListModelMixin, viewsets.GenericViewSet[Replica]):
    """A model's replicas. Rows outlive their model (to be drained), so no 404 on a gone model."""

    serializer_class = serializers.ReplicaSerializer
    filterset_class = filters.ReplicaFilter

    def get_queryset(self) -> QuerySet[Replica]:
        if getattr(self, "swagger_fake_view", False):
            return Replica.objects.none()
        return Replica.objects.filter(model_id=self.kwargs["model_id"])

    @extend_schema(
        summary="Clear a model's lost replicas",
        description="Deletes the lost rows now, so the failed-launch limit lets new launches in.",
        parameters=[MODEL_ID],
        request=None,
        responses={200: serializers.ClearLostSerializer},
    )
    @action(
        detail=False,
        methods=["post"],
        url_path="clear-lost",
        filter_backends=[],
        permission_classes=[permissions.ClearLost],
    )
    def clear_lost(self, request: Request, model_id: str) -> Response:
        serializers.refuse_any_body_field(request.data)
        count = services.clear_lost(model_id, actor=actor_of(request))
        return Response({"cleared": count})


# --------------------------------------------------------------------------------------- launches


@extend_schema_view(
    list=extend_schema(
        summary="Launch history, newest first",
        description="?model_id=, ?recipe_id=, ?limit= (default 50, at most 500), ?offset=.",
    ),
    retrieve=extend_schema(summary="Get a launch"),
)
class LaunchViewSet(viewsets.ReadOnlyModelViewSet[Launch]):
    queryset = Launch.objects.order_by("-submitted_at")
    serializer_class = serializers.LaunchSerializer
    filterset_class = filters.LaunchFilter
    lookup_value_regex = UUID_RE


# ---------------------------------------------------------------------------------------- recipes


@extend_schema_view(
    list=extend_schema(summary="List saved recipes"),
    create=extend_schema(summary="Save a recipe (the body is parsed and checked)"),
    retrieve=extend_schema(summary="Get a saved recipe"),
    update=extend_schema(summary="Replace a saved recipe"),
    partial_update=extend_schema(summary="Change a saved recipe"),
    destroy=extend_schema(summary="Delete a saved recipe"),
)
class RecipeViewSet(ActorContextMixin, viewsets.ModelViewSet[Recipe]):
    queryset = Recipe.objects.order_by("name")
    serializer_class = serializers.RecipeSerializer
    filterset_class = filters.RecipeFilter
    lookup_value_regex = UUID_RE

    @extend_schema(
        summary="List the library recipes (files in OBLETH_RECIPES_DIR)",
        responses={200: serializers.LibraryRecipeSerializer(many=True)},
    )
    @action(detail=False, methods=["get"], pagination_class=None, filter_backends=[])
    def library(self, request: Request) -> Response:
        from recipes.library import library_recipes

        items = [
            {
                "slug": str(getattr(item, "slug", "") or ""),
                "name": str(getattr(item, "name", "") or ""),
                "path": str(getattr(item, "path", "") or ""),
                "body": str(getattr(item, "text", "") or ""),
                "header": dict(getattr(item, "header", None) or {}),
                "error": getattr(item, "error", None) or None,
            }
            for item in library_recipes()
        ]
        return Response(serializers.LibraryRecipeSerializer(items, many=True).data)


# ---------------------------------------------------------------------------------- Slurm settings


class SlurmSettingsView(ActorContextMixin, GenericAPIView[SlurmSettings]):
    serializer_class = serializers.SlurmSettingsSerializer
    queryset = SlurmSettings.objects.all()
    filter_backends: list[Any] = []

    def get_object(self) -> SlurmSettings:
        """The single settings row (there is no id in the URL)."""
        return SlurmSettings.load()

    @extend_schema(summary="The Slurm connection, cluster defaults and provisioner status")
    def get(self, request: Request) -> Response:
        return Response(self.get_serializer(self.get_object()).data)

    def _save(self, request: Request, *, partial: bool) -> Response:
        serializer = self.get_serializer(self.get_object(), data=request.data, partial=partial)
        serializer.is_valid(raise_exception=True)
        obj = serializer.save()
        return Response(self.get_serializer(obj).data)

    @extend_schema(
        summary="Change the Slurm connection and cluster defaults",
        description=(
            "Fields left out keep their value. jwt and hf_token are write-only: empty or omitted "
            "keeps the stored secret; jwt_clear / hf_token_clear remove it. When enabled, "
            "slurmrestd_url and user are required."
        ),
    )
    def put(self, request: Request) -> Response:
        return self._save(request, partial=False)

    @extend_schema(summary="Change some Slurm settings")
    def patch(self, request: Request) -> Response:
        return self._save(request, partial=True)


class SlurmTestView(GenericAPIView[SlurmSettings]):
    permission_classes = [permissions.TestSlurmConnection]
    serializer_class = serializers.SlurmTestResultSerializer
    queryset = SlurmSettings.objects.all()
    filter_backends: list[Any] = []

    @extend_schema(
        summary="Test the Slurm connection",
        description="Pings slurmrestd, detects the API version and reports the JWT's expiry. "
        "400 when no slurmrestd_url is configured.",
        request=None,
        responses={200: serializers.SlurmTestResultSerializer},
    )
    def post(self, request: Request) -> Response:
        serializers.refuse_any_body_field(request.data)
        result = services.check_slurm_connection(SlurmSettings.load())
        return Response(serializers.SlurmTestResultSerializer(result).data)


class SlurmResourcesView(GenericAPIView[SlurmSettings]):
    serializer_class = serializers.SlurmResourcesSerializer
    queryset = SlurmSettings.objects.all()
    filter_backends: list[Any] = []

    @extend_schema(
        summary="Cluster discovery: partitions, nodes, accounts, QoS, associations",
        description="Best effort: a part that cannot be read is empty, with its reason in errors.",
    )
    def get(self, request: Request) -> Response:
        data = services.discover_resources(SlurmSettings.load())
        return Response(serializers.SlurmResourcesSerializer(data).data)


# ------------------------------------------------------------------------------ provisioner, alerts


class ProvisionerStatusView(GenericAPIView[Any]):
    permission_classes = [permissions.ViewProvisionerStatus]
    serializer_class = serializers.ProvisionerStatusSerializer
    queryset = SlurmSettings.objects.none()
    filter_backends: list[Any] = []

    @extend_schema(summary="Is the provisioner running, and are its passes failing?")
    def get(self, request: Request) -> Response:
        view = services.provisioner_view()
        return Response(serializers.ProvisionerStatusSerializer(view.as_dict()).data)


@extend_schema_view(
    list=extend_schema(summary="Alert log, newest first"),
    retrieve=extend_schema(summary="Get an alert"),
)
class AlertViewSet(viewsets.ReadOnlyModelViewSet[Alert]):
    queryset = Alert.objects.order_by("-created_at")
    serializer_class = serializers.AlertSerializer
    filterset_class = filters.AlertFilter
