"""build_submission / submission_record (provisioner/submission.py): what one submit sends.

Where the cluster is needed (whole-node memory for ``mem 0``), the in-process FakeSlurmrestd
(provisioner/slurm/fake.py) stands in: it is used here only for its node list and to be switched
off (fault injection); the same reads are proven against the real slurmrestd in tests/e2e and
tests/slurm/test_contract_live.py.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from obleth.core.models import ManagedSpec, SlurmSettings
from provisioner.slurm.client import SlurmClient
from provisioner.slurm.fake import FakeNode, FakeSlurmrestd
from provisioner.submission import DEFAULT_PATH, build_submission, submission_record
from tests.plugins.factories import make_slurm_model

HF_TOKEN = "hf_submissionSecretValue0123456789"


@pytest.fixture
def fake() -> Iterator[FakeSlurmrestd]:
    nodes = [
        FakeNode("big", real_memory=64000, partitions=("debug",)),
        FakeNode("small", real_memory=8000, specialized_memory=1000, partitions=("debug", "gpu")),
        FakeNode("tiny", real_memory=2000, partitions=("other",)),
    ]
    with FakeSlurmrestd(nodes=nodes, start_delay=3600) as server:
        yield server


def _client(fake: FakeSlurmrestd, version: str = "v0.0.38") -> SlurmClient:
    return SlurmClient(fake.url, "obleth", "fake-slurm-token", version, timeout=5)


def _spec(db: Any, **fields: Any) -> ManagedSpec:
    model = make_slurm_model(spec=fields)
    return ManagedSpec.objects.select_related("model").get(model=model)


def _build(spec: ManagedSpec, slurm: SlurmSettings | None = None, **kwargs: Any) -> Any:
    values: dict[str, Any] = {
        "spec": spec,
        "slurm": slurm or SlurmSettings.load(),
        "job_name": "obleth-m-0123456789ab",
        "port_base": 18000,
        "port_span": 8,
    }
    values.update(kwargs)
    return build_submission(**values)


def test_environment_has_path_and_no_token_when_unset(db: Any) -> None:
    sub = _build(_spec(db))
    env = dict(sub.environment)
    assert env["PATH"] == DEFAULT_PATH
    assert "/usr/bin" in env["PATH"]
    assert "HF_TOKEN" not in env and "HUGGING_FACE_HUB_TOKEN" not in env


def test_hf_token_is_sent_under_both_names_and_masked_in_the_record(db: Any) -> None:
    slurm = SlurmSettings.load()
    slurm.hf_token = f"  {HF_TOKEN}\n"
    slurm.save()
    sub = _build(_spec(db), slurm=SlurmSettings.load())
    env = dict(sub.environment)
    assert env["HF_TOKEN"] == HF_TOKEN
    assert env["HUGGING_FACE_HUB_TOKEN"] == HF_TOKEN
    assert "PATH" in env

    record = submission_record(sub)
    assert record["environment"]["HF_TOKEN"] == "[set]"
    assert record["environment"]["HUGGING_FACE_HUB_TOKEN"] == "[set]"
    assert record["environment"]["PATH"] == DEFAULT_PATH
    assert HF_TOKEN not in json.dumps(record)
    assert record["name"] == sub.name and record["script"] == sub.script


@pytest.mark.parametrize(
    ("text", "minutes"),
    [("30", 30), ("4:00:00", 240), ("1-00:00", 1440), ("1-02:03:04", 1564), ("0:90", 2)],
)
def test_time_limit_becomes_whole_minutes(db: Any, text: str, minutes: int) -> None:
    assert _build(_spec(db, time_limit=text)).time_limit_minutes == minutes


def test_blank_or_unlimited_time_limit_sends_none(db: Any) -> None:
    assert _build(_spec(db, time_limit="")).time_limit_minutes is None
    assert _build(_spec(db, time_limit="UNLIMITED")).time_limit_minutes is None


@pytest.mark.parametrize(("text", "mb"), [("512M", 512), ("64G", 65536), ("2048", 2048)])
def test_memory_becomes_megabytes(db: Any, text: str, mb: int) -> None:
    assert _build(_spec(db, mem=text)).memory_per_node_mb == mb


def test_unparseable_stored_values_are_left_out_with_a_warning(
    db: Any, caplog: pytest.LogCaptureFixture
) -> None:
    spec = _spec(db)
    # Saved behind the validators' back (an old row, a raw SQL edit).
    ManagedSpec.objects.filter(pk=spec.pk).update(mem="lots", time_limit="4h")
    spec.refresh_from_db()
    with caplog.at_level(logging.WARNING, logger="provisioner.submission"):
        sub = _build(spec)
    assert sub.memory_per_node_mb is None and sub.time_limit_minutes is None
    text = caplog.text
    assert "mem left out" in text and "time_limit left out" in text


def test_mem_zero_asks_for_the_smallest_whole_node_of_the_partition(
    db: Any, fake: FakeSlurmrestd
) -> None:
    with _client(fake) as client:
        debug = _build(_spec(db, mem="0", partition="debug"), client=client)
        gpu = _build(_spec(db, mem="0G", partition="gpu"), client=client)
        other = _build(_spec(db, mem="0", partition="other"), client=client)
    # debug: min(64000, 8000 - 1000); gpu: only "small"; other: only "tiny"
    assert debug.memory_per_node_mb == 7000
    assert gpu.memory_per_node_mb == 7000
    assert other.memory_per_node_mb == 2000
    assert ("GET", "/slurm/v0.0.38/nodes") in fake.requests


def test_mem_zero_stays_zero_without_a_client_or_when_nodes_cannot_be_read(
    db: Any, fake: FakeSlurmrestd, caplog: pytest.LogCaptureFixture
) -> None:
    spec = _spec(db, mem="0", partition="debug")
    assert _build(spec).memory_per_node_mb == 0
    with _client(fake) as client:
        fake.set_down(True)
        with caplog.at_level(logging.WARNING, logger="provisioner.submission"):
            sub = _build(spec, client=client)
    assert sub.memory_per_node_mb == 0
    assert "could not read node memory" in caplog.text


def test_mem_zero_for_a_partition_without_nodes_stays_zero(db: Any, fake: FakeSlurmrestd) -> None:
    with _client(fake) as client:
        assert (
            _build(_spec(db, mem="0", partition="nowhere"), client=client).memory_per_node_mb == 0
        )


def test_log_paths_come_from_the_spec_first(db: Any) -> None:
    slurm = SlurmSettings.load()
    slurm.log_dir = "/cluster/logs"
    slurm.save()
    sub = _build(_spec(db, log_output_dir="/data/model-logs/"), slurm=SlurmSettings.load())
    assert sub.standard_output == "/data/model-logs/obleth-m-0123456789ab-%j.out"
    assert sub.standard_error == "/data/model-logs/obleth-m-0123456789ab-%j.err"


def test_log_paths_fall_back_to_the_cluster_log_dir(db: Any) -> None:
    slurm = SlurmSettings.load()
    slurm.log_dir = " /cluster/logs/ "
    slurm.save()
    sub = _build(_spec(db, log_output_dir="  "), slurm=SlurmSettings.load())
    assert sub.standard_output == "/cluster/logs/obleth-m-0123456789ab-%j.out"
    assert sub.standard_error == "/cluster/logs/obleth-m-0123456789ab-%j.err"


def test_no_log_dir_anywhere_leaves_slurm_defaults(db: Any) -> None:
    sub = _build(_spec(db))
    assert sub.standard_output == "" and sub.standard_error == ""


def test_learned_exclusions_dropped_when_the_api_cannot_exclude(
    db: Any, fake: FakeSlurmrestd
) -> None:
    spec = _spec(db, exclude="bad1")
    with _client(fake, "v0.0.38") as client:
        sub = _build(spec, client=client, excluded_nodes=("failed-node",))
    # The learned exclusion is dropped; the operator's own list is kept (the adapter then
    # refuses it with SlurmConfigError: see test_execute).
    assert sub.excluded_nodes == "bad1"


def test_learned_exclusions_merged_when_the_api_can_exclude(db: Any) -> None:
    spec = _spec(db, exclude="bad1, bad2")
    # A pinned v0.0.40 client sends no request to name its adapter; the URL is never contacted.
    with SlurmClient("http://127.0.0.1:9", "obleth", "fake-slurm-token", "v0.0.40") as client:
        sub = _build(spec, client=client, excluded_nodes=("bad2", "n7"))
    # one Slurm hostlist expression, as --exclude takes it
    assert sub.excluded_nodes == "bad[1-2],n7"
    without_client = _build(spec, excluded_nodes=("n8",))
    assert without_client.excluded_nodes == "bad[1-2],n8"


def test_other_fields_are_copied_and_stripped(db: Any) -> None:
    spec = _spec(
        db,
        partition=" debug ",
        gres=" gpu:1 ",
        account=" acct ",
        qos=" normal ",
        constraints=" a100 ",
        nodes=2,
        cpus_per_task=4,
    )
    sub = _build(spec, port_base=18016)
    assert (sub.partition, sub.gres, sub.account, sub.qos, sub.constraints) == (
        "debug",
        "gpu:1",
        "acct",
        "normal",
        "a100",
    )
    assert sub.nodes == 2 and sub.cpus_per_task == 4
    assert sub.name == "obleth-m-0123456789ab"
    assert "export OBLETH_PORT_BASE=18016" in sub.script
    assert sub.script.startswith("#!/bin/bash")


def test_the_drain_time_reaches_the_job_and_no_warning_signal_without_a_public_url(
    db: Any, settings: Any
) -> None:
    settings.OBLETH_REPLICA_DRAIN_SECS = 7
    settings.OBLETH_PUBLIC_URL = ""
    sub = _build(_spec(db), replica_api_key="k" * 40, replica_id="r1")
    env = dict(sub.environment)
    assert env["OBLETH_DRAIN_SECS"] == "7"
    assert "OBLETH_SIGNAL_URL" not in env
    assert (sub.warning_signal, sub.warning_secs) == ("", 0)


def test_with_a_public_url_the_job_asks_for_the_warning_signal_and_knows_where_to_report_it(
    db: Any, settings: Any
) -> None:
    settings.OBLETH_PUBLIC_URL = "https://obleth.example.org"
    settings.OBLETH_PROVISIONER_WARNING_SIGNAL_SECS = 240
    sub = _build(_spec(db), replica_api_key="k" * 40, replica_id="0f0e")
    env = dict(sub.environment)
    assert env["OBLETH_SIGNAL_URL"] == (
        "https://obleth.example.org/api/v1/replicas/0f0e/drain-signal"
    )
    assert (sub.warning_signal, sub.warning_secs) == ("USR1", 240)
    settings.OBLETH_PROVISIONER_WARNING_SIGNAL_SECS = 0  # turned off
    off = _build(_spec(db), replica_api_key="k" * 40, replica_id="0f0e")
    assert "OBLETH_SIGNAL_URL" not in dict(off.environment) and off.warning_secs == 0


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("v0.0.38", {}),  # 22.05's REST parser refuses "B:USR1@240": not sent
        ("v0.0.39", {"kill_warning_signal": "USR1", "kill_warning_flags": ["BATCH_JOB"]}),
        ("v0.0.40", {"kill_warning_signal": "USR1", "kill_warning_flags": ["BATCH_JOB"]}),
        ("v0.0.44", {"kill_warning_signal": "USR1", "kill_warning_flags": ["BATCH_JOB"]}),
    ],
)
def test_each_api_version_spells_the_warning_signal_its_own_way(
    db: Any, settings: Any, version: str, expected: dict[str, Any]
) -> None:
    from provisioner.slurm.adapters import get_adapter

    settings.OBLETH_PUBLIC_URL = "https://obleth.example.org"
    settings.OBLETH_PROVISIONER_WARNING_SIGNAL_SECS = 240
    sub = _build(_spec(db), replica_api_key="k" * 40, replica_id="0f0e")
    job = get_adapter(version).build_submit_body(sub)["job"]
    for key, value in expected.items():
        assert job[key] == value
    if version == "v0.0.38":
        assert "signal" not in job
    else:
        assert job["kill_warning_delay"] == {"set": True, "infinite": False, "number": 240}
