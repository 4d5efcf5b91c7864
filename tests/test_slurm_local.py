"""Tests of scripts/slurm-local and the real_slurm plugin, against the REAL local Slurm cluster.

Nothing is faked: munged, slurmctld, slurmd and slurmrestd run on this machine (127.0.0.1 only).
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest

from tests.plugins.real_slurm import (
    SLURM_LOCAL,
    RealSlurm,
    job_workdir,
    parse_env_output,
    run_slurm_local,
    scancel,
    submit_job,
    wait_for_job_state,
)

pytestmark = pytest.mark.slurm

SLURM_CONF = Path("/etc/slurm/slurm.conf")
STARTED_FILE = Path("/run/obleth-slurm/started")
JWT_KEY = Path("/etc/slurm/jwt_hs256.key")
DAEMONS = ("munged", "slurmctld", "slurmd", "slurmrestd")


def _status_pids() -> dict[str, str]:
    proc = run_slurm_local("status", timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    pids: dict[str, str] = {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        assert parts[1] == "up", line
        assert parts[2] == "pid", line
        pids[parts[0]] = parts[3]
    return pids


def _ping(real_slurm: RealSlurm, token: str) -> httpx.Response:
    return httpx.get(real_slurm.api_url("ping"), headers=real_slurm.headers(token), timeout=30)


def _jwt_claims(token: str) -> dict[str, Any]:
    """Claims without verifying the signature (test_token_works_against_ping verifies it)."""
    payload = token.split(".")[1]
    claims: dict[str, Any] = json.loads(
        base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
    )
    return claims


def test_script_is_executable_bash() -> None:
    assert SLURM_LOCAL.stat().st_mode & 0o111, "scripts/slurm-local must be executable"
    assert SLURM_LOCAL.read_text().startswith("#!/usr/bin/env bash\n")


def test_second_start_is_a_noop(real_slurm: RealSlurm, tmp_path: Path) -> None:
    conf_before = SLURM_CONF.read_bytes()
    conf_mtime = SLURM_CONF.stat().st_mtime_ns
    started_before = STARTED_FILE.read_text() if STARTED_FILE.exists() else ""
    pids_before = _status_pids()

    # from another cwd on purpose: the script must not depend on it
    proc = run_slurm_local("start", timeout=600, cwd=tmp_path)

    assert proc.returncode == 0, proc.stderr
    assert "starting" not in proc.stderr, proc.stderr
    assert "wrote" not in proc.stderr, proc.stderr
    assert SLURM_CONF.read_bytes() == conf_before
    assert SLURM_CONF.stat().st_mtime_ns == conf_mtime
    assert (STARTED_FILE.read_text() if STARTED_FILE.exists() else "") == started_before
    assert _status_pids() == pids_before


def test_generated_conf_has_the_required_settings(real_slurm: RealSlurm) -> None:
    conf = SLURM_CONF.read_text()
    for line in (
        "AuthAltTypes=auth/jwt",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        "DefMemPerCPU=256",
        "AccountingStorageType=accounting_storage/none",
        "MailProg=/bin/true",
        "ReturnToService=2",
        "MinJobAge=300",
    ):
        assert line in conf.splitlines(), f"missing {line!r} in {SLURM_CONF}"
    node = next(ln for ln in conf.splitlines() if ln.startswith("NodeName="))
    assert node.startswith("NodeName=localhost NodeAddr=127.0.0.1 CPUs=")
    assert "RealMemory=" in node
    assert any(ln.startswith("PartitionName=other ") for ln in conf.splitlines())
    assert JWT_KEY.stat().st_size == 32
    assert JWT_KEY.stat().st_mode & 0o777 == 0o600


def test_status_reports_every_daemon_up(real_slurm: RealSlurm) -> None:
    proc = run_slurm_local("status", timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert [ln.split()[0] for ln in lines] == list(DAEMONS)
    assert "-> 200" in lines[-1]


def test_token_works_against_ping(real_slurm: RealSlurm) -> None:
    proc = run_slurm_local("token", "obleth", "120", timeout=60)
    assert proc.returncode == 0, proc.stderr
    token = proc.stdout.strip()
    assert not token.startswith("SLURM_JWT=")
    claims = jwt.decode(token, JWT_KEY.read_bytes(), algorithms=["HS256"])
    assert claims["sun"] == "obleth"
    assert claims["exp"] - claims["iat"] == 120

    resp = _ping(real_slurm, token)
    assert resp.status_code == 200
    assert resp.json()["pings"][0]["ping"] == "UP"

    # the token matters: a tampered signature is refused (22.05 answers 500, not 401)
    head, body, sig = token.split(".")
    tampered = f"{head}.{body}.{sig[:-4]}AAAA"
    assert _ping(real_slurm, tampered).status_code != 200


def test_token_defaults_and_fresh_token(real_slurm: RealSlurm) -> None:
    proc = run_slurm_local("token", timeout=60)
    assert proc.returncode == 0, proc.stderr
    claims = _jwt_claims(proc.stdout.strip())
    assert claims["sun"] == "obleth"
    assert claims["exp"] - claims["iat"] == 86400

    fresh = real_slurm.fresh_token(lifespan=60)
    assert _jwt_claims(fresh)["exp"] - _jwt_claims(fresh)["iat"] == 60
    assert _ping(real_slurm, fresh).status_code == 200
    assert _ping(real_slurm, real_slurm.token).status_code == 200


def test_token_rejects_a_bad_lifespan() -> None:
    proc = run_slurm_local("token", "obleth", "soon", timeout=60)
    assert proc.returncode != 0
    assert "LIFESPAN" in proc.stderr
    assert proc.stdout == ""


def test_unknown_command_fails() -> None:
    proc = run_slurm_local("launch", timeout=60)
    assert proc.returncode != 0
    assert "unknown command 'launch'" in proc.stderr


def test_env_prints_the_four_export_lines(real_slurm: RealSlurm) -> None:
    proc = run_slurm_local("env", timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 4
    assert all(ln.startswith("export ") for ln in lines)
    values = parse_env_output(proc.stdout)
    assert values["OBLETH_SLURM_URL"] == "http://127.0.0.1:6820"
    assert values["OBLETH_SLURM_USER"] == "obleth"
    assert values["OBLETH_SLURM_API_VERSION"] == "v0.0.38"
    assert _jwt_claims(values["OBLETH_SLURM_JWT"])["sun"] == "obleth"
    assert _ping(real_slurm, values["OBLETH_SLURM_JWT"]).status_code == 200
    assert real_slurm.url == values["OBLETH_SLURM_URL"]
    assert "token" not in repr(real_slurm)


def test_job_runs_as_obleth_on_the_other_partition(real_slurm: RealSlurm) -> None:
    workdir = job_workdir(real_slurm, "runs-as-obleth")
    script = '#!/bin/bash\necho "WHO=$(id -un) MYVAR=$MYVAR"\nsleep 300\n'
    job_id = submit_job(
        real_slurm,
        script,
        name="obleth-test-runs-as",
        partition="other",
        current_working_directory=str(workdir),
        environment={"PATH": "/usr/local/bin:/usr/bin:/bin", "MYVAR": "hello"},
        time_limit=5,
        memory_per_node=128,
        standard_output=str(workdir / "out-%j.txt"),
        standard_error=str(workdir / "err-%j.txt"),
    )
    try:
        job = wait_for_job_state(real_slurm, job_id, {"RUNNING"}, timeout=60)
        assert job["user_name"] == "obleth"
        assert job["partition"] == "other"
        assert job["nodes"] == "localhost"
        out = workdir / f"out-{job_id}.txt"
        deadline = time.monotonic() + 30
        while "WHO=" not in (out.read_text() if out.exists() else ""):
            assert time.monotonic() < deadline, f"job {job_id} wrote nothing to {out}"
            time.sleep(0.1)
        assert "WHO=obleth MYVAR=hello" in out.read_text()
    finally:
        scancel(job_id)
    job = wait_for_job_state(real_slurm, job_id, {"CANCELLED"}, timeout=60)
    assert job["job_state"] == "CANCELLED"
