"""The audit log: every person's write through the API or the admin, who and what, before and
after, secrets masked; actions recorded; the provisioner's own writes not recorded.

Real database, real API and admin views; nothing faked.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connection
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from obleth.accounts import services
from obleth.accounts.models import AuditEntry
from obleth.core.models import Endpoint, ManagedSpec, Recipe, Replica, SlurmSettings
from tests.api.conftest import make_jwt
from tests.api.test_launches_recipes_alerts import GOOD_RECIPE
from tests.plugins.factories import ADMIN_TOKEN, make_endpoint, make_model, make_slurm_model

pytestmark = pytest.mark.django_db

API = "/api/v1"
HF = "hf_AUDITHFTOKENabcdefghijklmnop"
KEY = "sk-AUDITAPIKEY-0123456789abcdef"


def _user(name: str, role: str) -> Any:
    user = get_user_model().objects.create_user(name, password="x", is_staff=True)
    user.groups.add(Group.objects.get(name=role))
    return user


def _api(user: Any) -> APIClient:
    client = APIClient(REMOTE_ADDR="198.51.100.20")
    client.force_login(user)
    return client


def _audit_dump() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM accounts_auditentry")
        return repr(cursor.fetchall())


def test_slurm_settings_change_is_recorded_with_secrets_masked() -> None:
    admin = _user("alice", "admin")
    SlurmSettings.load()  # the singleton exists (a first write would also log its creation)
    jwt = make_jwt(exp=timezone.now() + dt.timedelta(hours=1), marker="AUDITJWTMARK")
    answer = _api(admin).patch(
        f"{API}/settings/slurm",
        {"jwt": jwt, "hf_token": HF, "cache_dir": "/scratch/cache"},
        format="json",
    )
    assert answer.status_code == 200, answer.content
    entry = AuditEntry.objects.get(model="slurmsettings")
    assert (entry.actor, entry.actor_name, entry.via) == (admin, "alice", "api")
    assert entry.client_address == "198.51.100.20"
    assert entry.action == "update"
    assert {"jwt", "hf_token", "cache_dir"} <= set(entry.changed_fields)
    assert entry.after["cache_dir"] == "/scratch/cache"
    assert entry.after["jwt"] == {"set": True, "changed": True}
    assert entry.after["hf_token"] == {"set": True, "changed": True}
    dump = _audit_dump()
    for secret in (jwt, HF, jwt[-4:], HF[-4:], "AUDITJWTMARK"):
        assert secret not in dump
    # A second change that keeps the secrets says so, still without them.
    _api(admin).patch(f"{API}/settings/slurm", {"cache_dir": "/scratch/c2"}, format="json")
    second = AuditEntry.objects.filter(model="slurmsettings").order_by("-id").first()
    assert second is not None and second.action == "update"
    assert second.changed_fields == ["cache_dir"]
    assert second.before["cache_dir"] == "/scratch/cache"
    assert second.before["jwt"] == {"set": True, "changed": False}


def test_endpoint_api_key_never_reaches_the_log() -> None:
    admin = _user("bob", "admin")
    model = make_model(name="static-aud")
    created = _api(admin).post(
        f"{API}/models/{model.pk}/endpoints",
        {"name": "ep", "api_base": "http://127.0.0.1:8000/v1", "api_key": KEY},
        format="json",
    )
    assert created.status_code == 201
    entry = AuditEntry.objects.get(model="endpoint", action="create")
    assert entry.after["api_key"] == {"set": True}
    assert entry.after["api_base"] == "http://127.0.0.1:8000/v1"
    assert entry.before is None
    assert KEY not in _audit_dump() and KEY[-4:] not in _audit_dump()
    # The log is readable through the API, and still masked there.
    listing = _api(admin).get(f"{API}/audit", {"model": "endpoint"})
    assert listing.status_code == 200
    assert KEY not in listing.content.decode()
    assert [e["action"] for e in listing.json()["results"]] == ["create"]


def test_a_delete_keeps_the_before_and_names_the_object() -> None:
    admin = _user("carol", "admin")
    recipe = Recipe.objects.create(name="to-delete", body=GOOD_RECIPE)
    assert _api(admin).delete(f"{API}/recipes/{recipe.pk}").status_code == 204
    entry = AuditEntry.objects.get(model="recipe", action="delete")
    assert entry.object_id == str(recipe.pk)
    assert entry.object_repr == "to-delete"
    assert entry.before["name"] == "to-delete" and entry.after is None


def test_actions_are_recorded_restart_clear_lost_dismiss() -> None:
    operator = _user("dave", "operator")
    slurm = make_slurm_model(name="slurm-act")
    replica = Replica.objects.create(model_id=slurm.pk, model_name=slurm.name, job_name="j")
    Replica.objects.create(model_id=slurm.pk, model_name=slurm.name, job_name="j2", state="lost")
    ManagedSpec.objects.filter(model=slurm).update(last_provision_error="refused")
    client = _api(operator)
    assert client.post(f"{API}/replicas/{replica.pk}/restart").status_code == 200
    assert client.post(f"{API}/models/{slurm.pk}/replicas/clear-lost").status_code == 200
    dismissed = client.patch(
        f"{API}/models/{slurm.pk}/managed/provision-error", {"error": None}, format="json"
    )
    assert dismissed.status_code == 200
    actions = {e.action: e for e in AuditEntry.objects.filter(actor_name="dave")}
    assert actions["restart_replica"].object_id == str(replica.pk)
    assert actions["clear_lost"].object_id == str(slurm.pk)
    assert "cleared 1" in actions["clear_lost"].detail
    assert actions["dismiss_error"].object_id == str(slurm.pk)
    # The replica row's own change (cancel_requested) is the provisioner's table: not logged
    # as a generic update, only as the action.
    assert not AuditEntry.objects.filter(model="replica", action="update").exists()


def test_admin_writes_and_actions_are_recorded_as_admin() -> None:
    user = _user("erin", "admin")
    client = Client()
    client.force_login(user)
    recipe = Recipe.objects.create(name="adm", body=GOOD_RECIPE)
    url = reverse("admin:core_recipe_change", args=[recipe.pk])
    saved = client.post(url, {"name": "adm-2", "author": "erin", "body": GOOD_RECIPE})
    assert saved.status_code == 302
    entry = AuditEntry.objects.get(model="recipe")
    assert (entry.actor_name, entry.via, entry.action) == ("erin", "admin", "update")
    assert entry.before["name"] == "adm" and entry.after["name"] == "adm-2"
    assert {"author", "name"} <= set(entry.changed_fields)
    slurm = make_slurm_model(name="slurm-adm-act")
    replica = Replica.objects.create(model_id=slurm.pk, model_name=slurm.name, job_name="j")
    client.post(
        reverse("admin:core_replica_changelist"),
        {"action": "restart_selected", "_selected_action": [str(replica.pk)], "index": 0},
    )
    restart = AuditEntry.objects.get(action="restart_replica")
    assert (restart.via, restart.object_id) == ("admin", str(replica.pk))


def test_role_changes_are_recorded() -> None:
    admin = _user("frank", "admin")
    target = get_user_model().objects.create_user("newbie", password="x", is_staff=True)
    client = Client()
    client.force_login(admin)
    form = {
        "username": "newbie",
        "is_active": "on",
        "is_staff": "on",
        "groups": [str(Group.objects.get(name="operator").pk)],
        "last_login_0": "",
        "last_login_1": "",
        "date_joined_0": "2026-01-01",
        "date_joined_1": "00:00:00",
    }
    answer = client.post(reverse("admin:auth_user_change", args=[target.pk]), form)
    assert answer.status_code == 302, answer.content[:3000]
    entries = AuditEntry.objects.filter(model="user", object_id=str(target.pk))
    assert any("groups: added operator" in e.detail for e in entries)
    assert "pbkdf2" not in _audit_dump()  # the password hash is masked like any secret


def test_token_creation_and_revocation_are_recorded_without_the_token() -> None:
    user = _user("gina", "viewer")
    client = _api(user)
    made = client.post(f"{API}/tokens", {"name": "ci"}, format="json").json()
    assert client.delete(f"{API}/tokens/{made['id']}").status_code == 204
    entries = AuditEntry.objects.filter(model="apitoken").order_by("id")
    assert [e.action for e in entries] == ["create", "update"]
    assert entries[0].after["token_hash"] == {"set": True}
    assert entries[1].changed_fields == ["revoked_at"]
    dump = _audit_dump()
    assert made["token"] not in dump
    assert services.hash_token(made["token"]) not in dump


def test_a_personal_token_write_names_the_token() -> None:
    user = _user("hank", "operator")
    made = services.create_token(user, "deploy-bot")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {made.secret}")
    assert client.post(f"{API}/models", {"name": "from-token"}, format="json").status_code == 201
    entry = AuditEntry.objects.get(model="model", action="create")
    assert (entry.actor_name, entry.via, entry.token_prefix) == ("hank", "token", made.token.prefix)
    assert entry.after["name"] == "from-token"


def test_the_bootstrap_token_is_named_admin_token() -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {ADMIN_TOKEN}")
    assert client.post(f"{API}/models", {"name": "boot"}, format="json").status_code == 201
    entry = AuditEntry.objects.get(model="model")
    assert entry.actor is None and entry.actor_name == "admin-token"


def test_provisioner_writes_and_reads_are_not_recorded() -> None:
    """No request context (the provisioner, Celery, commands) and GETs: no entries."""
    slurm = make_slurm_model(name="slurm-prov")
    replica = Replica.objects.create(model_id=slurm.pk, model_name=slurm.name, job_name="j")
    replica.state = "healthy"
    replica.save()
    endpoint = make_endpoint(slurm, api_key=KEY)
    endpoint.health_status = "ok"
    endpoint.save()
    SlurmSettings.load()
    viewer = _api(_user("ivan", "viewer"))
    assert viewer.get(f"{API}/settings/slurm").status_code == 200  # creates the row: a read
    assert viewer.get(f"{API}/models").status_code == 200
    assert not AuditEntry.objects.exists()
    # A refused write leaves no entry either.
    assert viewer.post(f"{API}/models", {"name": "nope"}, format="json").status_code == 403
    assert not AuditEntry.objects.exists()
    assert Endpoint.objects.filter(pk=endpoint.pk).exists()


def test_the_audit_api_filters_and_needs_the_view_permission() -> None:
    admin = _user("judy", "admin")
    SlurmSettings.load()
    client = _api(admin)
    for name in ("m1", "m2"):
        client.post(f"{API}/models", {"name": name}, format="json")
    Recipe.objects.create(name="r", body=GOOD_RECIPE)
    client.patch(f"{API}/settings/slurm", {"cache_dir": "/x"}, format="json")
    everything = client.get(f"{API}/audit").json()
    assert everything["count"] == 3
    by_model = client.get(f"{API}/audit", {"model": "model"}).json()["results"]
    assert {e["object_repr"] for e in by_model} == {"m1", "m2"}
    first = AuditEntry.objects.filter(model="model").order_by("id").first()
    assert first is not None
    by_object = client.get(f"{API}/audit", {"object_id": first.object_id}).json()["results"]
    assert [e["id"] for e in by_object] == [first.pk]
    assert client.get(f"{API}/audit", {"actor": "nobody"}).json()["count"] == 0
    future = (timezone.now() + dt.timedelta(hours=1)).isoformat()
    assert client.get(f"{API}/audit", {"since": future}).json()["count"] == 0
    assert client.get(f"{API}/audit", {"since": "not-a-date"}).status_code == 400
    assert _api(_user("kim", "viewer")).get(f"{API}/audit").status_code == 200
    plain = get_user_model().objects.create_user("plain", password="x", is_staff=True)
    assert _api(plain).get(f"{API}/audit").status_code == 403
    # Read-only: no writes through the API, none in the admin.
    assert client.post(f"{API}/audit", {}, format="json").status_code == 405
    page = Client()
    page.force_login(admin)
    entry = AuditEntry.objects.first()
    assert entry is not None
    change = page.get(reverse("admin:accounts_auditentry_change", args=[entry.pk]))
    assert change.status_code == 200
    assert b'name="action"' not in change.content  # shown, not editable
    assert (
        page.post(reverse("admin:accounts_auditentry_delete", args=[entry.pk])).status_code == 403
    )
    json.dumps(everything)  # the answer is plain JSON
