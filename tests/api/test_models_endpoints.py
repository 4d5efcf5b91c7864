"""Models and their endpoints through the Management API."""

from __future__ import annotations

from typing import Any

import pytest

from obleth.core.models import Endpoint, ManagedSpec, Model, Replica
from tests.api.conftest import API
from tests.plugins.factories import make_endpoint, make_model, make_slurm_model

pytestmark = pytest.mark.django_db


def _error_field(response: Any) -> str:
    body = response.json()
    assert response.status_code == 400, body
    assert set(body) >= {"error", "fields"}
    return next(iter(body["fields"]))


# ------------------------------------------------------------------------------------------ models


def test_create_read_update_delete_a_static_model(api_client: Any) -> None:
    created = api_client.post(f"{API}/models", {"name": "llama-3"}, format="json")
    assert created.status_code == 201, created.json()
    body = created.json()
    assert body["hosting_mode"] == "static"
    assert body["managed"] is False
    model_id = body["id"]

    got = api_client.get(f"{API}/models/{model_id}").json()
    assert got["name"] == "llama-3"

    changed = api_client.patch(
        f"{API}/models/{model_id}", {"upstream_model": "meta/llama-3"}, format="json"
    )
    assert changed.status_code == 200
    assert Model.objects.get(pk=model_id).upstream_model == "meta/llama-3"

    assert api_client.delete(f"{API}/models/{model_id}").status_code == 204
    assert not Model.objects.filter(pk=model_id).exists()


def test_a_slurm_model_needs_no_api_base(api_client: Any) -> None:
    response = api_client.post(
        f"{API}/models", {"name": "qwen", "hosting_mode": "slurm"}, format="json"
    )
    assert response.status_code == 201, response.json()
    assert response.json()["hosting_mode"] == "slurm"


@pytest.mark.parametrize("method", ["put", "patch"])
def test_hosting_mode_cannot_change_after_creation(api_client: Any, method: str) -> None:
    model = make_model(name="fixed")
    response = getattr(api_client, method)(
        f"{API}/models/{model.pk}", {"name": "fixed", "hosting_mode": "slurm"}, format="json"
    )
    assert _error_field(response) == "hosting_mode"
    assert "hosting_mode" in response.json()["error"]
    assert "fixed at creation" in response.json()["error"]
    model.refresh_from_db()
    assert model.hosting_mode == "static"


def test_sending_the_same_hosting_mode_again_is_fine(api_client: Any) -> None:
    model = make_slurm_model(name="same")
    response = api_client.put(
        f"{API}/models/{model.pk}",
        {"name": "same", "hosting_mode": "slurm", "enabled": False},
        format="json",
    )
    assert response.status_code == 200, response.json()
    assert response.json()["enabled"] is False


def test_model_names_are_unique_and_named_in_the_error(api_client: Any) -> None:
    make_model(name="taken")
    response = api_client.post(f"{API}/models", {"name": "taken"}, format="json")
    assert _error_field(response) == "name"
    assert "taken" in response.json()["error"]


def test_unknown_hosting_mode_is_refused(api_client: Any) -> None:
    response = api_client.post(
        f"{API}/models", {"name": "x", "hosting_mode": "kubernetes"}, format="json"
    )
    assert _error_field(response) == "hosting_mode"


def test_deleting_a_model_keeps_its_replicas_for_the_drain(api_client: Any) -> None:
    model = make_slurm_model(name="going")
    Replica.objects.create(model_id=model.pk, model_name=model.name, job_name="obleth-going")
    assert api_client.delete(f"{API}/models/{model.pk}").status_code == 204
    assert not ManagedSpec.objects.filter(model_id=model.pk).exists()
    assert Replica.objects.filter(model_id=model.pk).count() == 1


def test_models_list_is_filterable(api_client: Any) -> None:
    make_model(name="a-static")
    make_slurm_model(name="b-slurm")
    body = api_client.get(f"{API}/models", {"hosting_mode": "slurm"}).json()
    assert [m["name"] for m in body["results"]] == ["b-slurm"]
    assert body["results"][0]["managed"] is True


# --------------------------------------------------------------------------------------- endpoints


def test_endpoint_crud_with_a_write_only_api_key(api_client: Any) -> None:
    model = make_model()
    url = f"{API}/models/{model.pk}/endpoints"
    created = api_client.post(
        url,
        {"name": "gpu-1", "api_base": "http://127.0.0.1:8000/v1", "api_key": "sk-abcdefgh1234"},
        format="json",
    )
    assert created.status_code == 201, created.json()
    body = created.json()
    assert "api_key" not in body
    assert body["api_key_set"] is True
    assert body["api_key_last4"] == "1234"
    assert body["model_id"] == str(model.pk)
    assert (body["priority"], body["weight"], body["enabled"]) == (100, 100, True)
    endpoint = Endpoint.objects.get(pk=body["id"])
    assert endpoint.api_key == "sk-abcdefgh1234"

    # Omitted on a full update to the same address: kept.
    replaced = api_client.put(
        f"{url}/{endpoint.pk}",
        {"name": "gpu-1", "api_base": "http://127.0.0.1:8000/v1/", "priority": 5},
        format="json",
    )
    assert replaced.status_code == 200, replaced.json()
    endpoint.refresh_from_db()
    assert endpoint.api_key == "sk-abcdefgh1234"
    assert endpoint.priority == 5

    # Omitted with a new api_base: removed (it was given for the old address).
    moved = api_client.put(
        f"{url}/{endpoint.pk}",
        {"name": "gpu-1", "api_base": "http://127.0.0.1:8001/v1", "priority": 5},
        format="json",
    )
    assert moved.status_code == 200, moved.json()
    assert moved.json()["api_key_set"] is False
    endpoint.refresh_from_db()
    assert endpoint.api_key == ""
    assert endpoint.api_base == "http://127.0.0.1:8001/v1"

    # A new value replaces it.
    api_client.patch(f"{url}/{endpoint.pk}", {"api_key": "sk-newkey-98765"}, format="json")
    endpoint.refresh_from_db()
    assert endpoint.api_key == "sk-newkey-98765"

    # An empty string keeps it (as an omitted one does); api_key_clear removes it.
    kept = api_client.patch(f"{url}/{endpoint.pk}", {"api_key": ""}, format="json")
    assert kept.json()["api_key_set"] is True
    endpoint.refresh_from_db()
    assert endpoint.api_key == "sk-newkey-98765"
    cleared = api_client.patch(f"{url}/{endpoint.pk}", {"api_key_clear": True}, format="json")
    assert cleared.json()["api_key_set"] is False
    endpoint.refresh_from_db()
    assert endpoint.api_key == ""

    assert api_client.delete(f"{url}/{endpoint.pk}").status_code == 204
    assert not Endpoint.objects.filter(pk=endpoint.pk).exists()


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"priority": -1}, "priority"),
        ({"weight": 0}, "weight"),
        ({"api_base": "ftp://127.0.0.1/v1"}, "api_base"),
        ({"api_base": "not a url"}, "api_base"),
        ({"api_base": ""}, "api_base"),
        ({"name": ""}, "name"),
    ],
)
def test_endpoint_validation_names_the_field(
    api_client: Any, payload: dict[str, Any], field: str
) -> None:
    model = make_model()
    data = {"name": "ep", "api_base": "http://127.0.0.1:8000/v1", **payload}
    response = api_client.post(f"{API}/models/{model.pk}/endpoints", data, format="json")
    assert _error_field(response) == field
    assert response.json()["error"].startswith(f"{field}: ")
    assert not Endpoint.objects.exists()


def test_endpoint_names_are_unique_per_model(api_client: Any) -> None:
    model, other = make_model(), make_model()
    make_endpoint(model, name="dup")
    response = api_client.post(
        f"{API}/models/{model.pk}/endpoints",
        {"name": "dup", "api_base": "http://127.0.0.1:8000/v1"},
        format="json",
    )
    assert _error_field(response) == "name"
    ok = api_client.post(
        f"{API}/models/{other.pk}/endpoints",
        {"name": "dup", "api_base": "http://127.0.0.1:8000/v1"},
        format="json",
    )
    assert ok.status_code == 201


def test_endpoints_of_a_missing_model_are_404(api_client: Any) -> None:
    missing = "00000000-0000-0000-0000-000000000001"
    assert api_client.get(f"{API}/models/{missing}/endpoints").status_code == 404
    response = api_client.post(
        f"{API}/models/{missing}/endpoints",
        {"name": "x", "api_base": "http://127.0.0.1:1/v1"},
        format="json",
    )
    assert response.status_code == 404


def test_an_endpoint_is_only_reachable_under_its_own_model(api_client: Any) -> None:
    model, other = make_model(), make_model()
    endpoint = make_endpoint(model)
    assert api_client.get(f"{API}/models/{other.pk}/endpoints/{endpoint.pk}").status_code == 404
    assert api_client.get(f"{API}/models/{model.pk}/endpoints/{endpoint.pk}").status_code == 200


def test_flat_endpoint_list_filters_by_model_id(api_client: Any) -> None:
    model, other = make_model(), make_model()
    mine = make_endpoint(model)
    make_endpoint(other)
    body = api_client.get(f"{API}/endpoints", {"model_id": str(model.pk)}).json()
    assert [e["id"] for e in body["results"]] == [str(mine.pk)]
    assert body["count"] == 1
    assert api_client.get(f"{API}/endpoints").json()["count"] == 2
    bad = api_client.get(f"{API}/endpoints", {"model_id": "nope"})
    assert _error_field(bad) == "model_id"
