from __future__ import annotations

from typing import Any

from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "obleth.accounts"
    label = "accounts"
    verbose_name = "Accounts: roles, API tokens, audit log"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        from obleth.accounts import signals

        signals.connect()

        def sync_roles(
            sender: Any, using: str = "default", apps: Any = None, **kwargs: Any
        ) -> None:
            from obleth.accounts.roles import apply_roles

            if apps is None:
                from django.apps import apps as live_apps

                apps = live_apps
            try:
                apps.get_model("auth", "Group")
            except LookupError:
                return
            apply_roles(apps, using=using)

        # Once per migrate (sender = this app), after every app's models exist.
        post_migrate.connect(sync_roles, sender=self, weak=False, dispatch_uid="obleth-roles")
