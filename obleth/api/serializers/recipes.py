"""Serializers of recipes: the stored ones (named, unique) and the library's files."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from obleth.api.serializers.fields import StrictFieldsMixin, unique_name
from obleth.core import validators as v
from obleth.core.models import Recipe

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
