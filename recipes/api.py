"""POST /api/v1/deployments: review (``dry_run``) or launch a recipe as a Slurm-hosted model.

A thin view over :mod:`recipes.deploy.service` (the one deploy path; its docstring is the
interface). Permissions: ``core.deploy`` (+ ``core.add_model``, ``core.add_managedspec``);
an edited ``script`` is shell, so it needs ``core.change_launch_script``; ``save_as_recipe``
needs ``core.add_recipe``. A dry run writes nothing and answers 200; a launch answers 201 with
the model, its managed spec, the saved recipe and the review.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiTypes, extend_schema
from rest_framework import status
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response

from obleth.api.permissions import CheckedPermission
from obleth.api.serializers import ManagedSpecSerializer, ModelSerializer, RecipeSerializer
from obleth.core.models import Model
from recipes.deploy import service as deploy_service
from recipes.deploy.request import permissions_needed


class DeployPermission(CheckedPermission):
    def required(self, request: Request, view: Any) -> list[str]:
        data = request.data if isinstance(request.data, dict) else {}
        return permissions_needed(data)


class DeployView(GenericAPIView[Model]):
    permission_classes = [DeployPermission]
    queryset = Model.objects.all()
    filter_backends: list[Any] = []

    @extend_schema(
        summary="Review (dry_run) or launch a recipe as a Slurm-hosted model",
        description=deploy_service.__doc__,
        request=OpenApiTypes.OBJECT,
        responses={200: OpenApiTypes.OBJECT, 201: OpenApiTypes.OBJECT},
    )
    def post(self, request: Request) -> Response:
        deploy_request = deploy_service.request_from_data(request.data)
        if deploy_request.dry_run:
            review = deploy_service.plan_deployment(deploy_request)
            return Response(review.as_dict(), status=status.HTTP_200_OK)
        result = deploy_service.deploy(deploy_request)
        model = Model.objects.select_related("managed_spec").get(pk=result.model.pk)
        return Response(
            {
                "model": ModelSerializer(model).data,
                "managed_spec": ManagedSpecSerializer(model.managed_spec).data,
                "recipe": RecipeSerializer(result.recipe).data if result.recipe else None,
                "stage": result.stage,
                "review": {**result.review.as_dict(), "dry_run": False},
            },
            status=status.HTTP_201_CREATED,
        )
