"""Classification and parsing edge cases (reference section 8, "Slurm client", and 2.10).

The HTTP answers here are hand-made bodies in the shapes slurmrestd uses (faked: they test
the classifier's rules, the recorded/synthesized fixtures are in test_contract.py).
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from provisioner.slurm.adapters import get_adapter
from provisioner.slurm.classify import AnswerKind, Operation, classify, parse_errors
from provisioner.slurm.client import SlurmClient
from provisioner.slurm.errors import SlurmAuthError, SlurmRejected, SlurmUncertain
from provisioner.slurm.types import JobPhase, JobSubmission

TOKEN = "eyJhbGciOiJIUzI1NiJ9.e30.test-signature"


def client_for(status: int, body: Any, version: str = "v0.0.40") -> SlurmClient:
    content = body.encode() if isinstance(body, str) else json.dumps(body).encode()

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=content)

    return SlurmClient(
        "http://127.0.0.1:6820", "obleth", TOKEN, version, transport=httpx.MockTransport(handler)
    )


def err(number: int | None, text: str, description: str = "") -> dict[str, Any]:
    entry: dict[str, Any] = {"error": text, "description": description, "source": "test"}
    if number is not None:
        entry["error_number"] = number
    return entry


def job_record(**over: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "job_id": 7,
        "name": "obleth-m",
        "job_state": ["RUNNING"],
        "nodes": "gpu01",
        "state_reason": "None",
    }
    record.update(over)
    return record


# ---- job-not-found is narrow -------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "status", "errors", "gone"),
    [
        ("v0.0.40", 404, [err(2017, "Invalid job id specified")], True),
        ("v0.0.40", 404, [err(None, "Invalid job id specified")], True),  # text only
        ("v0.0.40", 404, [err(None, "error: INVALID JOB ID 7")], True),  # any case
        ("v0.0.40", 500, [err(2017, "Invalid job id specified")], False),  # 500 != 404 here
        ("v0.0.38", 500, [err(2017, "Invalid job id specified")], True),  # 22.05 uses 500
        ("v0.0.39", 500, [err(2017, "Invalid job id specified")], True),
        ("v0.0.40", 200, [err(2017, "Invalid job id specified")], False),
        ("v0.0.40", 404, [err(9002, "Jobs description entry not found")], False),
        ("v0.0.40", 404, [], False),
        ("v0.0.38", 500, [err(2017, "Invalid job id"), err(-1, "Unspecified error")], False),
        ("v0.0.38", 500, [err(2017, "Invalid job id"), err(2002, "Access denied")], False),
        ("v0.0.38", 500, [err(1800, "Unable to contact slurm controller")], False),
        # v0.0.36 says this for a bad token or a stopped slurmctld too (seen on 22.05)
        ("v0.0.36", 500, [{"error": "_handle_job_get: unknown job 7", "error_code": 0}], False),
        ("v0.0.38", 500, [{"error": "_handle_job_get: unknown job 7", "error_code": 0}], False),
    ],
)
def test_only_a_recognised_not_found_reads_as_gone(
    version: str, status: int, errors: list[dict[str, Any]], gone: bool
) -> None:
    with client_for(status, {"jobs": [], "errors": errors}, version) as client:
        if gone:
            assert client.get_job("7") is None
        else:
            with pytest.raises(SlurmUncertain):
                client.get_job("7")


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (404, "Unable find requested URL. Please view /openapi/v3 for API reference."),
        (404, "<html><body><h1>404 Not Found</h1></body></html>"),
        (200, "<html><body>proxy login</body></html>"),
        (200, ""),
        (200, "[]"),
        (200, '{"error": "something"}'),  # JSON error envelope without "jobs"
        (200, {"errors": "not a list", "jobs": []}),
        (200, {"jobs": []}),  # no record and no not-found error: doubt, not gone
        (200, {"jobs": "x"}),
        (200, {"jobs": [{"name": "no id", "job_state": "RUNNING"}]}),
        (200, {"jobs": [job_record(job_id=8)]}),  # another job's record
        (200, {"jobs": [job_record(job_state="SOMETHING_NEW")]}),
        (200, {"jobs": [job_record(job_state=[])]}),
        (400, {"errors": [err(9002, "Jobs description entry not found")], "jobs": []}),
        (502, "<html><center><h1>502 Bad Gateway</h1></center></html>"),
        (503, "Service Unavailable"),
        (502, {"errors": [err(1800, "Unable to contact slurm controller")], "jobs": []}),
        (301, ""),
    ],
)
def test_doubtful_answers_raise_uncertain_never_none(status: int, body: Any) -> None:
    with client_for(status, body) as client, pytest.raises(SlurmUncertain) as caught:
        client.get_job("7")
    assert not isinstance(caught.value, SlurmAuthError)


@pytest.mark.parametrize(
    ("version", "status", "body"),
    [
        ("v0.0.40", 200, {"jobs": [], "errors": [err(1007, "Protocol authentication error")]}),
        ("v0.0.40", 511, {"jobs": [], "errors": [err(1007, "Protocol authentication error")]}),
        ("v0.0.40", 401, "Authentication failure"),
        ("v0.0.40", 403, "Forbidden"),
        (
            "v0.0.38",
            500,
            {"jobs": [], "errors": [err(-1, "Unspecified error", "Unable to find JobId=7")]},
        ),
        ("v0.0.38", 500, {"errors": [err(5005, "Zero Bytes were transmitted or received")]}),
    ],
)
def test_auth_failures_raise_auth_error_with_the_fix(version: str, status: int, body: Any) -> None:
    with client_for(status, body, version) as client, pytest.raises(SlurmAuthError) as caught:
        client.get_job("7")
    message = str(caught.value)
    assert "scontrol token username=obleth" in message
    assert TOKEN not in message and TOKEN not in caught.value.detail


def test_expired_token_message_says_when_it_expired() -> None:
    import jwt

    expired = jwt.encode({"exp": 1_000_000_000, "sun": "obleth"}, "k" * 32, algorithm="HS256")

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(500, json={"jobs": [], "errors": [err(-1, "Unspecified error")]})

    client = SlurmClient(
        "http://127.0.0.1:6820",
        "obleth",
        expired,
        "v0.0.38",
        transport=httpx.MockTransport(handler),
    )
    with client, pytest.raises(SlurmAuthError, match="expired at 2001-09-09") as caught:
        client.list_jobs()
    assert expired not in str(caught.value)


# ---- submit and cancel ---------------------------------------------------------------------

SUB = JobSubmission(name="obleth-m", script="#!/bin/bash\ntrue\n", partition="gpu")


@pytest.mark.parametrize(
    ("status", "errors", "sentence"),
    [
        (
            500,
            [{"error_code": 2000, "error": "Invalid partition name specified"}],
            "Invalid partition name specified",
        ),
        (
            400,
            [
                {"error": "environment must be set", "error_code": 2127},
                {"error_code": 9001, "error": "Failure during parsing"},
            ],
            "environment must be set",
        ),
        (
            400,
            [
                {"description": 'Unknown key "bogus"', "source": "hsearch_r"},
                {"error_code": 9001, "error": "Failure during parsing"},
            ],
            'Unknown key "bogus"',
        ),
        (
            500,
            [
                {
                    "description": "Batch job submission failed",
                    "error_number": 2045,
                    "error": "Invalid account or account/partition combination specified",
                    "source": "slurm_submit_batch_job()",
                }
            ],
            "Invalid account or account/partition combination specified",
        ),
        (
            400,
            [
                {
                    "error": "Unspecified error",
                    "errno": -1,
                    "description": 'Unable to process key "environment"',
                }
            ],
            'Unable to process key "environment"',
        ),
        (400, [{"error_code": 9001, "error": "Failure during parsing"}], "Failure during parsing"),
    ],
)
def test_submit_rejections_carry_slurms_sentence(
    status: int, errors: list[dict[str, Any]], sentence: str
) -> None:
    client = client_for(status, {"errors": errors}, "v0.0.38")
    with client, pytest.raises(SlurmRejected) as caught:
        client.submit(SUB)
    assert caught.value.reason == sentence
    assert str(caught.value) == sentence
    assert "error" in caught.value.detail


@pytest.mark.parametrize(
    ("status", "body", "auth"),
    [
        (
            500,
            {
                "errors": [
                    {
                        "error_code": 1800,
                        "error": "Unable to contact slurm controller (connect failure)",
                    }
                ]
            },
            False,
        ),
        (
            500,
            {"errors": [{"error_code": 5005, "error": "Zero Bytes were transmitted or received"}]},
            True,
        ),
        (500, {"errors": []}, False),
        (200, {"errors": []}, False),  # accepted but no job id: the job may exist
        (200, {"job_id": "not-a-number"}, False),
        (504, "<html>Gateway Timeout</html>", False),
    ],
)
def test_submit_doubt_is_uncertain(status: int, body: Any, auth: bool) -> None:
    with client_for(status, body, "v0.0.38") as client, pytest.raises(SlurmUncertain) as caught:
        client.submit(SUB)
    assert isinstance(caught.value, SlurmAuthError) is auth


def test_submit_accepts_a_job_id_next_to_warnings_and_as_string() -> None:
    held = {
        "job_id": 12,
        "errors": [
            {"error_code": 2042, "error": "Job is in held state, pending scheduler release"}
        ],
    }
    with client_for(200, held, "v0.0.38") as client:
        assert client.submit(SUB) == "12"
    with client_for(200, {"job_id": "13", "errors": []}, "v0.0.40") as client:
        assert client.submit(SUB) == "13"
    with client_for(200, {"result": {"job_id": 14}, "errors": []}, "v0.0.41") as client:
        assert client.submit(SUB) == "14"


@pytest.mark.parametrize(
    ("version", "status", "body", "outcome"),
    [
        ("v0.0.38", 200, {"errors": []}, True),
        ("v0.0.38", 500, {"errors": [err(2017, "Invalid job id specified")]}, False),
        ("v0.0.40", 404, {"errors": [err(2017, "Invalid job id specified")]}, False),
        ("v0.0.40", 500, {"errors": [err(2017, "Invalid job id specified")]}, "uncertain"),
        ("v0.0.38", 200, {"errors": [err(2021, "Job/step already completing or completed")]}, True),
        (
            "v0.0.42",
            200,
            {
                "status": [
                    {
                        "error": {
                            "code": 2021,
                            "string": "Job/step already completing or completed",
                            "message": "",
                        }
                    }
                ]
            },
            True,
        ),
        (
            "v0.0.42",
            200,
            {"status": [{"error": {"code": 2017, "string": "Invalid job id specified"}}]},
            False,
        ),
        ("v0.0.42", 200, {"status": "bad"}, "uncertain"),
        ("v0.0.38", 500, {"errors": [err(2002, "Access/permission denied")]}, "rejected"),
        (
            "v0.0.38",
            500,
            {"errors": [err(1800, "Unable to contact slurm controller")]},
            "uncertain",
        ),
        ("v0.0.38", 404, "Unable find requested URL.", "uncertain"),
    ],
)
def test_cancel_outcomes(version: str, status: int, body: Any, outcome: object) -> None:
    with client_for(status, body, version) as client:
        if outcome == "rejected":
            with pytest.raises(SlurmRejected, match="Access/permission denied"):
                client.cancel("7")
        elif outcome == "uncertain":
            with pytest.raises(SlurmUncertain):
                client.cancel("7")
        else:
            assert client.cancel("7") is outcome


def test_cancel_error_includes_the_response_body_text() -> None:
    client = client_for(502, "upstream said: Access/permission denied", "v0.0.38")
    with client, pytest.raises(SlurmUncertain, match="upstream said: Access/permission denied"):
        client.cancel("7")


# ---- parsing -------------------------------------------------------------------------------


@pytest.mark.parametrize("job_id", [7, "7"])
@pytest.mark.parametrize(
    ("state", "raw", "phase"),
    [
        ("RUNNING", "RUNNING", JobPhase.RUNNING),
        (["RUNNING", "COMPLETING"], "RUNNING", JobPhase.RUNNING),
        ("running", "RUNNING", JobPhase.RUNNING),
        ("COMPLETING", "COMPLETING", JobPhase.RUNNING),
        (["PENDING", "REQUEUED"], "PENDING", JobPhase.PENDING),
        ("CONFIGURING", "CONFIGURING", JobPhase.PENDING),
        ("SUSPENDED", "SUSPENDED", JobPhase.PENDING),
        ("REQUEUE_HOLD", "REQUEUE_HOLD", JobPhase.PENDING),
        (["TIMEOUT"], "TIMEOUT", JobPhase.GONE),
        ("OUT_OF_MEMORY", "OUT_OF_MEMORY", JobPhase.GONE),
        ("PREEMPTED", "PREEMPTED", JobPhase.GONE),
        ("NODE_FAIL", "NODE_FAIL", JobPhase.GONE),
        ("CANCELLED", "CANCELLED", JobPhase.GONE),
    ],
)
def test_job_parse_tolerates_id_and_state_forms(
    job_id: int | str, state: Any, raw: str, phase: JobPhase
) -> None:
    job = get_adapter("v0.0.40").parse_job(job_record(job_id=job_id, job_state=state))
    assert (job.job_id, job.state, job.phase) == ("7", raw, phase)


def test_job_parse_reason_nodes_and_exit_code() -> None:
    adapter = get_adapter("v0.0.40")
    job = adapter.parse_job(
        job_record(
            nodes="gpu[01-03]",
            batch_host="gpu02",
            state_reason="none",
            restart_cnt=2,
            exit_code={
                "status": ["ERROR"],
                "return_code": {"set": True, "number": 8},
                "signal": {"id": {"set": False, "number": 0}},
            },
            submit_time={"set": True, "infinite": False, "number": 100},
            start_time={"set": False, "number": 0},
        )
    )
    assert job.nodes == ("gpu02", "gpu01", "gpu03")
    assert job.reason == "" and job.restart_count == 2 and job.exit_code == 2048
    assert job.submit_time == 100 and job.start_time is None
    signalled = adapter.parse_job(
        job_record(exit_code={"signal": {"id": {"set": True, "number": 9}}})
    )
    assert signalled.exit_code == 9
    old = get_adapter("v0.0.38").parse_job(
        {
            "job_id": 3,
            "job_state": "FAILED",
            "exit_code": 2048,
            "nodes": "",
            "start_time": 0,
            "state_reason": "NonZeroExitCode",
        }
    )
    assert old.exit_code == 2048 and old.reason == "NonZeroExitCode" and old.start_time is None


def test_parsers_tolerate_missing_keys() -> None:
    for version in ("v0.0.38", "v0.0.40", "v0.0.45"):
        adapter = get_adapter(version)
        job = adapter.parse_job({"job_id": 1, "job_state": "PENDING"})
        assert job.nodes == () and job.user == "" and job.exit_code is None
        node = adapter.parse_node({"name": "n1"})
        assert node.cpus is None and node.partitions == () and node.state == ()
        part = adapter.parse_partition({"name": "p"})
        assert part.nodes == () and part.max_time_minutes is None and not part.is_default
        assert adapter.parse_nodes({"nodes": [{"no": "name"}, {"name": "a"}]})[0].name == "a"


def test_node_parser_reads_specialized_memory_and_struct_numbers() -> None:
    adapter = get_adapter("v0.0.41")
    node = adapter.parse_node(
        {
            "name": "g1",
            "real_memory": 515000,
            "specialized_memory": 2048,
            "alloc_memory": {"set": True, "number": 1024},
            "state": ["idle", "DRAIN"],
            "partitions": "gpu,debug",
            "features": "a100,ib",
        }
    )
    assert node.specialized_memory_mb == 2048 and node.alloc_memory_mb == 1024
    assert node.state == ("IDLE", "DRAIN") and node.partitions == ("gpu", "debug")
    assert node.features == ("a100", "ib")
    assert adapter.parse_node({"name": "g2", "specialized_memory": 0}).specialized_memory_mb is None


def test_partition_parser_filters_all_and_reads_times() -> None:
    old = get_adapter("v0.0.38").parse_partition(
        {
            "name": "gpu",
            "nodes": "gpu[01-02]",
            "allowed_accounts": "ALL",
            "denied_accounts": "guests,interns",
            "max_time_limit": 4294967295,
            "default_time_limit": 60,
            "flags": ["default"],
            "state": "up",
        }
    )
    assert old.allowed_accounts == () and old.denied_accounts == ("guests", "interns")
    assert old.max_time_minutes is None and old.default_time_minutes == 60
    assert old.is_default and old.state == "UP" and old.nodes == ("gpu01", "gpu02")
    new = get_adapter("v0.0.40").parse_partition(
        {
            "name": "gpu",
            "nodes": {"configured": "gpu01"},
            "accounts": {"allowed": "a,ALL,b"},
            "maximums": {"time": {"set": True, "infinite": False, "number": 1440}},
            "defaults": {"time": {"set": False, "infinite": False, "number": 0}},
        }
    )
    assert new.allowed_accounts == ("a", "b") and new.max_time_minutes == 1440
    assert new.default_time_minutes is None


def test_associations_dedupe_and_blank_partition_means_all() -> None:
    adapter = get_adapter("v0.0.40")
    assocs = adapter.parse_associations(
        {
            "associations": [
                {"account": "a", "partition": "", "qos": ["n", "h"], "user": "u"},
                {"account": "a", "partition": None, "qos": ["h", "n"], "user": "u"},
                {"account": "", "partition": "gpu"},
                {"account": "b", "partition": "gpu", "qos": "n"},
            ]
        }
    )
    assert [(a.account, a.partition, a.qos) for a in assocs] == [
        ("a", None, ("h", "n")),
        ("b", "gpu", ("n",)),
    ]


def test_error_key_sets_are_all_read() -> None:
    errors = parse_errors(
        {
            "errors": [
                {"error_code": 2000, "error": "Invalid partition name specified"},
                {
                    "description": "d",
                    "error_number": 2017,
                    "error": "Invalid job id specified",
                    "source": "s",
                },
                {"error": "Unspecified error", "errno": -1},
                {"description": 'Unknown key "x"', "source": "hsearch_r"},
                "plain text error",
            ]
        }
    )
    assert errors is not None
    assert [e.number for e in errors] == [2000, 2017, -1, None, None]
    assert [e.sentence for e in errors] == [
        "Invalid partition name specified",
        "Invalid job id specified",
        "Unspecified error",
        'Unknown key "x"',
        "plain text error",
    ]


def test_classify_never_returns_not_found_for_reads_other_than_job() -> None:
    body = json.dumps({"errors": [err(2017, "Invalid job id specified")], "jobs": []})
    for operation in (Operation.JOBS, Operation.PING, Operation.NODES, Operation.SUBMIT):
        answer = classify(
            404, body, operation=operation, result_key="jobs", not_found_statuses={404}
        )
        assert answer.kind is not AnswerKind.NOT_FOUND
