"""Keep the data plane and the model badge current when endpoints change."""

from __future__ import annotations

from typing import Any

from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from obleth.core.models import Endpoint, Model
from obleth.gateway.health import request_model_refresh
from obleth.gateway.routing import invalidate_routes
from obleth.gateway.table import publish_change


@receiver(post_save, sender=Endpoint, dispatch_uid="gateway-endpoint-saved")
def endpoint_saved(sender: Any, instance: Endpoint, created: bool, **kwargs: Any) -> None:
    invalidate_routes()  # this process at once; other processes within the cache window
    publish_change()  # gateway service processes at once


@receiver(post_delete, sender=Endpoint, dispatch_uid="gateway-endpoint-deleted")
def endpoint_deleted(sender: Any, instance: Endpoint, **kwargs: Any) -> None:
    invalidate_routes()
    publish_change()
    request_model_refresh(instance.model_id)


@receiver(post_save, sender=Model, dispatch_uid="gateway-model-saved")
@receiver(post_delete, sender=Model, dispatch_uid="gateway-model-deleted")
def model_changed(sender: Any, **kwargs: Any) -> None:
    invalidate_routes()
    publish_change()
