from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "obleth.api"
    label = "api"
    verbose_name = "Management API"
