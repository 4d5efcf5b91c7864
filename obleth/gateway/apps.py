from django.apps import AppConfig


class GatewayConfig(AppConfig):
    name = "obleth.gateway"
    label = "gateway"
    verbose_name = "Gateway"
