"""Secrets (Slurm JWT, Hugging Face token, endpoint API keys) never appear in any answer or
log line. Every GET route of the URLconf is called, found by walking the resolver."""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from typing import Any

import pytest
from django.urls import reverse
from django.utils import timezone

from obleth.core.models import Alert, Endpoint, Launch, Recipe, Replica
from obleth.gateway import keys
from tests.api.conftest import API, api_routes, make_jwt
from tests.api.test_launches_recipes_alerts import GOOD_RECIPE
from tests.plugins.factories import make_model, make_slurm_model

pytestmark = pytest.mark.django_db

API_KEY = "sk-SECRETMARKER-endpoint-key-0123456789"
HF_TOKEN = "hf_SECRETMARKER_hugging_face_0123456789"


def _secret_pieces(secret: str) -> list[str]:
    """The secret and its parts without the last four characters (which may be shown)."""
    pieces = [secret, secret[:-4]]
    pieces += [part for part in secret.split(".") if len(part) >= 8]  # each JWT segment
    return pieces


@pytest.fixture
def world(api_client: Any, caplog: Any) -> dict[str, Any]:
    """Objects of every kind, with secrets set through the API itself (so writes are logged)."""
    caplog.set_level(logging.DEBUG)
    jwt_token = make_jwt(exp=timezone.now() + dt.timedelta(hours=3), marker="SECRETMARKER")
    settings_put = api_client.put(
        f"{API}/settings/slurm",
        {
            "enabled": True,
            "slurmrestd_url": "http://127.0.0.1:9",
            "user": "obleth",
            "jwt": jwt_token,
            "hf_token": HF_TOKEN,
        },
        format="json",
    )
    assert settings_put.status_code == 200
    static = make_model(name="static-secret")
    created = api_client.post(
        f"{API}/models/{static.pk}/endpoints",
        {"name": "ep", "api_base": "http://127.0.0.1:8000/v1", "api_key": API_KEY},
        format="json",
    )
    assert created.status_code == 201
    slurm = make_slurm_model(name="slurm-secret")
    replica = Replica.objects.create(model_id=slurm.pk, model_name=slurm.name, job_name="j")
    launch = Launch.objects.create(
        id=replica.pk, model_id=slurm.pk, model_name=slurm.name, job_name="j"
    )
    recipe = Recipe.objects.create(name="r", body=GOOD_RECIPE)
    alert = Alert.objects.create(key="k", title="t")
    gateway_key = keys.create_key("team", models=[static])
    bodies = [settings_put.content, created.content]
    from django.contrib.auth import get_user_model

    from obleth.accounts.models import AuditEntry
    from obleth.accounts.services import create_token

    owner = get_user_model().objects.create_user("token-owner", password="x", is_staff=True)
    token = create_token(owner, "secrets test").token
    audit = AuditEntry.objects.filter(model="slurmsettings").first()
    assert audit is not None  # the settings PUT above was recorded, secrets masked
    return {
        "secrets": [
            *_secret_pieces(gateway_key.secret),
            *_secret_pieces(jwt_token),
            *_secret_pieces(API_KEY),
            *_secret_pieces(HF_TOKEN),
        ],
        "bodies": bodies,
        "ids": {
            "model": static.pk,
            "model-endpoint": Endpoint.objects.get(name="ep").pk,
            "endpoint": Endpoint.objects.get(name="ep").pk,
            "replica": replica.pk,
            "replica-drain": replica.pk,
            "launch": launch.pk,
            "recipe": recipe.pk,
            "alert": alert.pk,
            "token": token.pk,
            "audit": audit.pk,
            "gateway-key": gateway_key.key.pk,
        },
        "endpoint_model": static.pk,
    }


def _kwargs(name: str, groups: dict[str, str], world: dict[str, Any]) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    base = name.removeprefix("api:").rsplit("-", 1)[0]
    for group in groups:
        if group == "model_id":
            kwargs[group] = world["endpoint_model"]
        elif group == "pk":
            kwargs[group] = world["ids"][base]
    return kwargs


def test_no_get_answer_and_no_log_line_carries_a_secret(
    api_client: Any, world: dict[str, Any], caplog: Any
) -> None:
    checked = []
    for _, name, groups in api_routes():
        url = reverse(name, kwargs=_kwargs(name, groups, world))
        response = api_client.get(url)
        if response.status_code == 405:
            continue
        if name == "api:replica-drain-signal":
            # only a replica's own key opens it (tests/api/test_drain_signal.py); the 401 is
            # scanned for secrets with the rest
            assert response.status_code == 401
            world["bodies"].append(response.content)
            continue
        if name == "api:model-managed" and response.status_code == 404:
            continue  # the static model has no managed spec: a 404 carries no secret either
        assert response.status_code == 200, (url, response.status_code)
        world["bodies"].append(response.content)
        checked.append(url)
    # the endpoint must really be reachable in the answers we scanned (not a vacuous pass)
    assert any(f"/endpoints/{world['ids']['endpoint']}" in url for url in checked)
    assert f"{API}/settings/slurm" in checked
    assert len(checked) >= 20

    # POST answers too: the connection test (which fails here: nothing listens on port 9).
    world["bodies"].append(api_client.post(f"{API}/settings/slurm/test").content)
    world["bodies"].append(api_client.get(f"{API}/slurm/resources").content)

    everything = b"\n".join(world["bodies"]).decode()
    assert "SECRETMARKER" not in everything
    for piece in world["secrets"]:
        assert piece not in everything
        assert piece not in caplog.text
    assert "api_key_set" in everything and "jwt_set" in everything


def test_settings_changes_are_audited_without_secrets(api_client: Any, caplog: Any) -> None:
    caplog.set_level(logging.INFO, logger="obleth.audit")
    token = make_jwt(exp=timezone.now() + dt.timedelta(hours=1))
    api_client.put(f"{API}/settings/slurm", {"jwt": token, "cache_dir": "/c"}, format="json")
    audit = [r.getMessage() for r in caplog.records if r.name == "obleth.audit"]
    assert any("cache_dir" in line and "jwt changed, set=True" in line for line in audit), audit
    assert all(token not in line for line in audit)


def test_a_replica_restart_is_audited(api_client: Any, caplog: Any) -> None:
    caplog.set_level(logging.INFO, logger="obleth.audit")
    replica = Replica.objects.create(
        model_id=uuid.uuid4(), model_name="m", job_name="j", job_id="9"
    )
    api_client.post(f"{API}/replicas/{replica.pk}/restart")
    assert any(
        "admin-token" in r.getMessage() and str(replica.pk) in r.getMessage()
        for r in caplog.records
    )
