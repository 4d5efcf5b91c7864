#!/usr/bin/env python3
"""Log lines per minute of an idle provisioner: ``manage.py reconcile --loop`` (full passes every
15 s, fast passes every second, as shipped), or with ``--celery`` the Celery worker and beat
``scripts/run`` starts, over a few models whose replicas all serve, nothing changing. Prints the
lines per minute by level once every replica serves.

What is real: the loop, its passes, the ORM on PostgreSQL, the probes over TCP/HTTP, the logging
configuration of obleth/settings.py. What is fake: slurmrestd (bench/_fake_slurm.py: every job
RUNNING on localhost at once) and the engines (bench/_engines.py, one port per replica window).

``--tree DIR`` runs the loop from another checkout (its manage.py and code) on the same database,
to compare before and after a change: ``--tree /work/main``.

Run: .venv/bin/python bench/idle_log_bench.py --models 3 --secs 60
Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import secrets
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common  # noqa: E402

LEVEL = re.compile(r"\b(DEBUG|INFO|WARNING|ERROR|CRITICAL)\b")


def main() -> int:
    parser = argparse.ArgumentParser(description="idle log volume of manage.py reconcile --loop")
    parser.add_argument("--models", type=int, default=3, help="models, 2 replicas each (3)")
    parser.add_argument("--secs", type=float, default=60.0, help="idle seconds measured (60)")
    parser.add_argument("--tree", default=str(common.ROOT), help="checkout to run the loop from")
    parser.add_argument("--db", default="obleth_bench_idlelog", help="database name")
    parser.add_argument("--port-base", type=int, default=17100, help="first serving_port")
    parser.add_argument(
        "--celery",
        action="store_true",
        help="a Celery worker (concurrency 4) and beat, as scripts/run starts them, not the loop",
    )
    parser.add_argument("--redis-db", type=int, default=13, help="Redis db for --celery (13)")
    args = parser.parse_args()

    common.setup_django(args.db)
    from obleth.core.choices import HostingMode, ReplicaState
    from obleth.core.models import ManagedSpec, Model, Replica, SlurmSettings

    common.reset_rows()
    token = secrets.token_urlsafe(24)
    engines = common.Child(
        [
            common.python(),
            str(common.BENCH / "_engines.py"),
            "--first",
            str(args.port_base),
            "--count",
            str(2 * args.models),
            "--step",
            "8",
        ],
        "READY",
        timeout=120,
    )
    fake = common.Child(
        [common.python(), str(common.BENCH / "_fake_slurm.py")],
        "URL ",
        env={"BENCH_FAKE_SLURM_TOKEN": token},
    )
    procs: list[subprocess.Popen[str]] = []
    counts: collections.Counter[str] = collections.Counter()
    sample: list[str] = []
    try:
        slurm = SlurmSettings.load()
        slurm.enabled, slurm.slurmrestd_url = True, fake.ready_line.split(" ", 1)[1]
        slurm.user, slurm.jwt, slurm.api_version = "obleth", token, "v0.0.38"
        slurm.save()
        for k in range(args.models):
            model = Model.objects.create(
                name=f"idle-{k}", hosting_mode=HostingMode.SLURM, upstream_model=f"idle-{k}"
            )
            ManagedSpec.objects.create(
                model=model,
                partition="debug",
                serving_port=args.port_base + 16 * k,
                launch_command="true",
                target_replicas=2,
            )
        env = {
            **os.environ,
            "OBLETH_PROVISIONER_DISPATCH": "inline",
            "OBLETH_LOG_LEVEL": "INFO",
            "OBLETH_PROVISIONER_WARMUP_TIMEOUT_SECS": "0",
        }
        if args.celery:
            from django.conf import settings

            celery = str(Path(common.python()).parent / "celery")
            env.update(
                {
                    "DJANGO_SETTINGS_MODULE": "obleth.settings",
                    "OBLETH_SECRET_KEY": os.environ.get("OBLETH_SECRET_KEY", ""),
                    "OBLETH_ENCRYPTION_KEY": settings.OBLETH_ENCRYPTION_KEY,
                    "OBLETH_CELERY_BROKER_URL": f"redis://127.0.0.1:6379/{args.redis_db}",
                    "OBLETH_PROVISIONER_DISPATCH": "celery",
                }
            )
            schedule = Path("/tmp") / f"idle-log-beat-{secrets.token_hex(4)}"
            commands = [
                [celery, "-A", "obleth", "worker", "--loglevel", "INFO", "--concurrency", "4"],
                [celery, "-A", "obleth", "beat", "--loglevel", "INFO", "--schedule", str(schedule)],
            ]
        else:
            commands = [[common.python(), "manage.py", "reconcile", "--loop"]]
        measuring = threading.Event()

        def read(proc: subprocess.Popen[str]) -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                if measuring.is_set():
                    found = LEVEL.search(line)
                    counts[found.group(1) if found else "other"] += 1
                    if len(sample) < 8:
                        sample.append(line.rstrip()[:200])

        for command in commands:
            proc = subprocess.Popen(
                command,
                cwd=args.tree,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            procs.append(proc)
            threading.Thread(target=read, args=(proc,), daemon=True).start()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if Replica.objects.filter(state=ReplicaState.HEALTHY).count() >= 2 * args.models:
                break
            time.sleep(0.5)
        else:
            print("replicas did not all serve; the figure below is not an idle one")
        time.sleep(3)  # the pass that promoted the last one, its warm-ups
        measuring.set()
        time.sleep(args.secs)
        measuring.clear()
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=30)
        fake.stop()
        engines.stop()
        common.reset_rows()
    total = sum(counts.values())
    per_minute = total * 60.0 / args.secs
    print(
        f"idle {'Celery worker+beat' if args.celery else 'reconcile --loop'} from {args.tree}: "
        f"{args.models} models x 2 replicas serving, "
        f"{args.secs:g} s measured: {per_minute:.1f} lines/min "
        f"({', '.join(f'{k} {v}' for k, v in sorted(counts.items())) or 'none'})"
    )
    for line in sample:
        print(f"  | {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
