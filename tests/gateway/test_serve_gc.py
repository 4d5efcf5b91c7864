"""The gateway worker freezes what it made at startup, so full collections stay cheap.

A real ``create_app()`` (the uvicorn factory) in a child process, with the test settings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = """
import gc, time
from obleth.gateway.serve import create_app
create_app()
frozen = gc.get_freeze_count()
started = time.perf_counter()
gc.collect()
print(frozen, round((time.perf_counter() - started) * 1000, 3))
"""


def test_create_app_moves_startup_objects_out_of_the_collectors_reach() -> None:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"}
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    frozen, _collect_ms = done.stdout.split()
    # Django, the settings and the service: tens of thousands of objects (about 90,000 here).
    assert int(frozen) > 20_000, done.stdout
