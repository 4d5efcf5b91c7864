"""scripts/die-with-parent and obleth.parent_death: the kernel ends a process whose parent died.

All real processes and real signals: a parent process is SIGKILLed (it can run no code then)
and the child must be gone anyway.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.faults.procs import wait_for

ROOT = Path(__file__).resolve().parents[2]
WRAPPER = ROOT / "scripts" / "die-with-parent"


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _parent_running(child_argv: list[str], tmp_path: Path) -> tuple[subprocess.Popen[str], int]:
    """A python parent that starts ``child_argv`` and waits; returns it and the child's pid."""
    code = textwrap.dedent(
        """
        import subprocess, sys, time
        child = subprocess.Popen(sys.argv[1:])
        print(child.pid, flush=True)
        time.sleep(300)
        """
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", code, *child_argv], stdout=subprocess.PIPE, text=True,
        start_new_session=True, cwd=tmp_path,
    )  # fmt: skip
    assert parent.stdout is not None
    return parent, int(parent.stdout.readline())


def test_the_child_is_killed_when_its_parent_is_sigkilled(tmp_path: Path) -> None:
    parent, child = _parent_running([str(WRAPPER), "--", "sleep", "300"], tmp_path)
    try:
        wait_for("the wrapper to become sleep", lambda: _comm(child) == "sleep", 10, 0.05)
        assert _alive(child)
        parent.kill()
        parent.wait(10)
        wait_for("the orphaned sleep to be killed", lambda: not _alive(child), 5, 0.05)
    finally:
        os.killpg(parent.pid, signal.SIGKILL)


def test_sigterm_lets_the_child_stop_in_order(tmp_path: Path) -> None:
    said, ready = tmp_path / "said", tmp_path / "ready"
    child_code = (
        "import signal, sys, time\n"
        f"signal.signal(signal.SIGTERM, lambda *_: (open({str(said)!r}, 'w').write('TERM'), "
        "sys.exit(0)))\n"
        f"open({str(ready)!r}, 'w').close()\n"
        "time.sleep(300)\n"
    )
    argv = [str(WRAPPER), "--signal", "TERM", "--", sys.executable, "-c", child_code]
    parent, child = _parent_running(argv, tmp_path)
    try:
        wait_for("the child's handler", ready.exists, 10, 0.05)
        assert _alive(child)
        parent.kill()
        wait_for("the child's TERM handler", said.exists, 10, 0.05)
        assert said.read_text() == "TERM"
    finally:
        os.killpg(parent.pid, signal.SIGKILL)


def test_a_parent_that_is_already_someone_else_means_no_start(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    done = subprocess.run(
        [str(WRAPPER), "--parent", "1", "--", "touch", str(marker)],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    assert "died before it started" in done.stderr
    assert not marker.exists()
    pidfile = tmp_path / "parent.pid"
    pidfile.write_text(f"{os.getpid()}\n")  # the right parent: this test process
    done = subprocess.run(
        [str(WRAPPER), "--parent-pidfile", str(pidfile), "--", "touch", str(marker)],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert marker.exists()


def test_new_group_and_the_command_line_after_exec(tmp_path: Path) -> None:
    code = "import os; print(os.getpid(), os.getpgrp())"
    done = subprocess.run(
        [str(WRAPPER), "--new-group", "--", sys.executable, "-c", code],
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    pid, group = done.stdout.split()
    assert pid == group  # its own process group (a terminal's Ctrl-C does not reach it)


@pytest.mark.parametrize(
    ("argv", "status", "message"),
    [
        (["--signal", "NOPE", "--", "true"], 2, "--signal 'NOPE': not a signal name"),
        (["--", "/nonexistent/command"], 127, "cannot run /nonexistent/command"),
        (["--signal", "KILL"], 2, "name the command to run after --"),
    ],
)
def test_bad_use_is_refused_with_the_reason(argv: list[str], status: int, message: str) -> None:
    done = subprocess.run(
        [str(WRAPPER), *argv], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == status
    assert message in done.stderr


def test_parent_death_module_kills_a_process_whose_parent_is_gone_already() -> None:
    """obleth.parent_death (gunicorn's post_fork, uvicorn workers): an expected parent that is
    not the real one means the parent died before the call: the process ends at once."""
    code = (
        "from obleth.parent_death import die_with_parent\n"
        "die_with_parent(1)\n"  # this process's parent is not pid 1
        "print('still here')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT,
        check=False, env={**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"},
    )  # fmt: skip
    assert done.returncode == -signal.SIGKILL
    assert "still here" not in done.stdout


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""
