"""manage.py configure_slurm: set the Slurm connection from the command line (scripts, demos)."""

from __future__ import annotations

import os
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from obleth.core import services


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
        parser.add_argument(
            "--keep-secret",
            action="store_true",
            help="With a new --url and no token in the env variable, keep the stored JWT and "
            "Hugging Face token for the new URL (otherwise they are removed).",
        )
        parser.add_argument("--log-dir", default=None)

    def handle(self, *args: Any, **options: Any) -> None:
        # Through the same service as the API and the admin: every field validated, and a new
        # URL without a token in the environment drops the stored token (it was for the old host).
        values: dict[str, Any] = {
            "slurmrestd_url": options["url"],
            "user": options["user"],
            "api_version": options["api_version"],
        }
        if options["log_dir"] is not None:
            values["log_dir"] = options["log_dir"]
        if options["enable"]:
            values["enabled"] = True
        token = os.environ.get(options["jwt_env"], "").strip()
        try:
            slurm = services.update_slurm_settings(
                values,
                jwt=token or None,
                keep_secret=bool(options["keep_secret"]),
                actor="manage.py configure_slurm",
            )
        except ValidationError as exc:
            messages = (
                exc.message_dict.items() if hasattr(exc, "error_dict") else [("", exc.messages)]
            )
            raise CommandError("; ".join(f"{k}: {' '.join(v)}" for k, v in messages)) from None
        self.stderr.write(
            f"slurm settings: {slurm.slurmrestd_url} user={slurm.user} "
            f"version={slurm.api_version or 'detect'} jwt={'set' if slurm.jwt else 'not set'} "
            f"enabled={slurm.enabled}"
        )
