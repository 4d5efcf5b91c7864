#!/usr/bin/env python3
"""Many fake engines in ONE process: the project's test engine on ports FIRST + i*STEP.

The test engine's own multi-port mode (``--ports-from P --ports-count N``) listens on N
*consecutive* ports. A provisioner port window is 8 ports wide (OBLETH_PORT_SPAN) and the probe
asks every port of it, so consecutive ports would make all 8 ports of each window answer, which
is not what a real replica does. This helper runs the very same ``Engine`` request handlers, but
on the first port of each window only (``--step 8``), so each probed window holds exactly one
listening engine and seven closed ports, as on a real node.

Usage: ``python bench/_engines.py --first 12000 --count 2000 --step 8``. Prints
``READY <count>`` on stdout once every port listens; exits 1 naming the port that could not be
bound. Stops on SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import resource
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from provisioner.testengine.server import MAX_HEAD_BYTES, Engine, EngineConfig  # noqa: E402


def raise_fd_limit(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(hard, needed)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


async def serve(first: int, count: int, step: int, host: str) -> int:
    stop = asyncio.Event()
    config = EngineConfig(
        host=host, port=first, port_count=max(2, count), model="bench-engine", quiet=True
    )
    engine = Engine(config, stop)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    servers: list[asyncio.Server] = []
    try:
        for i in range(count):
            port = first + i * step
            try:
                servers.append(
                    await asyncio.start_server(
                        functools.partial(engine.handle_connection, port),
                        host,
                        port,
                        backlog=64,
                        limit=MAX_HEAD_BYTES,
                    )
                )
            except OSError as exc:
                print(f"FAILED port {port}: {exc}", flush=True)
                return 1
        print(f"READY {count}", flush=True)
        await stop.wait()
        return 0
    finally:
        for server in servers:
            server.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--first", type=int, required=True, help="first port")
    parser.add_argument("--count", type=int, required=True, help="how many engines (ports)")
    parser.add_argument("--step", type=int, default=8, help="distance between ports (8)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (127.0.0.1)")
    args = parser.parse_args()
    if args.count < 1 or args.step < 1:
        parser.error("--count and --step must be 1 or more")
    if args.first + (args.count - 1) * args.step > 65535:
        parser.error("--first + (--count - 1) * --step is past port 65535; lower --first")
    raise_fd_limit(args.count + 256)
    return asyncio.run(serve(args.first, args.count, args.step, args.host))


if __name__ == "__main__":
    raise SystemExit(main())
