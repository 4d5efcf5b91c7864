#!/usr/bin/env python3
"""Pass benchmark: N models x 2 replicas against the FAKE slurmrestd and FAKE engines.

What runs for real: the provisioner's pass (run_pass, inline dispatch, warm-up off), its Django ORM
on a dedicated PostgreSQL database, its slurmrestd client over HTTP, and its probes over TCP/HTTP
to engines on 127.0.0.1. What is fake: slurmrestd (provisioner/slurm/fake.py, in its own process,
every job RUNNING on node "localhost" at once) and the engines (the test engine's handlers, one
process, one port per replica window; see bench/_engines.py).

For each scale (default 100, 500, 1000 models) it prints the pass that submits every job, the
pass(es) that promote them, then several steady-state passes (all replicas healthy) with their
median/min/max wall time, slurmrestd requests, database queries, probes and worker RSS. It then
checks that steady-state requests and queries do not grow with the number of models, and names
the queries that do if they do.

Run: .venv/bin/python bench/pass_bench.py  (options: --help). Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import json
import logging
import secrets
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common  # noqa: E402

ENGINE_STEP = 8  # = OBLETH_PORT_SPAN: replica i of a model gets window serving_port + i*8
MODEL_STRIDE = 16  # two windows per model


class Instrument:
    """Times the pass's phases by wrapping module attributes (provisioner code is untouched)."""

    def __init__(self) -> None:
        import provisioner.observe as observe_mod
        import provisioner.reconcile as reconcile_mod

        self.reset()
        real_probe_all = observe_mod.probe_all
        real_observe = reconcile_mod.observe
        real_plan = reconcile_mod.plan
        real_list = observe_mod.list_our_jobs

        def probe_all(targets: Any, **kwargs: Any) -> Any:
            targets = list(targets)
            self.probe_targets += len(targets)
            self.probe_ports += sum(len(t.ports()) for t in targets)
            started = time.perf_counter()
            try:
                outcomes = real_probe_all(targets, **kwargs)
            finally:
                self.probe_secs += time.perf_counter() - started
            self.probe_ready += sum(1 for o in outcomes.values() if o.ready_port is not None)
            return outcomes

        def observe(**kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return real_observe(**kwargs)
            finally:
                self.observe_secs += time.perf_counter() - started

        def plan(snapshot: Any) -> Any:
            started = time.perf_counter()
            try:
                return real_plan(snapshot)
            finally:
                self.plan_secs += time.perf_counter() - started

        def list_our_jobs(client: Any, *args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return real_list(client, *args, **kwargs)
            finally:
                self.listing_secs += time.perf_counter() - started

        observe_mod.probe_all = probe_all
        observe_mod.list_our_jobs = list_our_jobs
        reconcile_mod.observe = observe
        reconcile_mod.plan = plan

    def reset(self) -> None:
        self.probe_targets = 0
        self.probe_ports = 0
        self.probe_ready = 0
        self.probe_secs = 0.0
        self.observe_secs = 0.0
        self.plan_secs = 0.0
        self.listing_secs = 0.0


def choose_port_base(wanted: int | None, models: int) -> int:
    """A first port such that every engine port (the first port of each window) is free.

    Below the ephemeral range (32768+ here): a port there may be held by some process's
    outgoing connection or its TIME_WAIT, which makes a listener's bind fail.
    """
    busy = common.listening_ports()
    span = models * MODEL_STRIDE
    candidates = [wanted] if wanted else list(range(1100, 32768 - span))
    for base in candidates:
        engine_ports = range(base, base + span, ENGINE_STEP)
        if base + span <= 65535 and not busy.intersection(engine_ports):
            return base
    raise SystemExit(f"no free range of {span} ports for the engines; pass --port-base")


def create_models(count: int, port_base: int) -> None:
    from obleth.core.choices import HostingMode
    from obleth.core.models import ManagedSpec, Model

    models = [
        Model(name=f"bench-{k:05d}", hosting_mode=HostingMode.SLURM, upstream_model="bench-engine")
        for k in range(count)
    ]
    Model.objects.bulk_create(models, batch_size=500)
    specs = [
        ManagedSpec(
            model=model,
            partition="debug",
            serving_port=port_base + k * MODEL_STRIDE,
            script_body="#!/bin/bash\nexec engine --port $OBLETH_SERVING_PORT\n",
            # The fake engines (one process for every window) cannot know each replica's key:
            # they are proven by the model name they list, as Ollama replicas are.
            launcher_spec={"identity_check": "model-name"},
            target_replicas=2,
            mem="128M",
            time_limit="1-00:00",
        )
        for k, model in enumerate(models)
    ]
    ManagedSpec.objects.bulk_create(specs, batch_size=500)


def configure_slurm(url: str, token: str) -> None:
    from obleth.core.models import SlurmSettings

    slurm = SlurmSettings.load()
    slurm.enabled = True
    slurm.slurmrestd_url = url
    slurm.user = "obleth"
    slurm.jwt = token
    slurm.api_version = ""  # detected on the first pass, then cached (as in production)
    slurm.log_dir = "/tmp/obleth-bench-logs"
    slurm.node_addresses = {"localhost": "127.0.0.1"}
    slurm.save()


def one_pass(label: str, inst: Instrument, *, fast: bool = False) -> dict[str, Any]:
    from provisioner.reconcile import run_pass

    inst.reset()
    with common.count_queries() as queries:
        cpu = common.cpu_secs()
        started = time.perf_counter()
        report = run_pass(dispatch="inline", warmup=False, fast=fast)
        wall = time.perf_counter() - started
        cpu = common.cpu_secs() - cpu
    current, peak = common.rss_mb()
    kinds = collections.Counter(r.action for r in report.results)
    failed = sum(1 for r in report.results if not r.ok)
    return {
        "label": label,
        "status": report.status,
        "detail": report.detail[:200],
        "wall_s": wall,
        "cpu_s": cpu,
        "duration_ms": report.duration_ms,
        "slurm_requests": report.slurm_requests,
        "db_queries": queries.count,
        "queries_by_sql": dict(queries.by_sql),
        "actions": dict(kinds),
        "failed": failed,
        "probe_targets": inst.probe_targets,
        "probe_ports": inst.probe_ports,
        "probe_ready": inst.probe_ready,
        "probe_s": inst.probe_secs,
        "listing_s": inst.listing_secs,
        "observe_s": inst.observe_secs,
        "plan_s": inst.plan_secs,
        "rss_mb": current,
        "maxrss_mb": peak,
    }


def show(row: dict[str, Any]) -> None:
    actions = ", ".join(f"{k} {v}" for k, v in sorted(row["actions"].items())) or "none"
    print(
        f"  {row['label']:<10} {row['status']:<5} wall {row['wall_s']:7.3f}s "
        f"(listing {row['listing_s']:.3f}, probe {row['probe_s']:.3f}, "
        f"observe {row['observe_s']:.3f}, plan {row['plan_s']:.3f})  "
        f"slurm req {row['slurm_requests']:>5}  queries {row['db_queries']:>6}  "
        f"probes {row['probe_targets']} windows/{row['probe_ports']} ports "
        f"({row['probe_ready']} ready)  RSS {row['rss_mb']:.0f} MiB (peak {row['maxrss_mb']:.0f})"
        f"  actions: {actions}" + (f"  FAILED {row['failed']}" if row["failed"] else "")
    )


def all_healthy(count: int) -> bool:
    from obleth.core.choices import ReplicaState
    from obleth.core.models import Replica

    return Replica.objects.filter(state=ReplicaState.HEALTHY).count() == 2 * count


def run_scale(
    models: int, port_base: int, steady: int, inst: Instrument, token: str
) -> dict[str, Any]:
    common.reset_rows()
    fake = common.Child(
        [common.python(), str(common.BENCH / "_fake_slurm.py")],
        "URL ",
        env={"BENCH_FAKE_SLURM_TOKEN": token},
    )
    try:
        url = fake.ready_line.split(" ", 1)[1]
        configure_slurm(url, token)
        create_models(models, port_base)
        print(f"\n== {models} models x 2 replicas (fake slurmrestd {url}) ==")
        rows: list[dict[str, Any]] = []
        first = one_pass("submit", inst)
        rows.append(first)
        show(first)
        for i in range(6):
            row = one_pass(f"converge{i + 1}", inst)
            if row["actions"].get("Promote"):
                row["label"] = "promote" if i == 0 else f"promote{i + 1}"
            rows.append(row)
            show(row)
            if all_healthy(models):
                break
        else:
            print("  !! replicas did not all become healthy; steady-state figures are not steady")
        steady_rows = []
        for i in range(steady):
            row = one_pass(f"steady{i + 1}", inst)
            steady_rows.append(row)
            show(row)
        walls = [r["wall_s"] for r in steady_rows]
        print(f"  steady wall s      : {common.spread(walls)}")
        print(f"  steady slurm req   : {common.spread([r['slurm_requests'] for r in steady_rows])}")
        print(f"  steady db queries  : {common.spread([r['db_queries'] for r in steady_rows])}")
        print(f"  steady probe s     : {common.spread([r['probe_s'] for r in steady_rows])}")
        # Fast passes (every second as shipped): one listing, no probe of serving replicas.
        fast_rows = [one_pass(f"fast{i + 1}", inst, fast=True) for i in range(steady)]
        for row in fast_rows:
            show(row)
        print(f"  fast wall s        : {common.spread([r['wall_s'] for r in fast_rows])}")
        print(f"  fast slurm req     : {common.spread([r['slurm_requests'] for r in fast_rows])}")
        print(f"  fast db queries    : {common.spread([r['db_queries'] for r in fast_rows])}")
        return {"models": models, "passes": rows, "steady": steady_rows, "fast": fast_rows}
    finally:
        fake.stop()


def growth_report(results: list[dict[str, Any]]) -> list[str]:
    """Lines naming what grows with the number of models in steady state (empty: nothing)."""
    lines: list[str] = []
    small, large = results[0], results[-1]

    def typical(result: dict[str, Any], key: str) -> float:
        return statistics.median([r[key] for r in result["steady"]])

    for key in ("slurm_requests", "db_queries"):
        a, b = typical(small, key), typical(large, key)
        verdict = "constant" if a == b else f"GROWS ({a:g} -> {b:g})"
        lines.append(f"  {key:<15}: {verdict} from {small['models']} to {large['models']} models")
    a_sql: collections.Counter[str] = collections.Counter(small["steady"][-1]["queries_by_sql"])
    b_sql: collections.Counter[str] = collections.Counter(large["steady"][-1]["queries_by_sql"])
    for sql in sorted(set(a_sql) | set(b_sql), key=lambda s: -b_sql[s]):
        if a_sql[sql] != b_sql[sql]:
            lines.append(f"    query run {a_sql[sql]} -> {b_sql[sql]} times per pass: {sql}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description="provisioner pass benchmark (fake Slurm)")
    parser.add_argument("--scales", default="100,500,1000", help="model counts (100,500,1000)")
    parser.add_argument("--steady", type=int, default=5, help="steady-state passes per scale (5)")
    parser.add_argument("--db", default="obleth_bench", help="database name (obleth_bench)")
    parser.add_argument("--port-base", type=int, help="first engine port (default: a free one)")
    parser.add_argument("--json", action="store_true", help="also write bench/results/*.json")
    args = parser.parse_args()
    scales = sorted(int(s) for s in args.scales.split(",") if s.strip())
    if not scales or scales[0] < 1 or args.steady < 1:
        parser.error("--scales needs positive model counts and --steady at least 1")

    common.setup_django(args.db)
    logging.getLogger("provisioner").setLevel(logging.WARNING)
    from django.conf import settings

    settings.OBLETH_PROVISIONER_LOCK_TTL_SECS = 1800  # a 2000-job submit pass outlasts 120 s?
    common.raise_fd_limit(8192)
    inst = Instrument()
    port_base = choose_port_base(args.port_base, scales[-1])
    token = secrets.token_urlsafe(24)
    engines = common.Child(
        [
            common.python(),
            str(common.BENCH / "_engines.py"),
            "--first",
            str(port_base),
            "--count",
            str(2 * scales[-1]),
            "--step",
            str(ENGINE_STEP),
        ],
        "READY",
        timeout=120,
    )
    started = time.time()
    print(
        f"pass benchmark {dt.datetime.now().isoformat(timespec='seconds')}: scales {scales}, "
        f"port span {settings.OBLETH_PORT_SPAN}, probe concurrency "
        f"{settings.OBLETH_PROVISIONER_PROBE_CONCURRENCY}, health timeout "
        f"{settings.OBLETH_PROVISIONER_HEALTH_TIMEOUT_SECS}s; {2 * scales[-1]} engines on "
        f"127.0.0.1:{port_base}+8i"
    )
    results = []
    try:
        for models in scales:
            results.append(run_scale(models, port_base, args.steady, inst, token))
    finally:
        engines.stop()
        common.reset_rows()
    print("\n== summary ==")
    print(
        f"  {'models':>6} {'submit s':>9} {'promote s':>9} {'steady med s':>12} "
        f"{'steady min-max s':>17} {'req/pass':>8} {'queries/pass':>12} {'probes':>7} "
        f"{'RSS MiB':>8} {'peak MiB':>8}"
    )
    for result in results:
        steady = result["steady"]
        submit = result["passes"][0]
        promote = next((r for r in result["passes"] if r["label"].startswith("promote")), None)
        walls = [r["wall_s"] for r in steady]
        print(
            f"  {result['models']:>6} {submit['wall_s']:>9.2f} "
            f"{(promote['wall_s'] if promote else float('nan')):>9.2f} "
            f"{statistics.median(walls):>12.3f} {min(walls):>8.3f}-{max(walls):<8.3f} "
            f"{statistics.median([r['slurm_requests'] for r in steady]):>8g} "
            f"{statistics.median([r['db_queries'] for r in steady]):>12g} "
            f"{steady[-1]['probe_targets']:>7} {steady[-1]['rss_mb']:>8.0f} "
            f"{steady[-1]['maxrss_mb']:>8.0f}"
        )
    if len(results) > 1:
        print("\n== growth of steady-state costs with models ==")
        for line in growth_report(results):
            print(line)
    print(f"\ntotal benchmark time {time.time() - started:.0f}s")
    if args.json:
        common.RESULTS.mkdir(parents=True, exist_ok=True)
        path = common.RESULTS / f"pass_bench-{dt.datetime.now():%Y%m%d-%H%M%S}.json"
        path.write_text(json.dumps(results, indent=1, default=str))
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
