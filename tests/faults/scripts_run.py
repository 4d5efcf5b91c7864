"""Start ``scripts/run`` for a test: its own folder, ports, job prefix and (optionally) Redis.

Everything it starts is in the session of the process it returns (``start_new_session``), so
``kill_session`` ends whatever a failed test left, and nothing else.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from tests.faults.procs import children, cmdline, free_port, http_ok, kill_session, session_pids

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "scripts" / "run"


def clean_env(**extra: str) -> dict[str, str]:
    """What a person's shell would hold: no test settings, no test database, no shared Redis."""
    env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "OBLETH_VENV") if k in os.environ}
    env.update(extra)
    return env


class Instance:
    def __init__(self, tmp: Path, **env: str) -> None:
        self.var = tmp / "var"
        self.port = free_port()
        self.gateway_port = free_port()
        self.prefix = f"obc-t{uuid.uuid4().hex[:6]}-"
        self.env = clean_env(
            OBLETH_VAR_DIR=str(self.var),
            OBLETH_BIND=f"127.0.0.1:{self.port}",
            OBLETH_GATEWAY_BIND=f"127.0.0.1:{self.gateway_port}",
            OBLETH_PROVISIONER_JOB_PREFIX=self.prefix,
            OBLETH_WEB_WORKERS="1",
            OBLETH_WEB_THREADS="2",
            OBLETH_RUN_REAL_MODEL="0",
        )
        self.env.update(env)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def web(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def gateway(self) -> str:
        return f"http://127.0.0.1:{self.gateway_port}"

    @property
    def logs(self) -> Path:
        return self.var / "logs"

    def start(self, stdout: int | IO[Any]) -> subprocess.Popen[bytes]:
        self.proc = subprocess.Popen(
            [str(RUN)], cwd=ROOT, env=self.env, stdout=stdout, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        return self.proc

    def both_answer(self) -> bool:
        return http_ok(self.web + "/healthz") and http_ok(self.gateway + "/healthz")

    def supervisord_pid(self) -> int | None:
        try:
            return int((self.var / "supervisord.pid").read_text().strip())
        except (OSError, ValueError):
            return None

    def programs(self) -> dict[str, int]:
        """name -> pid of each process supervisord runs (web, gateway, worker, beat, loop...)."""
        sup = self.supervisord_pid()
        found: dict[str, int] = {}
        for pid in children(sup) if sup else []:
            line = " ".join(cmdline(pid))
            for name, mark in (
                ("web", "gunicorn"), ("gateway", "obleth.gateway.serve"), ("worker", " worker "),
                ("beat", " beat "), ("loop", "reconcile --loop"), ("real-model", "real_model up"),
            ):  # fmt: skip
                if mark in f" {line} ":
                    found[name] = pid
        return found

    def read_log(self, name: str = "run.log") -> str:
        try:
            return (self.logs / name).read_text(errors="replace")
        except OSError:
            return ""

    def status(self) -> str:
        done = subprocess.run(
            [str(RUN), "status"], cwd=ROOT, env=self.env, capture_output=True, text=True,
            timeout=120, check=False,
        )  # fmt: skip
        return done.stdout + done.stderr

    def stop(self, timeout: float = 90) -> int | None:
        """SIGTERM to scripts/run, as a person's kill would; its exit status (None: it hung)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            return self.proc.wait(timeout)
        return None

    def left(self) -> list[int]:
        return session_pids(self.proc.pid) if self.proc else []

    def cleanup(self) -> None:
        if self.proc is not None:
            self.stop(60)
            kill_session(self.proc.pid)


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (children, their children...)."""
    found: list[int] = []
    todo = children(pid)
    while todo:
        child = todo.pop()
        found.append(child)
        todo.extend(children(child))
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@contextlib.contextmanager
def running(instance: Instance, stdout: int | IO[Any]) -> Iterator[subprocess.Popen[bytes]]:
    try:
        yield instance.start(stdout)
    finally:
        instance.cleanup()
