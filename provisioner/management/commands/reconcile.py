"""manage.py reconcile: one provisioner pass, a dry run, or the loop without Celery."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser


class Command(BaseCommand):
    help = "Run one provisioner pass (or --loop). --dry-run prints the planned actions only."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dry-run", action="store_true", help="Plan, print, change nothing.")
        parser.add_argument("--json", action="store_true", help="Print the outcome as JSON.")
        parser.add_argument(
            "--loop", action="store_true", help="Run a pass every interval until SIGTERM."
        )
        parser.add_argument(
            "--interval", type=float, default=None, help="Seconds between passes (loop)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        from provisioner.reconcile import run_pass
        from provisioner.services import StopFlag, run_loop

        if options["loop"]:
            if options["dry_run"]:
                raise CommandError("--loop and --dry-run do not go together: use --dry-run alone.")
            interval = (
                options["interval"]
                if options["interval"] is not None
                else float(settings.OBLETH_PROVISIONER_INTERVAL_SECS)
            )
            if interval <= 0:
                raise CommandError("--interval must be a positive number of seconds.")
            stop = StopFlag()
            stop.install()
            self.stderr.write(
                f"provisioner loop: a pass every {interval:g}s (SIGTERM stops after the pass)"
            )
            run_loop(interval=interval, stop=stop)
            return
        report = run_pass(dry_run=options["dry_run"], dispatch="inline")
        data = report.as_dict()
        if options["json"]:
            self.stdout.write(json.dumps(data, indent=2, default=str))
            return
        self.stdout.write(f"pass {report.status}: {report.detail} ({report.duration_ms} ms)")
        label = "planned" if options["dry_run"] else "done"
        if options["dry_run"]:
            for action in report.planned:
                kind = action.pop("type")
                fields = ", ".join(
                    f"{k}={v}" for k, v in action.items() if v not in (None, "", [], False)
                )
                self.stdout.write(f"  {label}: {kind} {fields}")
        for result in report.results:
            mark = "ok" if result.ok else "FAILED"
            self.stdout.write(f"  {mark}: {result.action} {result.replica_id} {result.detail}")
        if report.status == "error":
            raise CommandError(report.detail)
