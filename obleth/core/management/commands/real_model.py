"""manage.py real_model: scripts/run's real model (SmolLM2-135M on llama.cpp).

``up`` builds the llama.cpp engine when ``scripts/real-engines status llamacpp`` says it is
missing, then deploys the library recipe ``llamacpp-smollm2`` through the deploy service and
waits for it to serve (:mod:`obleth.devrun.real_model`). ``status`` prints the state the
status file holds. ``OBLETH_RUN_REAL_MODEL_BUILD`` replaces the build command (a command line;
the fast test of the "engine missing" path points it at a tiny script); the check is always
the real ``scripts/real-engines status llamacpp``.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from obleth.devrun import real_model

REAL_ENGINES = Path(settings.BASE_DIR) / "scripts" / "real-engines"


class Command(BaseCommand):
    help = "Bring up scripts/run's real model (up) or show how far it is (status)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["up", "status"])
        parser.add_argument(
            "--status-file",
            type=Path,
            default=Path(settings.VAR_DIR) / "real-model.json",
            help="Where the state is kept (default: <var>/real-model.json).",
        )
        parser.add_argument(
            "--build-log",
            type=Path,
            default=Path(settings.VAR_DIR) / "logs" / "real-model-build.log",
            help="Where the engine build's whole output goes.",
        )
        parser.add_argument("--name", default=real_model.MODEL_NAME, help="The model name.")
        parser.add_argument(
            "--serve-timeout",
            type=float,
            default=900.0,
            help="Seconds to wait for the deployed model to serve (default 900).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == "status":
            status = real_model.read_status(options["status_file"])
            self.stdout.write(real_model.render(status, time.time()))
            return
        build = os.environ.get("OBLETH_RUN_REAL_MODEL_BUILD", "").strip()
        try:
            build_argv = shlex.split(build) if build else [str(REAL_ENGINES), "install", "llamacpp"]
        except ValueError as exc:
            raise CommandError(f"OBLETH_RUN_REAL_MODEL_BUILD: {exc}") from None
        cfg = real_model.Config(
            status_file=options["status_file"],
            build_log=options["build_log"],
            engines_dir=Path(settings.OBLETH_ENGINES_DIR),
            build_argv=build_argv,
            check_argv=[str(REAL_ENGINES), "status", "llamacpp"],
            model_name=options["name"],
            serve_timeout=options["serve_timeout"],
        )
        runner = real_model.Runner(cfg, sys.stdout)
        with real_model.stop_on_signals(runner):
            rc = runner.run()
        if rc != 0:
            raise SystemExit(rc)  # the reason is on stdout and in the status file already
