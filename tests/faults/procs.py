"""Process, port and Redis helpers for the fault tests and the soak (no fixtures here).

Everything started through these helpers is stopped by its own pid or session, never by name.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx


def free_port() -> int:
    """A TCP port nobody listens on right now (127.0.0.1)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def session_pids(sid: int) -> list[int]:
    """Every live process whose session id is ``sid`` (zombies left out)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp session ...: comm may hold spaces, split after ')'
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z" and int(fields[3]) == sid:
            found.append(int(entry.name))
    return found


def children(pid: int) -> list[int]:
    """Direct children of ``pid``."""
    kids: list[int] = []
    task_dir = Path(f"/proc/{pid}/task")
    with contextlib.suppress(OSError):
        for task in task_dir.iterdir():
            with contextlib.suppress(OSError):
                kids += [int(p) for p in (task / "children").read_text().split()]
    return kids


def cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def kill_session(sid: int, sig: int = signal.SIGKILL) -> None:
    """Signal every process of a session this test started (by its own session id)."""
    for pid in session_pids(sid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def http_ok(url: str, timeout: float = 2.0) -> bool:
    try:
        return httpx.get(url, timeout=timeout, headers={"Host": "127.0.0.1"}).status_code == 200
    except httpx.HTTPError:
        return False


def wait_for(what: str, check: object, timeout: float, interval: float = 0.2) -> None:
    assert callable(check)
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


class PrivateRedis:
    """A redis-server of our own on 127.0.0.1:<port> (the shared one on 6379 is never touched).

    ``stop()`` ends it (SIGKILL: a crash, nothing saved) and ``start()`` brings it back on the
    same port, so a test can cut the broker for a while."""

    def __init__(self, directory: Path, port: int | None = None) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (scripts/test installs it)")
        self.binary = binary
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        argv = [self.binary, "--bind", "127.0.0.1", "--port", str(self.port), "--save", ""]
        argv += ["--appendonly", "no", "--dir", str(self.dir)]
        self.proc = subprocess.Popen(
            argv,
            stdout=open(self.dir / "redis.log", "ab"),  # noqa: SIM115 - the child keeps it
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_for(f"redis-server on port {self.port}", self.answers, 15)

    def answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None


@contextlib.contextmanager
def private_redis(directory: Path) -> Iterator[PrivateRedis]:
    redis = PrivateRedis(directory)
    redis.start()
    try:
        yield redis
    finally:
        redis.stop()


def squeue_prefix(prefix: str) -> dict[str, tuple[str, str]]:
    """Live jobs whose name starts with ``prefix``: job id -> (name, state), from the Slurm CLI."""
    out = subprocess.run(
        ["squeue", "-h", "-o", "%i|%j|%T"], capture_output=True, text=True, check=True
    ).stdout
    jobs: dict[str, tuple[str, str]] = {}
    for line in out.splitlines():
        job_id, name, state = line.split("|", 2)
        if name.startswith(prefix):
            jobs[job_id] = (name, state)
    return jobs


def scancel_prefix(prefix: str) -> None:
    """Cancel the live jobs carrying ``prefix`` (a prefix this test made up: only its own)."""
    if not prefix.startswith("obc-") or len(prefix) < 8:
        raise ValueError(f"refusing to cancel jobs by the prefix {prefix!r}: not one of ours")
    for job_id in squeue_prefix(prefix):
        subprocess.run(["scancel", job_id], check=False)
