#!/usr/bin/env python3
"""Latency benchmark on the REAL local Slurm: how long until a ready engine is routable, and how
long until a job that ended is replaced.

Everything is real except the engine, which is the project's test engine started inside a real
Slurm job with ``--slow-start S`` (it listens only after S seconds, a stand-in for a model that
loads). slurmrestd, slurmctld, slurmd, the probes, the database (a dedicated one) and the gateway
(``python -m obleth.gateway.serve``, its own process, as in production) are the real ones.

(a) ready -> routable: from the engine's first 200 on /health (this script polls the replica's
    port window every 20 ms and timestamps it) to the first 200 of a chat completion sent through
    the gateway for that model.
(b) end -> replacement: from ``scancel`` of the replica's job to the replacement's Launch row
    (``submitted_at``: written just before the submit; counted once the job id is recorded),
    plus the duration of the pass that did it.

Modes (N repetitions each, median/min/max printed):
  cadence  passes on the fixed schedule of the beat task (OBLETH_PROVISIONER_INTERVAL_SECS,
           default 15 s); the engine's slow start and the cancel are placed at random phases of
           the schedule, so the figures sample the whole interval.
  event    the same loop, plus an immediate pass when something happens: the engine answering
           (a), the job having ended in Slurm, RUNNING and COMPLETING both over (b). What an
           event-driven trigger would give.
  fast     (a) only: a 1 s interval while one of the model's replicas is pending or starting,
           the normal interval otherwise (one suggested design change).
  shipped  the provisioner's own schedule (provisioner.services.run_loop): a full pass every
           interval and fast passes (run_pass(fast=True): one job listing, probes of replicas
           not serving yet) every OBLETH_PROVISIONER_FAST_INTERVAL_SECS (1 s) in between; the
           engine's start and the cancel at random phases, as for cadence.

Run: .venv/bin/python bench/latency_bench.py  (needs root for scripts/slurm-local; --help).
Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import json
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
import uuid
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common  # noqa: E402

ENGINE = common.ROOT / "provisioner" / "testengine" / "server.py"
POLL_SECS = 0.02
# The gateway is closed without a key: the bench's gateway service gets this static one.
GATEWAY_KEY = "bench-" + uuid.uuid4().hex
GATEWAY_POLL_SECS = 0.05


def engine_script(model_name: str, slow_start: float, marker: str = "") -> str:
    """The replica's job. With ``marker`` (a file path), only the first job slow-starts: a
    replacement listens at once, as the test-engine recipe does ("healthy a second after the
    job starts"), so (c) measures the provisioner, not the engine's start."""
    slow = f"{slow_start:.2f}"
    lines = [
        "#!/bin/bash",
        f'echo "replica of {model_name} on $(hostname) port $OBLETH_SERVING_PORT"',
    ]
    if marker:
        lines += [
            f"SLOW={slow}",
            f"if [ -e {marker} ]; then SLOW=0; else touch {marker}; fi",
        ]
        slow = "$SLOW"
    lines += [
        f'/usr/bin/python3 {ENGINE} --host 127.0.0.1 --port "$OBLETH_SERVING_PORT" '
        f"--model {model_name} --quiet --slow-start {slow} || true",
        "exec sleep 100000",
    ]
    return "\n".join(lines) + "\n"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def squeue(prefix: str) -> dict[str, str]:
    out = subprocess.run(
        ["squeue", "-h", "-o", "%i|%j|%T"], capture_output=True, text=True, check=False
    ).stdout
    jobs = {}
    for line in out.splitlines():
        job_id, name, state = line.split("|")
        if name.startswith(prefix):
            jobs[job_id] = state
    return jobs


def job_state(job_id: str) -> str:
    out = subprocess.run(
        ["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True, check=False
    ).stdout.strip()
    return out or "GONE"


# ----------------------------------------------------------------------------------- the loop


@dataclasses.dataclass
class PassRecord:
    started: float
    ended: float
    status: str
    actions: list[str]
    detail: str = ""


class CeleryLoop:
    """--celery: passes are the real Celery beat and worker (started once by main()); this
    stands in for Loop with no pass records (their timings are in the worker's log)."""

    def __init__(self) -> None:
        self.kick = threading.Event()
        self.passes: list[PassRecord] = []
        self.error: BaseException | None = None

    def start(self) -> None:
        return None

    def stop(self) -> None:
        return None

    def is_alive(self) -> bool:
        return True

    def first_pass_with(self, action: str, after: float, wait: float = 30) -> PassRecord | None:
        return None


def start_celery(env: dict[str, str], log_path: Path) -> list[subprocess.Popen[bytes]]:
    """A Celery worker (concurrency 4, as scripts/run) and beat on the bench database."""
    celery = str(Path(sys.executable).parent / "celery")
    out = log_path.open("ab")
    procs = [
        subprocess.Popen(
            [celery, "-A", "obleth", "worker", "--loglevel", "INFO", "--concurrency", "4"],
            cwd=common.ROOT,
            env={**os.environ, **env},
            stdout=out,
            stderr=subprocess.STDOUT,
        ),
        subprocess.Popen(
            [
                celery,
                "-A",
                "obleth",
                "beat",
                "--loglevel",
                "INFO",
                "--schedule",
                str(log_path.with_suffix(".beat")),
            ],
            cwd=common.ROOT,
            env={**os.environ, **env},
            stdout=out,
            stderr=subprocess.STDOUT,
        ),
    ]
    time.sleep(5)
    return procs


class Loop(threading.Thread):
    """The beat task, in a thread: run_pass on the interval (plus kicks in 'event' mode)."""

    def __init__(self, mode: str, interval: float, model_id: uuid.UUID) -> None:
        super().__init__(name=f"loop-{mode}", daemon=True)
        self.mode = mode
        self.interval = interval
        self.model_id = model_id
        self.kick = threading.Event()
        self.halt = threading.Event()
        self.passes: list[PassRecord] = []
        self.error: BaseException | None = None

    def starting(self) -> bool:
        from obleth.core.choices import ReplicaState
        from obleth.core.models import Replica

        return Replica.objects.filter(
            model_id=self.model_id, state__in=[ReplicaState.PENDING, ReplicaState.STARTING]
        ).exists()

    def run(self) -> None:
        from django.conf import settings
        from django.db import connection

        from provisioner.reconcile import run_pass

        origin = time.monotonic()
        beat = 0
        next_full = time.monotonic()
        fast_every = float(settings.OBLETH_PROVISIONER_FAST_INTERVAL_SECS)
        try:
            while not self.halt.is_set():
                started = time.time()
                if self.mode == "shipped":
                    # as run_loop does it: full passes on the interval, fast passes between
                    now = time.monotonic()
                    full = now >= next_full
                    if full:
                        next_full = now + self.interval
                    report = run_pass(dispatch="inline", warmup=False, fast=not full)
                else:
                    report = run_pass(dispatch="inline", warmup=False)
                self.passes.append(
                    PassRecord(
                        started,
                        time.time(),
                        report.status,
                        [r.action for r in report.results],
                        report.detail[:300],
                    )
                )
                if self.mode == "shipped":
                    wait = min(fast_every, next_full - time.monotonic())
                elif self.mode == "fast" and self.starting():
                    wait = 1.0
                else:
                    # Fixed-rate schedule like celery beat: the next beat after now.
                    while origin + beat * self.interval <= time.monotonic():
                        beat += 1
                    wait = origin + beat * self.interval - time.monotonic()
                if self.kick.wait(max(0.0, wait)):
                    self.kick.clear()
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            self.error = exc
        finally:
            connection.close()

    def stop(self) -> None:
        self.halt.set()
        self.kick.set()
        self.join(timeout=120)

    def first_pass_with(self, action: str, after: float, wait: float = 30) -> PassRecord | None:
        """The first pass ending after ``after`` that ran ``action`` (waits for its record)."""
        deadline = time.monotonic() + wait
        while True:
            found = next(
                (p for p in list(self.passes) if p.ended >= after and action in p.actions), None
            )
            if found is not None or time.monotonic() > deadline or not self.is_alive():
                return found
            time.sleep(0.05)


# ------------------------------------------------------------------------------- watchers


def wait_ready(model_name: str, port_base: int, span: int, deadline: float) -> float | None:
    """Poll the replica's window; return time.time() of the engine's first healthy answer."""
    with httpx.Client(timeout=0.5, trust_env=False) as client:
        while time.monotonic() < deadline:
            for port in range(port_base, port_base + span):
                url = f"http://127.0.0.1:{port}"
                try:
                    answer = client.get(url + "/health")
                except httpx.HTTPError:
                    continue
                at = time.time()
                if answer.status_code == 200 and answer.json().get("status") == "ok":
                    with contextlib.suppress(httpx.HTTPError, ValueError, KeyError, IndexError):
                        if client.get(url + "/v1/models").json()["data"][0]["id"] == model_name:
                            return at
            time.sleep(POLL_SECS)
    return None


class GatewayWatcher(threading.Thread):
    """Sends a chat completion for the model through the gateway every 50 ms from the moment it
    is deployed (so the gateway's route-cache refreshes fall at a random phase, as under real
    traffic); ``first_ok`` is time.time() of the first 200."""

    def __init__(self, gateway: str, model_name: str) -> None:
        super().__init__(name="gateway-watcher", daemon=True)
        self.url = f"{gateway}/v1/chat/completions"
        self.body = {
            "model": model_name,
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 1,
        }
        self.first_ok: float | None = None
        self.halt = threading.Event()

    def run(self) -> None:
        auth = {"Authorization": f"Bearer {GATEWAY_KEY}"}
        with httpx.Client(timeout=5, trust_env=False, headers=auth) as client:
            while not self.halt.is_set() and self.first_ok is None:
                with contextlib.suppress(httpx.HTTPError):
                    if client.post(self.url, json=self.body).status_code == 200:
                        self.first_ok = time.time()
                        return
                self.halt.wait(GATEWAY_POLL_SECS)

    def wait_ok(self, deadline: float) -> float | None:
        while self.first_ok is None and time.monotonic() < deadline and self.is_alive():
            time.sleep(0.02)
        return self.first_ok

    def stop(self) -> None:
        self.halt.set()
        self.join(timeout=10)


# ------------------------------------------------------------------------------ one repetition


@dataclasses.dataclass
class Rep:
    mode: str
    slow_start: float
    ready_to_routable: float | None = None
    wait_for_pass: float | None = None  # engine ready -> start of the pass that promoted it
    promote_pass_s: float | None = None
    promote_to_routable: float | None = None  # endpoint row written -> gateway answered
    end_to_submit: float | None = None
    end_to_event: float | None = None  # event mode: scancel -> not RUNNING nor COMPLETING
    end_to_pass: float | None = None  # scancel -> start of the pass that replaced it
    replace_pass_s: float | None = None
    # (c) the replacement (it listens as soon as its job starts): how soon it serves again
    end_to_routed: float | None = None  # scancel -> first 200 through the gateway again
    repl_start_to_ready: float | None = None  # replacement job started (Slurm) -> engine 200
    repl_ready_to_promoted: float | None = None  # replacement engine 200 -> Launch.healthy_at
    repl_promoted_to_routed: float | None = None
    repl_start_to_promoted: float | None = None  # replacement job started (Slurm) -> promoted
    note: str = ""
    passes_to_promote: list[str] = dataclasses.field(default_factory=list)
    passes_after_end: list[str] = dataclasses.field(default_factory=list)


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.prefix = f"oblbench{uuid.uuid4().hex[:6]}-"
        self.port_cursor = args.port_base

    def deploy(self, name: str, slow_start: float) -> Any:
        from obleth.core.choices import HostingMode
        from obleth.core.models import ManagedSpec, Model

        model = Model.objects.create(name=name, hosting_mode=HostingMode.SLURM, upstream_model=name)
        ManagedSpec.objects.create(
            model=model,
            partition="debug",
            serving_port=self.port_cursor,
            script_body=engine_script(name, slow_start, marker_path(name)),
            target_replicas=self.args.replicas,
            mem="128M",
            time_limit="30",
        )
        self.port_cursor += 16
        return model

    def cleanup(self, model: Any) -> None:
        from obleth.core.models import Endpoint, Launch, Replica

        for job_id in squeue(self.prefix):
            subprocess.run(["scancel", job_id], check=False)
        Endpoint.objects.filter(model_id=model.pk).delete()
        Replica.objects.filter(model_id=model.pk).delete()
        Launch.objects.filter(model_id=model.pk).delete()
        Path(marker_path(model.name)).unlink(missing_ok=True)
        model.delete()

    def measure_replacement(
        self,
        rep: Rep,
        loop: Loop,
        watcher: GatewayWatcher,
        launch_id: uuid.UUID,
        ended: float,
        deadline: float,
    ) -> None:
        _measure_replacement(rep, loop, watcher, launch_id, ended, deadline)

    def run_rep(self, mode: str, index: int, gateway: str) -> Rep:
        from obleth.core.models import Endpoint, Launch, Replica

        interval = float(self.args.interval)
        if mode in ("cadence", "shipped"):
            slow = random.uniform(1.0, 1.0 + interval)
        else:
            slow = random.uniform(1.0, 3.0)
        rep = Rep(mode=mode, slow_start=slow)
        name = f"lat-{mode}-{index}-{uuid.uuid4().hex[:4]}"
        model = self.deploy(name, slow)
        watcher = GatewayWatcher(gateway, name)
        watcher.start()
        loop: Any = CeleryLoop() if self.args.celery else Loop(mode, interval, model.pk)
        loop.start()
        try:
            deadline = time.monotonic() + 3 * interval + slow + 60
            replica = None
            while replica is None and time.monotonic() < deadline:
                replica = Replica.objects.filter(model_id=model.pk).first()
                time.sleep(0.05)
            if replica is None:
                rep.note = "no replica row"
                return rep
            port_base = replica.port_base or model.managed_spec.serving_port
            ready = wait_ready(name, port_base, 8, deadline)
            if ready is None:
                rep.note = "engine never answered"
                return rep
            if mode == "event":
                loop.kick.set()
            routable = watcher.wait_ok(deadline)
            if routable is None:
                rep.note = "never routable"
                return rep
            rep.ready_to_routable = routable - ready
            endpoint = Endpoint.objects.filter(model_id=model.pk).first()
            promoter = loop.first_pass_with("Promote", ready)
            if promoter is not None:
                rep.wait_for_pass = promoter.started - ready
                rep.promote_pass_s = promoter.ended - promoter.started
            if endpoint is not None:
                rep.promote_to_routable = routable - endpoint.created_at.timestamp()
            if mode == "fast":
                return rep

            # (b) the job ends; how long until its replacement is submitted?
            while (
                Replica.objects.filter(model_id=model.pk, state="healthy").count()
                < self.args.replicas
                and time.monotonic() < deadline
            ):
                time.sleep(0.05)
            victim = Replica.objects.filter(model_id=model.pk, state="healthy").first()
            if victim is None:
                rep.note = "no healthy replica to cancel"
                return rep
            if mode in ("cadence", "shipped"):
                time.sleep(random.uniform(0.0, interval))  # a random phase of the schedule
            again = GatewayWatcher(gateway, name)
            subprocess.run(["scancel", victim.job_id], check=True)
            ended = time.time()
            again.start()
            if mode == "event":
                # The event is the job having ENDED: while Slurm still says COMPLETING (its
                # processes being killed) slurmrestd reports it live and a pass waits for it.
                while (
                    job_state(victim.job_id) in ("RUNNING", "COMPLETING")
                    and time.monotonic() < deadline + 60
                ):
                    time.sleep(POLL_SECS)
                rep.end_to_event = time.time() - ended
                loop.kick.set()
            deadline = time.monotonic() + 3 * interval + 60
            launch = None
            earlier = set(
                Launch.objects.filter(model_id=model.pk).values_list("pk", flat=True)
            )  # the victim and, with --replicas 2+, its siblings: not the replacement
            while launch is None and time.monotonic() < deadline:
                launch = (
                    Launch.objects.filter(model_id=model.pk)
                    .exclude(pk__in=earlier)
                    .exclude(job_id="")
                    .first()
                )
                time.sleep(0.05)
            if launch is None:
                rep.note = "no replacement submitted"
                return rep
            rep.end_to_submit = launch.submitted_at.timestamp() - ended
            replacer = loop.first_pass_with("Submit", ended)
            rep.passes_after_end = [
                f"+{p.started - ended:.2f}s {p.status} {','.join(p.actions) or '-'} ({p.detail})"
                for p in loop.passes
                if p.ended >= ended and (replacer is None or p.started <= replacer.started)
            ]
            if replacer is not None:
                rep.end_to_pass = replacer.started - ended
                rep.replace_pass_s = replacer.ended - replacer.started
            if mode == "shipped":
                self.measure_replacement(rep, loop, again, launch.pk, ended, deadline)
            again.stop()
            return rep
        finally:
            watcher.stop()
            loop.stop()
            if loop.error is not None:
                rep.note = f"loop failed: {loop.error!r}"
            self.cleanup(model)


def marker_path(model_name: str) -> str:
    return f"/tmp/oblbench-{model_name}.started"


def slurm_start_time(job_id: str) -> float | None:
    """The job's start time as Slurm recorded it (epoch seconds; sacct-free: scontrol)."""
    out = subprocess.run(
        ["scontrol", "-o", "show", "job", job_id], capture_output=True, text=True, check=False
    ).stdout
    for field in out.split():
        if field.startswith("StartTime="):
            with contextlib.suppress(ValueError):
                return dt.datetime.fromisoformat(field.split("=", 1)[1]).timestamp()
    return None


def _measure_replacement(
    rep: Rep,
    loop: Loop,
    watcher: GatewayWatcher,
    launch_id: uuid.UUID,
    ended: float,
    deadline: float,
) -> None:
    """(c): the replacement listens as soon as its job starts; how soon is it promoted and
    routed? Records the passes between its engine answering and its promotion."""
    from obleth.core.models import Launch

    launch = Launch.objects.get(pk=launch_id)
    replica_port = (
        launch.submission.get("port_base") if isinstance(launch.submission, dict) else None
    )
    from obleth.core.models import Replica

    row = Replica.objects.filter(pk=launch_id).first()
    port_base = (row.port_base if row is not None else None) or replica_port
    if not port_base:
        rep.note = "replacement has no port window"
        return
    ready = wait_ready(launch.model_name, int(port_base), 8, deadline)
    routed = watcher.wait_ok(deadline)
    launch.refresh_from_db()
    while launch.healthy_at is None and time.monotonic() < deadline:
        time.sleep(0.05)
        launch.refresh_from_db()
    if routed is not None:
        rep.end_to_routed = routed - ended
    started = slurm_start_time(launch.job_id) if launch.job_id else None
    if ready is not None and started is not None:
        rep.repl_start_to_ready = ready - started
    if launch.healthy_at is not None:
        promoted = launch.healthy_at.timestamp()
        if ready is not None:
            rep.repl_ready_to_promoted = promoted - ready
        if started is not None:
            rep.repl_start_to_promoted = promoted - started
        if routed is not None:
            rep.repl_promoted_to_routed = routed - promoted
        since = ready if ready is not None else ended
        rep.passes_to_promote = [
            f"+{p.started - since:.2f}s ({p.ended - p.started:.2f}s) {p.status} "
            f"{','.join(p.actions) or '-'}"
            for p in list(loop.passes)
            if p.ended >= since - 1 and p.started <= promoted
        ]


def start_gateway(env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "obleth.gateway.serve",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "1",
        ],
        cwd=common.ROOT,
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url + "/healthz", timeout=2, trust_env=False).status_code == 200:
                return proc, url
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    proc.terminate()
    raise SystemExit("the gateway service (python -m obleth.gateway.serve) did not start")


def show(label: str, values: list[float | None]) -> str:
    found = [v for v in values if v is not None]
    return f"    {label:<38}: {common.spread(found)}"


def settings_fast() -> str:
    from django.conf import settings

    return f"{settings.OBLETH_PROVISIONER_FAST_INTERVAL_SECS:g}"


def verdict(label: str, reps: list[Any], interval: float) -> None:
    """Whether the issue's goals hold for one mode: (a) < 2 s and (b) < 3 s, worst case."""
    a = [r.ready_to_routable for r in reps if r.ready_to_routable is not None]
    b = [r.end_to_submit for r in reps if r.end_to_submit is not None]
    if not (a and b):
        return
    verdict_a = "meets" if max(a) < 2 else "does NOT meet"
    verdict_b = "meets" if max(b) < 3 else "does NOT meet"
    print(
        f"\n  goals, {label} ({interval:g} s full-pass interval): (a) < 2 s {verdict_a} "
        f"(median {statistics.median(a):.2f} s, max {max(a):.2f} s); (b) < 3 s {verdict_b} "
        f"(median {statistics.median(b):.2f} s, max {max(b):.2f} s)."
    )


def main() -> int:
    parser = argparse.ArgumentParser(description="latency benchmark (real local Slurm)")
    parser.add_argument("-n", "--reps", type=int, default=5, help="repetitions per mode (5)")
    parser.add_argument(
        "--modes", default="cadence,shipped,event", help="cadence,shipped,event,fast"
    )
    parser.add_argument("--interval", type=float, help="pass interval s (settings: 15)")
    parser.add_argument("--db", default="obleth_bench_latency", help="database name")
    parser.add_argument("--port-base", type=int, default=17100, help="first serving_port")
    parser.add_argument("--json", action="store_true", help="also write bench/results/*.json")
    parser.add_argument("--replicas", type=int, default=1, help="replicas per model (1)")
    parser.add_argument(
        "--celery",
        action="store_true",
        help="passes by a real Celery worker+beat (Redis db --redis-db) instead of run_pass here",
    )
    parser.add_argument("--redis-db", type=int, default=13, help="Redis db for --celery (13)")
    args = parser.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = set(modes) - {"cadence", "event", "fast", "shipped"}
    if unknown or args.reps < 1:
        parser.error(
            f"--modes takes cadence, shipped, event, fast (got {sorted(unknown)}); -n >= 1"
        )

    # SIGTERM cleans up like Ctrl-C: the jobs, the worker and the gateway are stopped.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    common.setup_django(args.db)
    logging.getLogger("provisioner").setLevel(logging.ERROR)  # "replica lost" is expected here
    from django.conf import settings

    from obleth.core.models import SlurmSettings
    from tests.plugins.real_slurm import job_workdir, start_real_slurm

    args.interval = args.interval or float(settings.OBLETH_PROVISIONER_INTERVAL_SECS)
    bench = Bench(args)
    settings.OBLETH_PROVISIONER_JOB_PREFIX = bench.prefix  # never touches anyone else's jobs
    common.reset_rows()
    real = start_real_slurm()
    slurm = SlurmSettings.load()
    slurm.enabled = True
    slurm.slurmrestd_url = real.url
    slurm.user = real.user
    slurm.api_version = ""
    slurm.jwt = real.fresh_token(7200)
    log_dir = job_workdir(real, "bench-logs")
    slurm.log_dir = str(log_dir)
    slurm.save()
    db_env = {
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": os.environ["DATABASE_URL"],
        "OBLETH_DATABASE_URL": os.environ["DATABASE_URL"],
        "OBLETH_LOG_LEVEL": "WARNING",
        "OBLETH_GATEWAY_API_KEYS": GATEWAY_KEY,
    }
    gateway, gateway_url = start_gateway(db_env)
    workers: list[subprocess.Popen[bytes]] = []
    if args.celery:
        common.RESULTS.mkdir(parents=True, exist_ok=True)
        celery_log = common.RESULTS / f"celery-{dt.datetime.now():%Y%m%d-%H%M%S}.log"
        celery_env = {
            **db_env,
            "DJANGO_SETTINGS_MODULE": "obleth.settings",
            "OBLETH_SECRET_KEY": os.environ.get("OBLETH_SECRET_KEY", "bench-secret"),
            "OBLETH_ENCRYPTION_KEY": settings.OBLETH_ENCRYPTION_KEY,
            "OBLETH_CELERY_BROKER_URL": f"redis://127.0.0.1:6379/{args.redis_db}",
            "OBLETH_PROVISIONER_DISPATCH": "celery",
            "OBLETH_PROVISIONER_JOB_PREFIX": bench.prefix,
            "OBLETH_LOG_LEVEL": "DEBUG",
        }
        workers = start_celery(celery_env, celery_log)
        print(f"celery worker+beat logging to {celery_log}")
    print(
        f"latency benchmark {dt.datetime.now().isoformat(timespec='seconds')}: real Slurm at "
        f"{real.url}, gateway {gateway_url} (reloads on change notices, else every "
        f"{settings.OBLETH_GATEWAY_RELOAD_SECS} s), pass interval "
        f"{args.interval:g} s, job prefix {bench.prefix}, {args.reps} reps per mode"
    )
    results: dict[str, list[Rep]] = {}
    try:
        for mode in modes:
            results[mode] = []
            for i in range(args.reps):
                rep = bench.run_rep(mode, i, gateway_url)
                results[mode].append(rep)
                print(f"  {mode} #{i + 1}: {_line(rep)}")
                sys.stdout.flush()
    finally:
        for proc in workers:
            proc.terminate()
        for proc in workers:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=30)
        gateway.terminate()
        gateway.wait(timeout=20)
        for job_id in squeue(bench.prefix):
            subprocess.run(["scancel", job_id], check=False)
        common.reset_rows()
        shutil.rmtree(log_dir, ignore_errors=True)

    print("\n== summary (seconds) ==")
    for mode, reps in results.items():
        what = {
            "cadence": f"a pass every {args.interval:g} s",
            "event": "a pass at once on the event, else every interval",
            "fast": "1 s interval while a replica is starting",
            "shipped": f"full pass every {args.interval:g} s, fast passes every "
            f"{settings_fast()} s in between (as shipped)",
        }[mode]
        print(f"  {mode}: {what}")
        print(show("(a) engine ready -> routable", [r.ready_to_routable for r in reps]))
        print(show("    ready -> promoting pass starts", [r.wait_for_pass for r in reps]))
        print(show("    promoting pass duration", [r.promote_pass_s for r in reps]))
        print(show("    endpoint written -> routable", [r.promote_to_routable for r in reps]))
        if mode != "fast":
            print(show("(b) scancel -> replacement submitted", [r.end_to_submit for r in reps]))
            print(show("    scancel -> replacing pass starts", [r.end_to_pass for r in reps]))
            if mode == "event":
                ended_at = [r.end_to_event for r in reps]
                print(show("    scancel -> job ended (not COMPLETING)", ended_at))
            print(show("    replacing pass duration", [r.replace_pass_s for r in reps]))
        if mode == "shipped":
            print(show("(c) scancel -> routed again", [r.end_to_routed for r in reps]))
            print(
                show(
                    "    replacement started -> engine ready", [r.repl_start_to_ready for r in reps]
                )
            )
            print(
                show("    replacement ready -> promoted", [r.repl_ready_to_promoted for r in reps])
            )
            print(show("    promoted -> routed", [r.repl_promoted_to_routed for r in reps]))
            start_promoted = [r.repl_start_to_promoted for r in reps]
            print(show("    replacement started -> promoted", start_promoted))
            routed = sorted(r.end_to_routed for r in reps if r.end_to_routed is not None)
            if routed:
                p90 = routed[min(len(routed) - 1, int(round(0.9 * (len(routed) - 1))))]
                print(
                    f"    scancel -> routed p50 {statistics.median(routed):.2f} s, "
                    f"p90 {p90:.2f} s, max {routed[-1]:.2f} s (N={len(routed)})"
                )
        failed = [r.note for r in reps if r.note]
        if failed:
            print(f"    problems: {failed}")
    for label in ("cadence", "shipped"):
        verdict(label, results.get(label, []), args.interval)
    if args.json:
        common.RESULTS.mkdir(parents=True, exist_ok=True)
        path = common.RESULTS / f"latency_bench-{dt.datetime.now():%Y%m%d-%H%M%S}.json"
        path.write_text(
            json.dumps({m: [dataclasses.asdict(r) for r in v] for m, v in results.items()})
        )
        print(f"wrote {path}")
    return 0


def _line(rep: Rep) -> str:
    parts = []
    for key, value in dataclasses.asdict(rep).items():
        if key == "mode" or value in (None, "", []):
            continue
        parts.append(f"{key}={value:.3f}" if isinstance(value, float) else f"{key}={value}")
    return " ".join(parts)


if __name__ == "__main__":
    raise SystemExit(main())
