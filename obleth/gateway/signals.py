"""Keep the gateway's routing table and the model badge current when something they show changes.

Every gateway process reloads its table on a change notice (:func:`publish_change`, sent once
the transaction commits) and on its timer (``OBLETH_GATEWAY_RELOAD_SECS``) in any case. Saved or
deleted rows notify here: endpoints, models, managed specs, replicas, gateway keys. Writes made
with ``QuerySet.update`` send no signal; the provisioner publishes once per pass that changed
rows that way (:func:`provisioner.reconcile.publish_if_changed`), the operator actions that use
it (Try once more, Restart) publish themselves, and the timer covers anything else.
"""

from __future__ import annotations

from typing import Any

from django.core.signals import setting_changed
from django.db.models.signals import m2m_changed, post_delete, post_save
from django.dispatch import receiver

from obleth.core.models import Endpoint, ManagedSpec, Model, Replica
from obleth.gateway.health import request_model_refresh
from obleth.gateway.keys import invalidate_keys
from obleth.gateway.models import GatewayKey
from obleth.gateway.table import publish_change


@receiver(post_save, sender=Endpoint, dispatch_uid="gateway-endpoint-saved")
def endpoint_saved(sender: Any, instance: Endpoint, created: bool, **kwargs: Any) -> None:
    publish_change()


@receiver(post_delete, sender=Endpoint, dispatch_uid="gateway-endpoint-deleted")
def endpoint_deleted(sender: Any, instance: Endpoint, **kwargs: Any) -> None:
    publish_change()
    request_model_refresh(instance.model_id)


@receiver(post_save, sender=Model, dispatch_uid="gateway-model-saved")
@receiver(post_delete, sender=Model, dispatch_uid="gateway-model-deleted")
@receiver(post_save, sender=ManagedSpec, dispatch_uid="gateway-spec-saved")
@receiver(post_delete, sender=ManagedSpec, dispatch_uid="gateway-spec-deleted")
def model_changed(sender: Any, **kwargs: Any) -> None:
    publish_change()


@receiver(post_save, sender=Replica, dispatch_uid="gateway-replica-saved")
@receiver(post_delete, sender=Replica, dispatch_uid="gateway-replica-deleted")
def replica_changed(sender: Any, **kwargs: Any) -> None:
    publish_change("replicas")  # what a model's 503 says (pending, starting...)


@receiver(post_save, sender=GatewayKey, dispatch_uid="gateway-key-saved")
@receiver(post_delete, sender=GatewayKey, dispatch_uid="gateway-key-deleted")
@receiver(m2m_changed, sender=GatewayKey.allowed_models.through, dispatch_uid="gateway-key-models")
@receiver(post_save, sender=Model, dispatch_uid="gateway-key-model-saved")
@receiver(post_delete, sender=Model, dispatch_uid="gateway-key-model-deleted")
def gateway_keys_changed(sender: Any, **kwargs: Any) -> None:
    invalidate_keys()  # this process at once; other processes within OBLETH_GATEWAY_KEY_CACHE_MS
    publish_change("keys")  # gateway service processes at once


@receiver(setting_changed, dispatch_uid="gateway-key-settings")
def gateway_key_settings_changed(setting: str, **kwargs: Any) -> None:
    if setting.startswith(("OBLETH_GATEWAY_", "OBLETH_AUTH_")):
        invalidate_keys()
