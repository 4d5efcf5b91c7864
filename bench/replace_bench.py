#!/usr/bin/env python3
"""Replacement latency under churn, on the REAL local Slurm: several models x 2 replicas of the
test engine (listening as soon as its job starts), a random serving replica scancel'ed every few
seconds, client requests through the gateway; for every replacement, how long from its job's
start (as Slurm recorded it) to its promotion (Launch.healthy_at), and from the scancel to the
promotion. The shape of the soak in issue 8, small enough to run in a few minutes.

Passes run as shipped: a real Celery worker (concurrency 4) and beat (--celery, the default) or
``provisioner.services.run_loop`` in a thread (--loop). Their log (DEBUG) goes to
bench/results/. Jobs carry a random ``oblbench…-`` prefix; everything started is stopped.

Run: .venv/bin/python bench/replace_bench.py --models 4 --cancels 12 --every 8
Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import logging
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common  # noqa: E402
import latency_bench as lat  # noqa: E402


class TcpProxy:
    """slurmrestd as the provisioner sees it: a TCP forwarder to the real one that this bench
    can stop for a while (an outage) without touching the shared slurmrestd itself."""

    def __init__(self, port: int, target: tuple[str, int]) -> None:
        self.port = port
        self.target = target
        self.listener: socket.socket | None = None
        self.conns: list[socket.socket] = []
        self.lock = threading.Lock()

    def start(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def stop(self) -> None:
        """Refuse connections and cut the open ones, as a stopped slurmrestd does."""
        if self.listener is not None:
            with contextlib.suppress(OSError):
                self.listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
            self.listener.close()
            self.listener = None
        with self.lock:
            for conn in self.conns:
                with contextlib.suppress(OSError):
                    conn.close()
            self.conns.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                with contextlib.suppress(OSError):
                    s.close()


def recipe_like_script(model_name: str, slow_start: float = 0.0) -> str:
    """The test-engine recipe's script (recipes/library/test-engine.recipe), with this checkout's
    engine: it listens on all addresses, takes /_control, and the job ends when the engine does."""
    return (
        "#!/bin/bash\n"
        "#SBATCH --cpus-per-task=1\n"
        "set -uo pipefail\n"
        f'echo "obleth test engine: model {model_name}, job ${{SLURM_JOB_ID:-none}} on '
        f'$(hostname), port ${{OBLETH_SERVING_PORT}}"\n'
        f'/usr/bin/python3 "{lat.ENGINE}" --port "$OBLETH_SERVING_PORT" --model "{model_name}" '
        f"--loading 0 --control --slow-start {slow_start:g} || true\n"
        'echo "engine exited"\n'
    )


def p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]


def figures(label: str, values: list[float]) -> str:
    if not values:
        return f"  {label:<34}: n/a"
    return (
        f"  {label:<34}: p50 {statistics.median(values):.2f}  p90 {p90(values):.2f}  "
        f"max {max(values):.2f}  (n={len(values)})"
    )


class Clients(threading.Thread):
    """One client thread: a chat completion for a random model every ``pause`` seconds."""

    def __init__(self, gateway: str, names: list[str], pause: float) -> None:
        super().__init__(daemon=True)
        self.url = f"{gateway}/v1/chat/completions"
        self.names = names
        self.pause = pause
        self.halt = threading.Event()
        self.outcomes: dict[int, int] = {}

    def run(self) -> None:
        with httpx.Client(timeout=10, trust_env=False) as client:
            while not self.halt.is_set():
                body = {
                    "model": random.choice(self.names),
                    "messages": [{"role": "user", "content": "hi"}],
                    "max_tokens": 1,
                }
                try:
                    status = client.post(self.url, json=body).status_code
                except httpx.HTTPError:
                    status = 0
                self.outcomes[status] = self.outcomes.get(status, 0) + 1
                self.halt.wait(self.pause)


def main() -> int:
    parser = argparse.ArgumentParser(description="replacement latency under churn (real Slurm)")
    parser.add_argument("--models", type=int, default=4, help="models, 2 replicas each (4)")
    parser.add_argument("--cancels", type=int, default=12, help="scancels in all (12)")
    parser.add_argument("--every", type=float, default=8.0, help="seconds between scancels (8)")
    parser.add_argument("--clients", type=int, default=2, help="client threads (2)")
    parser.add_argument("--loop", action="store_true", help="run_loop in a thread, not Celery")
    parser.add_argument("--db", default="obleth_bench_replace", help="database name")
    parser.add_argument("--port-base", type=int, default=17100, help="first serving_port")
    parser.add_argument("--redis-db", type=int, default=13, help="Redis db for Celery (13)")
    parser.add_argument(
        "--outages", type=int, default=0, help="slurmrestd outages (through a proxy) (0)"
    )
    parser.add_argument("--outage-secs", type=float, default=20.0, help="outage length (20)")
    parser.add_argument(
        "--outage-after", type=float, default=1.5, help="outage starts this long after a scancel"
    )
    parser.add_argument("--proxy-port", type=int, default=17099, help="port of the proxy")
    parser.add_argument(
        "--slow-start", type=float, default=0.0, help="engine listens this long into its job"
    )
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, signal.default_int_handler)

    common.setup_django(args.db)
    logging.getLogger("provisioner").setLevel(logging.ERROR)
    from django.conf import settings

    from obleth.core.choices import HostingMode
    from obleth.core.models import Launch, ManagedSpec, Model, Replica, SlurmSettings
    from tests.plugins.real_slurm import job_workdir, start_real_slurm

    prefix = f"oblbench{uuid.uuid4().hex[:6]}-"
    settings.OBLETH_PROVISIONER_JOB_PREFIX = prefix
    common.reset_rows()
    real = start_real_slurm()
    proxy: TcpProxy | None = None
    url = real.url
    if args.outages:
        parts = urllib.parse.urlsplit(real.url)
        proxy = TcpProxy(args.proxy_port, (parts.hostname or "127.0.0.1", parts.port or 6820))
        proxy.start()
        url = f"http://127.0.0.1:{args.proxy_port}"
    slurm = SlurmSettings.load()
    slurm.enabled, slurm.slurmrestd_url, slurm.user = True, url, real.user
    slurm.api_version, slurm.jwt = "", real.fresh_token(7200)
    log_dir = job_workdir(real, "bench-logs")
    slurm.log_dir = str(log_dir)
    slurm.save()
    db_env = {
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": os.environ["DATABASE_URL"],
        "OBLETH_DATABASE_URL": os.environ["DATABASE_URL"],
        "OBLETH_LOG_LEVEL": "WARNING",
    }
    gateway, gateway_url = lat.start_gateway(db_env)
    common.RESULTS.mkdir(parents=True, exist_ok=True)
    log_path = common.RESULTS / f"replace-{dt.datetime.now():%Y%m%d-%H%M%S}.log"
    workers: list[subprocess.Popen[bytes]] = []
    loop_stop = None
    if args.loop:
        from provisioner.services import StopFlag, run_loop

        loop_stop = StopFlag()
        handler = logging.FileHandler(log_path)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logging.getLogger("provisioner").addHandler(handler)
        logging.getLogger("provisioner").setLevel(logging.DEBUG)
        threading.Thread(
            target=run_loop,
            kwargs={
                "interval": float(settings.OBLETH_PROVISIONER_INTERVAL_SECS),
                "stop": loop_stop,
            },
            daemon=True,
        ).start()
    else:
        workers = lat.start_celery(
            {
                **db_env,
                "DJANGO_SETTINGS_MODULE": "obleth.settings",
                "OBLETH_SECRET_KEY": os.environ.get("OBLETH_SECRET_KEY", "bench-secret"),
                "OBLETH_ENCRYPTION_KEY": settings.OBLETH_ENCRYPTION_KEY,
                "OBLETH_CELERY_BROKER_URL": f"redis://127.0.0.1:6379/{args.redis_db}",
                "OBLETH_PROVISIONER_DISPATCH": "celery",
                "OBLETH_PROVISIONER_JOB_PREFIX": prefix,
                "OBLETH_LOG_LEVEL": "DEBUG",
                "OBLETH_LOG_CELERY_TASKS": "1",
            },
            log_path,
        )
    print(
        f"replace bench {dt.datetime.now().isoformat(timespec='seconds')}: {args.models} models "
        f"x 2 replicas, {args.cancels} scancels every {args.every:g} s, "
        f"{'run_loop' if args.loop else 'Celery worker+beat'}, log {log_path}"
    )
    names: list[str] = []
    clients: list[Clients] = []
    cancels: list[tuple[float, str, Any]] = []  # (time, job id, model id)
    outages: list[tuple[float, float]] = []
    try:
        for k in range(args.models):
            name = f"rb-{k}-{uuid.uuid4().hex[:4]}"
            model = Model.objects.create(
                name=name, hosting_mode=HostingMode.SLURM, upstream_model=name
            )
            ManagedSpec.objects.create(
                model=model,
                partition="debug",
                serving_port=args.port_base + 16 * k,
                script_body=recipe_like_script(name, args.slow_start),
                target_replicas=2,
                mem="64M",
                time_limit="30",
            )
            names.append(name)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if Replica.objects.filter(state="healthy").count() >= 2 * args.models:
                break
            time.sleep(0.2)
        clients = [Clients(gateway_url, names, 0.05) for _ in range(args.clients)]
        for c in clients:
            c.start()
        outage_at = {
            round((i + 1) * args.cancels / (args.outages + 1)) for i in range(args.outages)
        }
        for number in range(args.cancels):
            time.sleep(args.every)
            victims = list(Replica.objects.filter(state="healthy").exclude(job_id=""))
            if not victims:
                continue
            victim = random.choice(victims)
            subprocess.run(["scancel", victim.job_id], check=False)
            cancels.append((time.time(), victim.job_id, victim.model_id))
            if proxy is not None and number in outage_at:
                # The outage begins as soon as a replacement has been seen running, not serving
                # yet (state starting), or --outage-after seconds after the scancel.
                until = time.monotonic() + args.outage_after
                while time.monotonic() < until:
                    if Replica.objects.filter(state="starting").exists():
                        break
                    time.sleep(0.02)
                proxy.stop()
                began = time.time()
                print(f"  slurmrestd outage from {dt.datetime.now():%H:%M:%S.%f}"[:-3])
                time.sleep(args.outage_secs)
                proxy.start()
                outages.append((began, time.time()))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if Replica.objects.filter(state="healthy").count() >= 2 * args.models:
                break
            time.sleep(0.2)
        time.sleep(2)
    finally:
        for c in clients:
            c.halt.set()
        if loop_stop is not None:
            loop_stop.event.set()
        for proc in workers:
            proc.terminate()
        for proc in workers:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=30)
        gateway.terminate()
        gateway.wait(timeout=20)
        if proxy is not None:
            proxy.stop()
        rows = list(
            Launch.objects.exclude(job_id="").values(
                "job_id", "model_name", "submitted_at", "started_at", "healthy_at", "end_state"
            )
        )
        for job_id in lat.squeue(prefix):
            subprocess.run(["scancel", job_id], check=False)

    start_to_promoted: list[float] = []
    seen_to_promoted: list[float] = []  # Launch.started_at (a pass saw it RUNNING, not ready)
    cancel_to_promoted: list[float] = []
    slow: list[str] = []
    first_jobs = sorted(rows, key=lambda r: int(r["job_id"]))[: 2 * args.models]
    initial = {r["job_id"] for r in first_jobs}
    for row in sorted(rows, key=lambda r: int(r["job_id"])):
        if row["job_id"] in initial or row["healthy_at"] is None:
            continue
        started = lat.slurm_start_time(row["job_id"])
        promoted = row["healthy_at"].timestamp()
        submitted = row["submitted_at"].timestamp()
        before = [c[0] for c in cancels if c[0] <= submitted + 0.5]
        if started is not None:
            start_to_promoted.append(promoted - started)
        if row["started_at"] is not None:
            seen_to_promoted.append(promoted - row["started_at"].timestamp())
        if before:
            cancel_to_promoted.append(promoted - before[-1])
        seen = row["started_at"]
        late_start = started is not None and promoted - started > 3
        late_seen = seen is not None and promoted - seen.timestamp() > 3
        if late_start or late_seen:
            slow.append(
                f"    job {row['job_id']} ({row['model_name']}): submitted "
                f"{row['submitted_at']:%H:%M:%S.%f}"[:-3]
                + f", started {dt.datetime.fromtimestamp(started or 0):%H:%M:%S} (Slurm)"
                + (f", seen running {seen:%H:%M:%S.%f}"[:-3] if seen is not None else "")
                + f", promoted {row['healthy_at']:%H:%M:%S.%f}"[:-3]
            )
    print(figures("replacement started -> promoted", start_to_promoted))
    print(figures("scancel -> replacement promoted", cancel_to_promoted))
    print(figures("seen running (not ready) -> promoted", seen_to_promoted))
    outcomes: dict[int, int] = {}
    for c in clients:
        for status, n in c.outcomes.items():
            outcomes[status] = outcomes.get(status, 0) + n
    print(f"  client answers by status: {dict(sorted(outcomes.items()))}")
    for began, ended in outages:
        print(
            f"  slurmrestd outage {dt.datetime.fromtimestamp(began):%H:%M:%S.%f}"[:-3]
            + f" - {dt.datetime.fromtimestamp(ended):%H:%M:%S.%f}"[:-3]
        )
    if slow:
        print("  replacements promoted more than 3 s after their job started:")
        print("\n".join(slow))
    common.reset_rows()
    shutil.rmtree(log_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
