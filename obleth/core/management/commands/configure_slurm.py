"""manage.py configure_slurm: set the Slurm connection from the command line (scripts, demos)."""

from __future__ import annotations

import os
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from obleth.core.models import SlurmSettings


class Command(BaseCommand):
    help = "Set the slurmrestd URL, user, API version and JWT (read from an env variable)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--url", required=True)
        parser.add_argument("--user", required=True)
        parser.add_argument("--api-version", default="")
        parser.add_argument(
            "--jwt-env", default="OBLETH_SLURM_JWT", help="Env variable holding the JWT."
        )
        parser.add_argument("--enable", action="store_true")
        parser.add_argument("--log-dir", default=None)

    def handle(self, *args: Any, **options: Any) -> None:
        slurm = SlurmSettings.load()
        slurm.slurmrestd_url = options["url"]
        slurm.user = options["user"]
        slurm.api_version = options["api_version"]
        token = os.environ.get(options["jwt_env"], "").strip()
        if token:
            slurm.jwt = token
        if options["log_dir"] is not None:
            slurm.log_dir = options["log_dir"]
        if options["enable"]:
            slurm.enabled = True
        try:
            slurm.full_clean()
        except ValidationError as exc:
            raise CommandError(
                "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())
            ) from None
        slurm.save()
        self.stderr.write(
            f"slurm settings: {slurm.slurmrestd_url} user={slurm.user} "
            f"version={slurm.api_version or 'detect'} jwt={'set' if slurm.jwt else 'not set'} "
            f"enabled={slurm.enabled}"
        )
