"""Every adapter reads a job's end time and time limit (walltime handover needs both).

The answers are the per-version fixtures (validated against each version's OpenAPI document by
test_contract.py) and UNLIMITED variants of them, validated against the same document here
before they are parsed, so a shape Slurm does not send cannot make these tests pass.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from provisioner.slurm.adapters import get_adapter, supported_versions
from tests.slurm import openapi_docs as docs

VERSIONS = ["v0.0.38", *[v for v in supported_versions() if v > "v0.0.38"]]


def _running(version: str) -> dict[str, Any]:
    body: dict[str, Any] = docs.load_fixture(docs.FIXTURES / version / "job_running.json")["body"]
    return body


def _valid(version: str, body: dict[str, Any]) -> None:
    name = docs.response_schema_name(version, "job")
    assert name is not None
    record = docs.load_fixture(docs.FIXTURES / version / "job_running.json")
    errors = docs.schema_errors(
        version, name, body, recorded_22_05="RECORDED" in record["source"].upper()
    )
    assert errors == [], errors


@pytest.mark.parametrize("version", VERSIONS)
def test_running_job_carries_its_end_and_limit(version: str) -> None:
    job = get_adapter(version).parse_jobs(_running(version))[0]
    assert job.end_time is not None and job.start_time is not None
    assert job.time_limit_minutes is not None and not job.time_unlimited
    assert job.end_time - job.start_time == job.time_limit_minutes * 60


@pytest.mark.parametrize("version", VERSIONS)
def test_unlimited_time_limit_is_told_apart(version: str) -> None:
    body = copy.deepcopy(_running(version))
    record = body["jobs"][0]
    if isinstance(record.get("time_limit"), dict):
        record["time_limit"] = {"set": True, "infinite": True, "number": 0}
    else:  # v0.0.38 (22.05): a bare integer, INFINITE = 0xFFFFFFFF
        record["time_limit"] = 0xFFFFFFFF
    _valid(version, body)
    job = get_adapter(version).parse_jobs(body)[0]
    assert job.time_unlimited and job.time_limit_minutes is None


@pytest.mark.parametrize("version", VERSIONS)
def test_unset_end_time_is_none(version: str) -> None:
    body = copy.deepcopy(_running(version))
    record = body["jobs"][0]
    if isinstance(record.get("end_time"), dict):
        record["end_time"] = {"set": False, "infinite": False, "number": 0}
    else:
        record["end_time"] = 0
    _valid(version, body)
    job = get_adapter(version).parse_jobs(body)[0]
    assert job.end_time is None and not job.time_unlimited
