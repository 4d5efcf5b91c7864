"""POST /api/v1/deployments: dry run (the review) and a real deploy, through the real API.

What is faked: slurmrestd. Discovery answers from tests.deploy.conftest.cluster() (the shape
``discover_resources`` returns) where a test needs a cluster; otherwise Slurm is disabled and
every cluster check says "not checked". The submit body is built by the real adapters.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.cache import cache
from rest_framework.test import APIClient

from obleth.accounts.models import AuditEntry
from obleth.core.models import Launch, ManagedSpec, Model, Recipe, SlurmSettings
from provisioner.slurm.adapters import get_adapter
from recipes.document import parse_recipe
from tests.deploy.conftest import cluster

pytestmark = pytest.mark.django_db
URL = "/api/v1/deployments"
NEEDED_INPUTS = {"model": "HuggingFaceTB/SmolLM2-135M-Instruct"}
LIBRARY = sorted(p.stem for p in Path(settings.BASE_DIR, "recipes", "library").glob("*.recipe"))


def client_for(role: str | None, **perms: Any) -> APIClient:
    user = get_user_model().objects.create_user(
        username=f"u-{uuid.uuid4().hex[:8]}", password="x", is_staff=True
    )
    if role:
        user.groups.add(Group.objects.get(name=role))
    client = APIClient()
    client.force_login(user)
    return client


@pytest.fixture
def operator() -> APIClient:
    return client_for("operator")


@pytest.fixture
def admin() -> APIClient:
    return client_for("admin")


@pytest.fixture
def slurm_on(monkeypatch: pytest.MonkeyPatch) -> SlurmSettings:
    """Slurm enabled on v0.0.40, discovery answering cluster(), an HF token set."""
    slurm = SlurmSettings.load()
    slurm.enabled = True
    slurm.slurmrestd_url = "http://slurm.invalid:6820"
    slurm.user = "obleth"
    slurm.api_version = "v0.0.40"
    slurm.hf_token = "hf_SECRETSECRETSECRET1234"
    slurm.cache_dir = "/scratch/cache"
    slurm.log_dir = "/scratch/logs"
    slurm.images_dir = "/scratch/images"
    slurm.images = {"vllm": "vllm.sif", "sglang": "sglang.sif", "ollama": "ollama.sif"}
    slurm.save()
    calls: list[int] = []

    def fake(settings_row: SlurmSettings, **options: Any) -> dict[str, Any]:
        calls.append(1)
        return cluster()

    monkeypatch.setattr("obleth.core.services.discover_resources", fake)
    slurm.discovery_calls = calls  # type: ignore[attr-defined]
    return slurm


def body(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"library": "test-engine", "name": "demo", "dry_run": True}
    data.update(changes)
    return data


@pytest.mark.parametrize("slug", LIBRARY)
def test_every_library_recipe_dry_runs(
    admin: APIClient, slurm_on: SlurmSettings, slug: str
) -> None:
    """Each file in recipes/library/ gives a review with a script, the Slurm body and sources."""
    parsed = parse_recipe(
        Path(settings.BASE_DIR, "recipes", "library", f"{slug}.recipe").read_text()
    )
    needed = {i.name for i in parsed.inputs if i.required and not i.default}
    inputs = {k: v for k, v in NEEDED_INPUTS.items() if k in needed}
    assert needed == set(inputs), f"give a value for {needed - set(inputs)} in NEEDED_INPUTS"
    answer = admin.post(
        URL,
        body(library=slug, name=f"dry-{slug}", inputs=inputs, overrides={"partition": "cpu"}),
        format="json",
    )
    assert answer.status_code == 200, answer.json()
    review = answer.json()
    assert review["dry_run"] is True
    assert review["script"].startswith("#!")
    assert "OBLETH_SERVING_PORT" in review["script"]
    assert review["slurm"]["api_version"] == "v0.0.40"
    assert review["slurm"]["body"]["job"]["partition"] == "cpu"
    assert review["values"]["partition"] == {"value": "cpu", "source": "you"}
    assert not Model.objects.filter(name=f"dry-{slug}").exists()


def test_dry_run_body_is_exactly_what_the_adapter_sends(
    admin: APIClient, slurm_on: SlurmSettings
) -> None:
    answer = admin.post(
        URL,
        body(overrides={"partition": "cpu", "time_limit": "2:00:00", "mem": "1G", "cpus": 2}),
        format="json",
    ).json()
    job = answer["slurm"]["body"]["job"]
    assert answer["slurm"]["path"] == get_adapter("v0.0.40").submit_path()
    assert answer["slurm"]["body"]["script"] == answer["script"]
    assert job["time_limit"] == {"set": True, "infinite": False, "number": 120}
    assert job["cpus_per_task"] == 2
    assert job["standard_output"].startswith("/scratch/logs/obleth-demo-000000000000-")
    env = job["environment"]
    assert "HF_TOKEN=[masked]" in env
    assert "hf_SECRET" not in str(answer)
    assert answer["values"]["log_output_dir"] == {
        "value": "/scratch/logs",
        "source": "cluster default",
    }
    assert answer["values"]["mem"]["source"] == "you"
    assert answer["values"]["cpus"] == {"value": 2, "source": "you"}
    assert answer["values"]["replicas"] == {"value": 2, "source": "recipe"}
    assert answer["inputs"]["loading"] == {"value": "0", "source": "recipe"}


def test_dry_run_for_v0_0_38_uses_its_body_shape(admin: APIClient, slurm_on: SlurmSettings) -> None:
    slurm_on.api_version = "v0.0.38"
    slurm_on.save()
    answer = admin.post(URL, body(overrides={"time_limit": "30"}), format="json").json()
    job = answer["slurm"]["body"]["job"]
    assert answer["slurm"]["api_version"] == "v0.0.38"
    assert job["time_limit"] == 30  # a bare integer in v0.0.38
    assert job["environment"]["HF_TOKEN"] == "[masked]"


def test_exclude_on_v0_0_38_is_refused_naming_the_field(
    admin: APIClient, slurm_on: SlurmSettings
) -> None:
    slurm_on.api_version = "v0.0.38"
    slurm_on.save()
    review = admin.post(
        URL, body(overrides={"partition": "cpu", "exclude": "cpu02"}), format="json"
    ).json()
    assert review["ok"] is False
    assert "no exclude field" in review["refusals"]["overrides.exclude"][0]
    launched = admin.post(
        URL, body(dry_run=False, overrides={"partition": "cpu", "exclude": "cpu02"}), format="json"
    )
    assert launched.status_code == 400
    assert "overrides.exclude" in launched.json()["fields"]
    assert not Model.objects.filter(name="demo").exists()


def test_sbatch_directive_not_applied_is_a_warning(
    admin: APIClient, slurm_on: SlurmSettings
) -> None:
    script = "#!/bin/bash\n#SBATCH --cpus-per-task=1\n#SBATCH --signal=B:USR1@60\nexec sleep 1\n"
    answer = admin.post(URL, body(script=script, overrides={"partition": "cpu"}), format="json")
    assert answer.status_code == 200, answer.json()
    assert any("--signal" in w and "not applied" in w for w in answer.json()["warnings"])


def test_cluster_refusals_name_the_field_and_valid_values(
    admin: APIClient, slurm_on: SlurmSettings
) -> None:
    review = admin.post(
        URL,
        body(overrides={"partition": "gpu", "account": "nobody", "time_limit": "3-00:00:00"}),
        format="json",
    ).json()
    assert review["ok"] is False
    assert review["refusals"]["overrides.account"] == [
        "Partition 'gpu' takes only accounts ml, ops (AllowAccounts), not 'nobody'."
    ]
    assert "give at most 2-00:00:00" in review["refusals"]["overrides.time_limit"][0]
    launched = admin.post(
        URL,
        body(dry_run=False, overrides={"partition": "nope"}),
        format="json",
    )
    assert launched.status_code == 400
    assert launched.json()["fields"]["overrides.partition"] == [
        "Partition 'nope' does not exist on the cluster; choose one of: cpu, gpu, tiny."
    ]


def test_no_partition_anywhere_takes_the_clusters_default(
    admin: APIClient, slurm_on: SlurmSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """llamacpp-smollm2 names no partition: sbatch would use the default one, and so do we."""
    request = body(library="llamacpp-smollm2", name="smol")
    refused = admin.post(URL, request, format="json")
    assert refused.status_code == 400  # no partition is marked default in cluster()
    assert refused.json()["fields"]["overrides.partition"][-1] == (
        "Partitions on the cluster: cpu, gpu, tiny."
    )
    data = cluster()
    data["partitions"][1]["is_default"] = True
    monkeypatch.setattr("obleth.core.services.discover_resources", lambda s, **kw: data)
    cache.clear()
    review = admin.post(URL, request, format="json").json()
    assert review["values"]["partition"] == {"value": "cpu", "source": "cluster default"}


def test_discovery_is_cached_and_its_age_shown(admin: APIClient, slurm_on: SlurmSettings) -> None:
    first = admin.post(URL, body(overrides={"partition": "cpu"}), format="json").json()
    second = admin.post(URL, body(overrides={"partition": "cpu"}), format="json").json()
    assert slurm_on.discovery_calls == [1]  # type: ignore[attr-defined]
    assert first["discovery"]["cached"] is False
    assert second["discovery"]["cached"] is True
    assert second["discovery"]["age_seconds"] >= 0
    assert second["discovery"]["fetched_at"] == first["discovery"]["fetched_at"]


def test_without_slurm_checks_say_not_checked(admin: APIClient) -> None:
    review = admin.post(URL, body(), format="json").json()
    assert review["ok"] is True
    assert {c["status"] for c in review["checks"]} <= {"not checked", "ok"}
    assert "Slurm is disabled" in review["checks"][0]["message"]
    assert review["slurm"]["body"] is None
    assert "test the Slurm connection" in review["slurm"]["reason"]


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"library": "test-engine", "name": "x", "colour": "red"}, "colour"),
        ({"library": "test-engine", "name": "x", "overrides": {"gpu": 1}}, "overrides.gpu"),
        ({"library": "test-engine", "name": "x", "overrides": []}, "overrides"),
        ({"library": "test-engine", "name": "x", "inputs": {"nope": "1"}}, "inputs.nope"),
        ({"library": "test-engine", "name": "x", "inputs": {"loading": "-5"}}, "inputs.loading"),
        ({"library": "test-engine", "name": "x", "inputs": {"extra": "a\nb"}}, "inputs.extra"),
        ({"library": "test-engine", "name": "x", "inputs": {"extra": "a\x00"}}, "inputs.extra"),
        ({"library": "test-engine", "name": "x", "overrides": {"nodes": 0}}, "overrides.nodes"),
        ({"library": "test-engine", "name": "x", "overrides": {"gpus": "two"}}, "overrides.gpus"),
        ({"library": "test-engine", "name": "x", "overrides": {"mem": "lots"}}, "overrides.mem"),
        (
            {"library": "test-engine", "name": "x", "overrides": {"partition": "a;rm -rf /"}},
            "overrides.partition",
        ),
        (
            {"library": "test-engine", "name": "x", "overrides": {"env": {"BAD NAME": "1"}}},
            "overrides.env.BAD NAME",
        ),
        (
            {"library": "test-engine", "name": "x", "overrides": {"env": {"SLURM_X": "1"}}},
            "overrides.env.SLURM_X",
        ),
        (
            {"library": "test-engine", "name": "x", "overrides": {"env": {"A": "x\n#SBATCH"}}},
            "overrides.env.A",
        ),
        (
            {"library": "test-engine", "name": "x", "overrides": {"replicas": 5000}},
            "overrides.replicas",
        ),
        ({"library": "no-such", "name": "x"}, "library"),
        ({"library": "../etc/passwd", "name": "x"}, "library"),
        ({"recipe": str(uuid.uuid4()), "name": "x"}, "recipe"),
        ({"recipe": "not-a-uuid", "name": "x"}, "recipe"),
        ({"name": "x"}, "recipe"),
        ({"library": "test-engine", "recipe": str(uuid.uuid4()), "name": "x"}, "recipe"),
        ({"library": "test-engine"}, "name"),
        ({"library": "test-engine", "name": "a\nb"}, "name"),
        ({"library": "test-engine", "name": "x", "dry_run": "yes"}, "dry_run"),
        ({"library": "test-engine", "name": "x", "script": "#SBATCH -p {{x}}\n"}, "script"),
        ({"hf_repo": "not a repo id", "name": "x"}, "hf_repo"),
        ({"library": "test-engine", "name": "x", "script": "#!/bin/bash\n\x00\n"}, "script"),
        ({"library": "test-engine", "name": "x", "script": "#" * 300_000}, "script"),
        ({"library": "test-engine", "name": "n" * 100_000}, "name"),
        ({"library": "test-engine", "name": "x", "save_as_recipe": "a\nb"}, "save_as_recipe"),
        ({"library": "test-engine", "name": "x", "overrides": {"cpus": True}}, "overrides.cpus"),
    ],
)
def test_bad_requests_are_400_naming_the_field(
    admin: APIClient, data: dict[str, Any], field: str
) -> None:
    for dry_run in (True, False):
        answer = admin.post(URL, {**data, "dry_run": data.get("dry_run", dry_run)}, format="json")
        assert answer.status_code == 400, answer.json()
        fields = answer.json()["fields"]
        # Named as a field, or (a NUL anywhere in the body, refused before the view) in the
        # message of its top-level field.
        named = field in fields or any(
            field in message for messages in fields.values() for message in messages
        )
        assert named, answer.json()
    assert not Model.objects.exists()


def test_an_unset_cluster_default_is_named(admin: APIClient, slurm_on: SlurmSettings) -> None:
    slurm_on.images = {}
    slurm_on.save()
    answer = admin.post(URL, body(library="vllm", name="v"), format="json")
    assert answer.status_code == 400
    assert "{{image.vllm}}" in answer.json()["fields"]["inputs.image"][0]


def test_shell_characters_in_the_model_name_stay_data(
    admin: APIClient, slurm_on: SlurmSettings
) -> None:
    """A model name is what clients send; it never reaches the script, and the job name (which
    names the log files) has its unsafe characters replaced."""
    review = admin.post(
        URL, body(name="$(id)`id`;x y/z", overrides={"partition": "cpu"}), format="json"
    ).json()
    job = review["slurm"]["body"]["job"]
    assert job["name"] == "obleth---id--id--x-y-z-000000000000"
    assert "$(id)" not in review["script"]
    assert job["standard_output"] == "/scratch/logs/obleth---id--id--x-y-z-000000000000-%j.out"


def test_deploy_creates_model_spec_and_recipe_in_one_go_and_is_audited(
    admin: APIClient, slurm_on: SlurmSettings
) -> None:
    answer = admin.post(
        URL,
        body(
            dry_run=False,
            name="demo",
            inputs={"loading": "3", "extra": "--latency-ms 5"},
            overrides={"partition": "cpu", "replicas": 1, "env": {"MY_FLAG": "on"}},
            save_as_recipe="demo settings",
        ),
        format="json",
    )
    assert answer.status_code == 201, answer.json()
    data = answer.json()
    assert data["stage"] == "staged"
    model = Model.objects.get(name="demo")
    spec = ManagedSpec.objects.get(model=model)
    saved = Recipe.objects.get(name="demo settings")
    assert data["model"]["id"] == str(model.pk)
    assert data["recipe"]["id"] == str(saved.pk)
    assert spec.recipe_id == saved.pk
    assert spec.partition == "cpu" and spec.target_replicas == 1
    assert "export MY_FLAG=on" in spec.script_body
    assert spec.launcher_spec["recipe"]["library"] == "test-engine"
    preview = admin.post(
        URL,
        body(name="demo-3", overrides={"partition": "cpu"}, save_as_recipe="preview"),
        format="json",
    ).json()
    assert preview["save_as_recipe"]["name"] == "preview"
    assert "partition: cpu" in preview["save_as_recipe"]["body"]
    assert not Recipe.objects.filter(name="preview").exists()
    # The saved recipe deploys again with the settings given (inputs became its defaults).
    again = admin.post(
        URL, {"recipe": str(saved.pk), "name": "demo-2", "dry_run": True}, format="json"
    ).json()
    assert again["values"]["partition"] == {"value": "cpu", "source": "recipe"}
    assert again["inputs"]["loading"] == {"value": "3", "source": "recipe"}
    assert "export MY_FLAG=on" in again["script"]
    logged = set(AuditEntry.objects.values_list("model", "action"))
    assert {("model", "create"), ("managedspec", "create"), ("recipe", "create")} <= {
        (m, a) for m, a in logged
    }, logged
    assert ("model", "deploy") in logged


def test_a_taken_name_writes_nothing(admin: APIClient, slurm_on: SlurmSettings) -> None:
    first = admin.post(URL, body(dry_run=False, overrides={"partition": "cpu"}), format="json")
    assert first.status_code == 201
    second = admin.post(
        URL,
        body(dry_run=False, overrides={"partition": "cpu"}, save_as_recipe="never"),
        format="json",
    )
    assert second.status_code == 400
    assert "already exists" in second.json()["fields"]["name"][0]
    assert not Recipe.objects.filter(name="never").exists()


def test_operator_deploys_but_cannot_edit_the_script_or_save_a_recipe(
    operator: APIClient, slurm_on: SlurmSettings
) -> None:
    ok = operator.post(URL, body(dry_run=False, overrides={"partition": "cpu"}), format="json")
    assert ok.status_code == 201, ok.json()
    script = operator.post(URL, body(script="#!/bin/bash\nexec sleep 1\n"), format="json")
    assert script.status_code == 403
    assert "core.change_launch_script" in script.json()["error"]
    saved = operator.post(URL, body(dry_run=False, name="o2", save_as_recipe="r"), format="json")
    assert saved.status_code == 403
    assert "core.add_recipe" in saved.json()["error"]
    viewer = client_for("viewer").post(URL, body(), format="json")
    assert viewer.status_code == 403


def test_learned_account_is_prefilled_and_other_suggestions_wait(
    admin: APIClient, slurm_on: SlurmSettings
) -> None:
    first = admin.post(
        URL,
        body(dry_run=False, name="past", overrides={"partition": "gpu", "account": "ml"}),
        format="json",
    )
    assert first.status_code == 201, first.json()
    model = Model.objects.get(name="past")
    for state in ("TIMEOUT", "TIMEOUT", "COMPLETED"):
        Launch.objects.create(
            id=uuid.uuid4(),
            model_id=model.pk,
            model_name="past",
            job_name="j",
            partition="gpu",
            account="ml",
            time_limit="2:00:00",
            end_state=state,
        )
    review = admin.post(URL, body(name="next", overrides={"partition": "gpu"}), format="json")
    data = review.json()
    assert data["values"]["account"] == {"value": "ml", "source": "learned"}
    walltime = next(s for s in data["suggestions"] if s["field"] == "time_limit")
    assert walltime["evidence"] == (
        "2 of the last 3 launches hit the 2:00:00 limit (TIMEOUT): try 4:00:00."
    )
    assert walltime["apply"] == {"time_limit": "4:00:00"}
    assert data["values"]["time_limit"]["value"] != "4:00:00"  # not applied until picked
    assert walltime["applied"] is False
    chosen = admin.post(
        URL,
        body(name="next", overrides={"partition": "gpu", **walltime["apply"]}),
        format="json",
    ).json()
    assert chosen["values"]["time_limit"] == {"value": "4:00:00", "source": "you"}
    assert next(s for s in chosen["suggestions"] if s["field"] == "time_limit")["applied"] is True
    picked = admin.post(
        URL, body(name="next", overrides={"partition": "gpu", "account": "ops"}), format="json"
    ).json()
    assert picked["values"]["account"] == {"value": "ops", "source": "you"}


def test_learning_reads_only_this_recipes_launches(
    admin: APIClient, slurm_on: SlurmSettings
) -> None:
    other = admin.post(
        URL,
        body(
            library="vllm",
            name="other",
            dry_run=False,
            inputs=NEEDED_INPUTS,
            overrides={"partition": "gpu", "account": "ml", "gpus": 1},
        ),
        format="json",
    )
    assert other.status_code == 201, other.json()
    model = Model.objects.get(name="other")
    for _ in range(3):
        Launch.objects.create(
            id=uuid.uuid4(), model_id=model.pk, model_name="other", job_name="j", account="ml"
        )
    mine = admin.post(URL, body(overrides={"partition": "gpu"}), format="json").json()
    assert mine["values"]["account"] == {"value": "", "source": "not set"}
    assert mine["suggestions"] == []
    theirs = admin.post(
        URL,
        body(library="vllm", name="v2", inputs=NEEDED_INPUTS, overrides={"partition": "gpu"}),
        format="json",
    ).json()
    assert theirs["values"]["account"] == {"value": "ml", "source": "learned"}
    assert theirs["suggestions"][0]["applied"] is True


def test_too_many_gpus_is_refused_on_the_gpus_field_with_the_options(
    admin: APIClient, slurm_on: SlurmSettings
) -> None:
    review = admin.post(
        URL, body(overrides={"partition": "gpu", "account": "ml", "gpus": 8}), format="json"
    ).json()
    assert review["ok"] is False
    assert list(review["refusals"]) == ["overrides.gpus"]
    assert "8 GPUs on one node and 0 nodes fit" in review["refusals"]["overrides.gpus"][0]
    # The review lists what the form may offer: no partition fits 8 GPUs.
    assert [(p["name"], p["fits"]) for p in review["options"]["partitions"]] == [
        ("cpu", False),
        ("gpu", False),
        ("tiny", False),
    ]
    assert review["options"]["accounts"] == ["ml", "ops"]
