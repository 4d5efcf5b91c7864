"""Soak: the whole instance under a hostile cluster, with invariants sampled every second.

Starts ``scripts/run`` (its own OBLETH_VAR_DIR, database, private redis-server, port and job
prefix), deploys N models x 2 replicas of recipes/library/test-engine.recipe on the real local
Slurm, runs bounded client load through the gateway (127.0.0.1 only) and meanwhile: scancels a
random serving replica of ITS OWN prefix every few seconds, stops slurmrestd twice
(``scripts/slurm-local rest-stop`` / ``rest-start``), SIGKILLs the Celery worker twice, and
(``--chaos-redis``, on by default: the Redis is the soak's own) kills and restarts Redis once.
Prints the invariant counts, the replacement latencies and the client outcomes; exit status 1 when
an invariant broke.

    .venv/bin/python bench/soak.py --minutes 10            # the benchmark
    .venv/bin/python bench/soak.py --minutes 2 --models 3  # what tests/soak runs in CI

Needs root (the local Slurm cluster). Never touches jobs without its prefix, the shared Redis or
any database but its own (``--db``, default obleth_soak).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from bench._common import database_url, ensure_database, reset_rows, setup_django  # noqa: E402
from bench._soak_checks import (  # noqa: E402
    Cancel,
    Checks,
    Sample,
    match_replacements,
    slowest,
    spread,
)
from tests.faults.procs import (  # noqa: E402
    PrivateRedis,
    children,
    cmdline,
    free_port,
    http_ok,
    kill_session,
    scancel_prefix,
    squeue_prefix,
)

SLURM_LOCAL = ROOT / "scripts" / "slurm-local"


def log(msg: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Instance:
    """``scripts/run`` in a session of its own; stopped by that session, never by name."""

    def __init__(self, args: argparse.Namespace, db_url: str, redis: PrivateRedis) -> None:
        self.var = Path(tempfile.mkdtemp(prefix="obleth-soak-"))
        self.port = args.port or free_port()
        self.gateway_port = free_port()
        self.prefix = args.prefix
        self.env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG") if k in os.environ}
        self.env.update(
            OBLETH_VENV=os.environ.get("OBLETH_VENV", str(Path(sys.executable).parents[1])),
            OBLETH_VAR_DIR=str(self.var),
            OBLETH_BIND=f"127.0.0.1:{self.port}",
            OBLETH_GATEWAY_BIND=f"127.0.0.1:{self.gateway_port}",
            OBLETH_NO_DEMO="1",
            OBLETH_PROVISIONER_JOB_PREFIX=self.prefix,
            DATABASE_URL=db_url,
            REDIS_URL=redis.url,
        )
        self.log_path = self.var / "run.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def gateway(self) -> str:
        """The /v1 gateway service scripts/run starts beside the web process."""
        return f"http://127.0.0.1:{self.gateway_port}"

    def demo_key(self) -> str | None:
        """The gateway key scripts/run created for this instance (var/dev.env)."""
        for line in (self.var / "dev.env").read_text().splitlines():
            name, _, value = line.partition("=")
            if name == "OBLETH_DEMO_GATEWAY_KEY":
                return value
        return None

    def start(self) -> None:
        with open(self.log_path, "wb") as out:
            self.proc = subprocess.Popen(
                [str(ROOT / "scripts" / "run")],
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        deadline = time.monotonic() + 240
        while not (http_ok(self.base + "/healthz") and http_ok(self.gateway + "/healthz")):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = self.log_path.read_text(errors="replace")[-3000:]
                raise SystemExit(f"scripts/run did not come up:\n{tail}")
            time.sleep(0.5)

    def manage(self, *argv: str) -> subprocess.CompletedProcess[str]:
        env = dict(self.env)
        for line in (self.var / "dev.env").read_text().splitlines():
            name, sep, value = line.partition("=")
            if sep:
                env[name] = value
        env["DJANGO_SETTINGS_MODULE"] = "obleth.settings"
        return subprocess.run(
            [sys.executable, "manage.py", *argv],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def worker_pid(self) -> int | None:
        try:
            sup = int((self.var / "supervisord.pid").read_text().strip())
        except (OSError, ValueError):
            return None
        for pid in children(sup):
            argv = cmdline(pid)
            if "worker" in argv and "celery" in " ".join(argv[:2]):
                return pid
        return None

    def stop(self) -> str:
        """SIGTERM scripts/run and wait; returns what it said last."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(120)
        if self.proc is not None:
            kill_session(self.proc.pid)
        return "\n".join(
            line
            for line in self.log_path.read_text(errors="replace").splitlines()
            if line.startswith("[obleth]")
        )[-1500:]


def forget_instance() -> None:
    """Empty the soak database's provisioner tables AND its Slurm settings: each run's instance
    has new secrets, and a JWT encrypted by the last one would not decrypt."""
    from obleth.core.models import SlurmSettings

    reset_rows()
    from django.db import connection

    # Raw: deleting through the ORM would decrypt the old JWT first, with a key that is gone.
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {connection.ops.quote_name(SlurmSettings._meta.db_table)}")


class Load:
    """A few client threads through the gateway; bounded by the run's stop event."""

    def __init__(
        self, base: str, models: list[str], threads: int, key: str | None, pause: float
    ) -> None:
        self.base = base
        self.pause = pause
        self.models = models
        self.threads = threads
        self.headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.stop = threading.Event()
        self.outcomes: Counter[str] = Counter()
        self.no_replica: list[tuple[float, str]] = []  # (when, model) of each 503
        self.lock = threading.Lock()
        self.workers: list[threading.Thread] = []

    def _run(self, seed: int) -> None:
        rng = random.Random(seed)
        with httpx.Client(timeout=30, trust_env=False) as client:
            while not self.stop.is_set():
                model = rng.choice(self.models)
                body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
                try:
                    status = str(
                        client.post(
                            self.base + "/v1/chat/completions", json=body, headers=self.headers
                        ).status_code
                    )
                except httpx.HTTPError as exc:
                    status = type(exc).__name__
                with self.lock:
                    self.outcomes[status] += 1
                    if status == "503":
                        self.no_replica.append((time.time(), model))
                self.stop.wait(self.pause)

    def start(self) -> None:
        for i in range(self.threads):
            t = threading.Thread(target=self._run, args=(i,), name=f"load-{i}", daemon=True)
            t.start()
            self.workers.append(t)

    def finish(self) -> None:
        self.stop.set()
        for t in self.workers:
            t.join(40)


def job_starts(prefix: str, into: dict[str, float]) -> None:
    """Slurm's own start time (1 s resolution, local time) of each started job of the prefix."""
    out = subprocess.run(
        ["squeue", "-h", "-o", "%i|%j|%T|%S"], capture_output=True, text=True, check=False
    ).stdout
    for line in out.splitlines():
        job_id, name, state, start = (line.split("|", 3) + ["", "", ""])[:4]
        running = state in ("RUNNING", "COMPLETING")  # a PENDING job's %S is an estimate
        if running and name.startswith(prefix) and job_id not in into and start[:2] == "20":
            with contextlib.suppress(ValueError):
                into[job_id] = time.mktime(time.strptime(start, "%Y-%m-%dT%H:%M:%S"))


def sample(inst: Instance) -> Sample:
    from obleth.core.models import Endpoint, Replica

    jobs = squeue_prefix(inst.prefix)
    replicas: list[dict[str, Any]] = [
        dict(row)
        for row in Replica.objects.values("id", "model_name", "state", "job_id", "job_name")
    ]
    endpoints: list[dict[str, Any]] = []
    for row in Endpoint.objects.filter(replica_id__isnull=False).values(
        "replica_id", "model__name", "enabled", "health_status", "created_at"
    ):
        endpoint = dict(row)
        endpoint["model_name"] = endpoint.pop("model__name")
        endpoints.append(endpoint)
    return Sample(
        time.time(),
        jobs,
        replicas,
        endpoints,
        healthz_ok=http_ok(inst.base + "/healthz") and http_ok(inst.gateway + "/healthz"),
    )


class Chaos:
    """The scheduled faults, one thread; every outage window goes into ``checks``."""

    def __init__(self, args: argparse.Namespace, inst: Instance, redis: PrivateRedis) -> None:
        self.args = args
        self.inst = inst
        self.redis = redis
        self.cancels: list[Cancel] = []
        self.events: list[str] = []
        self.stop = threading.Event()

    def plan(self, start: float, duration: float) -> list[tuple[float, str]]:
        a = self.args
        steps: list[tuple[float, str]] = []
        t = 10.0
        while t < duration - 15:
            steps.append((start + t, "cancel"))
            t += a.cancel_every
        steps += [(start + duration * f, "kill-worker") for f in (0.25, 0.6)[: a.worker_kills]]
        steps += [(start + duration * f, "rest-outage") for f in (0.35, 0.75)[: a.rest_outages]]
        if a.chaos_redis:
            steps.append((start + duration * 0.5, "redis-outage"))
        return sorted(steps)

    def run(self, checks: Checks, start: float, duration: float) -> None:
        rng = random.Random(self.args.seed)
        for when, what in self.plan(start, duration):
            if self.stop.wait(max(0.0, when - time.time())):
                return
            getattr(self, what.replace("-", "_"))(checks, rng)

    def cancel(self, checks: Checks, rng: random.Random) -> None:
        from obleth.core.models import Replica

        jobs = squeue_prefix(self.inst.prefix)
        serving = {
            r["job_id"]: r
            for r in Replica.objects.filter(state="healthy").values("id", "job_id", "model_name")
        }
        candidates = sorted(j for j, (_, st) in jobs.items() if st == "RUNNING" and j in serving)
        if not candidates:
            self.events.append(f"{time.strftime('%H:%M:%S')} cancel skipped: no serving replica")
            return
        job_id = rng.choice(candidates)
        subprocess.run(["scancel", job_id], check=False)
        row = serving[job_id]
        self.cancels.append(Cancel(time.time(), job_id, str(row["id"]), row["model_name"]))

    def kill_worker(self, checks: Checks, rng: random.Random) -> None:
        pid = self.inst.worker_pid()
        if pid is None:
            self.events.append("kill-worker: no worker found")
            return
        began = time.time()
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while self.inst.worker_pid() in (None, pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        back = self.inst.worker_pid()
        took = time.time() - began
        self.events.append(
            f"kill-worker: SIGKILL {pid}; "
            + (f"restarted as {back} after {took:.1f}s" if back not in (None, pid) else "NOT back")
        )
        # the new worker connects and takes tasks
        checks.outage(began, time.time() + 5, "worker killed")

    def rest_outage(self, checks: Checks, rng: random.Random) -> None:
        began = time.time()
        stopped = subprocess.run(
            [str(SLURM_LOCAL), "rest-stop"], capture_output=True, text=True, check=False
        )
        if stopped.returncode != 0:
            self.events.append(f"rest-stop failed: {stopped.stderr.strip()[-200:]}")
            return
        self.stop.wait(self.args.rest_outage_secs)
        started = subprocess.run(
            [str(SLURM_LOCAL), "rest-start"], capture_output=True, text=True, check=False
        )
        self.events.append(
            f"slurmrestd down {time.time() - began:.1f}s"
            + ("" if started.returncode == 0 else f"; rest-start FAILED: {started.stderr[-200:]}")
        )
        checks.outage(began, time.time(), "slurmrestd down")

    def redis_outage(self, checks: Checks, rng: random.Random) -> None:
        began = time.time()
        self.redis.stop()
        self.stop.wait(self.args.redis_outage_secs)
        self.redis.start()
        self.events.append(f"redis (the soak's own) down {time.time() - began:.1f}s")
        checks.outage(began, time.time() + 5, "redis down")


def at_count(inst: Instance, models: list[str], target: int) -> dict[str, tuple[int, int]]:
    """model -> (healthy replicas, live jobs) for the models not at their count."""
    from obleth.core.models import Replica

    jobs = squeue_prefix(inst.prefix)
    off = {}
    for model in models:
        rows = list(Replica.objects.filter(model_name=model).values("state", "job_id"))
        healthy = sum(1 for r in rows if r["state"] == "healthy" and r["job_id"] in jobs)
        live = sum(1 for r in rows if r["job_id"] in jobs)
        if healthy != target or live != target:
            off[model] = (healthy, live)
    return off


class GuardWatch:
    """The model guards as the provisioner records them, sampled every second: the failed-launch
    breaker ("Stop after failed launches": ``ManagedSpec.breaker_message``) and the
    replacement-storm backoff (``storm_message``), with the spans each storm lasted. A model the
    breaker stopped is a failure under churn (issue 8); a storm slows replacements on purpose
    and never stops them, so its replacements are reported apart."""

    def __init__(self, models: list[str]) -> None:
        self.models = models
        self.stopped: set[str] = set()
        self.storms: dict[str, list[list[float]]] = {}  # model -> [[start, last seen], ...]

    def check(self) -> None:
        from obleth.core.models import ManagedSpec

        now = time.time()
        rows = ManagedSpec.objects.filter(model__name__in=self.models).values_list(
            "model__name", "breaker_message", "storm_message"
        )
        for name, breaker, storm in rows:
            if breaker:
                self.stopped.add(name)
            if storm:
                spans = self.storms.setdefault(name, [])
                if spans and now - spans[-1][1] < 5:
                    spans[-1][1] = now
                else:
                    spans.append([now, now])

    def storm_at(self, model: str, start: float, end: float) -> bool:
        """Whether the model was in a replacement storm between start and end."""
        return any(a <= end + 1 and b >= start - 1 for a, b in self.storms.get(model, []))


def main() -> int:  # noqa: PLR0915 - one straight story, told in order
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--minutes", type=float, default=10.0, help="chaos phase length (default 10)")
    p.add_argument("--models", type=int, default=5)
    p.add_argument("--replicas", type=int, default=2)
    p.add_argument("--threads", type=int, default=4, help="client threads (default 4)")
    p.add_argument(
        "--pause", type=float, default=0.2, help="seconds each client waits between requests"
    )
    p.add_argument("--cancel-every", type=float, default=10.0, help="seconds between scancels")
    p.add_argument("--rest-outages", type=int, default=2, choices=(0, 1, 2))
    p.add_argument("--rest-outage-secs", type=float, default=20.0)
    p.add_argument("--worker-kills", type=int, default=2, choices=(0, 1, 2))
    p.add_argument(
        "--chaos-redis",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="kill and restart the soak's own redis-server once (default on)",
    )
    p.add_argument("--redis-outage-secs", type=float, default=10.0)
    p.add_argument("--grace", type=float, default=25.0, help="one pass (15 s) plus slack")
    p.add_argument(
        "--settle",
        type=float,
        default=330.0,
        help="max seconds to settle at the end (default 330: past the storm guard's 300 s backoff)",
    )
    p.add_argument("--db", default="obleth_soak")
    p.add_argument("--port", type=int, default=0, help="web port (default: a free one)")
    p.add_argument("--prefix", default=f"obc-soak{uuid.uuid4().hex[:4]}-")
    p.add_argument("--gateway-key", default=os.environ.get("OBLETH_SOAK_GATEWAY_KEY"))
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", type=Path, help="also write the figures to this file")
    args = p.parse_args()
    if not args.prefix.startswith("obc-"):
        raise SystemExit("--prefix must start with obc- (the soak only ever cancels its own jobs)")

    url = database_url(args.db)
    ensure_database(url)
    setup_django(args.db)
    forget_instance()
    redis = PrivateRedis(Path(tempfile.mkdtemp(prefix="obleth-soak-redis-")))
    redis.start()
    inst = Instance(args, url, redis)
    models = [f"soak-{i}" for i in range(args.models)]
    result: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}}
    checks = Checks(grace=args.grace)
    try:
        log(f"starting scripts/run on {inst.base} (var {inst.var}, prefix {inst.prefix})")
        inst.start()
        for model in models:
            done = inst.manage(
                "deploy_recipe", "recipes/library/test-engine.recipe", "--name", model,
                "--replicas", str(args.replicas),
            )  # fmt: skip
            if done.returncode != 0:
                raise SystemExit(f"deploy_recipe {model} failed: {done.stderr[-1000:]}")
        log(f"deployed {len(models)} models x {args.replicas}; waiting for all to serve")
        deadline = time.monotonic() + 180
        while off := at_count(inst, models, args.replicas):
            if time.monotonic() > deadline:
                raise SystemExit(f"models never all served before the chaos: {off}")
            time.sleep(1)

        duration = args.minutes * 60
        start = time.time()
        key = args.gateway_key or inst.demo_key()
        load = Load(inst.gateway, models, args.threads, key, args.pause)
        chaos = Chaos(args, inst, redis)
        load.start()
        chaos_thread = threading.Thread(target=chaos.run, args=(checks, start, duration))
        chaos_thread.start()
        guards = GuardWatch(models)
        starts: dict[str, float] = {}  # job id -> Slurm's start time
        routed_at: dict[str, float] = {}
        log(f"chaos for {duration:.0f}s")
        while time.time() < start + duration:
            s = sample(inst)
            checks.add(s)
            for ep in s.endpoints:
                routed_at.setdefault(str(ep["replica_id"]), ep["created_at"].timestamp())
            guards.check()
            job_starts(inst.prefix, starts)
            time.sleep(max(0.0, 1.0 - (time.time() - s.at)))
        chaos.stop.set()
        chaos_thread.join(120)
        log("chaos over; settling")
        settle_start = time.time()
        settled_in: float | None = None
        while time.time() < settle_start + args.settle:
            s = sample(inst)
            checks.add(s)
            for ep in s.endpoints:
                routed_at.setdefault(str(ep["replica_id"]), ep["created_at"].timestamp())
            guards.check()
            off = at_count(inst, models, args.replicas)
            if not off:
                settled_in = time.time() - settle_start
                break
            if set(off) <= guards.stopped and time.time() - settle_start > 30:
                break  # only models the breaker stopped are short: they will not come back
            time.sleep(1)
        load.finish()
        off = at_count(inst, models, args.replicas)

        from obleth.core.models import Launch

        launches = [
            {**row, "submitted_at": row["submitted_at"].timestamp(),
             "started_at": starts.get(row["job_id"]),
             "healthy_at": row["healthy_at"].timestamp() if row["healthy_at"] else None}
            for row in Launch.objects.filter(model_name__in=models).values(
                "id", "model_name", "job_id", "submitted_at", "healthy_at"
            )
        ]  # fmt: skip
        reps = match_replacements(chaos.cancels, launches, routed_at)
        unexpected_503 = sum(1 for t, m in load.no_replica if checks.serving_at(m, t))
        # Replacements no replacement storm slowed (its backoff is on purpose: reported apart).
        calm = [
            r
            for r in reps
            if not guards.storm_at(r.cancel.model, r.cancel.at, r.cancel.at + (r.routed or 0))
        ]
        result.update(
            cancels=len(chaos.cancels),
            replaced=sum(1 for r in reps if r.routed is not None),
            not_replaced=[
                f"job {r.cancel.job_id} of {r.cancel.model}" for r in reps if r.routed is None
            ],
            duplicates=[v.detail for v in checks.duplicates],
            orphans=[v.detail for v in checks.orphans],
            stale_endpoints=[v.detail for v in checks.stale_endpoints],
            models_off_count=off,
            settled_in_secs=None if settled_in is None else round(settled_in, 1),
            breaker_stopped_models=sorted(guards.stopped),
            storm_models=sorted(guards.storms),
            healthz_failures=checks.healthz_failures,
            samples=checks.samples,
            latency_submitted=spread([r.submitted for r in reps if r.submitted is not None]),
            latency_started=spread([r.started for r in reps if r.started is not None]),
            latency_healthy=spread([r.healthy for r in reps if r.healthy is not None]),
            latency_routed=spread([r.routed for r in reps if r.routed is not None]),
            latency_routed_outside_storms=spread([r.routed for r in calm if r.routed is not None]),
            slowest_routed_outside_storms=slowest(calm, checks),
            replacements=[
                {
                    "job": r.cancel.job_id,
                    "model": r.cancel.model,
                    "cancelled_at": r.cancel.at,
                    "submitted": r.submitted,
                    "started": r.started,
                    "healthy": r.healthy,
                    "routed": r.routed,
                }
                for r in reps
            ],
            slowest_routed=slowest(
                reps,
                checks,
                also=lambda r: [] if r in calm else ["replacement storm backoff"],
            ),
            client_outcomes=dict(sorted(load.outcomes.items())),
            client_503_with_a_serving_replica=unexpected_503,
            events=chaos.events,
        )
    finally:
        said = inst.stop()
        result["scripts_run_said_on_stop"] = said
        drained = inst.manage("replicas_on_slurm", "--drain", "--timeout", "90")
        result["stop_replicas"] = (drained.stdout + drained.stderr).strip()[-300:]
        scancel_prefix(inst.prefix)  # only jobs of the soak's own prefix, if the drain left any
        redis.stop()
        with contextlib.suppress(Exception):
            forget_instance()
    return report(result)


def report(result: dict[str, Any]) -> int:
    broken = {
        "duplicate jobs": len(result.get("duplicates", [])),
        "orphan jobs past one pass": len(result.get("orphans", [])),
        "stale endpoints past one pass": len(result.get("stale_endpoints", [])),
        "cancels not replaced": len(result.get("not_replaced", [])),
        "models not at their count at the end": len(result.get("models_off_count", {})),
    }
    print()
    print("soak figures")
    print(f"  cancels {result.get('cancels')}, replaced and routed again {result.get('replaced')}")
    for name, count in broken.items():
        print(f"  {name:40s} {count}")
    stopped = len(result.get("breaker_stopped_models", []))
    print(f"  {'models stopped by the breaker':40s} {stopped}")
    print(f"  {'/healthz failures (1 s samples)':40s} {result.get('healthz_failures')}")
    print(f"  settled after the chaos in {result.get('settled_in_secs')} s")
    for what in ("submitted", "started", "healthy", "routed"):
        s = result.get(f"latency_{what}", {})
        print(
            f"  cancel -> {what:9s} median {s.get('median')} s  p90 {s.get('p90')} s  "
            f"max {s.get('max')} s  (n={s.get('n')})"
        )
    s = result.get("latency_routed_outside_storms", {})
    print(
        f"  cancel -> routed outside replacement storms: median {s.get('median')} s  "
        f"p90 {s.get('p90')} s  max {s.get('max')} s  (n={s.get('n')})"
    )
    storms = result.get("storm_models")
    print(f"  models that had a replacement storm (slowed, never stopped): {storms}")
    for line in result.get("slowest_routed", []):
        print(f"  slowest: {line}")
    for line in result.get("slowest_routed_outside_storms", []):
        print(f"  slowest outside storms: {line}")
    print(f"  client outcomes {result.get('client_outcomes')}")
    print(
        "  503 while the model had a serving replica: "
        f"{result.get('client_503_with_a_serving_replica')}"
    )
    for event in result.get("events", []):
        print(f"  event: {event}")
    for key in ("duplicates", "orphans", "stale_endpoints", "not_replaced"):
        for item in result.get(key, []):
            print(f"  {key}: {item}")
    if result.get("models_off_count"):
        print(f"  off count (healthy, live jobs): {result['models_off_count']}")
    if result.get("breaker_stopped_models"):
        print(f"  breaker stopped: {result['breaker_stopped_models']}")
    print(f"  scripts/run on stop: {result.get('scripts_run_said_on_stop', '').splitlines()[-1:]}")
    result["broken"] = broken
    if result.get("args", {}).get("json") not in (None, "None"):
        Path(result["args"]["json"]).write_text(json.dumps(result, indent=2, default=str))
    ok = "cancels" in result and not any(broken.values())
    print("soak: all invariants held" if ok else "soak: INVARIANTS BROKEN")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
