"""Table tests: every Slurm pending reason, every probe outcome and the refusal hints in words.

The expected words are written here (the specification), one row per reason; nothing is read
back from the module's own tables except to check that each of them has a row here too.
"""

from __future__ import annotations

import datetime as dt

import pytest

from provisioner.reasons import PENDING_REASONS, explain_pending, explain_probe, explain_refusal

NOW = dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.UTC)

# reason code -> (words the sentence must contain, words the fix must contain)
PENDING_TABLE: dict[str, tuple[str, str]] = {
    "Resources": ("no node in the partition has", "ask for less"),
    "Priority": ("higher priority", "QoS or account"),
    "Dependency": ("depends on", "dependency"),
    "DependencyNeverSatisfied": ("never satisfy", "Restart"),
    "BeginTime": ("earliest start time", "Wait"),
    "JobHeldUser": ("Held by its owner", "scontrol release"),
    "JobHeldAdmin": ("cluster administrator", "cluster admins"),
    "ReqNodeNotAvail": ("node the job needs is unavailable", "sinfo -R"),
    "PartitionTimeLimit": ("longer than the partition allows", "Lower the time limit"),
    "PartitionNodeLimit": ("more nodes than the partition", "node count"),
    "PartitionDown": ("partition is down", "another partition"),
    "PartitionInactive": ("inactive", "another partition"),
    "PartitionConfig": ("configuration", "another partition"),
    "NodeDown": ("is down", "exclude"),
    "BadConstraints": ("No node matches", "constraints"),
    "Licenses": ("license", "license"),
    "Reservation": ("reservation", "reservation"),
    "InvalidAccount": ("account is not valid", "account you belong to"),
    "InvalidQOS": ("QoS is not valid", "QoS your account"),
    "AccountNotAllowed": ("not allowed in this partition", "another account"),
    "QOSNotAllowed": ("not allowed in this partition", "another QoS"),
    "WaitingForScheduling": ("scheduler", "few seconds"),
    "None": ("Just submitted", "Nothing to change"),
    "Prolog": ("prolog", "Nothing to change"),
    "PowerUpNode": ("powering up", "Nothing to change"),
    "Cleaning": ("cleaning up", "Nothing to change"),
    "launch failed requeued held": ("failed to launch", "Restart"),
    "JobLaunchFailure": ("could not launch", "job log"),
    "NonZeroExitCode": ("non-zero exit code", "job log"),
    "SystemFailure": ("failure", "cluster admins"),
    "InactiveLimit": ("inactivity limit", "InactiveLimit"),
    "DeadLine": ("deadline", "deadline"),
    "BurstBufferResources": ("burst buffer", "burst buffer"),
    "BurstBufferStageIn": ("staging", "Nothing"),
    "FrontEndDown": ("front-end", "cluster admins"),
    "SchedDefer": ("deferred", "Nothing"),
    "MaxRequeue": ("requeued too many times", "Restart"),
    "OutOfMemory": ("out of memory", "Raise the memory"),
    "TimeLimit": ("time limit", "Raise the time limit"),
    "NodeFail": ("node the job ran on failed", "new job"),
    "Preempted": ("preempted", "Nothing to change"),
    "AssocGrpGRES": ("group limit on GRES", "GrpTRES"),
    "QOSMaxJobsPerUserLimit": ("no more running jobs for this user", "MaxJobsPerUser"),
    "QOSUsageThreshold": ("usage threshold", "another QoS"),
    "QOSJobLimit": ("QoS's job limit", "replica count"),
    "QOSResourceLimit": ("QoS's resource limit", "Ask for less"),
    "QOSTimeLimit": ("above what the QoS allows", "Lower the time limit"),
    "AssociationJobLimit": ("account's job limit", "replica count"),
    "AssociationResourceLimit": ("account's resource limit", "Ask for less"),
    "AssociationTimeLimit": ("above what the account allows", "Lower the time limit"),
    # The account/QoS limit family, read by its parts (not in the explicit table).
    "AssocGrpCpuLimit": ("account's group limit on CPUs is reached", "raise the limit"),
    "AssocGrpMemLimit": ("account's group limit on memory", "another account"),
    "AssocGrpNodeLimit": ("group limit on nodes", "replica count"),
    "AssocGrpJobsLimit": ("group limit on running jobs", "replica count"),
    "AssocGrpSubmitJobsLimit": ("group limit on queued jobs", "replica count"),
    "AssocGrpCPURunMinutesLimit": ("CPU-minutes of running jobs", "raise the limit"),
    "AssocGrpWall": ("group limit on wall time", "raise the limit"),
    "AssocMaxJobsLimit": ("account's maximum on running jobs", "replica count"),
    "AssocMaxWallDurationPerJobLimit": ("more than the account's maximum on wall time", "less"),
    "QOSGrpGRES": ("QoS's group limit on GRES", "another QoS"),
    "QOSGrpCpuLimit": ("QoS's group limit on CPUs", "another QoS"),
    "QOSMaxGRESPerUser": ("maximum on GRES (GPUs) per user", "another QoS"),
    "QOSMaxCpuPerJobLimit": ("more than the QoS's maximum on CPUs per job", "less CPUs"),
    "QOSMaxNodePerJobLimit": ("maximum on nodes per job", "less nodes"),
    "QOSMaxSubmitJobPerUserLimit": ("maximum on queued jobs per user", "replica count"),
    "QOSMinGRES": ("less than the QoS's minimum on GRES", "Ask for more"),
}


@pytest.mark.parametrize(("code", "words"), PENDING_TABLE.items(), ids=list(PENDING_TABLE))
def test_every_pending_reason_has_words_and_a_fix(code: str, words: tuple[str, str]) -> None:
    found = explain_pending(code, now=NOW)
    sentence, fix = words
    assert found.code == code
    assert sentence.lower() in found.sentence.lower(), found.sentence
    assert fix.lower() in found.fix.lower(), found.fix
    assert "Slurm says" not in found.sentence  # not the fallback


def test_the_explicit_table_is_all_covered_here() -> None:
    assert set(PENDING_REASONS) <= set(PENDING_TABLE)


def test_details_after_the_code_are_kept() -> None:
    found = explain_pending("ReqNodeNotAvail, UnavailableNodes:gpu[01-02]", now=NOW)
    assert found.code == "ReqNodeNotAvail"
    assert "UnavailableNodes:gpu[01-02]" in found.sentence


def test_the_expected_start_is_given_when_slurm_gives_a_future_one() -> None:
    start = NOW + dt.timedelta(hours=2)
    found = explain_pending("Resources", expected_start=start, now=NOW)
    assert found.expected_start == start
    assert "Slurm expects it to start at 2026-12-01 11:00" in found.sentence
    assert found.as_dict()["expected_start"] == start.isoformat()
    past = explain_pending("Resources", expected_start=NOW - dt.timedelta(1), now=NOW)
    assert past.expected_start is None and "expects" not in past.sentence


@pytest.mark.parametrize("raw", ["", "   ", None])
def test_a_blank_reason_reads_as_just_submitted(raw: str | None) -> None:
    assert explain_pending(raw or "", now=NOW).code == "None"


@pytest.mark.parametrize("raw", ["SomethingNew", "QOS", "Assoc", "x\nrm -rf /", "\x00" * 3])
def test_an_unknown_reason_is_named_with_where_to_look(raw: str) -> None:
    found = explain_pending(raw, now=NOW)
    assert "Slurm says" in found.sentence
    assert "man squeue" in found.fix


def test_a_huge_reason_does_not_explode() -> None:
    found = explain_pending("Resources," + "x" * 100_000, now=NOW)
    assert found.code == "Resources"


# probe outcome text (as provisioner.probe writes it) -> kind, words of the sentence, of the fix
PROBE_TABLE: list[tuple[str, str, str, str]] = [
    ("ready on port 8001", "ready", "answered", ""),
    (
        "connection refused on all 8 ports (8000-8007)",
        "refused",
        "Nothing listens",
        "OBLETH_SERVING_PORT",
    ),
    ("connection refused on port 8000", "refused", "connection refused", "job log"),
    ("timed out on all 8 ports (8000-8007)", "timeout", "no answer in time", "reach the node"),
    ("loading (HTTP 200, status 'loading') on port 8000", "loading", "still loading", "minutes"),
    ("loading (HTTP 503, 'loading model') on port 8000", "loading", "still loading", "minutes"),
    (
        "wrong server: answered with replica key of another job on port 8000",
        "wrong_server",
        "not this replica's server",
        "Restart",
    ),
    (
        "wrong server: /v1/models does not list model 'qwen' (lists 'llama') on port 8000",
        "wrong_server",
        "not this replica's server",
        "Restart",
    ),
    (
        "wrong server: refused the replica key on /v1/models (HTTP 401) on port 8000",
        "wrong_server",
        "not this replica's server",
        "job log",
    ),
    (
        "identity not proven: GET /v1/models answered HTTP 500 on port 8000",
        "identity",
        "could not prove",
        "OBLETH_REPLICA_API_KEY",
    ),
    ("identity not proven: the replica has no key on port 8000", "identity", "prove", "key"),
    ("no HTTP answer (RemoteProtocolError) on port 8000", "no_http", "not speak HTTP", "HTTP"),
    ("HTTP 500 on port 8000", "server_error", "HTTP 5xx", "stderr"),
    ("HTTP 503 on all 8 ports (8000-8007)", "server_error", "HTTP 5xx", "stderr"),
    ("HTTP 404 on port 8000", "http_error", "not with a 2xx", "health path"),
    ("no address on port 8000", "unreachable", "cannot reach the node", "override"),
    ("no port to probe: window 0+8 has no valid TCP port", "no_port", "no valid TCP", "port"),
    (
        "HTTP 503 on port 8000; connection refused on ports 8001,8002",
        "server_error",
        "HTTP 5xx",
        "stderr",
    ),
    ("", "not_probed", "Not probed yet", ""),
    ("something odd happened", "other", "The probe failed: something odd", "job log"),
]


@pytest.mark.parametrize(("text", "kind", "sentence", "fix"), PROBE_TABLE)
def test_every_probe_outcome_in_words(text: str, kind: str, sentence: str, fix: str) -> None:
    found = explain_probe(text)
    assert found.code == kind
    assert sentence.lower() in found.sentence.lower(), found.sentence
    assert fix.lower() in found.fix.lower(), found.fix
    if text:
        assert text in found.sentence  # the probe's own words stay visible


REFUSAL_TABLE = [
    ("Invalid partition name specified", "partition", "partition"),
    ("Invalid account or account/partition combination specified", "account", "account"),
    ("Invalid qos specification", "qos", "QoS"),
    ("Requested time limit is invalid (missing or exceeds some limit)", "time", "MaxTime"),
    ("Invalid generic resource (gres) specification", "gres", "GRES"),
    ("Memory required by task is not available", "memory", "less memory"),
    ("Invalid feature specification", "features", "constraints"),
    ("Requested node configuration is not available", "nodes", "fewer nodes"),
    ("Access/permission denied", "permission", "JWT"),
    (
        "Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)",
        "policy",
        "ask for less",
    ),
    ("QOSMaxSubmitJobPerUserLimit reached", "limit", "QoS limit"),
    ("Something else entirely", "other", "whole answer"),
]


@pytest.mark.parametrize(("reason", "cause", "hint"), REFUSAL_TABLE)
def test_every_refusal_gets_a_cause_specific_hint(reason: str, cause: str, hint: str) -> None:
    found = explain_refusal(reason)
    assert found.code == cause
    assert hint.lower() in found.fix.lower()
    assert found.sentence == reason


def test_an_unknown_partition_lists_the_valid_ones() -> None:
    found = explain_refusal(
        "Invalid partition name specified", partitions=["gpu", "debug"], requested_partition="gpux"
    )
    assert "The cluster has: debug, gpu ('gpux' is not one)." in found.fix
