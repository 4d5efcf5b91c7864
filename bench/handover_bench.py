#!/usr/bin/env python3
"""Walltime handover on the REAL local Slurm: failed requests and successors' time to serving
across N boundaries.

One model, one replica of the test engine with a short time limit (default 3 minutes) and
``handover_secs`` (default 120): each replica gets a successor before its end, is drained and
cancelled. Client requests go through the real gateway service (``python -m
obleth.gateway.serve`` on 127.0.0.1, ``OBLETH_GATEWAY_OPEN=1``: a lab setting, the bench's only
client is itself) in a bounded loop.
Passes run inline, one a second. For every boundary it prints: the successor's submit -> job
start (Slurm queue), job start -> promotion (engine start + probe), promotion -> old one out of
routing, and how the old job ended; then the request totals.

With ``--wakes N`` it then measures waking from zero N times: a second model autoscaled with
``min_replicas 0`` (the test engine, ``scale_to_zero_after_secs`` short) sits at zero replicas; a
request goes through the gateway service (``python -m obleth.gateway.serve``, which holds it and
signals the wake), the provisioner loop runs as in production (``run_loop``: a fast pass a second
and a pass at once on the wake signal) in a thread. For each wake it prints request -> submit
(signal + pass), the Slurm queue (submit -> job start), the engine start (job start -> promoted:
start + probe) and probe-to-route (promoted -> the held request answered: endpoint registered,
gateway table reloaded, request relayed). The model then idles back to zero for the next one.

Jobs carry a random ``obw-…`` prefix and are cancelled at the end (only those). The gateways
listen on the first free ports of ``--ports`` (default 21300-21399), the models' port windows
start 10 and 50 ports above its first.

Run: .venv/bin/python bench/handover_bench.py --boundaries 3
     .venv/bin/python bench/handover_bench.py --boundaries 0 --wakes 5 --ports 24000-24099
Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import logging
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common  # noqa: E402

PORTS = range(21300, 21400)


def port_range(text: str) -> range:
    first, _, last = text.partition("-")
    if not (first.isdigit() and last.isdigit() and 1024 <= int(first) < int(last) <= 65535):
        raise SystemExit(f"--ports {text!r}: give FIRST-LAST, e.g. 24000-24099")
    return range(int(first), int(last) + 1)


def free_port_in_range(skip: tuple[int, ...] = ()) -> int:
    for port in PORTS:
        if port in skip or PORTS.start + 10 <= port < PORTS.start + 90:  # the models' windows
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise SystemExit(f"no free port in {PORTS.start}-{PORTS.stop - 1}")


def engine_script(engine: str, model_name: str) -> str:
    return (
        "#!/bin/bash\n"
        f'echo "replica of {model_name} on $(hostname) port $OBLETH_SERVING_PORT"\n'
        f'/usr/bin/python3 {engine} --host 127.0.0.1 --port "$OBLETH_SERVING_PORT" '
        f"--model {model_name} --quiet || true\n"
        "exec sleep 100000\n"
    )


class Load(threading.Thread):
    def __init__(self, url: str, model: str) -> None:
        super().__init__(daemon=True)
        self.url, self.model = url, model
        self.stop = threading.Event()
        self.ok = 0
        self.failed: list[str] = []
        self.latencies: list[float] = []

    def run(self) -> None:
        body = {"model": self.model, "messages": [{"role": "user", "content": "hi"}]}
        with httpx.Client(timeout=30, trust_env=False) as client:
            while not self.stop.is_set():
                started = time.monotonic()
                try:
                    answer = client.post(self.url + "/v1/chat/completions", json=body)
                except httpx.HTTPError as exc:
                    self.failed.append(f"{type(exc).__name__}: {exc}")
                    continue
                if answer.status_code == 200:
                    self.ok += 1
                    self.latencies.append(time.monotonic() - started)
                else:
                    self.failed.append(f"{answer.status_code}: {answer.text[:120]}")
                time.sleep(0.05)


def start_gateway(
    env: dict[str, str], *, skip: tuple[int, ...] = (), workers: int | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    """The /v1 gateway service on a free port of the range (it counts in-flight requests and
    holds a request for a wake); ``workers`` None: the service's own default."""
    port = free_port_in_range(skip=skip)
    command = [sys.executable, "-m", "obleth.gateway.serve", "--bind", f"127.0.0.1:{port}"]
    if workers is not None:
        command += ["--workers", str(workers)]
    proc = subprocess.Popen(
        command,
        cwd=common.ROOT,
        env={**os.environ, "PYTHONPATH": str(common.ROOT), **env},
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


def wake_from_zero(url: str, engine: str, wakes: int, idle_secs: int) -> None:
    """Wake a model at zero ``wakes`` times through the gateway service; print the split."""
    from obleth.core.choices import HostingMode
    from obleth.core.models import Launch, ManagedSpec, Model, Replica
    from provisioner.services import StopFlag, run_loop

    name = f"bench-wake-{uuid.uuid4().hex[:4]}"
    model = Model.objects.create(name=name, hosting_mode=HostingMode.SLURM, upstream_model=name)
    ManagedSpec.objects.create(
        model=model,
        partition="debug",
        serving_port=PORTS.start + 50,
        script_body=engine_script(engine, name),
        target_replicas=0,
        min_replicas=0,
        max_replicas=1,
        scale_up_delay_secs=0,
        scale_to_zero_after_secs=idle_secs,
        mem="128M",
        time_limit="30",
    )
    stop = StopFlag()
    loop = threading.Thread(
        target=run_loop, kwargs={"interval": 15, "fast_interval": 1, "stop": stop}, daemon=True
    )
    loop.start()
    rows: list[tuple[float | None, ...]] = []
    failed: list[str] = []
    body = {"model": name, "messages": [{"role": "user", "content": "hi"}]}

    def at_zero() -> bool:
        spec = ManagedSpec.objects.get(model=model)
        rows_left = Replica.objects.filter(model_id=model.pk).exists()
        return spec.autoscale_replicas == 0 and not rows_left

    try:
        for n in range(wakes):
            deadline = time.monotonic() + 120 + idle_secs
            while not at_zero():
                if time.monotonic() > deadline:
                    raise SystemExit("the model did not go to zero replicas")
                time.sleep(0.5)
            time.sleep(2)  # the gateway's table has caught up with zero
            asked = time.time()
            try:
                answer = httpx.post(
                    url + "/v1/chat/completions", json=body, timeout=300, trust_env=False
                )
                status = answer.status_code
            except httpx.HTTPError as exc:
                status, answer = 0, None
                failed.append(f"{type(exc).__name__}: {exc}")
            served = time.time()
            if status != 200:
                failed.append(f"{status}: {answer.text[:160] if answer is not None else ''}")
            launch = (
                Launch.objects.filter(model_id=model.pk, submitted_at__gte=_at(asked - 1))
                .order_by("submitted_at")
                .first()
            )
            if launch is None:
                rows.append((None, None, None, None, served - asked))
                continue
            settle = time.monotonic() + 5  # the promoting pass records the job's start after
            while launch.started_at is None and time.monotonic() < settle:  # the endpoint
                time.sleep(0.2)
                launch.refresh_from_db()
            sub, start, ready = launch.submitted_at, launch.started_at, launch.healthy_at
            rows.append(
                (
                    sub.timestamp() - asked if sub else None,
                    secs(sub, start),
                    secs(start, ready),
                    served - ready.timestamp() if ready else None,
                    served - asked,
                )
            )
            print(
                f"  wake {n + 1}: HTTP {status} after {served - asked:.1f} s (job {launch.job_id})"
            )
    finally:
        stop.event.set()
        loop.join(timeout=60)
        for replica in Replica.objects.filter(model_id=model.pk).exclude(job_id=""):
            with contextlib.suppress(Exception):
                subprocess.run(["scancel", replica.job_id], check=False)

    columns = list(zip(*rows, strict=True)) if rows else [[] for _ in range(5)]
    print(f"wakes from zero: {len(rows)}, {len(failed)} failed")
    print(f"request -> replica submitted (wake signal + pass), s: {show(list(columns[0]))}")
    # Slurm records start times in whole seconds; passes run once a second.
    print(f"Slurm queue (submit -> job start, 1 s resolution), s: {show(list(columns[1]))}")
    print(f"engine start (job start -> promoted: start + probe), s: {show(list(columns[2]))}")
    print(f"probe-to-route (promoted -> held request answered), s: {show(list(columns[3]))}")
    print(f"total (request -> answer), s: {show(list(columns[4]))}")
    for line in failed[:10]:
        print(f"  failed: {line}")


def _at(epoch: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(epoch, tz=dt.UTC)


def secs(a: dt.datetime | None, b: dt.datetime | None) -> float | None:
    return (b - a).total_seconds() if a is not None and b is not None else None


def show(values: list[float | None]) -> str:
    known = [v for v in values if v is not None]
    return common.spread(known) if known else "n/a"


def handover(args: argparse.Namespace, engine: str, env: dict[str, str]) -> None:
    """Walltime handover across ``args.boundaries`` boundaries (see the module docstring)."""
    from obleth.core.choices import HostingMode, ReplicaState
    from obleth.core.models import Endpoint, Launch, ManagedSpec, Model, Replica
    from provisioner.reconcile import run_pass
    from tests.plugins.real_slurm import scancel

    gateway, url = start_gateway(env, workers=1)
    name = f"bench-handover-{uuid.uuid4().hex[:4]}"
    model = Model.objects.create(name=name, hosting_mode=HostingMode.SLURM, upstream_model=name)
    ManagedSpec.objects.create(
        model=model,
        partition="debug",
        serving_port=PORTS.start + 10,
        script_body=engine_script(engine, name),
        target_replicas=1,
        mem="128M",
        time_limit=args.time_limit,
        handover_secs=args.handover_secs,
    )
    print(
        f"handover bench {dt.datetime.now(dt.UTC).isoformat(timespec='seconds')}: "
        f"{args.boundaries} boundaries, time limit {args.time_limit} min, handover "
        f"{args.handover_secs} s, drain {args.drain_secs} s, {args.clients} clients, gateway {url}"
    )
    loads: list[Load] = []
    handed: list[uuid.UUID] = []
    retired_at: dict[uuid.UUID, float] = {}
    min_serving = 10**6
    try:
        deadline = time.monotonic() + 300
        while not Replica.objects.filter(model_id=model.pk, state=ReplicaState.HEALTHY).exists():
            run_pass(dispatch="inline")
            if time.monotonic() > deadline:
                raise SystemExit("the first replica did not become healthy in 300 s")
            time.sleep(1)
        current = Replica.objects.get(model_id=model.pk, state=ReplicaState.HEALTHY).pk
        loads = [Load(url, name) for _ in range(args.clients)]
        for load in loads:
            load.start()
        while len(handed) < args.boundaries:
            run_pass(dispatch="inline")
            serving = Endpoint.objects.filter(model=model, replica_id__isnull=False).count()
            min_serving = min(min_serving, serving)
            old = Replica.objects.filter(pk=current).first()
            if old is not None and old.state == ReplicaState.DRAINING and current not in retired_at:
                retired_at[current] = time.time()
            if old is None or (old.state == ReplicaState.DRAINING and old.drain_deadline is None):
                successor = Replica.objects.filter(successor_of=current).first()
                if successor is None:
                    print(
                        f"replica {current} ended without a successor: {old and old.last_message}"
                    )
                    break
                handed.append(current)
                print(f"  boundary {len(handed)}: {current.hex[:8]} -> {successor.pk.hex[:8]}")
                current = successor.pk
            time.sleep(1)
        time.sleep(2)
    finally:
        for load in loads:
            load.stop.set()
        for load in loads:
            load.join(timeout=30)
        gateway.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            gateway.wait(timeout=10)
        for replica in Replica.objects.filter(model_id=model.pk).exclude(job_id=""):
            with contextlib.suppress(Exception):
                scancel(int(replica.job_id))

    queue: list[float | None] = []
    start: list[float | None] = []
    overlap: list[float | None] = []
    ends: list[str] = []
    for old_id in handed:
        successor = Replica.objects.filter(successor_of=old_id).first()
        launch = Launch.objects.filter(pk=successor.pk).first() if successor else None
        if launch is not None:
            queue.append(secs(launch.submitted_at, launch.started_at))
            start.append(secs(launch.started_at, launch.healthy_at))
            if launch.healthy_at is not None and old_id in retired_at:
                overlap.append(retired_at[old_id] - launch.healthy_at.timestamp())
        old_launch = Launch.objects.filter(pk=old_id).first()
        ends.append(old_launch.end_state if old_launch else "?")
    ok = sum(load.ok for load in loads)
    failed = [f for load in loads for f in load.failed]
    latencies = [v for load in loads for v in load.latencies]
    print(f"boundaries crossed: {len(handed)} of {args.boundaries}")
    # Slurm records start times in whole seconds: a job started at once can read slightly < 0.
    print(f"successor submit -> job start (Slurm queue, 1 s resolution), s: {show(queue)}")
    print(f"successor job start -> promoted (engine start + probe), s: {show(start)}")
    print(f"successor promoted -> old out of routing (next pass), s: {show(overlap)}")
    print(f"old replicas ended as: {', '.join(ends) or 'n/a'}")
    print(f"fewest provisioner endpoints seen by a pass: {min_serving}")
    print(f"requests: {ok} ok, {len(failed)} failed")
    if latencies:
        print(
            f"request latency, s: median {statistics.median(latencies):.3f} "
            f"max {max(latencies):.3f}"
        )
    for line in failed[:10]:
        print(f"  failed: {line}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default="obleth_bench_handover")
    parser.add_argument("--boundaries", type=int, default=3)
    parser.add_argument("--time-limit", default="3", help="the job's Slurm time limit")
    parser.add_argument("--handover-secs", type=int, default=120)
    parser.add_argument("--drain-secs", type=int, default=5)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--wakes", type=int, default=0, help="wake-from-zero cycles to measure")
    parser.add_argument("--idle-secs", type=int, default=5, help="scale_to_zero_after_secs")
    parser.add_argument("--ports", default="21300-21399", help="gateways and port windows")
    args = parser.parse_args()
    global PORTS
    PORTS = port_range(args.ports)

    common.setup_django(args.db)
    logging.getLogger("provisioner").setLevel(logging.ERROR)
    from django.conf import settings

    from obleth.core.models import SlurmSettings
    from provisioner.testengine import install_copy
    from tests.plugins.real_slurm import job_workdir, start_real_slurm

    prefix = f"obw-{uuid.uuid4().hex[:6]}-"
    settings.OBLETH_PROVISIONER_JOB_PREFIX = prefix
    settings.OBLETH_PROVISIONER_DISPATCH = "inline"
    settings.OBLETH_PROVISIONER_DRAIN_SECS = args.drain_secs
    settings.OBLETH_PROVISIONER_WARMUP_TIMEOUT_SECS = 30
    common.reset_rows()
    real = start_real_slurm()
    slurm = SlurmSettings.load()
    slurm.enabled, slurm.slurmrestd_url, slurm.user = True, real.url, real.user
    slurm.api_version, slurm.jwt = "", real.fresh_token(7200)
    slurm.log_dir = str(job_workdir(real, "bench-logs"))
    slurm.save()
    engine = str(install_copy(settings.OBLETH_ENGINES_DIR))
    env = {
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": os.environ["DATABASE_URL"],
        "OBLETH_DATABASE_URL": os.environ["DATABASE_URL"],
        "OBLETH_LOG_LEVEL": "WARNING",
        "OBLETH_GATEWAY_OPEN": "1",
    }
    if args.boundaries > 0:
        handover(args, engine, env)
    if args.wakes > 0:
        service, url = start_gateway(env, skip=(0,))
        print(
            f"wake-from-zero bench {dt.datetime.now(dt.UTC).isoformat(timespec='seconds')}: "
            f"{args.wakes} wakes, idle {args.idle_secs} s to zero, gateway service {url}"
        )
        try:
            wake_from_zero(url, engine, args.wakes, args.idle_secs)
        finally:
            service.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                service.wait(timeout=10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
