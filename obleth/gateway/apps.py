from django.apps import AppConfig


class GatewayConfig(AppConfig):
    name = "obleth.gateway"
    label = "gateway"
    verbose_name = "Gateway"

    def ready(self) -> None:
        from obleth.gateway import checks, signals  # noqa: F401  (registers checks, receivers)
