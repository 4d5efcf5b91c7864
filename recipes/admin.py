"""Admin for saved recipes (the ``Recipe`` model of ``obleth.core``; library recipes are files in
settings.OBLETH_RECIPES_DIR and have no admin page)."""

from __future__ import annotations

from django import forms
from django.contrib import admin

from obleth.core.models import Recipe


class RecipeAdminForm(forms.ModelForm):
    class Meta:
        model = Recipe
        fields = ("name", "author", "body")
        widgets = {
            "body": forms.Textarea(attrs={"rows": 30, "cols": 100, "class": "vLargeTextField"})
        }


@admin.register(Recipe)
class RecipeAdmin(admin.ModelAdmin):
    form = RecipeAdminForm
    list_display = ("name", "author", "updated_at")
    search_fields = ("name", "author", "body")
    readonly_fields = ("created_at", "updated_at")
