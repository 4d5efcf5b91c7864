from django.apps import AppConfig


class RecipesConfig(AppConfig):
    """The recipe code: documents, rendering, the library and the deploy service. No models of
    its own: ``Recipe`` and ``ManagedSpec`` stay in ``obleth.core`` (app label ``core``)."""

    name = "recipes"
    label = "recipes"
    verbose_name = "Recipes"
    default_auto_field = "django.db.models.BigAutoField"
