"""Table tests of every "checked before submit" rule, each with the sentence the operator reads.

Pure functions: the cluster is tests.deploy.conftest.cluster() (a discovery answer's shape).
"""

from __future__ import annotations

from typing import Any

import pytest

from recipes.deploy import checks as dc
from tests.deploy.conftest import cluster

C = dc.cluster_from_resources(cluster())
# The real local cluster's shape: Slurm 22.05 / v0.0.38, no slurmdbd data.
NO_DB = "slurmdbd data is not served by this slurmrestd (v0.0.38)"
LAB = dc.cluster_from_resources(
    cluster(
        accounts=[],
        qos=[],
        associations=[],
        qos_limits=None,
        errors={"accounts": NO_DB, "qos": NO_DB, "associations": NO_DB},
    )
)
DISABLED = dc.cluster_from_resources(
    {
        "partitions": [],
        "nodes": [],
        "api_version": "",
        "reason": "Slurm is disabled: enable it in the Slurm settings.",
        "errors": {},
    }
)


def ask(**kw: Any) -> dc.Ask:
    values: dict[str, Any] = {"partition": "cpu"}
    values.update(kw)
    return dc.Ask(**values)


PARTITION = [
    (ask(), C, "ok", "Partition 'cpu' exists.", ()),
    (
        ask(partition="gpux"),
        C,
        "refused",
        "Partition 'gpux' does not exist on the cluster; choose one of: cpu, gpu, tiny.",
        ("cpu", "gpu", "tiny"),
    ),
    (
        ask(partition=""),
        C,
        "refused",
        "Choose a partition: cpu, gpu, tiny.",
        ("cpu", "gpu", "tiny"),
    ),
    (
        ask(),
        DISABLED,
        "not checked",
        "Partition not checked: Slurm is disabled: enable it in the Slurm settings.",
        (),
    ),
]


@pytest.mark.parametrize(("the_ask", "the_cluster", "status", "message", "valid"), PARTITION)
def test_partition_exists(
    the_ask: dc.Ask, the_cluster: dc.Cluster, status: str, message: str, valid: tuple[str, ...]
) -> None:
    got = dc.check_partition(the_ask, the_cluster)
    assert (got.status, got.message, got.valid) == (status, message, valid)


FIT = [
    (
        ask(cpus=4, mem_mb=8192),
        "partition",
        "ok",
        "A replica fits on 2 nodes of 'cpu'; 1 is idle now and 1 has room for it now.",
    ),
    (
        ask(cpus=32),
        "partition",
        "refused",
        "A replica does not fit in partition 'cpu': it asks 32 CPUs on one node and 0 nodes fit "
        "(its nodes have 16 CPUs). Partitions where it fits: gpu.",
    ),
    (
        ask(partition="gpu", gpus=8),
        "gpus",
        "refused",
        "A replica does not fit in partition 'gpu': it asks 1 CPU, 8 GPUs on one node and 0 "
        "nodes fit (its nodes have 4 GPUs). Partitions where it fits: none.",
    ),
    (
        ask(partition="tiny", mem_mb=4096),
        "partition",
        "refused",
        "A replica does not fit in partition 'tiny': it asks 1 CPU, 4G memory on one node and 0 "
        "nodes fit (its nodes have 2000M memory). Partitions where it fits: cpu, gpu.",
    ),
    (
        ask(nodes=3),
        "partition",
        "refused",
        "A replica does not fit in partition 'cpu': it asks 1 CPU on 3 such nodes and 2 nodes "
        "fit (the partition has 2 nodes). Partitions where it fits: none.",
    ),
    (
        ask(constraints="avx512"),
        "partition",
        "ok",
        "A replica fits on 1 node of 'cpu'; 1 is idle now and 1 has room for it now.",
    ),
    (
        ask(exclude=("cpu01", "cpu02")),
        "partition",
        "refused",
        "A replica does not fit in partition 'cpu': it asks 1 CPU on one node and 0 nodes fit "
        "(Avoid nodes (exclude) leaves too few). Partitions where it fits: gpu, tiny.",
    ),
    (
        ask(exclude=("cpu01",)),
        "partition",
        "warning",
        "A replica fits on 1 node of 'cpu'; 0 are idle now and 0 have room for it now. It will "
        "wait in the queue (Resources) until a node frees up.",
    ),
    (
        ask(partition="gpu", gpus=2),
        "partition",
        "ok",
        "A replica fits on 2 nodes of 'gpu'; 0 are idle now and 1 has room for it now.",
    ),
    (
        ask(partition="gpu", gpus=2, nodes=2),
        "partition",
        "warning",
        "A replica fits on 2 nodes of 'gpu'; 0 are idle now and 1 has room for it now. The "
        "fitting nodes are down or drained: the job waits until one is back.",
    ),
    (
        ask(mem_mb=0),
        "partition",
        "ok",
        "A replica fits on 2 nodes of 'cpu'; 1 is idle now and 1 has room for it now.",
    ),
]


@pytest.mark.parametrize(("the_ask", "field", "status", "message"), FIT)
def test_a_replica_fits(the_ask: dc.Ask, field: str, status: str, message: str) -> None:
    got = dc.check_fit(the_ask, C)
    assert (got.field, got.status, got.message) == (field, status, message)


def test_fit_not_checked_without_nodes() -> None:
    got = dc.check_fit(ask(), DISABLED)
    assert got.status == "not checked"
    assert got.message == "Fit not checked: Slurm is disabled: enable it in the Slurm settings."


ACCOUNT = [
    (ask(), C, "ok", "No account given: Slurm uses your default account.", ()),
    (ask(account="ml"), C, "ok", "Partition 'cpu' takes account 'ml'.", ()),
    (
        ask(account="guests"),
        C,
        "refused",
        "Partition 'cpu' denies account 'guests' (DenyAccounts); use one of: ml, ops.",
        ("ml", "ops"),
    ),
    (
        ask(partition="gpu", account="guests"),
        C,
        "refused",
        "Partition 'gpu' takes only accounts ml, ops (AllowAccounts), not 'guests'.",
        ("ml", "ops"),
    ),
    (
        ask(account="ghost"),
        C,
        "refused",
        "Account 'ghost' is not one of your accounts; use one of: ml, ops.",
        ("ml", "ops"),
    ),
    (
        ask(partition="gpu"),
        C,
        "warning",
        "No account given: Slurm uses your default account, and partition 'gpu' takes only ml, "
        "ops.",
        ("ml", "ops"),
    ),
    (ask(account="ml"), LAB, "not checked", f"Account not checked: {NO_DB}.", ()),
    (ask(partition="gpu", account="ml"), LAB, "ok", "Partition 'gpu' takes account 'ml'.", ()),
    (
        ask(partition="gpu", account="x"),
        LAB,
        "refused",
        "Partition 'gpu' takes only accounts ml, ops (AllowAccounts), not 'x'.",
        ("ml", "ops"),
    ),
]


@pytest.mark.parametrize(("the_ask", "the_cluster", "status", "message", "valid"), ACCOUNT)
def test_only_accounts_the_partition_allows(
    the_ask: dc.Ask, the_cluster: dc.Cluster, status: str, message: str, valid: tuple[str, ...]
) -> None:
    got = dc.check_account(the_ask, the_cluster)
    assert (got.status, got.message, got.valid) == (status, message, valid)


QOS = [
    (ask(), C, "ok", "No QoS given: Slurm uses the account's default QoS.", ()),
    (ask(account="ml", qos="long"), C, "ok", "QoS 'long' is allowed.", ()),
    (
        ask(account="ml", qos="debug"),
        C,
        "refused",
        "Account 'ml' may not use QoS 'debug' in partition 'cpu'; use one of: long, normal.",
        ("long", "normal"),
    ),
    (ask(account="ops", qos="debug"), C, "ok", "QoS 'debug' is allowed.", ()),
    (
        ask(partition="gpu", account="ops", qos="debug"),
        C,
        "refused",
        "No association lets account 'ops' run in partition 'gpu', so QoS 'debug' cannot be "
        "used; pick another account or partition.",
        (),
    ),
    (
        ask(qos="nope"),
        C,
        "refused",
        "Your account may not use QoS 'nope' in partition 'cpu'; use one of: debug, long, normal.",
        ("debug", "long", "normal"),
    ),
    (ask(qos="normal"), LAB, "not checked", f"QoS not checked: {NO_DB}.", ()),
]


@pytest.mark.parametrize(("the_ask", "the_cluster", "status", "message", "valid"), QOS)
def test_only_qos_the_account_may_use(
    the_ask: dc.Ask, the_cluster: dc.Cluster, status: str, message: str, valid: tuple[str, ...]
) -> None:
    got = dc.check_qos(the_ask, the_cluster)
    assert (got.status, got.message, got.valid) == (status, message, valid)


WALLTIME = [
    (ask(time_limit_minutes=60), C, [("ok", "Walltime is within 'cpu''s 2-00:00:00.")]),
    (
        ask(time_limit_minutes=3000),
        C,
        [
            (
                "refused",
                "Walltime 2-02:00:00 is over partition 'cpu''s limit of 2-00:00:00 (MaxTime); "
                "give at most 2-00:00:00.",
            )
        ],
    ),
    (ask(), C, [("ok", "No walltime given: partition 'cpu' allows at most 2-00:00:00.")]),
    (
        ask(partition="tiny", time_limit_minutes=99999),
        C,
        [("ok", "Partition 'tiny' has no walltime limit.")],
    ),
    (
        ask(time_limit_minutes=1500, qos="normal"),
        C,
        [
            ("ok", "Walltime is within 'cpu''s 2-00:00:00."),
            (
                "refused",
                "Walltime 1-01:00:00 is over QoS 'normal''s limit of 1-00:00:00 (MaxWall); give "
                "at most 1-00:00:00 or another QoS.",
            ),
        ],
    ),
    (
        ask(time_limit_minutes=60, qos="normal"),
        C,
        [
            ("ok", "Walltime is within 'cpu''s 2-00:00:00."),
            ("ok", "Walltime is within QoS 'normal''s 1-00:00:00."),
        ],
    ),
    (
        ask(time_limit_minutes=60, qos="normal"),
        LAB,
        [
            ("ok", "Walltime is within 'cpu''s 2-00:00:00."),
            ("not checked", f"Walltime not checked against QoS 'normal': {NO_DB}."),
        ],
    ),
    (
        ask(time_limit_minutes=60),
        DISABLED,
        [
            (
                "not checked",
                "Walltime not checked against the partition: Slurm is disabled: enable it in "
                "the Slurm settings.",
            )
        ],
    ),
]


@pytest.mark.parametrize(("the_ask", "the_cluster", "expected"), WALLTIME)
def test_walltime_within_partition_and_qos(
    the_ask: dc.Ask, the_cluster: dc.Cluster, expected: list[tuple[str, str]]
) -> None:
    got = [(c.status, c.message) for c in dc.check_walltime(the_ask, the_cluster)]
    assert got == expected


@pytest.mark.parametrize(
    ("gres", "gpus"),
    [("", 0), ("gpu:2", 2), ("gpu:a100:4(S:0-1)", 4), ("gpu:1,shard:8", 1), ("gres/gpu:3", 3)],
)
def test_node_gpus(gres: str, gpus: int) -> None:
    assert dc.node_gpus(gres) == gpus


@pytest.mark.parametrize(
    ("minutes", "text"),
    [(30, "0:30:00"), (120, "2:00:00"), (1440, "1-00:00:00"), (1501, "1-01:01:00")],
)
def test_format_minutes(minutes: int, text: str) -> None:
    assert dc.format_minutes(minutes) == text
