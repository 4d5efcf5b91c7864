"""The /v1 data plane side by side: the direct upstream, obleth's gateway service, LiteLLM's proxy.

    .venv/bin/python bench/gateway_bench.py                 # ~8 min
    .venv/bin/python bench/gateway_bench.py --quick         # ~2 min, fewer cells

Same fake upstream (bench/_upstream.py, raw asyncio), same load generator (this script: asyncio
protocols parsing with httptools on kept-alive connections, so the client costs little), one
interleaved run: for every cell the three targets run one after the other, and the fast-upstream
cells are repeated in rotating order (medians printed). LiteLLM is installed from PyPI into its
own virtualenv on first use (``--litellm-venv``, default
``~/.cache/obleth-bench/litellm-<version>``).

Printed per target:
- CPU ms per request: the target's whole process tree (utime + stime from /proc), divided by the
  requests it completed in the cell.
- added latency p50/p99 at concurrency 1: the target's latency minus direct's in the same round.
- req/s at concurrency 16 and 64, non-streamed and streamed (5 chunks at once).
- With a slow upstream (``--chunks`` events ``--interval-ms`` apart, ~2 s a stream): completed
  streams/s, time to first byte p50/p99 and errors at 64, 256 and 1,000 concurrent streams, for
  obleth with 1 and 2 workers, LiteLLM with 1, and direct; and each target's RSS after the cell.

Nothing is asserted: the figures are printed (``--json`` also writes bench/results/).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httptools

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    RESULTS,
    ROOT,
    Child,
    database_url,
    ensure_database,
    python,
    raise_fd_limit,
)

# Both proxies authenticate every request, as in production: obleth with a gateway key, LiteLLM
# with its master key.
OBLETH_KEY = "obk_" + "bench" + "0" * 38  # the shape of a real key: obk_ + 43 characters
LITELLM_KEY = "sk-bench-0123456789abcdef0123456789abcdef"
LITELLM_VERSION = "1.106.12"  # the newest whose [proxy] extra installs from PyPI alone
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
CLK = os.sysconf("SC_CLK_TCK")
# What the targets print (their own logs), for when one does not start.
LOG = tempfile.NamedTemporaryFile(  # noqa: SIM115 - open for the whole run, read on failure
    prefix="obleth-gateway-bench-", suffix=".log", delete=False
)


# ------------------------------------------------------------------------------ process tree


def _proc_stat(pid: int) -> tuple[int, int] | None:
    """(ppid, utime + stime ticks) of one process."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), int(fields[11]) + int(fields[12])


def tree(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = _proc_stat(int(entry))
            if st:
                children.setdefault(st[0], []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def tree_cpu_secs(pid: int) -> float:
    return sum((_proc_stat(p) or (0, 0))[1] for p in tree(pid)) / CLK


def machine_ticks() -> tuple[int, int]:
    """(busy, total) CPU ticks of the whole machine since boot, from /proc/stat."""
    with open("/proc/stat", encoding="ascii") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    return sum(values) - idle, sum(values)


def tree_rss_mb(pid: int) -> float:
    return rss_mb(tree(pid))


def rss_mb(pids: list[int]) -> float:
    total = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/status", encoding="ascii") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


# ------------------------------------------------------------------------------ load generator


@dataclass
class Result:
    ok: int = 0
    errors: int = 0
    error_kinds: dict[str, int] = field(default_factory=dict)  # "HTTP 503", "ConnectionError"...
    latencies: list[float] = field(default_factory=list)
    ttfbs: list[float] = field(default_factory=list)
    secs: float = 0.0
    # Answers to requests sent before this instant (the ramp-up) are not counted; errors are.
    window_start: float = 0.0


class _Caller(asyncio.Protocol):
    """One load-generator connection: a request written, its answer parsed by httptools (C) as
    it arrives, one future per answer (no await per chunk), so the load generator costs the
    machine little and the same for every target."""

    def __init__(self, result: Result, first_byte: bool) -> None:
        self.result, self.first_byte = result, first_byte
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.answered: asyncio.Future[tuple[int, bool]] | None = None
        self.t0 = 0.0
        self.first = False
        self.delimited = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def ask(self, request: bytes) -> asyncio.Future[tuple[int, bool]]:
        assert self.transport is not None
        self.answered = asyncio.get_running_loop().create_future()
        self.t0, self.first, self.delimited = time.monotonic(), False, False
        self.transport.write(request)
        return self.answered

    def data_received(self, data: bytes) -> None:
        if not self.first:  # time to first byte: the answer's first bytes have arrived
            self.first = True
            if self.first_byte and self.t0 >= self.result.window_start:
                self.result.ttfbs.append(time.monotonic() - self.t0)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._end(exc)

    def on_header(self, name: bytes, value: bytes) -> None:
        lower = name.lower()
        if lower == b"content-length" or (
            lower == b"transfer-encoding" and b"chunked" in value.lower()
        ):
            self.delimited = True

    def on_headers_complete(self) -> None:
        if self.parser.get_status_code() in (204, 304):
            self.delimited = True

    def on_message_complete(self) -> None:
        if self.answered is not None and not self.answered.done():
            keep = bool(self.parser.should_keep_alive())
            self.answered.set_result((self.parser.get_status_code(), not keep))

    def _end(self, exc: BaseException) -> None:
        if self.answered is not None and not self.answered.done():
            self.answered.set_exception(exc)
        if self.transport is not None:
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.answered is not None and not self.answered.done():
            if self.first and not self.delimited:  # an answer that ends with its connection
                self.answered.set_result((self.parser.get_status_code(), True))
            else:
                self.answered.set_exception(ConnectionError("closed before the answer's end"))


async def _worker(
    port: int, request: bytes, deadline: float, result: Result, first_byte: bool, delay: float
) -> None:
    loop = asyncio.get_running_loop()
    caller: _Caller | None = None
    if delay > 0:
        await asyncio.sleep(delay)
    while time.monotonic() < deadline:
        try:
            if caller is None:
                _, caller = await loop.create_connection(
                    lambda: _Caller(result, first_byte), "127.0.0.1", port
                )
            status, close = await caller.ask(request)
            if status == 200:
                if caller.t0 >= result.window_start:
                    result.ok += 1
                    result.latencies.append(time.monotonic() - caller.t0)
            else:
                result.errors += 1
                kind = f"HTTP {status}"
                result.error_kinds[kind] = result.error_kinds.get(kind, 0) + 1
            if close:
                assert caller.transport is not None
                caller.transport.close()
                caller = None
            else:
                caller.parser = httptools.HttpResponseParser(caller)
        except (OSError, ValueError, httptools.HttpParserError) as exc:
            result.errors += 1
            kind = type(exc).__name__
            result.error_kinds[kind] = result.error_kinds.get(kind, 0) + 1
            if caller is not None and caller.transport is not None:
                caller.transport.abort()
            caller = None
            await asyncio.sleep(0.01)
    if caller is not None and caller.transport is not None:
        caller.transport.close()


def request_bytes(model: str, stream: bool, auth: str = "") -> bytes:
    body = json.dumps({**CHAT, "model": model, "stream": stream}).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    )
    if auth:
        head += f"Authorization: Bearer {auth}\r\n"
    return head.encode() + b"\r\n" + body


async def load(
    port: int,
    request: bytes,
    concurrency: int,
    secs: float,
    first_byte: bool = False,
    ramp: float = 0.0,
) -> Result:
    """``concurrency`` callers, each sending one request after another for ``secs`` seconds.
    With ``ramp`` > 0, caller i starts ``i * ramp / concurrency`` seconds in, so requests
    arrive spread out as in production (steady state, N in flight), and only requests sent
    after the ramp are counted (errors always are); with 0, every caller starts at once and
    the callers go on in cohorts of N requests arriving within milliseconds (the worst case)."""
    t0 = time.monotonic()
    result = Result(window_start=t0 + ramp)
    deadline = t0 + ramp + secs
    await asyncio.gather(
        *(
            _worker(port, request, deadline, result, first_byte, i * ramp / concurrency)
            for i in range(concurrency)
        )
    )
    # Steady: the rate at which the counted requests were sent (N in flight, so the rate at which
    # they complete). At once: answers over the time until the last one.
    result.secs = secs if ramp > 0 else time.monotonic() - t0
    return result


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


# ------------------------------------------------------------------------------ targets


@dataclass
class Target:
    name: str
    port: int
    pid: int  # root of the process tree whose CPU is counted (0: not counted)
    auth: str = ""
    stop: Any = None


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_upstream(chunks: int, interval_ms: float) -> Child:
    port = free_port()
    return Child(
        [
            python(),
            str(ROOT / "bench" / "_upstream.py"),
            "--port",
            str(port),
            "--chunks",
            str(chunks),
            "--interval-ms",
            str(interval_ms),
        ],
        "ready",
    )


def upstream_port(child: Child) -> int:
    return int(child.ready_line.split()[1])


def prepare_obleth_db(db_name: str, fast_base: str, slow_base: str) -> str:
    url = database_url(db_name)
    ensure_database(url)
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "tests.settings"}
    code = f"""
import django; django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0, interactive=False)
from obleth.core.models import Model, Endpoint
Model.objects.filter(name__in=["bench", "bench-slow"]).delete()
for name, base in (("bench", {fast_base!r}), ("bench-slow", {slow_base!r})):
    m = Model.objects.create(name=name, hosting_mode="static")
    Endpoint.objects.create(model=m, name=name + "-ep", api_base=base)
from obleth.gateway import keys
from obleth.gateway.models import GatewayKey
GatewayKey.objects.filter(name="bench").delete()
keys.ensure_key("bench", {OBLETH_KEY!r})
"""
    subprocess.run([python(), "-c", code], env=env, cwd=ROOT, check=True)
    return url


def start_obleth(db_url: str, workers: int, root: Path = ROOT, label: str = "obleth") -> Target:
    """obleth's gateway with ``workers`` processes, from the checkout at ``root`` (another
    checkout: an earlier revision measured beside this one, ``--baseline``)."""
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": db_url,
        "DJANGO_SETTINGS_MODULE": "obleth.settings",
        # The keys tests.settings uses, so the rows prepared with it decrypt here.
        "OBLETH_SECRET_KEY": "test-secret-key-not-for-production",
        "OBLETH_ENCRYPTION_KEY": "test-encryption-key-not-for-production",
        "OBLETH_GATEWAY_OPEN": "0",
        "OBLETH_LOG_LEVEL": "WARNING",
    }
    proc = subprocess.Popen(
        [
            python(),
            "-m",
            "obleth.gateway.serve",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            str(workers),
        ],
        cwd=root,
        env=env,
        stdout=LOG,
        stderr=subprocess.STDOUT,
    )
    _wait_http(port, "/healthz", proc)
    _wait_model(port, "bench-slow", OBLETH_KEY)
    return Target(f"{label} x{workers}", port, proc.pid, auth=OBLETH_KEY, stop=proc)


def litellm_venv(path: str | None) -> Path:
    venv = Path(path or Path.home() / ".cache" / "obleth-bench" / f"litellm-{LITELLM_VERSION}")
    exe = venv / "bin" / "litellm"
    if not exe.exists():
        print(f"installing litellm[proxy]=={LITELLM_VERSION} into {venv} (first run only)")
        subprocess.run(["python3.11", "-m", "venv", str(venv)], check=True)
        subprocess.run(
            [str(venv / "bin" / "pip"), "install", "-q", f"litellm[proxy]=={LITELLM_VERSION}"],
            check=True,
        )
    return venv


def start_litellm(venv: Path, fast_base: str, slow_base: str, workers: int) -> Target:
    port = free_port()
    cfg = Path(tempfile.mkdtemp(prefix="obleth-bench-litellm-")) / "config.yaml"
    cfg.write_text(
        "model_list:\n"
        + "".join(
            f"  - model_name: {name}\n    litellm_params:\n      model: openai/bench\n"
            f"      api_base: {base}\n      api_key: none\n"
            for name, base in (("bench", fast_base), ("bench-slow", slow_base))
        )
        + "litellm_settings:\n  drop_params: true\n  turn_off_message_logging: true\n"
    )
    env = {
        **os.environ,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_MASTER_KEY": LITELLM_KEY,
        "LITELLM_LOG": "ERROR",
        "NO_DOCS": "True",
        "DISABLE_ADMIN_UI": "True",
    }
    proc = subprocess.Popen(
        [
            str(venv / "bin" / "litellm"),
            "--config",
            str(cfg),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--num_workers",
            str(workers),
        ],
        env=env,
        stdout=LOG,
        stderr=subprocess.STDOUT,
    )
    _wait_http(port, "/health/liveliness", proc, timeout=180)
    _wait_model(port, "bench", LITELLM_KEY)
    return Target(f"litellm x{workers}", port, proc.pid, auth=LITELLM_KEY, stop=proc)


def _wait_http(port: int, path: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"a target exited (code {proc.returncode}); see {LOG.name}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}{path}", timeout=2).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise SystemExit(f"nothing answered on {port}{path} within {timeout:.0f} s; see {LOG.name}")


def _wait_model(port: int, model: str, auth: str) -> None:
    import httpx

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            r = httpx.post(
                f"http://127.0.0.1:{port}/v1/chat/completions",
                json={**CHAT, "model": model},
                headers={"Authorization": f"Bearer {auth}"} if auth else {},
                timeout=10,
            )
            if r.status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise SystemExit(f"model {model} never answered through port {port}; see {LOG.name}")


def _kinds(kinds: dict[str, int]) -> str:
    return ", ".join(f"{kind} x{n}" for kind, n in sorted(kinds.items(), key=lambda kv: -kv[1]))


def _revision(checkout: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
    )
    return done.stdout.strip() or checkout.name


def stop(target: Target) -> None:
    proc = target.stop
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ------------------------------------------------------------------------------ the run


def measure(
    target: Target, model: str, stream: bool, concurrency: int, secs: float, ramp: float = 0.0
) -> dict:
    request = request_bytes(model, stream, target.auth)
    cpu0 = tree_cpu_secs(target.pid) if target.pid else 0.0
    busy0, total0 = machine_ticks()
    wall0 = time.monotonic()
    # The target's peak RSS while the load runs: its processes are listed once, then their
    # VmRSS read every 2 s (a few small reads, so the load generator's clock is not disturbed).
    pids = tree(target.pid) if target.pid else []
    peak = [0.0]
    finished = threading.Event()

    def sample_rss() -> None:
        while True:
            peak[0] = max(peak[0], rss_mb(pids))
            if finished.wait(2.0):
                return

    sampler = threading.Thread(target=sample_rss, daemon=True)
    sampler.start()
    try:
        result = asyncio.run(
            load(target.port, request, concurrency, secs, first_byte=stream, ramp=ramp)
        )
    finally:
        finished.set()
        sampler.join(5)
    peak[0] = max(peak[0], rss_mb(pids))
    cpu = (tree_cpu_secs(target.pid) - cpu0) if target.pid else 0.0
    busy1, total1 = machine_ticks()
    wall = time.monotonic() - wall0
    done = max(1, result.ok)
    return {
        "ok": result.ok,
        "errors": result.errors,
        "error_kinds": result.error_kinds,
        "rps": result.ok / result.secs,
        "cpu_ms_per_req": cpu * 1000 / done if target.pid else None,
        "p50_ms": pct(result.latencies, 0.5) * 1000,
        "p99_ms": pct(result.latencies, 0.99) * 1000,
        "ttfb_p50_ms": pct(result.ttfbs, 0.5) * 1000 if stream else None,
        "ttfb_p99_ms": pct(result.ttfbs, 0.99) * 1000 if stream else None,
        "rss_mb": tree_rss_mb(target.pid) if target.pid else None,
        "rss_peak_mb": peak[0] if target.pid else None,
        # the target's share of one core over the cell (its whole process tree)
        "cpu_pct": cpu * 100 / wall if target.pid and wall else None,
        # how busy the whole machine was (all cores, 100 = every core busy): near 100, every
        # process in the cell (load generator, upstream, target) waited for a core
        "machine_busy_pct": (busy1 - busy0) * 100 / max(1, total1 - total0),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", default="obleth_bench_gateway")
    parser.add_argument("--secs", type=float, default=5.0, help="seconds per fast cell")
    parser.add_argument("--rounds", type=int, default=3, help="repeats of the fast cells")
    parser.add_argument("--slow-secs", type=float, default=10.0)
    parser.add_argument("--chunks", type=int, default=100)
    parser.add_argument("--interval-ms", type=float, default=20)
    parser.add_argument("--streams", default="64,256,1000", help="concurrent slow streams")
    parser.add_argument(
        "--arrivals",
        choices=("steady", "cohort"),
        default="steady",
        help="slow cells: callers start spread over one stream's length and only requests sent"
        " after that are counted (steady), or all start at once and go on in cohorts (cohort)",
    )
    parser.add_argument("--litellm-venv")
    parser.add_argument("--no-litellm", action="store_true")
    parser.add_argument("--quick", action="store_true", help="1 round, 3 s cells, 64/256 streams")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--slow-only", action="store_true", help="only the slow-upstream stream cells"
    )
    parser.add_argument(
        "--baseline",
        metavar="DIR",
        help="also run the gateway of another checkout (an earlier revision, e.g. a git worktree)"
        " beside this one, in the same cells",
    )
    args = parser.parse_args()
    if args.quick:
        args.secs, args.rounds, args.slow_secs, args.streams = 3.0, 1, 6.0, "64,256"
    streams = [int(x) for x in args.streams.split(",")]
    raise_fd_limit(max(streams) * 4 + 1024)

    fast = start_upstream(5, 0)
    slow = start_upstream(args.chunks, args.interval_ms)
    fast_base = f"http://127.0.0.1:{upstream_port(fast)}/v1"
    slow_base = f"http://127.0.0.1:{upstream_port(slow)}/v1"
    db_url = prepare_obleth_db(args.db, fast_base, slow_base)
    direct_fast = Target("direct", upstream_port(fast), fast.proc.pid)
    direct_slow = Target("direct", upstream_port(slow), slow.proc.pid)

    targets: list[Target] = []
    figures: dict[str, Any] = {"fast": {}, "slow": {}, "argv": sys.argv[1:]}
    baseline = Path(args.baseline).resolve() if args.baseline else None
    base_label = f"base@{_revision(baseline)}" if baseline else ""
    try:
        targets.append(start_obleth(db_url, 1))
        if baseline:
            targets.append(start_obleth(db_url, 1, baseline, base_label))
        if not args.no_litellm:
            targets.append(start_litellm(litellm_venv(args.litellm_venv), fast_base, slow_base, 1))

        if not args.slow_only:  # the fast-upstream cells
            # ---- fast upstream: interleaved rounds, rotating order
            cells = [(1, False), (16, False), (64, False), (16, True), (64, True)]
            rows: dict[tuple[str, int, bool], list[dict]] = {}
            everyone = [direct_fast, *targets]
            for rnd in range(args.rounds):
                order = everyone[rnd % len(everyone) :] + everyone[: rnd % len(everyone)]
                for conc, stream in cells:
                    for t in order:
                        rows.setdefault((t.name, conc, stream), []).append(
                            measure(t, "bench", stream, conc, args.secs)
                        )
            print("\n== fast upstream (instant answer; streams: 5 events at once)")
            print(f"   {args.rounds} interleaved round(s) of {args.secs:.0f} s per cell; medians")
            header = (
                f"{'target':<16} {'CPU ms/req':>10} {'added p50':>10} {'added p99':>10}"
                f" {'c16 rps':>9} {'c64 rps':>9} {'c16 s-rps':>10} {'c64 s-rps':>10}"
            )
            print(header)
            direct_lat = rows[("direct", 1, False)]
            for t in everyone:

                def med(conc: int, stream: bool, key: str, t: Target = t) -> float:
                    vals = [r[key] for r in rows[(t.name, conc, stream)] if r[key] is not None]
                    return statistics.median(vals) if vals else float("nan")

                cpu_vals = [
                    r["cpu_ms_per_req"]
                    for (name, _, _), rs in rows.items()
                    if name == t.name
                    for r in rs
                    if r["cpu_ms_per_req"] is not None and not r["errors"]
                ]
                added50 = [
                    a["p50_ms"] - d["p50_ms"]
                    for a, d in zip(rows[(t.name, 1, False)], direct_lat, strict=True)
                ]
                added99 = [
                    a["p99_ms"] - d["p99_ms"]
                    for a, d in zip(rows[(t.name, 1, False)], direct_lat, strict=True)
                ]
                line = {
                    "cpu_ms_per_req": statistics.median(cpu_vals) if cpu_vals else float("nan"),
                    "added_p50_ms": statistics.median(added50),
                    "added_p99_ms": statistics.median(added99),
                    "c16_rps": med(16, False, "rps"),
                    "c64_rps": med(64, False, "rps"),
                    "c16_stream_rps": med(16, True, "rps"),
                    "c64_stream_rps": med(64, True, "rps"),
                    "errors": sum(
                        r["errors"] for (n, _, _), rs in rows.items() if n == t.name for r in rs
                    ),
                }
                figures["fast"][t.name] = line
                print(
                    f"{t.name:<16} {line['cpu_ms_per_req']:>10.3f}"
                    f" {line['added_p50_ms']:>10.2f} {line['added_p99_ms']:>10.2f}"
                    f" {line['c16_rps']:>9.0f} {line['c64_rps']:>9.0f}"
                    f" {line['c16_stream_rps']:>10.0f} {line['c64_stream_rps']:>10.0f}"
                    + (f"  errors {line['errors']}" if line["errors"] else "")
                )
            if "obleth x1" in figures["fast"] and "litellm x1" in figures["fast"]:
                o, li = figures["fast"]["obleth x1"], figures["fast"]["litellm x1"]
                cpu_ratio = li["cpu_ms_per_req"] / o["cpu_ms_per_req"]
                lat_ratio = li["added_p50_ms"] / max(o["added_p50_ms"], 0.01)
                print(
                    f"   LiteLLM / obleth: CPU per request {cpu_ratio:.1f}x,"
                    f" added latency p50 {lat_ratio:.1f}x"
                )

        # ---- slow upstream: streams
        targets.append(start_obleth(db_url, 2))
        if baseline:
            targets.append(start_obleth(db_url, 2, baseline, base_label))
        slow_targets = [direct_slow, *targets]
        stream_secs = args.chunks * args.interval_ms / 1000
        ramp = stream_secs if args.arrivals == "steady" else 0.0
        print(
            f"\n== slow upstream: {args.chunks} events {args.interval_ms:.0f} ms apart"
            f" (~{stream_secs:.1f} s a stream), {args.slow_secs:.0f} s a cell, arrivals "
            + (
                f"steady (callers start over {ramp:.1f} s, counted after that)"
                if ramp
                else "in cohorts (every caller starts at once)"
            )
        )
        print(
            f"{'target':<16} {'streams':>7} {'done/s':>8} {'% direct':>8} {'TTFB p50':>9}"
            f" {'TTFB p99':>9} {'errors':>7} {'RSS MB':>7} {'CPU %':>6} {'busy %':>6}"
        )
        for n in streams:
            base = None
            for t in slow_targets:
                r = measure(t, "bench-slow", True, n, args.slow_secs, ramp)
                figures["slow"].setdefault(t.name, {})[n] = r
                if t.name == "direct":
                    base = r
                share = 100 * r["rps"] / base["rps"] if base and base["rps"] else float("nan")
                print(
                    f"{t.name:<16} {n:>7} {r['rps']:>8.1f} {share:>7.0f}%"
                    f" {r['ttfb_p50_ms']:>8.1f}ms {r['ttfb_p99_ms']:>8.1f}ms"
                    f" {r['errors']:>7} {r['rss_mb']:>7.0f}"
                    + (f" {r['cpu_pct']:>6.0f}" if r["cpu_pct"] is not None else f" {'-':>6}")
                    + f" {r['machine_busy_pct']:>6.0f}"
                    + (f"  ({_kinds(r['error_kinds'])})" if r["error_kinds"] else "")
                )
        if len(streams) > 1:
            few, many = min(streams), max(streams)
            print(f"\n   RSS per extra stream (peak at {many} minus peak at {few} streams):")
            for name, cells in figures["slow"].items():
                low, high = cells.get(few, {}), cells.get(many, {})
                if low.get("rss_peak_mb") and high.get("rss_peak_mb"):
                    kb = (high["rss_peak_mb"] - low["rss_peak_mb"]) * 1024 / (many - few)
                    print(
                        f"   {name:<16} {kb:>6.1f} KB  ({low['rss_peak_mb']:.0f} ->"
                        f" {high['rss_peak_mb']:.0f} MB)"
                    )
    finally:
        for t in targets:
            stop(t)
        fast.stop()
        slow.stop()
    if args.json:
        RESULTS.mkdir(exist_ok=True)
        out = RESULTS / f"gateway-{time.strftime('%Y%m%d-%H%M%S')}.json"
        out.write_text(json.dumps(figures, indent=2, default=str))
        print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    sys.exit(main())
