"""POST /api/v1/deployments: deploy a tested recipe as a model with its managed spec.

This is the operator's way to launch: the recipe's script (written by an admin) is rendered with
the operator's inputs and placement overrides; an edited ``script_body`` in the overrides is
shell, so it needs ``core.change_launch_script`` like any other write of a spec's shell.
The deploy itself is :func:`obleth.core.recipes.deploy`.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response

from obleth.api.permissions import CheckedPermission
from obleth.api.serializers import ModelSerializer
from obleth.core.models import Model, Recipe, SlurmSettings


class DeployRequestSerializer(serializers.Serializer[Any]):
    name = serializers.CharField(max_length=200, help_text="The new model's name.")
    recipe_id = serializers.UUIDField(required=False, help_text="A saved recipe's id ...")
    library = serializers.RegexField(
        r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$",
        required=False,
        help_text="... or a library recipe's slug (its file name without .recipe).",
    )
    overrides = serializers.DictField(
        required=False,
        default=dict,
        help_text="Placement and replicas (partition, qos, time_limit, target_replicas, ...), "
        "inputs: {name: value}, api_model_name, script_body (needs core.change_launch_script).",
    )

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError(
                    {k: [f"Unknown field. Use: {', '.join(self.fields)}."] for k in unknown}
                )
        return super().to_internal_value(data)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if ("recipe_id" in attrs) == ("library" in attrs):
            raise serializers.ValidationError(
                {"recipe_id": ["Give recipe_id (a saved recipe) or library (a slug), not both."]}
            )
        return attrs


class DeployPermission(CheckedPermission):
    def required(self, request: Request, view: Any) -> list[str]:
        needed = ["core.deploy", "core.add_model", "core.add_managedspec"]
        data = request.data if isinstance(request.data, dict) else {}
        overrides = data.get("overrides")
        if isinstance(overrides, dict) and "script_body" in overrides:
            needed.append("core.change_launch_script")
        return needed


class DeployView(GenericAPIView[Model]):
    permission_classes = [DeployPermission]
    serializer_class = DeployRequestSerializer
    queryset = Model.objects.all()
    filter_backends: list[Any] = []

    @extend_schema(
        summary="Deploy a recipe: create a Slurm-hosted model and its managed spec",
        request=DeployRequestSerializer,
        responses={201: ModelSerializer},
    )
    def post(self, request: Request) -> Response:
        from obleth.core.recipes import deploy, find_library_recipe

        body = DeployRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        recipe: Recipe | None = None
        if "recipe_id" in data:
            recipe = Recipe.objects.filter(pk=data["recipe_id"]).first()
            if recipe is None:
                raise ValidationError({"recipe_id": [f"No saved recipe {data['recipe_id']}."]})
            text = recipe.body
        else:
            item = find_library_recipe(data["library"])
            if item is None:
                raise ValidationError(
                    {"library": [f"No library recipe {data['library']!r} (GET /recipes/library)."]}
                )
            text = item.text
        model = deploy(
            recipe_text=text,
            model_name=data["name"],
            overrides=data["overrides"],
            cluster=SlurmSettings.load(),
            recipe=recipe,
        )
        model = Model.objects.select_related("managed_spec").get(pk=model.pk)
        return Response(ModelSerializer(model).data, status=status.HTTP_201_CREATED)
