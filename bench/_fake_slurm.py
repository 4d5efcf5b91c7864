#!/usr/bin/env python3
"""The project's fake slurmrestd (provisioner/slurm/fake.py) in its own process.

Run apart from the benchmark so the worker's RSS and CPU are the provisioner's alone, as they are
against a real slurmrestd. Prints ``URL <url>`` on stdout once it listens, then serves until
SIGTERM/SIGINT or until stdin closes (so it never outlives the benchmark that started it).
The token is read from the environment variable BENCH_FAKE_SLURM_TOKEN (never from argv).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from provisioner.slurm.fake import FakeNode, FakeSlurmrestd  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--user", default="obleth", help="Slurm user the token belongs to")
    parser.add_argument("--node", default="localhost", help="node every job runs on")
    parser.add_argument("--start-delay", type=float, default=0.0, help="PENDING -> RUNNING secs")
    args = parser.parse_args()
    token = os.environ.get("BENCH_FAKE_SLURM_TOKEN", "")
    if not token:
        print("set BENCH_FAKE_SLURM_TOKEN to the token the fake accepts", file=sys.stderr)
        return 2
    fake = FakeSlurmrestd(
        token=token,
        user=args.user,
        start_delay=args.start_delay,
        nodes=[FakeNode(args.node, cpus=4096, real_memory=10_000_000)],
    )
    fake.start()
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())

    def watch_stdin() -> None:
        sys.stdin.read()
        done.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    print(f"URL {fake.url}", flush=True)
    done.wait()
    fake.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
