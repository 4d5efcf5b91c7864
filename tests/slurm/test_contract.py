"""Contract tests: every adapter against its slurmrestd API version.

* The submit body each adapter builds for a rich submission validates against that version's
  OpenAPI request schema (``$ref``s resolved from the document), and uses no job key the
  document does not list (slurmrestd 22.05 refuses unknown keys with 400).
* Every answer in ``fixtures/<version>/`` is classified into the expected kind, parsed into
  the expected values, and (when JSON) validated against the version's response schema.

Fixture origins (each file's ``source`` says which):
* v0.0.36/37/38: RECORDED from the real slurmrestd 22.05.8 on this machine
  (``fixtures/record_v0_0_38.py``), except ``controller_down_*`` (transcribed from the lab
  report: stopping slurmctld on a shared machine would break other tests) and
  ``html_proxy_error`` (synthesized nginx page; there is no proxy here).
* v0.0.39 .. v0.0.45: SYNTHESIZED from each version's OpenAPI document by
  ``fixtures/synthesize.py``, NOT recorded (no newer Slurm runs here). v0.0.39 has no
  document; its schema is derived from v0.0.40 (see ``openapi_docs.py``).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from provisioner.slurm.adapters import ADAPTERS, get_adapter, supported_versions
from provisioner.slurm.classify import AnswerKind, Operation
from provisioner.slurm.client import SlurmClient
from provisioner.slurm.errors import (
    SlurmAuthError,
    SlurmConfigError,
    SlurmRejected,
    SlurmUncertain,
)
from provisioner.slurm.types import JobPhase, JobSubmission
from tests.slurm import openapi_docs as docs

RICH = JobSubmission(
    name="obleth-llama-70b",
    script='#!/bin/bash\nexec vllm serve /models/llama --port "$OBLETH_SERVING_PORT"\n',
    partition="gpu",
    nodes=2,
    current_working_directory="/tmp",
    environment=(("PATH", "/usr/local/bin:/usr/bin:/bin"), ("HF_TOKEN", "hf_secret")),
    time_limit_minutes=240,
    memory_per_node_mb=573440,
    cpus_per_task=16,
    gres="gpu:a100:4",
    account="physics",
    qos="high",
    constraints="a100&ib",
    excluded_nodes="gpu[03-04],gpu07",
    standard_output="/logs/obleth-llama-70b-%j.out",
    standard_error="/logs/obleth-llama-70b-%j.err",
)


def _replace(sub: JobSubmission, **changes: Any) -> JobSubmission:
    return dataclasses.replace(sub, **changes)


VERSIONS = supported_versions()


def test_every_required_version_has_an_adapter() -> None:
    for version in (
        "v0.0.38",
        "v0.0.39",
        "v0.0.40",
        "v0.0.41",
        "v0.0.42",
        "v0.0.43",
        "v0.0.44",
        "v0.0.45",
    ):
        assert version in ADAPTERS, version


# ---- submit payloads ----------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_rich_submit_body_validates_against_the_request_schema(version: str) -> None:
    adapter = get_adapter(version)
    submission = RICH
    if version in docs.OLD_API:
        with pytest.raises(SlurmConfigError, match="excluded_nodes"):
            adapter.build_submit_body(RICH)
        submission = _replace(RICH, excluded_nodes="")
    body = adapter.build_submit_body(submission)
    errors = docs.schema_errors(version, docs.request_schema_name(version), body)
    assert errors == [], errors
    documented = set(docs.schema(version, docs.job_schema_name(version))["properties"])
    assert set(body["job"]) <= documented, set(body["job"]) - documented
    assert set(body) <= set(docs.schema(version, docs.request_schema_name(version))["properties"])


@pytest.mark.parametrize("version", VERSIONS)
def test_submit_body_shapes_per_version(version: str) -> None:
    adapter = get_adapter(version)
    submission = _replace(RICH, excluded_nodes="") if version in docs.OLD_API else RICH
    body = adapter.build_submit_body(submission)
    job = body["job"]
    script = job.get("script", body.get("script"))
    assert script == RICH.script
    assert job["tasks"] == 2 and job["tasks_per_node"] == 1
    assert job["name"] == "obleth-llama-70b" and job["partition"] == "gpu"
    assert job["account"] == "physics" and job["qos"] == "high"
    assert job["constraints"] == "a100&ib" and job["cpus_per_task"] == 16
    if version in docs.OLD_API:
        assert job["environment"] == {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HF_TOKEN": "hf_secret",
        }
        assert job["nodes"] == [2, 2]
        assert job["time_limit"] == 240 and job["memory_per_node"] == 573440
        assert job["gres"] == "gpu:a100:4"
        assert "script" in body  # v0.0.38 requires the top-level script
    else:
        assert job["environment"] == ["PATH=/usr/local/bin:/usr/bin:/bin", "HF_TOKEN=hf_secret"]
        assert job["nodes"] == "2"
        assert job["time_limit"] == {"set": True, "infinite": False, "number": 240}
        assert job["memory_per_node"] == {"set": True, "infinite": False, "number": 573440}
        assert job["tres_per_node"] == "gres/gpu:a100:4"
        assert job["excluded_nodes"] == ["gpu[03-04]", "gpu07"]
        if version >= "v0.0.41":
            assert "script" not in body and job["script"] == RICH.script
    out_key = "standard_out" if version == "v0.0.36" else "standard_output"
    assert job[out_key] == "/logs/obleth-llama-70b-%j.out"
    assert job["standard_error"] == "/logs/obleth-llama-70b-%j.err"
    assert "hf_secret" not in script


@pytest.mark.parametrize("version", VERSIONS)
def test_minimal_body_always_carries_path_and_whole_node_memory(version: str) -> None:
    adapter = get_adapter(version)
    minimal = JobSubmission(name="obleth-m", script="#!/bin/bash\ntrue\n", memory_per_node_mb=0)
    body = adapter.build_submit_body(minimal)
    env = body["job"]["environment"]
    assert ("PATH" in env) if isinstance(env, dict) else any(e.startswith("PATH=") for e in env)
    memory = body["job"]["memory_per_node"]
    assert memory == 0 or memory == {"set": True, "infinite": False, "number": 0}
    assert "partition" not in body["job"] and "time_limit" not in body["job"]
    assert docs.schema_errors(version, docs.request_schema_name(version), body) == []


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"script": "  "}, "script"),
        ({"nodes": 0}, "nodes"),
        ({"time_limit_minutes": 0}, "time_limit"),
        ({"memory_per_node_mb": -1}, "mem"),
        ({"environment": (("BAD NAME", "x"),)}, "environment"),
    ],
)
def test_bad_submissions_are_refused_before_sending(
    version: str, changes: dict[str, Any], field: str
) -> None:
    with pytest.raises(SlurmConfigError, match=field):
        get_adapter(version).build_submit_body(_replace(RICH, excluded_nodes="", **changes))


# ---- answers ------------------------------------------------------------------------------

# fixture name -> (operation, expected kind, auth flag, Slurm's sentence for rejections)
EXPECTED: dict[str, tuple[Operation, AnswerKind, bool, str]] = {
    "ping": (Operation.PING, AnswerKind.OK, False, ""),
    "nodes": (Operation.NODES, AnswerKind.OK, False, ""),
    "partitions": (Operation.PARTITIONS, AnswerKind.OK, False, ""),
    "jobs": (Operation.JOBS, AnswerKind.OK, False, ""),
    "submit_ok": (Operation.SUBMIT, AnswerKind.OK, False, ""),
    "cancel_ok": (Operation.CANCEL, AnswerKind.OK, False, ""),
    "job_running": (Operation.JOB, AnswerKind.OK, False, ""),
    "job_pending": (Operation.JOB, AnswerKind.OK, False, ""),
    "job_requeued": (Operation.JOB, AnswerKind.OK, False, ""),
    "job_timeout": (Operation.JOB, AnswerKind.OK, False, ""),
    "job_cancelled": (Operation.JOB, AnswerKind.OK, False, ""),
    "job_not_found": (Operation.JOB, AnswerKind.NOT_FOUND, False, ""),
    "cancel_not_found": (Operation.CANCEL, AnswerKind.NOT_FOUND, False, ""),
    "cancel_denied": (Operation.CANCEL, AnswerKind.REJECTED, False, "Access/permission denied"),
    "submit_rejected_partition": (
        Operation.SUBMIT,
        AnswerKind.REJECTED,
        False,
        "Invalid partition name specified",
    ),
    "submit_rejected_environment": (
        Operation.SUBMIT,
        AnswerKind.REJECTED,
        False,
        "environment must be set",
    ),
    "submit_rejected_environment_list": (
        Operation.SUBMIT,
        AnswerKind.REJECTED,
        False,
        "environment must be a dictionary",
    ),
    "submit_rejected_unknown_key": (
        Operation.SUBMIT,
        AnswerKind.REJECTED,
        False,
        'Unknown key "exclude"',
    ),
    "submit_rejected_constraint": (
        Operation.SUBMIT,
        AnswerKind.REJECTED,
        False,
        "Invalid feature specification",
    ),
    "auth_bad_token_job": (Operation.JOB, AnswerKind.UNCERTAIN, True, ""),
    "auth_bad_token_jobs": (Operation.JOBS, AnswerKind.UNCERTAIN, True, ""),
    "auth_bad_token_ping": (Operation.PING, AnswerKind.UNCERTAIN, True, ""),
    "auth_no_headers": (Operation.JOBS, AnswerKind.UNCERTAIN, True, ""),
    "auth_expired_submit": (Operation.SUBMIT, AnswerKind.UNCERTAIN, True, ""),
    "auth_expired_cancel": (Operation.CANCEL, AnswerKind.UNCERTAIN, True, ""),
    "auth_expired_job": (Operation.JOB, AnswerKind.UNCERTAIN, True, ""),
    "auth_failure_job": (Operation.JOB, AnswerKind.UNCERTAIN, True, ""),
    "controller_down_submit": (Operation.SUBMIT, AnswerKind.UNCERTAIN, False, ""),
    # 22.05 answers a read with slurmctld down exactly like a bad token (-1), so it reads as
    # an auth failure whose message also names an unreachable slurmctld; 23.11+ says 1800.
    "controller_down_job": (Operation.JOB, AnswerKind.UNCERTAIN, False, ""),
    "controller_down_partitions": (Operation.PARTITIONS, AnswerKind.UNCERTAIN, True, ""),
    "html_proxy_error": (Operation.JOB, AnswerKind.UNCERTAIN, False, ""),
    "unknown_url": (Operation.JOB, AnswerKind.UNCERTAIN, False, ""),
    "unknown_version": (Operation.PING, AnswerKind.UNCERTAIN, False, ""),
    "slurmdb_not_served": (Operation.SLURMDB, AnswerKind.UNCERTAIN, False, ""),
    "slurmdb_associations": (Operation.SLURMDB, AnswerKind.OK, False, ""),
    "slurmdb_accounts": (Operation.SLURMDB, AnswerKind.OK, False, ""),
    "slurmdb_qos": (Operation.SLURMDB, AnswerKind.OK, False, ""),
}
AUTH_OVERRIDES = {("v0.0.38", "controller_down_job"): True}
# v0.0.36 gives the same "unknown job" answer for a bad token or a stopped slurmctld as for a
# missing job (seen on 22.05), so its job-not-found cannot be trusted: it stays uncertain.
KIND_OVERRIDES = {("v0.0.36", "job_not_found"): AnswerKind.UNCERTAIN}
SLURMDB_KEYS = {
    "slurmdb_associations": "associations",
    "slurmdb_accounts": "accounts",
    "slurmdb_qos": "qos",
    "slurmdb_not_served": "associations",
}

FIXTURE_FILES = docs.fixture_files()


def _id(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


def test_fixture_set_is_complete() -> None:
    by_version: dict[str, set[str]] = {}
    for path in FIXTURE_FILES:
        by_version.setdefault(path.parent.name, set()).add(path.stem)
    for version in ["v0.0.38", *[v for v in VERSIONS if v > "v0.0.38"]]:
        assert {
            "job_running",
            "job_pending",
            "job_not_found",
            "submit_rejected_partition",
            "controller_down_submit",
            "html_proxy_error",
        } <= by_version[version], version
        assert any(n.startswith("auth_") for n in by_version[version]), version
    for path in FIXTURE_FILES:
        source = docs.load_fixture(path)["source"]
        if path.parent.name in docs.OLD_API and "RECORDED" not in source.upper():
            assert path.stem.startswith(("controller_down", "html_")), path
        if path.parent.name not in docs.OLD_API:
            assert "SYNTHESIZED" in source, path


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=_id)
def test_fixture_is_classified(path: Path) -> None:
    version, name = path.parent.name, path.stem
    assert name in EXPECTED, f"add {name} to EXPECTED"
    operation, kind, auth, sentence = EXPECTED[name]
    auth = AUTH_OVERRIDES.get((version, name), auth)
    kind = KIND_OVERRIDES.get((version, name), kind)
    record = docs.load_fixture(path)
    adapter = get_adapter(version)
    answer = adapter.classify(
        record["status"], docs.fixture_body_bytes(record), operation, SLURMDB_KEYS.get(name)
    )
    assert answer.kind is kind, answer
    assert answer.auth is auth, answer
    if kind is AnswerKind.REJECTED:
        assert answer.sentence == sentence
    if kind is not AnswerKind.NOT_FOUND:
        assert answer.kind is not AnswerKind.NOT_FOUND


@pytest.mark.parametrize(
    "path", [p for p in FIXTURE_FILES if docs.load_fixture(p)["body_is_json"]], ids=_id
)
def test_fixture_body_validates_against_the_response_schema(path: Path) -> None:
    version, name = path.parent.name, path.stem
    record = docs.load_fixture(path)
    operation = EXPECTED[name][0]
    kind = name if name.startswith("slurmdb_") else operation.value
    schema_name = docs.response_schema_name(version, kind)
    if version in docs.OLD_API and operation in (Operation.CANCEL, Operation.SLURMDB):
        # 22.05 documents no body for DELETE; validate the envelope parts it has.
        schema_name = None
        assert docs.schema_errors(version, "errors", record["body"].get("errors", [])) == []
    if schema_name is None:
        return
    errors = docs.schema_errors(
        version, schema_name, record["body"], recorded_22_05="RECORDED" in record["source"].upper()
    )
    assert errors == [], errors


# ---- parsed values ------------------------------------------------------------------------


def _body(version: str, name: str) -> dict[str, Any]:
    body: dict[str, Any] = docs.load_fixture(docs.FIXTURES / version / f"{name}.json")["body"]
    return body


@pytest.mark.parametrize("version", ["v0.0.38", *[v for v in VERSIONS if v > "v0.0.38"]])
def test_job_records_parse(version: str) -> None:
    adapter = get_adapter(version)
    running = adapter.parse_jobs(_body(version, "job_running"))[0]
    assert running.state == "RUNNING" and running.phase is JobPhase.RUNNING
    assert running.reason == "" and running.start_time and running.submit_time
    pending = adapter.parse_jobs(_body(version, "job_pending"))[0]
    assert pending.phase is JobPhase.PENDING and pending.nodes == ()
    requeued = adapter.parse_jobs(_body(version, "job_requeued"))[0]
    assert requeued.state == "PENDING" and requeued.reason == "BeginTime"
    assert requeued.restart_count == 1 and requeued.nodes == ()
    if version == "v0.0.38":
        assert running.nodes == ("localhost",) and running.user == "obleth"
        assert pending.reason == "BeginTime"
    else:
        assert running.nodes == ("gpu02", "gpu01")  # batch host first
        assert pending.reason == "Resources"
    timeout = adapter.parse_jobs(_body(version, "job_timeout"))[0]
    assert timeout.state == "TIMEOUT" and timeout.phase is JobPhase.GONE
    assert timeout.reason == "TimeLimit" and timeout.exit_code == 15


@pytest.mark.parametrize("version", ["v0.0.38", *[v for v in VERSIONS if v > "v0.0.38"]])
def test_nodes_partitions_ping_parse(version: str) -> None:
    adapter = get_adapter(version)
    ok, words = adapter.parse_ping(_body(version, "ping"))
    assert ok and "UP" in words
    nodes = adapter.parse_nodes(_body(version, "nodes"))
    partitions = adapter.parse_partitions(_body(version, "partitions"))
    if version == "v0.0.38":
        assert [n.name for n in nodes] == ["localhost"]
        assert nodes[0].real_memory_mb and "debug" in nodes[0].partitions
        debug = next(p for p in partitions if p.name == "debug")
        assert debug.is_default and debug.nodes == ("localhost",)
        assert debug.max_time_minutes is None
        assert adapter.slurm_release(_body(version, "ping")) == "22.05.8"
        return
    by_name = {n.name: n for n in nodes}
    assert by_name["gpu02"].specialized_memory_mb == 2048
    assert by_name["gpu01"].specialized_memory_mb is None
    assert by_name["gpu02"].state == ("MIXED",) and by_name["gpu02"].alloc_cpus == 8
    assert by_name["gpu01"].features == ("a100", "ib") and by_name["gpu01"].gres == "gpu:a100:8"
    assert by_name["cpu1"].partitions == ("debug",)
    gpu, debug = partitions
    assert gpu.nodes == ("gpu01", "gpu02") and gpu.allowed_accounts == ("physics",)
    assert gpu.denied_accounts == ("guests",) and gpu.default_time_minutes == 60
    assert gpu.max_time_minutes is None and debug.max_time_minutes == 120
    assert debug.nodes == ("gpu01", "gpu02", "cpu1") and gpu.state == "UP"
    assert gpu.is_default is (version >= "v0.0.45")


@pytest.mark.parametrize("version", [v for v in VERSIONS if v >= "v0.0.40"])
def test_slurmdb_parse_dedupes(version: str) -> None:
    adapter = get_adapter(version)
    assocs = adapter.parse_associations(_body(version, "slurmdb_associations"))
    assert [(a.account, a.partition, a.qos) for a in assocs] == [
        ("physics", "gpu", ("high", "normal")),
        ("chem", None, ("normal",)),
    ]
    assert adapter.parse_accounts(_body(version, "slurmdb_accounts")) == ("chem", "physics")
    assert adapter.parse_qos(_body(version, "slurmdb_qos")) == ("high", "normal")


# ---- the client on every recorded/synthesized answer --------------------------------------


def _client_for(record: dict[str, Any], version: str) -> SlurmClient:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            record["status"],
            content=docs.fixture_body_bytes(record),
            headers={"content-type": record["content_type"] or "text/plain"},
        )

    return SlurmClient(
        "http://127.0.0.1:6820", "obleth", "tok", version, transport=httpx.MockTransport(handler)
    )


@pytest.mark.parametrize(
    "path",
    [p for p in FIXTURE_FILES if EXPECTED[p.stem][0] is Operation.JOB],
    ids=_id,
)
def test_get_job_on_every_job_answer_never_reads_doubt_as_gone(path: Path) -> None:
    version, name = path.parent.name, path.stem
    record = docs.load_fixture(path)
    job_id = record["request"]["path"].rsplit("/", 1)[1]
    _, kind, auth, _ = EXPECTED[name]
    auth = AUTH_OVERRIDES.get((version, name), auth)
    kind = KIND_OVERRIDES.get((version, name), kind)
    with _client_for(record, version) as client:
        if kind is AnswerKind.NOT_FOUND:
            assert client.get_job(job_id) is None
        elif kind is AnswerKind.OK:
            job = client.get_job(job_id)
            assert job is not None and job.job_id == job_id
        else:
            with pytest.raises(SlurmUncertain) as caught:
                client.get_job(job_id)
            assert isinstance(caught.value, SlurmAuthError) is auth
            if auth:
                assert "scontrol token username=obleth" in str(caught.value)


@pytest.mark.parametrize(
    "path",
    [p for p in FIXTURE_FILES if EXPECTED[p.stem][0] is Operation.SUBMIT],
    ids=_id,
)
def test_submit_on_every_submit_answer(path: Path) -> None:
    version, name = path.parent.name, path.stem
    record = docs.load_fixture(path)
    _, kind, auth, sentence = EXPECTED[name]
    submission = _replace(RICH, excluded_nodes="")
    with _client_for(record, version) as client:
        if kind is AnswerKind.OK:
            assert client.submit(submission) == str(record["body"]["job_id"])
        elif kind is AnswerKind.REJECTED:
            with pytest.raises(SlurmRejected) as rejected:
                client.submit(submission)
            assert rejected.value.reason == sentence
            assert sentence in str(rejected.value)
        else:
            with pytest.raises(SlurmUncertain) as caught:
                client.submit(submission)
            assert isinstance(caught.value, SlurmAuthError) is auth


@pytest.mark.parametrize(
    "path",
    [p for p in FIXTURE_FILES if EXPECTED[p.stem][0] is Operation.CANCEL],
    ids=_id,
)
def test_cancel_on_every_cancel_answer(path: Path) -> None:
    version, name = path.parent.name, path.stem
    record = docs.load_fixture(path)
    job_id = record["request"]["path"].rsplit("/", 1)[1]
    _, kind, auth, sentence = EXPECTED[name]
    with _client_for(record, version) as client:
        if kind is AnswerKind.OK:
            assert client.cancel(job_id) is True
        elif kind is AnswerKind.NOT_FOUND:
            assert client.cancel(job_id) is False
        elif kind is AnswerKind.REJECTED:
            with pytest.raises(SlurmRejected, match=sentence):
                client.cancel(job_id)
        else:
            with pytest.raises(SlurmAuthError) as caught:
                client.cancel(job_id)
            assert "Zero Bytes were transmitted or received" in str(caught.value)


def test_recorded_fixtures_hold_no_token() -> None:
    for path in FIXTURE_FILES:
        text = path.read_text()
        assert "eyJ" not in text, path  # no JWT (base64 of '{"') anywhere
        assert json.loads(text)["request"]["path"].startswith(("/slurm", "/slurmdb", "/openapi"))
