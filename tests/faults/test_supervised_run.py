"""``scripts/run`` keeps its processes alive, stops them all on SIGTERM, and tells what it leaves
on Slurm.

Everything here is real: ``scripts/run`` itself (its own OBLETH_VAR_DIR under tmp, SQLite, a
port of its own, a job prefix of its own), supervisord, gunicorn, the Celery worker and beat on a
private redis-server (the shared Redis on 6379 is not used), the real local Slurm cluster with
the demo model's two test-engine replicas. The faults are real signals: SIGKILL of the worker and
of gunicorn's master, then SIGTERM to ``scripts/run``.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.procs import (
    PrivateRedis,
    children,
    cmdline,
    free_port,
    http_ok,
    kill_session,
    scancel_prefix,
    session_pids,
    squeue_prefix,
    wait_for,
)
from tests.plugins.real_slurm import RealSlurm

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slurm, pytest.mark.e2e]


def clean_env(**extra: str) -> dict[str, str]:
    """What a person's shell would hold: no test settings, no test database, no shared Redis."""
    env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "OBLETH_VENV") if k in os.environ}
    env.update(extra)
    return env


class RunningInstance:
    def __init__(self, proc: subprocess.Popen[str], var: Path, port: int, log: Path) -> None:
        self.proc = proc
        self.var = var
        self.port = port
        self.log = log

    @property
    def healthz(self) -> str:
        return f"http://127.0.0.1:{self.port}/healthz"

    def supervisord_pid(self) -> int:
        return int((self.var / "supervisord.pid").read_text().strip())

    def program_pid(self, name: str) -> int | None:
        """The pid of the supervised process ``name`` (web, worker, beat), if it runs."""
        for pid in children(self.supervisord_pid()):
            argv = cmdline(pid)
            if name == "web" and any(a.endswith("gunicorn") for a in argv[:2]):
                return pid
            if name in ("worker", "beat") and name in argv and "celery" in " ".join(argv[:2]):
                return pid
        return None

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture
def instance(tmp_path: Path, real_slurm: RealSlurm) -> Iterator[RunningInstance]:
    redis = PrivateRedis(tmp_path / "redis")
    redis.start()
    prefix = f"obc-t{uuid.uuid4().hex[:6]}-"
    port = free_port()
    var = tmp_path / "var"
    log = tmp_path / "run.log"
    env = clean_env(
        OBLETH_VAR_DIR=str(var),
        OBLETH_BIND=f"127.0.0.1:{port}",
        OBLETH_GATEWAY_BIND=f"127.0.0.1:{free_port()}",
        OBLETH_PROVISIONER_JOB_PREFIX=prefix,
        OBLETH_RUN_REAL_MODEL="0",  # only the demo's two jobs (tests/faults/test_run_real_model.py)
        REDIS_URL=redis.url,
        OBLETH_WEB_WORKERS="1",
        OBLETH_WEB_THREADS="4",
    )
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [str(ROOT / "scripts" / "run")],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            text=True,
        )
    run = RunningInstance(proc, var, port, log)
    run.prefix = prefix  # type: ignore[attr-defined]
    try:
        yield run
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(60)
        kill_session(proc.pid)
        scancel_prefix(prefix)
        redis.stop()


def test_scripts_run_restarts_killed_processes_and_stops_everything(
    instance: RunningInstance,
) -> None:
    run = instance
    prefix: str = run.prefix  # type: ignore[attr-defined]
    wait_for("/healthz of scripts/run", lambda: http_ok(run.healthz), 180, 0.5)
    wait_for("the worker", lambda: run.program_pid("worker") is not None, 30)
    wait_for("the beat", lambda: run.program_pid("beat") is not None, 30)
    # the demo model's two replicas are submitted by the supervised provisioner
    wait_for("2 demo jobs on Slurm", lambda: len(squeue_prefix(prefix)) == 2, 90, 0.5)

    # 1. SIGKILL the worker: restarted, and the gateway never stops answering meanwhile.
    worker = run.program_pid("worker")
    assert worker is not None
    os.kill(worker, signal.SIGKILL)
    answers = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        answers.append(http_ok(run.healthz))
        new = run.program_pid("worker")
        if new is not None and new != worker:
            break
        time.sleep(0.3)
    assert new is not None and new != worker, "the killed worker was not restarted"
    assert all(answers), f"/healthz failed {answers.count(False)} of {len(answers)} times"
    wait_for(
        "the restart in supervisord's log",
        lambda: (
            "exited: worker (terminated by SIGKILL; not expected)" in run.output()
            and run.output().count("spawned: 'worker'") >= 2
        ),
        10,
    )

    # 2. SIGKILL gunicorn's master: a new one binds the port again and /healthz comes back.
    web = run.program_pid("web")
    assert web is not None
    os.kill(web, signal.SIGKILL)
    wait_for(
        "a new web process",
        lambda: run.program_pid("web") not in (None, web) and http_ok(run.healthz),
        60,
        0.5,
    )
    assert "exited: web (terminated by SIGKILL; not expected)" in run.output()

    # 3. SIGTERM: everything stops, nothing of the session is left, and it says what is left on
    # Slurm (the demo's two jobs, which keep running).
    run.proc.send_signal(signal.SIGTERM)
    run.proc.wait(90)
    wait_for("every process of scripts/run to end", lambda: not session_pids(run.proc.pid), 30)
    out = run.output()
    assert "[obleth] stopped" in out
    said = re.search(r"(\d+) replica job\(s\) of this instance keep running on Slurm", out)
    assert said is not None, out[-2000:]
    assert int(said.group(1)) == len(squeue_prefix(prefix)) == 2
    assert "scripts/run stop-replicas" in out

    # 4. stop-replicas drains them through the provisioner.
    drained = subprocess.run(
        [str(ROOT / "scripts" / "run"), "stop-replicas"],
        cwd=ROOT,
        env=clean_env(OBLETH_VAR_DIR=str(run.var), OBLETH_PROVISIONER_JOB_PREFIX=prefix),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert drained.returncode == 0, drained.stderr[-2000:]
    assert "0 live jobs left on Slurm" in drained.stdout
    assert squeue_prefix(prefix) == {}


def test_scripts_run_refuses_unknown_arguments(tmp_path: Path) -> None:
    proc = subprocess.run(
        [str(ROOT / "scripts" / "run"), "stop-everything; rm -rf /"],
        cwd=ROOT,
        env=clean_env(OBLETH_VAR_DIR=str(tmp_path / "var")),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode != 0
    assert "unknown argument" in proc.stderr
    assert not (tmp_path / "var").exists()


def test_stop_replicas_needs_an_instance(tmp_path: Path) -> None:
    proc = subprocess.run(
        [str(ROOT / "scripts" / "run"), "stop-replicas"],
        cwd=ROOT,
        env=clean_env(OBLETH_VAR_DIR=str(tmp_path / "nothing")),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode != 0
    assert "no instance here" in proc.stderr


def test_scripts_run_without_redis_supervises_the_loop(tmp_path: Path) -> None:
    """No Redis answering: scripts/run runs the provisioner loop instead; a SIGKILLed loop is
    restarted too. No Slurm here (OBLETH_NO_SLURM=1): the loop idles, which is enough."""
    port = free_port()
    var = tmp_path / "var"
    log = tmp_path / "run.log"
    env = clean_env(
        OBLETH_VAR_DIR=str(var),
        OBLETH_BIND=f"127.0.0.1:{port}",
        OBLETH_GATEWAY_BIND=f"127.0.0.1:{free_port()}",
        OBLETH_NO_SLURM="1",
        REDIS_URL=f"redis://127.0.0.1:{free_port()}/0",  # nothing listens there
        OBLETH_PROVISIONER_JOB_PREFIX=f"obc-t{uuid.uuid4().hex[:6]}-",
        OBLETH_WEB_WORKERS="1",
        OBLETH_WEB_THREADS="2",
    )
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [str(ROOT / "scripts" / "run")], cwd=ROOT, env=env, stdout=out,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    run = RunningInstance(proc, var, port, log)

    def loop_pid() -> int | None:
        for pid in children(run.supervisord_pid()):
            if "reconcile" in cmdline(pid) or any("reconcile" in a for a in cmdline(pid)):
                return pid
        return None

    try:
        wait_for("/healthz", lambda: http_ok(run.healthz), 120, 0.5)
        assert "running the provisioner loop" in run.output()
        wait_for("the loop", lambda: loop_pid() is not None, 30)
        first = loop_pid()
        assert first is not None
        os.kill(first, signal.SIGKILL)
        wait_for("a new loop", lambda: loop_pid() not in (None, first), 30)
        assert "exited: loop (terminated by SIGKILL; not expected)" in run.output()
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        wait_for("every process to end", lambda: not session_pids(proc.pid), 30)
        # no Slurm configured: it says it could not count, and why
        assert "could not count this instance's jobs on Slurm" in run.output()
    finally:
        if proc.poll() is None:
            proc.kill()
        kill_session(proc.pid)
