"""Shared plumbing for the benchmarks: a dedicated database, query counting, RSS, child
processes, and median/min/max. Not a test: nothing here asserts a time limit."""

from __future__ import annotations

import collections
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
RESULTS = BENCH / "results"
DEFAULT_DB_SERVER = "postgres://postgres@127.0.0.1:5432"
FORBIDDEN_DB_NAMES = ("test",)  # test, test_test, test_<helper>: the test suites' databases


def database_url(name: str, server: str | None = None) -> str:
    if not re.fullmatch(r"[a-z][a-z0-9_]{2,62}", name):
        raise SystemExit(f"--db {name!r}: use lower-case letters, digits and _ (e.g. obleth_bench)")
    if name.startswith(FORBIDDEN_DB_NAMES):
        raise SystemExit(
            f"--db {name!r}: names starting with 'test' belong to the test suites; "
            "pick another, e.g. obleth_bench"
        )
    base = (server or os.environ.get("BENCH_DB_SERVER") or DEFAULT_DB_SERVER).rstrip("/")
    return f"{base}/{name}"


def ensure_database(url: str) -> None:
    """CREATE DATABASE when it does not exist (connects to the server's 'postgres' database)."""
    import psycopg

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    admin = urlunsplit((parts.scheme, parts.netloc, "/postgres", "", ""))
    with psycopg.connect(admin, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{name}"')
            print(f"created database {name}")


def setup_django(db_name: str) -> None:
    """Standalone Django on tests.settings, pointed at a dedicated, migrated database."""
    url = database_url(db_name)
    ensure_database(url)
    sys.path.insert(0, str(ROOT))
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    os.environ["DATABASE_URL"] = url
    os.environ["OBLETH_DATABASE_URL"] = url
    os.environ.setdefault("OBLETH_LOG_LEVEL", "WARNING")
    import django
    from django.core.management import call_command

    django.setup()
    from django.conf import settings

    used = settings.DATABASES["default"]["NAME"]
    if used != db_name:
        raise SystemExit(f"settings chose database {used!r}, not {db_name!r}; refusing to run")
    call_command("migrate", verbosity=0, interactive=False)


def reset_rows() -> None:
    """Empty the provisioner's tables in the bench database (never any other database)."""
    from django.db import connection

    from obleth.core.models import (
        Alert,
        Endpoint,
        Launch,
        Lease,
        ManagedSpec,
        Model,
        ProvisionerStatus,
        Replica,
    )

    # TRUNCATE, not the ORM: deleting through models would decrypt secrets (endpoint and replica
    # keys) written by an earlier instance with other keys. CASCADE takes rows that point here.
    tables = ", ".join(
        connection.ops.quote_name(model._meta.db_table)
        for model in (
            Endpoint,
            Replica,
            Launch,
            ManagedSpec,
            Model,
            ProvisionerStatus,
            Alert,
            Lease,
        )
    )
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {tables} CASCADE")


# ------------------------------------------------------------------------------ measurements

_LITERALS = [
    (re.compile(r'"s\d+_x\d+"'), '"<savepoint>"'),
    (re.compile(r"'(?:[^']|'')*'"), "?"),
    (re.compile(r"\b[0-9a-f]{32}\b|\b[0-9a-f-]{36}\b"), "?"),
    (re.compile(r"\b\d+(\.\d+)?\b"), "?"),
    (re.compile(r"%s"), "?"),
    (re.compile(r"\((?:\?, )+\?\)"), "(?...)"),
]


def normalise_sql(sql: str) -> str:
    for pattern, repl in _LITERALS:
        sql = pattern.sub(repl, sql)
    return " ".join(sql.split())[:240]


class QueryCounter:
    """Counts every query this thread's connection runs (django execute_wrapper)."""

    def __init__(self) -> None:
        self.count = 0
        self.by_sql: collections.Counter[str] = collections.Counter()

    def __call__(
        self, execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any
    ) -> Any:
        self.count += 1
        self.by_sql[normalise_sql(sql)] += 1
        return execute(sql, params, many, context)


@contextmanager
def count_queries() -> Iterator[QueryCounter]:
    from django.db import connection

    counter = QueryCounter()
    with connection.execute_wrapper(counter):
        yield counter


def rss_mb() -> tuple[float, float]:
    """(current VmRSS, peak ru_maxrss) of this process in MiB."""
    current = 0.0
    with open("/proc/self/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                current = int(line.split()[1]) / 1024
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return current, peak


def cpu_secs() -> float:
    """User + system CPU seconds this process has used (all threads)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def spread(values: Sequence[float]) -> str:
    if not values:
        return "n/a"
    return (
        f"median {statistics.median(values):.3f}  min {min(values):.3f}  max {max(values):.3f}"
        f"  (n={len(values)})"
    )


def raise_fd_limit(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, needed), hard))


# ---------------------------------------------------------------------------- child processes


class Child:
    """A helper process started by the benchmark; stopped by its own pid, never by name."""

    def __init__(
        self,
        argv: list[str],
        ready_prefix: str,
        *,
        env: dict[str, str] | None = None,
        timeout: float = 60,
    ) -> None:
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
        )
        deadline = time.monotonic() + timeout
        assert self.proc.stdout is not None
        said = "no output"
        while True:
            line = self.proc.stdout.readline()
            if line.startswith(ready_prefix):
                self.ready_line = line.strip()
                return
            said = line.strip() or said
            if not line or time.monotonic() > deadline:
                self.stop()
                raise SystemExit(f"{argv[1]} did not start: {said}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


def python() -> str:
    return sys.executable


def listening_ports() -> set[int]:
    """TCP ports something on this machine listens on (from /proc/net/tcp and tcp6)."""
    ports: set[int] = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name, encoding="ascii") as handle:
                next(handle, None)
                for line in handle:
                    fields = line.split()
                    if len(fields) > 3 and fields[3] == "0A":
                        ports.add(int(fields[1].rsplit(":", 1)[1], 16))
        except OSError:
            continue
    return ports
