"""manage.py ensure_admin: create the first superuser once (idempotent; never resets a password)."""

from __future__ import annotations

import os
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser


class Command(BaseCommand):
    help = "Create a superuser if it does not exist yet. The password comes from an env variable."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default="admin")
        parser.add_argument("--password-env", default="OBLETH_ADMIN_PASSWORD")

    def handle(self, *args: Any, **options: Any) -> None:
        users = get_user_model()
        if users.objects.filter(username=options["username"]).exists():
            return
        password = os.environ.get(options["password_env"], "")
        if len(password) < 8:
            raise CommandError(
                f"Set {options['password_env']} to a password of 8 characters or more."
            )
        users.objects.create_superuser(options["username"], "", password)
        self.stderr.write(f"created superuser {options['username']!r}")
