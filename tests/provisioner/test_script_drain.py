"""``obleth_serve``: the job script's server drains on Slurm's SIGTERM, then stops.

Runs the rendered job script under bash, as slurmstepd would, with a tiny Python server that writes
a tick every 50 ms and notes the signals it gets. What stands in for Slurm: the test sends SIGTERM
to every process of the script (what proctrack/linuxproc and proctrack/cgroup do on ``scancel``,
preemption and the time limit), as it cannot start a Slurm job here; the real job path is
covered by tests/e2e/test_gateway_service_real.py and tests/slurm/test_drain_real_slurm.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from provisioner.script import DRAIN_SECS_DEFAULT, drain_block, render_batch_script

SERVER = r"""
import signal, sys, time
out = open(sys.argv[1], "a", buffering=1)
def on(sig, _frame):
    out.write(f"signal {signal.Signals(sig).name}\n")
    if sig == signal.SIGINT:
        out.write("stopped\n")
        sys.exit(0)
signal.signal(signal.SIGTERM, on)  # a server that would stop on SIGTERM if it ever got it
signal.signal(signal.SIGINT, on)
out.write("ready\n")
n = int(sys.argv[2]) if len(sys.argv) > 2 else 10**9
for _ in range(n):
    out.write("tick\n")
    time.sleep(0.05)
sys.exit(3)
"""


def _script(tmp_path: Path, body: str) -> Path:
    server = tmp_path / "server.py"
    server.write_text(SERVER)
    script = tmp_path / "job.sh"
    script.write_text(
        render_batch_script(
            script_body=f"#!/bin/bash\nset -euo pipefail\n{body.format(server=server)}\n",
            image="",
            preamble="",
            launch_command="",
            port_base=47000,
            port_span=2,
        )
    )
    return script


def _start(script: Path, drain: str | None) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "OBLETH_DRAIN_SECS"}
    if drain is not None:
        env["OBLETH_DRAIN_SECS"] = drain
    return subprocess.Popen(
        ["bash", str(script)],
        env=env,
        start_new_session=True,
        stderr=subprocess.PIPE,
    )


def _lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def _wait_for(predicate: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError("timed out")


def _sigterm_every_process(proc: subprocess.Popen[bytes]) -> None:
    """Slurm's way: SIGTERM to each process of the job, the server included."""
    os.killpg(proc.pid, signal.SIGTERM)


def test_the_server_keeps_answering_through_the_drain_and_then_gets_sigint(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    script = _script(tmp_path, f'obleth_serve {sys.executable} {{server}} "{log}"')
    proc = _start(script, drain="2")
    try:
        _wait_for(lambda: "ready" in _lines(log), 10)
        _sigterm_every_process(proc)
        signalled_at = time.monotonic()
        ticks_at_term = _lines(log).count("tick")
        rc = proc.wait(timeout=15)
        took = time.monotonic() - signalled_at
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    lines = _lines(log)
    # SIGTERM never reached the server; it ticked on through the drain and then got SIGINT.
    assert "signal SIGTERM" not in lines
    assert lines[-2:] == ["signal SIGINT", "stopped"]
    assert lines.count("tick") - ticks_at_term >= 20  # about 40 ticks in 2 s
    assert took >= 1.5
    assert rc == 0
    stderr = proc.stderr.read().decode() if proc.stderr else ""
    assert "drains for up to 2 s" in stderr


def test_drain_zero_stops_the_server_at_once(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    script = _script(tmp_path, f'obleth_serve {sys.executable} {{server}} "{log}"')
    proc = _start(script, drain="0")
    try:
        _wait_for(lambda: "ready" in _lines(log), 10)
        _sigterm_every_process(proc)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    lines = _lines(log)
    assert "signal SIGTERM" not in lines
    assert lines[-2:] == ["signal SIGINT", "stopped"]


def test_a_server_that_ends_on_its_own_ends_the_job_with_its_exit_code(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    script = _script(tmp_path, f'obleth_serve {sys.executable} {{server}} "{log}" 5')
    proc = _start(script, drain="30")
    rc = proc.wait(timeout=20)
    assert rc == 3  # the server's own code, through `set -e`
    assert _lines(log).count("tick") == 5


@pytest.mark.parametrize("value", ["abc", "-5", "1; touch /tmp/obleth-pwned", "$(id)", ""])
def test_a_drain_setting_that_is_not_whole_seconds_falls_back_to_the_default(
    tmp_path: Path, value: str
) -> None:
    script = tmp_path / "probe.sh"
    script.write_text(drain_block() + '\necho "drain=$OBLETH_DRAIN_SECS"\n')
    out = subprocess.run(
        ["bash", str(script)],
        env={**os.environ, "OBLETH_DRAIN_SECS": value},
        capture_output=True,
        text=True,
        timeout=10,
        check=True,
    )
    assert out.stdout.strip() == f"drain={DRAIN_SECS_DEFAULT}"
    assert not Path("/tmp/obleth-pwned").exists()
    if value:
        assert "must be whole seconds" in out.stderr


def test_the_block_sits_after_the_port_window_and_before_the_recipe(tmp_path: Path) -> None:
    text = render_batch_script(
        script_body="#!/bin/bash -l\n#SBATCH --cpus-per-task=1\nobleth_serve server\n",
        image="",
        preamble="",
        launch_command="",
        port_base=47000,
        port_span=2,
    )
    assert text.startswith("#!/bin/bash -l\n")
    assert text.index("OBLETH_SERVING_PORT") < text.index("obleth_serve() {")
    assert text.index("obleth_serve() {") < text.index("#SBATCH --cpus-per-task=1")
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)
