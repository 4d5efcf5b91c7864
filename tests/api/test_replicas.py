"""Replicas: read-only lists, restart, clear-lost."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from obleth.core.models import Replica
from tests.api.conftest import API
from tests.plugins.factories import make_slurm_model

pytestmark = pytest.mark.django_db


def _replica(model: Any, state: str = "healthy", **kwargs: Any) -> Replica:
    return Replica.objects.create(
        model_id=model.pk,
        model_name=model.name,
        job_name=f"obleth-{model.name}",
        state=state,
        **kwargs,
    )


def test_model_replicas_and_the_flat_list_with_filters(api_client: Any) -> None:
    model, other = make_slurm_model(name="r-a"), make_slurm_model(name="r-b")
    healthy = _replica(model, "healthy", job_id="11", nodes="node1", port=18000)
    lost = _replica(model, "lost", job_id="12", last_message="job ended: TIMEOUT")
    _replica(other, "pending", job_id="13")

    mine = api_client.get(f"{API}/models/{model.pk}/replicas").json()
    assert {r["id"] for r in mine["results"]} == {str(healthy.pk), str(lost.pk)}

    everything = api_client.get(f"{API}/replicas").json()
    assert everything["count"] == 3

    lost_only = api_client.get(f"{API}/replicas", {"state": "lost"}).json()
    assert [r["job_id"] for r in lost_only["results"]] == ["12"]
    assert lost_only["results"][0]["last_message"] == "job ended: TIMEOUT"

    by_model = api_client.get(f"{API}/replicas", {"model_id": str(other.pk)}).json()
    assert [r["job_id"] for r in by_model["results"]] == ["13"]

    bad_state = api_client.get(f"{API}/replicas", {"state": "exploded"})
    assert bad_state.status_code == 400
    assert "state" in bad_state.json()["fields"]


def test_replicas_of_a_deleted_model_are_still_listed(api_client: Any) -> None:
    gone_id = uuid.uuid4()
    Replica.objects.create(model_id=gone_id, model_name="gone", job_name="obleth-gone")
    body = api_client.get(f"{API}/models/{gone_id}/replicas").json()
    assert body["count"] == 1


def test_restart_sets_cancel_requested(api_client: Any) -> None:
    model = make_slurm_model()
    replica = _replica(model, job_id="42")
    other = _replica(model, job_id="43")
    response = api_client.post(f"{API}/replicas/{replica.pk}/restart")
    assert response.status_code == 200, response.json()
    assert response.json()["cancel_requested"] is True
    replica.refresh_from_db()
    other.refresh_from_db()
    assert replica.cancel_requested is True
    assert other.cancel_requested is False


def test_restart_of_a_missing_replica_is_404(api_client: Any) -> None:
    response = api_client.post(f"{API}/replicas/{uuid.uuid4()}/restart")
    assert response.status_code == 404
    assert "error" in response.json()


def test_clear_lost_deletes_only_that_models_lost_rows(api_client: Any) -> None:
    model, other = make_slurm_model(), make_slurm_model()
    _replica(model, "lost")
    _replica(model, "lost")
    keep = _replica(model, "healthy")
    other_lost = _replica(other, "lost")
    response = api_client.post(f"{API}/models/{model.pk}/replicas/clear-lost")
    assert response.status_code == 200
    assert response.json() == {"cleared": 2}
    assert set(Replica.objects.values_list("pk", flat=True)) == {keep.pk, other_lost.pk}
    again = api_client.post(f"{API}/models/{model.pk}/replicas/clear-lost")
    assert again.json() == {"cleared": 0}


@pytest.mark.parametrize("method", ["put", "patch", "delete"])
def test_replica_rows_are_read_only(api_client: Any, method: str) -> None:
    model = make_slurm_model()
    replica = _replica(model, job_id="5")
    response = getattr(api_client, method)(
        f"{API}/replicas/{replica.pk}", {"state": "lost"}, format="json"
    )
    assert response.status_code == 405
    replica.refresh_from_db()
    assert replica.state == "healthy"
    assert (
        api_client.post(f"{API}/replicas", {"state": "pending"}, format="json").status_code == 405
    )
    assert (
        api_client.post(f"{API}/models/{model.pk}/replicas", {}, format="json").status_code == 405
    )
