from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "obleth.core"
    label = "core"
    verbose_name = "obleth"
    default_auto_field = "django.db.models.BigAutoField"
