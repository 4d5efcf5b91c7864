"""manage.py replicas_on_slurm: how many of this site's jobs live on Slurm, and drain them.

``scripts/run`` calls it when it stops (``--count``: one number, the live jobs carrying
OBLETH_PROVISIONER_JOB_PREFIX) and ``scripts/run stop-replicas`` calls it with ``--drain``: every
managed spec is disabled (the admin shows "Off: its replicas are drained") and provisioner passes
run until no live job with the prefix is left, so the provisioner cancels its own jobs the way it
always does. Nothing here cancels a job by hand, and jobs without the prefix are never touched.
"""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from obleth.core.models import ManagedSpec, SlurmSettings
from provisioner.slurm.errors import SlurmError
from provisioner.slurm.types import JobPhase


def live_jobs() -> list[str]:
    """Ids of the live (pending or running) jobs carrying this site's prefix."""
    from provisioner.reconcile import idle_reason, slurm_client_for

    slurm = SlurmSettings.load()
    reason = idle_reason(slurm)
    if reason:
        raise CommandError(f"cannot ask Slurm: {reason}")
    prefix = settings.OBLETH_PROVISIONER_JOB_PREFIX
    with slurm_client_for(slurm) as client:
        try:
            jobs = client.list_jobs(prefix)
        except SlurmError as exc:
            raise CommandError(f"cannot ask Slurm: {exc}") from None
    return [job.job_id for job in jobs if job.phase is not JobPhase.GONE]


class Command(BaseCommand):
    help = "Count this site's live jobs on Slurm (--count) or drain them (--drain)."

    def add_arguments(self, parser: CommandParser) -> None:
        what = parser.add_mutually_exclusive_group(required=True)
        what.add_argument("--count", action="store_true", help="Print the number of live jobs.")
        what.add_argument(
            "--drain",
            action="store_true",
            help="Disable every managed spec and run passes until no live job is left.",
        )
        parser.add_argument(
            "--timeout", type=float, default=120.0, help="Seconds --drain waits (default 120)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["count"]:
            self.stdout.write(str(len(live_jobs())))
            return
        from provisioner.reconcile import run_pass

        disabled = ManagedSpec.objects.filter(enabled=True).update(enabled=False)
        self.stderr.write(
            f"disabled {disabled} managed spec(s); the provisioner drains their replicas "
            "(enable them again in the admin to serve)"
        )
        deadline = time.monotonic() + options["timeout"]
        left = live_jobs()
        while left:
            if time.monotonic() > deadline:
                raise CommandError(
                    f"{len(left)} job(s) still live after {options['timeout']:g}s: "
                    f"{', '.join(left)} (run it again, or see the admin's pass status)"
                )
            report = run_pass(dispatch="inline")
            if report.status == "error":
                self.stderr.write(f"pass held: {report.detail}")
            time.sleep(1.0)
            left = live_jobs()
        self.stdout.write("0 live jobs left on Slurm")
