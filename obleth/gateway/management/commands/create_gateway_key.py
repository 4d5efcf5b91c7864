"""manage.py create_gateway_key: a new gateway key for /v1, its secret printed once."""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from obleth.gateway import keys

MAX_DAYS = 36500


class Command(BaseCommand):
    help = (
        "Create a gateway key and print its secret (shown once: only its SHA-256 digest is "
        "stored). Clients send it as 'Authorization: Bearer <secret>'."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--name", required=True, help="Who or what uses the key.")
        parser.add_argument(
            "--models", default="", help="Comma-separated model names it may call (default: all)."
        )
        parser.add_argument(
            "--expires-days", type=int, default=None, help="Refuse the key after N days."
        )
        parser.add_argument(
            "--quiet", action="store_true", help="Print only the secret (for scripts)."
        )
        parser.add_argument(
            "--secret-env",
            default="",
            help="Register the secret held by this environment variable instead of drawing one, "
            "once (nothing happens when a key with that secret exists). For scripts/run's demo.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            if options["secret_env"]:
                self._ensure(options)
                return
            models = keys.resolve_models(options["models"].split(","))
            created = keys.create_key(
                options["name"],
                models=models,
                expires_at=_expiry(options["expires_days"]),
                actor="manage.py create_gateway_key",
            )
        except ValidationError as exc:
            raise CommandError(" ".join(exc.messages)) from None
        key = created.key
        if options["quiet"]:
            self.stdout.write(created.secret)
            return
        names = ", ".join(m.name for m in models) or "all models"
        expiry = key.expires_at.isoformat(timespec="seconds") if key.expires_at else "never"
        self.stdout.write(
            f"Created gateway key {key.name!r} ({key.prefix}…): {names}; expires {expiry}.\n"
            "Its secret, shown this once (it is not stored; lost = revoke and create another):\n\n"
            f"  {created.secret}\n\n"
            "Send it as 'Authorization: Bearer <secret>', e.g.\n"
            '  curl http://HOST/v1/models -H "Authorization: Bearer <secret>"'
        )

    def _ensure(self, options: dict[str, Any]) -> None:
        variable = options["secret_env"]
        if options["models"] or options["expires_days"] is not None:
            raise CommandError(
                "--secret-env registers an unrestricted key: drop --models/--expires-days."
            )
        secret = os.environ.get(variable, "")
        if not secret:
            raise CommandError(f"{variable} is not set: it must hold the secret to register.")
        key, created = keys.ensure_key(
            options["name"], secret, actor="manage.py create_gateway_key"
        )
        if created:
            self.stderr.write(f"registered gateway key {key.name!r} ({key.prefix}…)")
        elif not key.active:
            self.stderr.write(
                f"warning: gateway key {key.name!r} ({key.prefix}…) is revoked or expired; "
                f"remove {variable} from its env file to get a new one"
            )


def _expiry(days: int | None) -> dt.datetime | None:
    if days is None:
        return None
    if not 1 <= days <= MAX_DAYS:
        raise CommandError(f"--expires-days must be between 1 and {MAX_DAYS} (got {days}).")
    return timezone.now() + dt.timedelta(days=days)
