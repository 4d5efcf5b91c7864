"""``POST /api/v1/replicas/{id}/drain-signal``: only the replica's own key records the signal.

Real database, real URLconf, real throttling; the caller stands in for the job's obleth_serve
(the job side is tested in tests/provisioner/test_script_drain.py and on the real Slurm)."""

from __future__ import annotations

import uuid

import pytest
from rest_framework.test import APIClient

from obleth.core import limits
from obleth.core.models import Replica
from provisioner.identity import new_replica_key
from tests.plugins.factories import ADMIN_TOKEN, make_slurm_model

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_throttle() -> None:
    limits.reset()


def _replica(state: str = "healthy") -> Replica:
    model = make_slurm_model(name=f"m-{uuid.uuid4().hex[:6]}")
    return Replica.objects.create(
        model_id=model.pk,
        model_name=model.name,
        job_name="j",
        state=state,
        job_id="7",
        api_key=new_replica_key(),  # as execute.submit writes it
    )


def _post(replica_id: object, key: str | None) -> object:
    client = APIClient()
    if key is not None:
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client.post(f"/api/v1/replicas/{replica_id}/drain-signal", data={}, format="json")


def test_the_replicas_key_records_the_signal_once() -> None:
    replica = _replica()
    assert replica.api_key
    first = _post(replica.pk, replica.api_key)
    assert first.status_code == 202, first.content
    stamped = Replica.objects.get(pk=replica.pk).drain_signal_at
    assert stamped is not None
    again = _post(replica.pk, replica.api_key)
    assert again.status_code == 202
    assert Replica.objects.get(pk=replica.pk).drain_signal_at == stamped


@pytest.mark.parametrize(
    "key",
    [None, "", "wrong", ADMIN_TOKEN, "x" * 100_000, "a\x00b", "$(id); rm -rf /"],
    ids=["none", "empty", "wrong", "admin-token", "huge", "nul", "shell"],
)
def test_anything_but_the_replicas_own_key_is_refused_and_records_nothing(key: str | None) -> None:
    replica = _replica()
    answer = _post(replica.pk, key)
    assert answer.status_code == 401, answer.content
    assert "OBLETH_REPLICA_API_KEY" in answer.json()["error"]
    assert answer["WWW-Authenticate"].startswith("Bearer")
    assert Replica.objects.get(pk=replica.pk).drain_signal_at is None


def test_another_replicas_key_is_refused() -> None:
    one, other = _replica(), _replica()
    assert _post(one.pk, other.api_key).status_code == 401
    assert Replica.objects.get(pk=one.pk).drain_signal_at is None


def test_an_unknown_replica_answers_like_a_wrong_key() -> None:
    answer = _post(uuid.uuid4(), "whatever")
    assert answer.status_code == 401


def test_a_replica_that_is_not_live_is_a_conflict() -> None:
    replica = _replica(state="lost")
    answer = _post(replica.pk, replica.api_key)
    assert answer.status_code == 409
    assert Replica.objects.get(pk=replica.pk).drain_signal_at is None


def test_wrong_keys_from_one_address_are_throttled(settings: object) -> None:
    replica = _replica()
    statuses = [_post(replica.pk, f"wrong-{n}").status_code for n in range(12)]  # type: ignore[attr-defined]
    assert statuses[-1] == 429, statuses
    blocked = _post(replica.pk, replica.api_key)
    assert blocked.status_code == 429  # even the right key waits out the block
    assert blocked["Retry-After"]


def test_other_methods_need_the_key_and_then_do_not_exist() -> None:
    replica = _replica()
    client = APIClient()
    url = f"/api/v1/replicas/{replica.pk}/drain-signal"
    assert client.get(url).status_code == 401
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {replica.api_key}")
    assert client.get(url).status_code == 405
    assert client.delete(url).status_code == 405
