#!/usr/bin/env python3
"""Gateway request-path benchmark: what authenticating a /v1 request costs, per request.

Drives Django's WSGI handler in this process (no HTTP server, no upstream: the figures are the
gateway's own work) with GET /v1/models (M enabled models) and GET /v1/models/<name>, and prints
per mode the median and p99 time per request, requests per second and database queries per
request (every query counted with ``connection.execute_wrapper``, cache rebuilds included).

Modes (those the tree lacks are skipped, so the same script measures a tree from before gateway
keys: ``git archive main | tar -x -C /tmp/before; cp bench/gateway_bench.py /tmp/before/bench/``):
  open        no key checked (before: no OBLETH_GATEWAY_API_KEYS; after: OBLETH_GATEWAY_OPEN=1)
  static      one key in OBLETH_GATEWAY_API_KEYS
  db          a database gateway key (after only), with K other keys in the table
  db-limited  a database key allowed 5 of the models (after only)
  bad-key     an unknown key, every time (the failure path: lockout counting in the database);
              the failure limit is raised so the address is never blocked

Run: .venv/bin/python bench/gateway_bench.py [--db obleth_bench_gateway] [-n 3000]
Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common  # noqa: E402


def environ(path: str, authorization: str | None) -> dict[str, Any]:
    env: dict[str, Any] = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": path,
        "QUERY_STRING": "",
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "8000",
        "REMOTE_ADDR": "127.0.0.1",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(b""),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
        "wsgi.version": (1, 0),
    }
    if authorization:
        env["HTTP_AUTHORIZATION"] = authorization
    return env


def measure(
    app: Callable[..., Any], paths: list[str], authorization: str | None, n: int, expect: int
) -> dict[str, Any]:
    statuses: dict[str, int] = {}

    def start_response(status: str, headers: list[tuple[str, str]]) -> None:
        statuses[status[:3]] = statuses.get(status[:3], 0) + 1

    def one(i: int) -> None:
        body = app(environ(paths[i % len(paths)], authorization), start_response)
        for _ in body:
            pass
        body.close()

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
    from django.core.handlers.wsgi import WSGIHandler
    from django.test.utils import override_settings

    from obleth.core.models import Model
    from obleth.gateway.routing import invalidate_routes

    logging.disable(logging.WARNING)  # the bad-key mode logs a line per request
    try:
        from obleth.gateway import keys
        from obleth.gateway.models import GatewayKey
    except ImportError:
        keys = None  # type: ignore[assignment]
        GatewayKey = None  # type: ignore[assignment,misc]  # noqa: N806

    common.reset_rows()
    if GatewayKey is not None:
        GatewayKey.objects.all().delete()
    names = [f"bench-model-{i:03d}" for i in range(args.models)]
    for name in names:
        Model.objects.create(name=name, hosting_mode="static")
    invalidate_routes()
    paths = ["/v1/models", *[f"/v1/models/{n}" for n in names[:5]]]
    app = WSGIHandler()
    static_key = "static-bench-key-0123456789abcdef"
    modes: list[tuple[str, dict[str, Any], str | None, int]] = []
    if keys is None:
        modes.append(("open", {"OBLETH_GATEWAY_API_KEYS": []}, None, 200))
        modes.append(("static", {"OBLETH_GATEWAY_API_KEYS": [static_key]}, static_key, 200))
        modes.append(
            ("bad-key", {"OBLETH_GATEWAY_API_KEYS": [static_key]}, "wrong-key-0123456789", 401)
        )
    else:
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
        f"gateway bench {time.strftime('%Y-%m-%d %H:%M:%S')}: tree {common.ROOT}, "
        f"{'with' if keys else 'without'} gateway keys, {args.models} models, "
        f"{args.other_keys if keys else 0} other database keys, {args.n} requests per mode, "
        f"route cache {settings.OBLETH_GATEWAY_ROUTE_CACHE_MS} ms"
        + (f", key cache {settings.OBLETH_GATEWAY_KEY_CACHE_MS} ms" if keys else "")
    )
    print(
        f"{'mode':<12} {'median µs':>10} {'p99 µs':>9} {'req/s':>8} {'queries/req':>12}  statuses"
    )
    results: dict[str, Any] = {}
    for name, overrides, authorization, expect in modes:
        with override_settings(**overrides):
            n = args.n if name != "bad-key" else max(200, args.n // 10)
            figures = measure(
                app, paths, f"Bearer {authorization}" if authorization else None, n, expect
            )
        results[name] = figures
        print(
            f"{name:<12} {figures['median_us']:>10.1f} {figures['p99_us']:>9.1f} "
            f"{figures['req_per_s']:>8.0f} {figures['queries_per_req']:>12.4f}  "
            f"{figures['statuses']}"
        )
    print("the authentication step alone (median per call over batches of 100, 20000 calls):")
    from django.test import RequestFactory

    factory = RequestFactory()
    for name, overrides, authorization, _expect in modes:
        if name == "bad-key":
            continue
        extra = {"HTTP_AUTHORIZATION": f"Bearer {authorization}"} if authorization else {}
        request = factory.get("/v1/models", **extra)
        with override_settings(**overrides):
            if keys is not None:
                from obleth.gateway.auth import authenticate

                def step(request: Any = request) -> Any:
                    return authenticate(request)
            else:
                from obleth.gateway.auth import is_authorized

                def step(request: Any = request) -> Any:
                    return is_authorized(request)

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

    rebuilds = {"route table": build_route_table}
    if keys is not None:
        rebuilds["key table"] = keys.build_key_table
    for label, build in rebuilds.items():
        samples = []
        for _ in range(20):
            t0 = time.perf_counter()
            build()
            samples.append((time.perf_counter() - t0) * 1000)
        results[f"rebuild {label} ms"] = statistics.median(samples)
        print(f"{label} rebuild (the cache refresh): median {statistics.median(samples):.2f} ms")
    if keys is not None:
        from obleth.core import limits

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
