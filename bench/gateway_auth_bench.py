#!/usr/bin/env python3
"""Gateway request-path benchmark: what authenticating a /v1 request costs, per request.

Drives the gateway service's ASGI application in this process (no HTTP server, no upstream: the
figures are the gateway's own work, plus the in-process driver's two thread hops per request,
tests/plugins/gateway_client.py) with GET /v1/models (M enabled models) and GET
/v1/models/<name>, and prints per mode the median and p99 time per request, requests per second
and database queries per request (the service's blocking calls run on this thread, so every
query is counted with ``connection.execute_wrapper``, key-table rebuilds included; the routing
table is loaded once, as in a gateway process).

Modes:
  open        no key checked (OBLETH_GATEWAY_OPEN=1)
  static      one key in OBLETH_GATEWAY_API_KEYS
  db          a database gateway key, with K other keys in the table
  db-limited  a database key allowed 5 of the models
  bad-key     an unknown key, every time (the failure path: lockout counting in the database);
              the failure limit is raised so the address is never blocked

Trees from before the gateway service (the Django /v1 views) are not measured by this version.

Run: .venv/bin/python bench/gateway_auth_bench.py [--db obleth_bench_gateway] [-n 3000]
Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import _common as common  # noqa: E402


def measure(
    gateway: Any, paths: list[str], authorization: str | None, n: int, expect: int
) -> dict[str, Any]:
    statuses: dict[str, int] = {}
    extra = {"HTTP_AUTHORIZATION": authorization} if authorization else {}

    def one(i: int) -> None:
        status = str(gateway.get(paths[i % len(paths)], **extra).status_code)
        statuses[status] = statuses.get(status, 0) + 1

    for i in range(200):  # warm-up: tables built, last use written, code paths hot
        one(i)
    statuses.clear()
    times: list[int] = []
    with common.count_queries() as queries:
        started = time.perf_counter()
        for i in range(n):
            t0 = time.perf_counter_ns()
            one(i)
            times.append(time.perf_counter_ns() - t0)
        wall = time.perf_counter() - started
    times.sort()
    return {
        "median_us": statistics.median(times) / 1000,
        "p99_us": times[int(len(times) * 0.99) - 1] / 1000,
        "req_per_s": n / wall,
        "queries_per_req": queries.count / n,
        "statuses": dict(statuses),
        "expected": expect,
        "queries_by_sql": dict(queries.by_sql.most_common(5)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", default="obleth_bench_gateway")
    parser.add_argument("-n", type=int, default=3000, help="requests per mode")
    parser.add_argument("--models", type=int, default=20, help="enabled models (M)")
    parser.add_argument("--other-keys", type=int, default=1000, help="other database keys (K)")
    parser.add_argument("--json", action="store_true", help="also write bench/results/*.json")
    args = parser.parse_args()

    common.setup_django(args.db)
    import logging

    from django.conf import settings
    from django.test.utils import override_settings

    from obleth.core.models import Model
    from obleth.gateway import keys
    from obleth.gateway.auth import check_credentials
    from obleth.gateway.models import GatewayKey
    from tests.plugins.gateway_client import GatewayClient

    logging.disable(logging.WARNING)  # the bad-key mode logs a line per request

    common.reset_rows()
    GatewayKey.objects.all().delete()
    names = [f"bench-model-{i:03d}" for i in range(args.models)]
    for name in names:
        Model.objects.create(name=name, hosting_mode="static")
    paths = ["/v1/models", *[f"/v1/models/{n}" for n in names[:5]]]
    gateway = GatewayClient()
    gateway.reload()  # the routing table, once: a gateway process holds it in memory
    gateway.auto_reload = False
    static_key = "static-bench-key-0123456789abcdef"
    modes: list[tuple[str, dict[str, Any], str | None, int]] = []
    from obleth.core import limits

    for i in range(args.other_keys):
        keys.create_key(f"other-{i}")
    db_key = keys.create_key("bench").secret
    allowed = list(Model.objects.filter(name__in=names[:5]))
    limited = keys.create_key("bench-limited", models=allowed).secret
    closed = {"OBLETH_GATEWAY_OPEN": False, "OBLETH_GATEWAY_API_KEYS": []}
    modes += [
        ("open", {"OBLETH_GATEWAY_OPEN": True, "OBLETH_GATEWAY_API_KEYS": []}, None, 200),
        (
            "static",
            {"OBLETH_GATEWAY_OPEN": False, "OBLETH_GATEWAY_API_KEYS": [static_key]},
            static_key,
            200,
        ),
        ("db", closed, db_key, 200),
        ("db-limited", closed, limited, 200),
        (
            "bad-key",
            {**closed, "OBLETH_AUTH_MAX_FAILURES": 10**9},
            "obk_wrong-key-0123456789",
            401,
        ),
    ]
    limits.reset(keys.SCOPE)
    print(
        f"gateway bench {time.strftime('%Y-%m-%d %H:%M:%S')}: tree {common.ROOT}, gateway service "
        f"in-process, {args.models} models, {args.other_keys} other database keys, "
        f"{args.n} requests per mode, key cache {settings.OBLETH_GATEWAY_KEY_CACHE_MS} ms"
    )
    print(
        f"{'mode':<12} {'median µs':>10} {'p99 µs':>9} {'req/s':>8} {'queries/req':>12}  statuses"
    )
    results: dict[str, Any] = {}
    for name, overrides, authorization, expect in modes:
        with override_settings(**overrides):
            n = args.n if name != "bad-key" else max(200, args.n // 10)
            figures = measure(
                gateway, paths, f"Bearer {authorization}" if authorization else None, n, expect
            )
        results[name] = figures
        print(
            f"{name:<12} {figures['median_us']:>10.1f} {figures['p99_us']:>9.1f} "
            f"{figures['req_per_s']:>8.0f} {figures['queries_per_req']:>12.4f}  "
            f"{figures['statuses']}"
        )
    gateway.close()
    print("the authentication step alone (median per call over batches of 100, 20000 calls):")
    for name, overrides, authorization, _expect in modes:
        if name == "bad-key":
            continue
        header = f"Bearer {authorization}" if authorization else ""
        with override_settings(**overrides):

            def step(header: str = header) -> Any:
                return check_credentials(header, address="127.0.0.1", path="/v1/models")

            for _ in range(1000):
                step()
            batches = []
            with common.count_queries() as queries:
                for _ in range(200):
                    t0 = time.perf_counter_ns()
                    for _ in range(100):
                        step()
                    batches.append((time.perf_counter_ns() - t0) / 100)
        median_us = statistics.median(batches) / 1000
        results[f"auth step {name} us"] = median_us
        print(f"  {name:<12} {median_us:8.2f} µs   queries {queries.count} in 20000 calls")
    from obleth.gateway.routing import build_route_table

    rebuilds = {"route table": build_route_table, "key table": keys.build_key_table}
    for label, build in rebuilds.items():
        samples = []
        for _ in range(20):
            t0 = time.perf_counter()
            build()
            samples.append((time.perf_counter() - t0) * 1000)
        results[f"rebuild {label} ms"] = statistics.median(samples)
        print(f"{label} rebuild (a reload): median {statistics.median(samples):.2f} ms")
    limits.reset(keys.SCOPE)
    GatewayKey.objects.all().delete()
    common.reset_rows()
    if args.json:
        common.RESULTS.mkdir(parents=True, exist_ok=True)
        out = common.RESULTS / f"gateway-{time.strftime('%Y%m%d-%H%M%S')}.json"
        out.write_text(json.dumps(results, indent=2))
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
