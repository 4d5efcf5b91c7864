"""Managed specs: GET/PUT/PATCH/DELETE /models/{id}/managed, /managed, provision-error."""

from __future__ import annotations

from typing import Any

import pytest

from obleth.core.models import ManagedSpec, Recipe, Replica
from tests.api.conftest import API
from tests.plugins.factories import make_model, make_slurm_model

pytestmark = pytest.mark.django_db

VALID = {
    "partition": "debug",
    "serving_port": 18000,
    "launch_command": "python3 -m http.server $OBLETH_SERVING_PORT",
}


def _slurm_model_without_spec(name: str = "bare") -> Any:
    return make_model(name=name, hosting_mode="slurm")


def _error_field(response: Any) -> str:
    body = response.json()
    assert response.status_code == 400, body
    return next(iter(body["fields"]))


def test_get_answers_404_when_the_model_is_not_managed(api_client: Any) -> None:
    """The schema says object: a model without a spec is a 404 saying how to add one."""
    model = _slurm_model_without_spec()
    response = api_client.get(f"{API}/models/{model.pk}/managed")
    assert response.status_code == 404
    assert "has no managed spec" in response.json()["error"]
    assert "PUT" in response.json()["error"]


def test_get_on_a_missing_model_is_404(api_client: Any) -> None:
    response = api_client.get(f"{API}/models/00000000-0000-0000-0000-00000000000a/managed")
    assert response.status_code == 404


def test_put_creates_then_replaces_the_spec(api_client: Any) -> None:
    model = _slurm_model_without_spec()
    url = f"{API}/models/{model.pk}/managed"
    created = api_client.put(
        url, {**VALID, "target_replicas": 3, "time_limit": "4:00:00"}, format="json"
    )
    assert created.status_code == 201, created.json()
    body = created.json()
    assert body["model_id"] == str(model.pk)
    assert body["target_replicas"] == 3
    # defaults of the fields not sent
    assert (body["enabled"], body["health_path"], body["nodes"], body["min_replicas"]) == (
        True,
        "/health",
        1,
        1,
    )
    assert body["max_job_failures"] == 0

    # PUT replaces: what is not sent returns to its default.
    replaced = api_client.put(url, {**VALID, "partition": "gpu"}, format="json")
    assert replaced.status_code == 200, replaced.json()
    spec = ManagedSpec.objects.get(model=model)
    assert spec.partition == "gpu"
    assert spec.target_replicas == 2
    assert spec.time_limit == ""


def test_patch_changes_only_what_is_sent(api_client: Any) -> None:
    model = make_slurm_model(spec={"target_replicas": 4, "account": "research"})
    response = api_client.patch(f"{API}/models/{model.pk}/managed", {"qos": "high"}, format="json")
    assert response.status_code == 200, response.json()
    spec = ManagedSpec.objects.get(model=model)
    assert (spec.qos, spec.target_replicas, spec.account) == ("high", 4, "research")


def test_put_keeps_the_provision_error_banner(api_client: Any) -> None:
    model = make_slurm_model()
    api_client.patch(
        f"{API}/models/{model.pk}/managed/provision-error", {"error": "bad QoS"}, format="json"
    )
    api_client.put(f"{API}/models/{model.pk}/managed", VALID, format="json")
    assert ManagedSpec.objects.get(model=model).last_provision_error == "bad QoS"


def test_a_script_body_alone_is_enough(api_client: Any) -> None:
    model = _slurm_model_without_spec()
    response = api_client.put(
        f"{API}/models/{model.pk}/managed",
        {"partition": "debug", "serving_port": 8000, "script_body": "#!/bin/bash\nexec srv\n"},
        format="json",
    )
    assert response.status_code == 201, response.json()


def test_recipe_reference_is_accepted(api_client: Any) -> None:
    model = _slurm_model_without_spec()
    recipe = Recipe.objects.create(name="r", body="---\nname: r\n---\n")
    response = api_client.put(
        f"{API}/models/{model.pk}/managed", {**VALID, "recipe": str(recipe.pk)}, format="json"
    )
    assert response.status_code == 201, response.json()
    assert response.json()["recipe"] == str(recipe.pk)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"time_limit": "4h"}, "time_limit"),
        ({"time_limit": "1:2:3:4"}, "time_limit"),
        ({"serving_port": 0}, "serving_port"),
        ({"serving_port": 65536}, "serving_port"),
        ({"serving_port": "http"}, "serving_port"),
        ({"target_replicas": -1}, "target_replicas"),
        ({"target_replicas": 1001}, "target_replicas"),
        ({"target_replicas": 1, "min_replicas": 2}, "min_replicas"),
        ({"min_replicas": -1}, "min_replicas"),
        ({"max_job_failures": -1}, "max_job_failures"),
        ({"nodes": 0}, "nodes"),
        ({"cpus_per_task": -1}, "cpus_per_task"),
        ({"mem": "12Q"}, "mem"),
        ({"mem": "lots"}, "mem"),
        ({"partition": ""}, "partition"),
        ({"partition": "   "}, "partition"),
        ({"launch_command": ""}, "script_body"),
        ({"health_path": "health"}, "health_path"),
        ({"recipe": "00000000-0000-0000-0000-000000000000"}, "recipe"),
    ],
)
def test_each_rule_rejects_bad_input_naming_the_field(
    api_client: Any, change: dict[str, Any], field: str
) -> None:
    model = _slurm_model_without_spec()
    response = api_client.put(
        f"{API}/models/{model.pk}/managed", {**VALID, **change}, format="json"
    )
    assert _error_field(response) == field
    assert response.json()["error"].startswith(f"{field}: ")
    assert not ManagedSpec.objects.filter(model=model).exists()


@pytest.mark.parametrize("missing", ["partition", "serving_port"])
def test_put_requires_partition_and_serving_port(api_client: Any, missing: str) -> None:
    model = _slurm_model_without_spec()
    data = {k: v for k, v in VALID.items() if k != missing}
    response = api_client.put(f"{API}/models/{model.pk}/managed", data, format="json")
    assert _error_field(response) == missing


def test_valid_slurm_values_pass(api_client: Any) -> None:
    model = _slurm_model_without_spec()
    response = api_client.put(
        f"{API}/models/{model.pk}/managed",
        {**VALID, "time_limit": "1-00:00", "mem": "0", "cpus_per_task": 0, "nodes": 2},
        format="json",
    )
    assert response.status_code == 201, response.json()


def test_only_slurm_models_take_a_spec(api_client: Any) -> None:
    model = make_model(name="static-one")
    response = api_client.put(f"{API}/models/{model.pk}/managed", VALID, format="json")
    assert _error_field(response) == "hosting_mode"
    assert "slurm" in response.json()["error"]
    assert not ManagedSpec.objects.exists()


def test_delete_stops_launching_and_leaves_replicas_to_the_drain(api_client: Any) -> None:
    model = make_slurm_model()
    Replica.objects.create(model_id=model.pk, model_name=model.name, job_name="j", job_id="7")
    url = f"{API}/models/{model.pk}/managed"
    assert api_client.delete(url).status_code == 204
    assert not ManagedSpec.objects.filter(model=model).exists()
    assert Replica.objects.filter(model_id=model.pk).count() == 1
    assert api_client.get(url).status_code == 404
    again = api_client.delete(url)
    assert again.status_code == 404
    assert "no managed spec" in again.json()["error"]


def test_all_specs_list(api_client: Any) -> None:
    first, second = make_slurm_model(name="m-a"), make_slurm_model(name="m-b")
    _slurm_model_without_spec("m-c")
    body = api_client.get(f"{API}/managed").json()
    assert [s["model_name"] for s in body["results"]] == ["m-a", "m-b"]
    assert {s["model_id"] for s in body["results"]} == {str(first.pk), str(second.pk)}


def test_provision_error_set_and_dismiss(api_client: Any) -> None:
    model = make_slurm_model()
    url = f"{API}/models/{model.pk}/managed/provision-error"
    set_ = api_client.patch(url, {"error": "Invalid account or account/partition"}, format="json")
    assert set_.status_code == 200, set_.json()
    assert set_.json()["last_provision_error"] == "Invalid account or account/partition"
    assert set_.json()["last_provision_error_at"] is not None

    dismissed = api_client.patch(url, {"error": None}, format="json")
    assert dismissed.status_code == 200
    spec = ManagedSpec.objects.get(model=model)
    assert spec.last_provision_error == ""
    assert spec.last_provision_error_at is None


def test_provision_error_needs_the_error_key_and_a_spec(api_client: Any) -> None:
    model = make_slurm_model()
    url = f"{API}/models/{model.pk}/managed/provision-error"
    assert _error_field(api_client.patch(url, {}, format="json")) == "error"
    bare = _slurm_model_without_spec("no-spec")
    missing = api_client.patch(
        f"{API}/models/{bare.pk}/managed/provision-error", {"error": None}, format="json"
    )
    assert missing.status_code == 404
