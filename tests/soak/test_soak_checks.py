"""The soak's invariant bookkeeping (bench/_soak_checks.py) on hand-made samples: each check
must fire on the fault it names and stay quiet on the normal churn around it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench._soak_checks import (  # noqa: E402
    Cancel,
    Checks,
    Replacement,
    Sample,
    match_replacements,
    slowest,
    spread,
)


def replica(
    rid: str, job: str, name: str, model: str = "m", state: str = "healthy"
) -> dict[str, Any]:
    return {"id": rid, "model_name": model, "state": state, "job_id": job, "job_name": name}


def endpoint(rid: str, model: str = "m", enabled: bool = True) -> dict[str, Any]:
    return {"replica_id": rid, "model_name": model, "enabled": enabled, "health_status": "healthy"}


def test_two_live_jobs_of_one_replica_are_a_duplicate_but_a_completing_one_is_not() -> None:
    checks = Checks(grace=10)
    rows = [replica("r1", "1", "obc-x-m-r1")]
    checks.add(
        Sample(0, {"1": ("obc-x-m-r1", "RUNNING"), "2": ("obc-x-m-r1", "COMPLETING")}, rows, [])
    )
    assert checks.duplicates == []
    checks.add(
        Sample(1, {"1": ("obc-x-m-r1", "RUNNING"), "2": ("obc-x-m-r1", "PENDING")}, rows, [])
    )
    checks.add(
        Sample(2, {"1": ("obc-x-m-r1", "RUNNING"), "2": ("obc-x-m-r1", "PENDING")}, rows, [])
    )
    assert len(checks.duplicates) == 1  # reported once, not once a second
    assert "jobs ['1', '2']" in checks.duplicates[0].detail


def test_an_orphan_is_a_violation_only_past_the_grace_and_outages_stop_its_clock() -> None:
    checks = Checks(grace=10)
    jobs = {"9": ("obc-x-m-gone", "RUNNING")}
    for t in range(0, 10):
        checks.add(Sample(t, jobs, [], []))
    assert checks.orphans == []
    checks.outage(5, 30)  # slurmrestd down from t=5 to t=30: nobody could cancel it
    for t in range(10, 40):
        checks.add(Sample(t, jobs, [], []))
    assert checks.orphans == []
    checks.add(Sample(41, jobs, [], []))
    assert [v.detail for v in checks.orphans] == ["job 9 (obc-x-m-gone)"]


def test_a_job_whose_name_is_a_replica_row_is_not_an_orphan() -> None:
    checks = Checks(grace=0)
    rows = [replica("r1", "", "obc-x-m-r1", state="pending")]  # job id not stored yet
    checks.add(Sample(0, {"5": ("obc-x-m-r1", "PENDING")}, rows, []))
    checks.add(Sample(5, {"5": ("obc-x-m-r1", "PENDING")}, rows, []))
    assert checks.orphans == []


def test_an_endpoint_of_an_ended_job_is_stale_past_the_grace() -> None:
    checks = Checks(grace=3)
    rows = [replica("r1", "1", "n1")]
    checks.add(Sample(0, {"1": ("n1", "RUNNING")}, rows, [endpoint("r1")]))
    assert checks.serving_at("m", 0)
    for t in (1, 2, 3):
        checks.add(Sample(t, {}, rows, [endpoint("r1")]))
    assert checks.stale_endpoints == []
    checks.add(Sample(5, {}, rows, [endpoint("r1")]))
    assert len(checks.stale_endpoints) == 1
    assert not checks.serving_at("m", 4)
    # a disabled endpoint routes nothing: not stale
    other = Checks(grace=0)
    other.add(Sample(0, {}, rows, [endpoint("r1", enabled=False)]))
    other.add(Sample(9, {}, rows, [endpoint("r1", enabled=False)]))
    assert other.stale_endpoints == []


def test_each_cancel_takes_the_next_launch_of_its_model() -> None:
    cancels = [Cancel(100, "1", "a", "m"), Cancel(110, "2", "b", "m"), Cancel(120, "3", "c", "z")]
    launches = [
        {"id": "old", "model_name": "m", "submitted_at": 50.0, "healthy_at": 52.0},
        {"id": "n1", "model_name": "m", "submitted_at": 100.4, "healthy_at": 102.0},
        {"id": "n2", "model_name": "m", "submitted_at": 111.0, "healthy_at": None},
    ]
    reps = match_replacements(cancels, launches, {"n1": 102.5})
    assert [(r.submitted, r.healthy, r.routed) for r in reps] == [
        (0.4000000000000057, 2.0, 2.5),
        (1.0, None, None),
        (None, None, None),
    ]


def test_spread() -> None:
    assert spread([]) == {"n": 0, "median": None, "p90": None, "max": None}
    got = spread([float(i) for i in range(1, 11)])
    assert got == {"n": 10, "median": 5.5, "p90": 9.0, "max": 10.0}


def test_slowest_names_the_phases_and_the_outages_that_overlapped() -> None:
    checks = Checks(grace=25)
    checks.outage(1000.0, 1020.0, "slurmrestd down")
    checks.outage(2000.0, 2005.0, "worker killed")
    fast = Replacement(Cancel(1500.0, "7", "r7", "m"), submitted=0.4, healthy=1.5, routed=2.0)
    slow = Replacement(Cancel(995.0, "8", "r8", "m"), submitted=26.0, started=26.5, routed=43.2)
    lost = Replacement(Cancel(3000.0, "9", "r9", "m"))  # never routed: not among the slowest
    lines = slowest([fast, slow, lost], checks, n=2)
    assert len(lines) == 2
    assert lines[0].startswith("job 8 of m") and "submitted +26.0s" in lines[0]
    assert "routed +43.2s" in lines[0] and lines[0].endswith("during: slurmrestd down")
    assert lines[1].startswith("job 7 of m") and lines[1].endswith("no outage overlapped")
