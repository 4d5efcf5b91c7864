"""Query-string filters of the Management API lists (django-filter)."""

from __future__ import annotations

from typing import Any

import django_filters
from django import forms

from obleth.core.choices import HealthStatus, HostingMode, ModelType, ReplicaState
from obleth.core.models import Alert, Endpoint, Launch, ManagedSpec, Model, Recipe, Replica


class BoundedIsoDateTimeField(django_filters.fields.IsoDateTimeField):
    """An ISO 8601 time the database can hold: years 1900-9999, an offset within +-14 h
    (PostgreSQL refuses '+21:17' with an error that would otherwise be a 500)."""

    def clean(self, value: Any) -> Any:
        cleaned = super().clean(value)
        if cleaned is None:
            return cleaned
        offset = cleaned.utcoffset()
        if not 1900 <= cleaned.year <= 9999 or (
            offset is not None and abs(offset.total_seconds()) > 14 * 3600
        ):
            raise forms.ValidationError(
                "Give a time between 1900 and 9999 with an offset within +-14:00, "
                "e.g. 2026-12-01T09:00:00Z."
            )
        return cleaned


class BoundedIsoDateTimeFilter(django_filters.IsoDateTimeFilter):
    field_class = BoundedIsoDateTimeField


class ModelFilter(django_filters.FilterSet):
    name = django_filters.CharFilter(lookup_expr="icontains")
    hosting_mode = django_filters.ChoiceFilter(choices=HostingMode.choices)
    model_type = django_filters.ChoiceFilter(choices=ModelType.choices)
    health_status = django_filters.ChoiceFilter(choices=HealthStatus.choices)

    class Meta:
        model = Model
        fields = ["name", "hosting_mode", "model_type", "enabled", "health_status"]


class EndpointFilter(django_filters.FilterSet):
    model_id = django_filters.UUIDFilter(field_name="model_id")
    health_status = django_filters.ChoiceFilter(choices=HealthStatus.choices)
    managed = django_filters.BooleanFilter(
        field_name="replica_id", lookup_expr="isnull", exclude=True, label="Registered by a replica"
    )

    class Meta:
        model = Endpoint
        fields = ["model_id", "enabled", "health_status", "managed"]


class ManagedSpecFilter(django_filters.FilterSet):
    model_id = django_filters.UUIDFilter(field_name="model_id")

    class Meta:
        model = ManagedSpec
        fields = ["model_id", "enabled"]


class ReplicaFilter(django_filters.FilterSet):
    model_id = django_filters.UUIDFilter(field_name="model_id")
    state = django_filters.MultipleChoiceFilter(choices=ReplicaState.choices)

    class Meta:
        model = Replica
        fields = ["model_id", "state", "cancel_requested"]


class LaunchFilter(django_filters.FilterSet):
    model_id = django_filters.UUIDFilter(field_name="model_id")
    recipe_id = django_filters.UUIDFilter(field_name="recipe_id")

    class Meta:
        model = Launch
        fields = ["model_id", "recipe_id", "end_state"]


class RecipeFilter(django_filters.FilterSet):
    name = django_filters.CharFilter(lookup_expr="icontains")

    class Meta:
        model = Recipe
        fields = ["name", "author"]


class AlertFilter(django_filters.FilterSet):
    class Meta:
        model = Alert
        fields = ["key", "severity"]
