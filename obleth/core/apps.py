from typing import Any

from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "obleth.core"
    label = "core"
    verbose_name = "obleth"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.conf import settings
        from django.db.models.signals import post_init

        from obleth.core import auth_throttle  # noqa: F401 - connects the login signals
        from obleth.core.models import Endpoint, Replica, SlurmSettings
        from obleth.logging import register_secret

        # Every process that loads a secret learns to mask it in its logs, not only the one
        # that wrote it (the worker, beat and the loop read them from the database).
        register_secret(settings.OBLETH_ADMIN_TOKEN)
        register_secret(settings.EMAIL_HOST_PASSWORD)

        def slurm_loaded(sender: Any, instance: SlurmSettings, **kwargs: Any) -> None:
            register_secret(instance.jwt)
            register_secret(instance.hf_token)

        # A row loaded without its key (``.only()``/``.defer()``) is not made to read it: that
        # would be one query per row. The key is registered when it is loaded (a deferred
        # field is loaded by a query whose row comes through here with it).
        def endpoint_loaded(sender: Any, instance: Endpoint, **kwargs: Any) -> None:
            if "api_key" not in instance.get_deferred_fields():
                register_secret(instance.api_key)

        def replica_loaded(sender: Any, instance: Replica, **kwargs: Any) -> None:
            if "api_key" not in instance.get_deferred_fields():
                register_secret(instance.api_key)

        post_init.connect(slurm_loaded, sender=SlurmSettings, weak=False, dispatch_uid="mask-slurm")
        post_init.connect(replica_loaded, sender=Replica, weak=False, dispatch_uid="mask-replica")
        post_init.connect(endpoint_loaded, sender=Endpoint, weak=False, dispatch_uid="mask-ep")
