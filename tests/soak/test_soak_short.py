"""The 2-minute soak (bench/soak.py) as a CI test: fails on any broken invariant.

Everything is real (see bench/soak.py): scripts/run under supervisord, the real local Slurm
cluster and slurmrestd, test-engine replicas, a private redis-server, client load through the
gateway; the faults are a real scancel of a serving replica every 10 s, two slurmrestd outages
(``scripts/slurm-local rest-stop``), two SIGKILLs of the Celery worker and a Redis kill. The
outages are shorter than the 10-minute benchmark's (8 s slurmrestd, 5 s Redis, instead of 20 s
and 10 s): a pass holds the same way whether the outage lasts 8 s or 20 s, and CI's budget is
short. Nothing here checks a duration: latencies are printed, only invariants are asserted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.plugins.real_slurm import RealSlurm

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slurm, pytest.mark.e2e]


@pytest.mark.timeout(900)
def test_two_minute_soak_keeps_every_invariant(tmp_path: Path, real_slurm: RealSlurm) -> None:
    out = tmp_path / "soak.json"
    proc = subprocess.run(
        [
            sys.executable, str(ROOT / "bench" / "soak.py"),
            "--minutes", "2", "--models", "3", "--cancel-every", "10",
            "--rest-outage-secs", "8", "--redis-outage-secs", "5",
            "--db", "obleth_soak_ci", "--json", str(out),
        ],
        cwd=ROOT, capture_output=True, text=True, timeout=840, check=False,
    )  # fmt: skip
    print(proc.stdout[-6000:])
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["cancels"] >= 5, result["events"]
    assert result["broken"] == {
        "duplicate jobs": 0,
        "orphan jobs past one pass": 0,
        "stale endpoints past one pass": 0,
        "cancels not replaced": 0,
        "models not at their count at the end": 0,
    }, proc.stdout[-4000:]
    assert result["breaker_stopped_models"] == [], "the breaker stopped models under churn"
    assert result["healthz_failures"] == 0
    assert any("restarted as" in e for e in result["events"]), result["events"]
    assert proc.returncode == 0, proc.stdout[-3000:]
