"""Keep the data plane and the model badge current when endpoints, models or keys change."""

from __future__ import annotations

from typing import Any

from django.core.signals import setting_changed
from django.db.models.signals import m2m_changed, post_delete, post_save
from django.dispatch import receiver

from obleth.core.models import Endpoint, Model
from obleth.gateway.health import request_model_refresh
from obleth.gateway.keys import invalidate_keys
from obleth.gateway.models import GatewayKey
from obleth.gateway.routing import invalidate_routes


@receiver(post_save, sender=Endpoint, dispatch_uid="gateway-endpoint-saved")
def endpoint_saved(sender: Any, instance: Endpoint, created: bool, **kwargs: Any) -> None:
    invalidate_routes()  # this process at once; other processes within the cache window


@receiver(post_delete, sender=Endpoint, dispatch_uid="gateway-endpoint-deleted")
def endpoint_deleted(sender: Any, instance: Endpoint, **kwargs: Any) -> None:
    invalidate_routes()
    request_model_refresh(instance.model_id)


@receiver(post_save, sender=Model, dispatch_uid="gateway-model-saved")
@receiver(post_delete, sender=Model, dispatch_uid="gateway-model-deleted")
def model_changed(sender: Any, **kwargs: Any) -> None:
    invalidate_routes()


@receiver(post_save, sender=GatewayKey, dispatch_uid="gateway-key-saved")
@receiver(post_delete, sender=GatewayKey, dispatch_uid="gateway-key-deleted")
@receiver(m2m_changed, sender=GatewayKey.allowed_models.through, dispatch_uid="gateway-key-models")
@receiver(post_save, sender=Model, dispatch_uid="gateway-key-model-saved")
@receiver(post_delete, sender=Model, dispatch_uid="gateway-key-model-deleted")
def gateway_keys_changed(sender: Any, **kwargs: Any) -> None:
    invalidate_keys()  # this process at once; other processes within OBLETH_GATEWAY_KEY_CACHE_MS


@receiver(setting_changed, dispatch_uid="gateway-key-settings")
def gateway_key_settings_changed(setting: str, **kwargs: Any) -> None:
    if setting.startswith(("OBLETH_GATEWAY_", "OBLETH_AUTH_")):
        invalidate_keys()
