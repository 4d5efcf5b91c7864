"""What the deploy form offers (recipes.deploy.options): each partition's fit and idle
fitting nodes, the accounts a partition takes, the QoS an account may use. Table tests over
the cluster of tests.deploy.conftest (pure functions, no Django).

And the form's starting values (recipes.deploy.form.start) against the plan: for every
library recipe that can be planned, the values start shows before a plan are the plan's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from obleth.core.models import SlurmSettings
from recipes.deploy import checks as dc
from recipes.deploy import form as deploy_form
from recipes.deploy import service as deploy_service
from recipes.deploy.options import accounts_for, form_options, partition_options, qos_for
from recipes.deploy.request import DeployRequest
from recipes.document import parse_recipe
from tests.deploy.conftest import cluster

C = dc.cluster_from_resources(cluster())
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
    {"partitions": [], "nodes": [], "api_version": "", "reason": "Slurm is disabled.", "errors": {}}
)


@pytest.mark.parametrize(
    ("partition", "the_cluster", "expected"),
    [
        ("gpu", C, ["ml", "ops"]),  # AllowAccounts
        ("cpu", C, ["ml", "ops"]),  # every account but DenyAccounts' guests
        ("tiny", C, ["guests", "ml", "ops"]),
        ("nope", C, None),
        ("gpu", LAB, ["ml", "ops"]),  # AllowAccounts is read without slurmdbd
        ("cpu", LAB, None),  # accounts unknown: any account can be typed
        ("cpu", DISABLED, None),
    ],
)
def test_accounts_a_partition_takes(
    partition: str, the_cluster: dc.Cluster, expected: list[str] | None
) -> None:
    assert accounts_for(partition, the_cluster) == expected


@pytest.mark.parametrize(
    ("account", "partition", "the_cluster", "expected"),
    [
        ("ml", "gpu", C, ["long", "normal"]),
        ("ops", "cpu", C, ["debug"]),
        ("ops", "gpu", C, []),
        ("", "cpu", C, ["debug", "long", "normal"]),
        ("ml", "cpu", LAB, None),  # no slurmdbd data: any QoS can be typed
        ("ml", "cpu", DISABLED, None),
    ],
)
def test_qos_an_account_may_use(
    account: str, partition: str, the_cluster: dc.Cluster, expected: list[str] | None
) -> None:
    assert qos_for(account, partition, the_cluster) == expected


PARTITIONS = [
    (
        dc.Ask(partition="cpu"),
        [
            ("cpu", True, 2, 1, "cpu — fits on 2 nodes, 1 idle"),
            ("gpu", True, 2, 0, "gpu — fits on 2 nodes, 0 idle"),
            ("tiny", True, 1, 1, "tiny — fits on 1 node, 1 idle"),
        ],
    ),
    (
        dc.Ask(partition="cpu", cpus=8, mem_mb=32000),
        [
            ("cpu", True, 2, 1, "cpu — fits on 2 nodes, 1 idle"),
            ("gpu", True, 2, 0, "gpu — fits on 2 nodes, 0 idle"),
            ("tiny", False, 0, 0, "tiny — does not fit"),
        ],
    ),
    (
        dc.Ask(partition="gpu", gpus=2, exclude=("gpu02",)),
        [
            ("cpu", False, 0, 0, "cpu — does not fit"),
            ("gpu", True, 1, 0, "gpu — fits on 1 node, 0 idle"),
            ("tiny", False, 0, 0, "tiny — does not fit"),
        ],
    ),
    (
        dc.Ask(partition="cpu", constraints="avx512"),
        [
            ("cpu", True, 1, 1, "cpu — fits on 1 node, 1 idle"),
            ("gpu", False, 0, 0, "gpu — does not fit"),
            ("tiny", False, 0, 0, "tiny — does not fit"),
        ],
    ),
]


@pytest.mark.parametrize(("ask", "expected"), PARTITIONS)
def test_each_partition_with_fit_and_idle_fitting_nodes(ask: dc.Ask, expected: list[Any]) -> None:
    got = partition_options(ask, C)
    assert got is not None
    assert [
        (p["name"], p["fits"], p["fitting_nodes"], p["idle_fitting_nodes"], p["label"]) for p in got
    ] == expected
    # Each entry's sentence is the fit check's for that partition.
    for entry in got:
        check = dc.check_fit(dc.Ask(**{**ask.__dict__, "partition": entry["name"]}), C)
        assert entry["message"] == check.message


def test_the_partitions_carry_maxtime_and_their_accounts() -> None:
    got = {p["name"]: p for p in partition_options(dc.Ask(partition="cpu"), C) or []}
    assert got["gpu"]["max_time"] == "2-00:00:00" and got["tiny"]["max_time"] == ""
    assert got["gpu"]["accounts"] == ["ml", "ops"]


def test_without_discovery_nothing_is_listed_and_the_reason_is_given() -> None:
    options = form_options(dc.Ask(partition="cpu"), DISABLED)
    assert options == {
        "partitions": None,
        "accounts": None,
        "qos": None,
        "reasons": dict.fromkeys(("partitions", "accounts", "qos"), "Slurm is disabled"),
    }
    lab = form_options(dc.Ask(partition="cpu", account="ml"), LAB)
    assert lab["accounts"] is None and lab["reasons"]["accounts"] == NO_DB
    assert lab["qos"] is None and lab["reasons"]["qos"] == NO_DB
    assert lab["partitions"] is not None and len(lab["partitions"]) == 3


# ----------------------------------------------------------------------------- start vs plan

LIBRARY = sorted(p.stem for p in Path(settings.BASE_DIR, "recipes", "library").glob("*.recipe"))
NEEDED = {"model": "HuggingFaceTB/SmolLM2-135M-Instruct"}


@pytest.mark.django_db
@pytest.mark.parametrize("slug", LIBRARY)
def test_the_start_values_are_the_plans(slug: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the form shows before a plan (a recipe that needs values) is what the plan says
    once it can be planned: same values, same sources."""
    slurm = SlurmSettings.load()
    slurm.enabled = True
    slurm.slurmrestd_url = "http://slurm.invalid:6820"
    slurm.user = "obleth"
    slurm.api_version = "v0.0.40"
    slurm.cache_dir = "/scratch/cache"
    slurm.log_dir = "/scratch/logs"
    slurm.images_dir = "/scratch/images"
    slurm.images = {"vllm": "vllm.sif", "sglang": "sglang.sif", "ollama": "ollama.sif"}
    slurm.save()
    data = cluster()
    data["partitions"][1]["is_default"] = True
    monkeypatch.setattr("obleth.core.services.discover_resources", lambda s, **kw: data)
    parsed = parse_recipe(
        Path(settings.BASE_DIR, "recipes", "library", f"{slug}.recipe").read_text()
    )
    needed = {k: v for k, v in NEEDED.items() if parsed.input(k) and not parsed.input(k).default}
    request = DeployRequest(name=f"start-{slug}", library=slug, inputs=needed, dry_run=True)
    start = deploy_form.start(request)
    review = deploy_service.plan_deployment(request)
    differ = {
        k: (start.values[k], review.values[k])
        for k in review.values
        if start.values.get(k) != review.values[k]
    }
    # The plan may move the port to a free range; nothing else differs.
    if review.values["serving_port"]["source"] == "free range":
        differ.pop("serving_port", None)
    assert not differ
    given = set(needed)
    assert {k: v for k, v in start.inputs.items() if k not in given} == {
        k: v for k, v in review.inputs.items() if k not in given
    }
    assert start.options == review.options
