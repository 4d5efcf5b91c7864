"""The fault matrix, inside obleth: PostgreSQL down during passes, Redis down, two beat
processes at once.

Real: the provisioner runs in separate processes as in production (``manage.py reconcile
--loop``, or ``celery worker`` + ``celery beat``) against the test database and a PRIVATE
redis-server (the shared one on 6379 is never touched); the engines are real (conftest.py);
Slurm is the fake slurmrestd in this test process (its request log proves no cancel/submit).

PostgreSQL cannot be stopped here (it is shared by every session), so its outage is a real TCP
proxy between the loop and PostgreSQL that this test cuts: open connections are closed and new
ones refused, which is what the loop sees when PostgreSQL goes down (a restart of PostgreSQL
also closes every connection). Outages last 5 s, not 30: the loop and Celery retry on a fixed
short period, so a longer outage only repeats the same failed attempt more often.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from obleth.core.models import ManagedSpec, ProvisionerStatus
from tests.faults.conftest import Serving
from tests.faults.procs import PrivateRedis, free_port, wait_for

ROOT = Path(__file__).resolve().parents[2]


class CuttableProxy:
    """A TCP proxy to PostgreSQL; ``cut()`` closes every connection and refuses new ones."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.port = free_port()
        self.open = threading.Event()
        self.open.set()
        self.stop = threading.Event()
        self.pairs: list[tuple[socket.socket, socket.socket]] = []
        self.lock = threading.Lock()
        self.listener = socket.create_server(("127.0.0.1", self.port))
        self.listener.settimeout(0.2)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                client, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if not self.open.is_set():
                client.close()  # refused the moment it connects, as a down server's port
                continue
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.pairs.append((client, server))
            threading.Thread(target=self._pump, args=(client, server), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        with contextlib.suppress(OSError, ValueError):
            while not self.stop.is_set():
                ready, _, _ = select.select([a, b], [], [], 0.2)
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    (b if sock is a else a).sendall(data)
        for sock in (a, b):
            with contextlib.suppress(OSError):
                sock.close()

    def cut(self) -> None:
        self.open.clear()
        with self.lock:
            pairs, self.pairs = self.pairs, []
        for pair in pairs:
            for sock in pair:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                    sock.close()

    def restore(self) -> None:
        self.open.set()

    def close(self) -> None:
        self.stop.set()
        self.cut()
        self.listener.close()


def child_env(serving: Serving, database_url: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTEST_CURRENT_TEST", None)
    env.update(
        DJANGO_SETTINGS_MODULE="obleth.settings",
        DATABASE_URL=database_url,
        OBLETH_DATABASE_URL=database_url,
        OBLETH_PROVISIONER_JOB_PREFIX=serving.prefix,
        OBLETH_PROVISIONER_WARMUP_TIMEOUT_SECS="0",
        OBLETH_PROVISIONER_HEALTH_TIMEOUT_SECS="2",
        OBLETH_PROVISIONER_INTERVAL_SECS="2",
        OBLETH_PROVISIONER_FAST_INTERVAL_SECS="1",
        OBLETH_MODEL_HEALTH_ENABLED="0",
        OBLETH_CELERY_EAGER="0",
        OBLETH_LOG_LEVEL="INFO",
    )
    env.update(extra)
    return env


def db_url(port: int | None = None) -> str:
    s = connection.settings_dict
    return f"postgres://{s['USER']}@127.0.0.1:{port or s['PORT'] or 5432}/{s['NAME']}"


@contextlib.contextmanager
def started(argv: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # pool children of that session, if any


def last_pass() -> Any:
    ProvisionerStatus.objects.filter(pk=1).first()
    row = ProvisionerStatus.objects.filter(pk=1).first()
    return row.last_pass_at if row else None


def passes_after(moment: float, timeout: float, what: str) -> None:
    def ok() -> bool:
        row = ProvisionerStatus.objects.filter(pk=1).first()
        return bool(
            row
            and row.last_pass_at
            and row.last_pass_at.timestamp() > moment
            and row.last_pass_status == "ok"
        )

    wait_for(what, ok, timeout, 0.5)


def celery(*args: str) -> list[str]:
    return [str(Path(sys.executable).with_name("celery")), "-A", "obleth", *args]


@pytest.mark.timeout(180)
def test_loop_survives_postgresql_down(serving: Serving, tmp_path: Path) -> None:
    proxy = CuttableProxy(("127.0.0.1", int(connection.settings_dict["PORT"] or 5432)))
    env = child_env(serving, db_url(proxy.port), OBLETH_PROVISIONER_DISPATCH="inline")
    argv = [sys.executable, "manage.py", "reconcile", "--loop", "--interval", "2"]
    log = tmp_path / "loop.log"
    try:
        with started(argv, env, log) as loop:
            passes_after(time.time(), 30, "a first pass of the loop")
            before = serving.snapshot()
            proxy.cut()
            cut_at = time.time()
            time.sleep(5)
            assert loop.poll() is None, log.read_text()[-2000:]
            said = log.read_text()
            assert "pass could not run (database unreachable?)" in said, said[-2000:]
            proxy.restore()
            passes_after(time.time(), 30, "a pass after PostgreSQL came back")
            assert loop.poll() is None
            assert serving.snapshot() == before, "nothing may change around a database outage"
            assert time.time() - cut_at < 60
            # and it acts again
            ManagedSpec.objects.filter(model=serving.model).update(target_replicas=3)
            wait_for("the loop to scale up", lambda: len(serving.fake.jobs) == 3, 30)
    finally:
        proxy.close()


@pytest.mark.timeout(180)
def test_celery_survives_redis_down(serving: Serving, tmp_path: Path) -> None:
    redis = PrivateRedis(tmp_path / "redis")
    redis.start()
    env = child_env(serving, db_url(), REDIS_URL=redis.url, OBLETH_PROVISIONER_DISPATCH="celery")
    try:
        with (
            started(celery("worker", "--concurrency", "2", "--loglevel", "INFO"), env,
                    tmp_path / "worker.log") as worker,
            started(celery("beat", "--loglevel", "INFO", "--schedule",
                           str(tmp_path / "beat-schedule")), env, tmp_path / "beat.log") as beat,
        ):  # fmt: skip
            passes_after(time.time(), 60, "a first pass through Celery")
            before = serving.snapshot()
            redis.stop()
            time.sleep(5)
            assert worker.poll() is None and beat.poll() is None
            redis.start()
            passes_after(time.time(), 60, "a pass after Redis came back")
            assert worker.poll() is None and beat.poll() is None, "nobody restarted them"
            assert serving.snapshot() == before
            ManagedSpec.objects.filter(model=serving.model).update(target_replicas=3)
            wait_for("a scale-up through Celery", lambda: len(serving.fake.jobs) == 3, 30)
    finally:
        redis.stop()


@pytest.mark.timeout(180)
def test_two_beats_at_once_never_double_act(serving: Serving, tmp_path: Path) -> None:
    redis = PrivateRedis(tmp_path / "redis")
    redis.start()
    env = child_env(serving, db_url(), REDIS_URL=redis.url, OBLETH_PROVISIONER_DISPATCH="celery")
    try:
        with (
            started(celery("worker", "--concurrency", "4", "--loglevel", "INFO"), env,
                    tmp_path / "worker.log"),
            started(celery("beat", "--schedule", str(tmp_path / "one")), env, tmp_path / "b1.log"),
            started(celery("beat", "--schedule", str(tmp_path / "two")), env, tmp_path / "b2.log"),
        ):  # fmt: skip
            passes_after(time.time(), 60, "passes from two beats")
            submits_before = sum(1 for m, p in serving.writes() if m == "POST")
            ManagedSpec.objects.filter(model=serving.model).update(target_replicas=4)
            wait_for("the scale-up", lambda: len(serving.fake.jobs) == 4, 30)
            time.sleep(6)  # several more passes from each beat
            submits = sum(1 for m, p in serving.writes() if m == "POST") - submits_before
            assert submits == 2, f"{submits} submits for 2 missing replicas"
            assert not [w for w in serving.writes() if w[0] == "DELETE"]
            names = [j.name for j in serving.fake.jobs.values()]
            assert len(names) == len(set(names)) == 4
    finally:
        redis.stop()
