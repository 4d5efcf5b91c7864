"""``scripts/run`` outlives the pipe that reads it, and nothing outlives its supervisor.

Everything is real: ``scripts/run`` with its own folder, ports and job prefix, supervisord,
gunicorn, the gateway service, the Celery worker (prefork pool: it has children of its own) and
beat on a private redis-server. No Slurm here (``OBLETH_NO_SLURM=1``): the pipe and the process
tree are what is tested, and no job is ever submitted. The faults are real: the test closes the
read end of scripts/run's stdout pipe (what ``scripts/run | head`` or a reader that goes away
does), and SIGKILLs supervisord.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.faults.procs import PrivateRedis, cmdline, http_ok, wait_for
from tests.faults.scripts_run import RUN, Instance, alive, descendants, running

pytestmark = [pytest.mark.e2e]


@pytest.fixture
def redis(tmp_path: Path) -> PrivateRedis:
    server = PrivateRedis(tmp_path / "redis")
    server.start()
    yield server  # type: ignore[misc]
    server.stop()


def _instance(tmp_path: Path, redis: PrivateRedis) -> Instance:
    return Instance(tmp_path, OBLETH_NO_SLURM="1", REDIS_URL=redis.url)


def _follower(instance: Instance) -> list[int]:
    """The pid of scripts/run's `tail -F` (the only writer to its stdout), if it runs."""
    return [p for p in instance.left() if cmdline(p)[:1] == ["tail"]]


def test_closing_the_output_pipe_kills_only_the_follower(
    tmp_path: Path, redis: PrivateRedis
) -> None:
    run = _instance(tmp_path, redis)
    with running(run, subprocess.PIPE) as proc:
        assert proc.stdout is not None
        seen: list[bytes] = []

        def read_until_banner() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                seen.append(line)
                if b"obleth is starting" in line:
                    return

        reader = threading.Thread(target=read_until_banner, daemon=True)
        reader.start()
        reader.join(240)
        assert not reader.is_alive(), b"".join(seen)[-3000:].decode(errors="replace")
        # The reader goes away: what `scripts/run | head` does after its lines.
        proc.stdout.close()

        wait_for("web and gateway /healthz", run.both_answer, 180, 0.5)
        wait_for("worker and beat", lambda: {"worker", "beat"} <= set(run.programs()), 60)
        sup = run.supervisord_pid()
        assert sup is not None
        programs = run.programs()
        # Output keeps coming (gunicorn's access log, Celery's lines): the follower writes into
        # the closed pipe and dies of it; that is the only process that may.
        for _ in range(20):
            http_ok(run.web + "/healthz")
        wait_for("the follower to die of the closed pipe", lambda: not _follower(run), 30, 0.3)

        time.sleep(3)  # supervisord would have hit EPIPE by now
        assert alive(sup), "supervisord died with its output pipe"
        assert run.programs() == programs, "a supervised process was lost or restarted"
        assert run.both_answer()
        assert proc.poll() is None, "scripts/run itself ended"
        # The old failure: supervisord's writes to the dead pipe raised, it closed the programs'
        # output channels ("CRIT uncaptured python exception") and they blocked or it died.
        assert "exited:" not in run.read_log("supervisord.log")
        assert "CRIT" not in run.read_log("supervisord.log")

        # It still stops cleanly on SIGTERM, with nothing left behind.
        tree = [sup, *descendants(sup)]
        assert run.stop(90) is not None, "scripts/run did not end after SIGTERM"
        wait_for("every process of scripts/run to end", lambda: not run.left(), 30)
        assert not [p for p in tree if alive(p)]
        log = run.read_log()
        assert "[obleth] stopped" in log, log[-2000:]
        assert "[obleth] could not count this instance's jobs on Slurm" in log


def test_a_killed_supervisor_takes_every_program_with_it(
    tmp_path: Path, redis: PrivateRedis
) -> None:
    """Two gateway workers: uvicorn's worker processes are grandchildren to cover too."""
    run = _instance(tmp_path, redis)
    run.env["OBLETH_GATEWAY_WORKERS"] = "2"
    out = open(tmp_path / "out.log", "wb")  # noqa: SIM115 - closed below
    with running(run, out) as proc:
        wait_for("web and gateway /healthz", run.both_answer, 180, 0.5)
        wait_for("worker and beat", lambda: {"worker", "beat"} <= set(run.programs()), 60)
        sup = run.supervisord_pid()
        assert sup is not None
        worker = run.programs()["worker"]
        gateway = run.programs()["gateway"]
        # Grandchildren count too: the worker's prefork pool (4), gunicorn's worker, uvicorn's 2.
        wait_for("the worker's pool", lambda: len(descendants(worker)) >= 4, 60)
        wait_for("the gateway's workers", lambda: len(descendants(gateway)) >= 2, 60)
        tree = descendants(sup)
        assert len(tree) >= 4 + 4 + 1 + 2, [cmdline(p) for p in tree]

        killed = time.monotonic()
        subprocess.run(["kill", "-KILL", str(sup)], check=True)
        wait_for(
            "every process supervisord ran to die",
            lambda: not [p for p in tree if alive(p)],
            10,
            0.1,
        )
        gone_after = time.monotonic() - killed
        sys.stderr.write(f"[parent-death] {len(tree)} processes gone {gone_after:.2f} s after\n")
        # scripts/run sees its supervisor gone, says so and ends; nothing is left.
        assert proc.wait(60) is not None
        wait_for("every process of scripts/run to end", lambda: not run.left(), 30)
        assert "[obleth] stopped" in run.read_log()
    out.close()
    assert "[obleth] stopped" in (tmp_path / "out.log").read_text(errors="replace")


def _first_start(tmp_path: Path, name: str, **env: str) -> tuple[Path, str]:
    """Start scripts/run in a new folder and stop it right after it wrote var/dev.env (an invalid
    OBLETH_RUN_REAL_MODEL makes the instance refuse to go on at that point): the folder and what
    scripts/run printed (its front copies the instance's last lines before it ends)."""
    var = tmp_path / name
    env = {"OBLETH_VAR_DIR": str(var), "OBLETH_RUN_REAL_MODEL": "maybe", **env}
    done = subprocess.run(
        [str(RUN)], cwd=RUN.parents[1], env={**Instance(tmp_path).env, **env},
        capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    said = done.stdout + done.stderr
    assert done.returncode != 0, said
    assert "OBLETH_RUN_REAL_MODEL='maybe': write 0 (no real model) or 1" in said, said[-2000:]
    return var, said


def _drawn_prefix(var: Path) -> str:
    lines = (var / "dev.env").read_text().splitlines()
    name = "OBLETH_PROVISIONER_JOB_PREFIX="
    return next(line.removeprefix(name) for line in lines if line.startswith(name))


def test_each_instance_folder_draws_a_job_prefix_of_its_own(tmp_path: Path) -> None:
    without = {"OBLETH_PROVISIONER_JOB_PREFIX": ""}
    one, _ = _first_start(tmp_path, "one", **without)
    two, _ = _first_start(tmp_path, "two", **without)
    first, second = _drawn_prefix(one), _drawn_prefix(two)
    assert re.fullmatch(r"obleth[0-9a-f]{6}-", first), first
    assert first != second
    # Neither starts with the old shared default, which would match it (a prefix match).
    assert not first.startswith("obleth-") and not second.startswith("obleth-")
    # The same folder keeps its prefix.
    _first_start(tmp_path, "one", **without)
    assert _drawn_prefix(one) == first
    # The instance uses it; one set in the environment wins over it.
    drained = subprocess.run(
        [str(RUN), "stop-replicas"], env={**Instance(tmp_path).env, "OBLETH_VAR_DIR": str(one)},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert "(job prefix obc-t" in drained.stderr, drained.stderr
    drained = subprocess.run(
        [str(RUN), "stop-replicas"], env={**Instance(tmp_path).env, "OBLETH_VAR_DIR": str(one),
                                          "OBLETH_PROVISIONER_JOB_PREFIX": ""},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert f"(job prefix {first})" in drained.stderr, drained.stderr


def test_an_instance_from_before_keeps_the_prefix_its_jobs_carry(tmp_path: Path) -> None:
    """A folder with a dev.env and a database but no prefix line ran with the old default
    `obleth-`: it keeps it (its jobs carry it) and says how to get one of its own."""
    var = tmp_path / "old"
    var.mkdir()
    (var / "dev.env").write_text(
        "OBLETH_SECRET_KEY=x" + "k" * 50 + "\nOBLETH_ENCRYPTION_KEY=" + "e" * 43 + "\n"
        "OBLETH_ADMIN_TOKEN=t\nOBLETH_ADMIN_PASSWORD=p\n"
    )
    (var / "obleth.sqlite3").write_bytes(b"")
    _, said = _first_start(tmp_path, "old", OBLETH_PROVISIONER_JOB_PREFIX="")
    assert _drawn_prefix(var) == "obleth-"
    assert "keeps the shared job prefix obleth-" in said, said[-2000:]


def test_a_second_start_in_the_same_folder_is_refused(tmp_path: Path, redis: PrivateRedis) -> None:
    run = _instance(tmp_path, redis)
    with running(run, subprocess.DEVNULL):
        wait_for("web and gateway /healthz", run.both_answer, 180, 0.5)
        again = subprocess.run(
            [str(RUN)], env=run.env, capture_output=True, text=True, timeout=60, check=False
        )
        assert again.returncode != 0
        assert "obleth already runs in" in again.stderr, again.stderr
        assert run.both_answer(), "the refused start disturbed the running one"
        status = run.status()
        assert "running (supervisord pid" in status, status
        assert f"web     {run.web}/healthz  answers" in status, status
        assert f"gateway {run.gateway}/healthz  answers" in status, status
        assert f"job prefix  {run.prefix}" in status, status
        assert "real model  off (OBLETH_RUN_REAL_MODEL=0)" in status, status
        assert run.stop(90) is not None
    assert "not running" in run.status()
