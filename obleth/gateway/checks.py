"""System checks of the gateway: ``manage.py check --deploy`` reports an open gateway."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Tags, Warning, register

OPEN_GATEWAY_ID = "obleth.gateway.W001"


@register(Tags.security, deploy=True)
def open_gateway_check(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    if not getattr(settings, "OBLETH_GATEWAY_OPEN", False):
        return []
    return [
        Warning(
            "OBLETH_GATEWAY_OPEN=1: the /v1 gateway answers anyone, without a key, for every "
            "model (gateway keys are not checked).",
            hint=(
                "Unset OBLETH_GATEWAY_OPEN and create gateway keys (admin, "
                "POST /api/v1/gateway-keys or manage.py create_gateway_key --name NAME); "
                "see docs/gateway-keys.md."
            ),
            id=OPEN_GATEWAY_ID,
        )
    ]
