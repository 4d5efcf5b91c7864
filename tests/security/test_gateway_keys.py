"""Gateway keys and the closed gateway (issue 7, part 2), on the real database.

Requests go through the gateway service (in this process: tests/plugins/gateway_client.py), the
key table and obleth.core.limits; nothing is mocked. No upstream is needed: the answers checked
here are decided before a request is forwarded (a model allowed for a key but with no endpoint
answers 503, which proves it passed authentication). ``check --deploy`` runs as a real
``manage.py`` subprocess. Keys in the query string, throttling and hostile headers:
test_gateway_key_abuse.py.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import subprocess
import sys
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from obleth.core.models import AuthFailureWindow
from obleth.gateway import keys
from obleth.gateway.models import GatewayKey
from tests.plugins.factories import make_model
from tests.plugins.gateway_client import GatewayClient
from tests.security.gateway_keys_support import (
    ROOT,
    bearer,
    chat,
    closed_gateway,  # noqa: F401  (the fixture, by name)
    error_of,
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("closed_gateway")]


def test_gateway_is_closed_by_default_with_a_how_to(gateway: GatewayClient) -> None:
    make_model(name="m")
    for response in (
        gateway.get("/v1/models"),
        gateway.get("/v1/models/m"),
        chat(gateway, "m"),
        chat(gateway, "m", **bearer("obk_whatever")),
    ):
        assert response.status_code == 401
        error = error_of(response)
        assert error["code"] == "no_gateway_keys"
        for how in ("/admin/gateway/gatewaykey/add/", "POST /api/v1/gateway-keys"):
            assert how in error["message"]
        assert "manage.py create_gateway_key --name NAME" in error["message"]
        assert response["WWW-Authenticate"].startswith("Bearer")


def test_the_shipped_default_is_closed() -> None:
    """The setting itself, read from a fresh interpreter without OBLETH_GATEWAY_OPEN."""
    env = {k: v for k, v in os.environ.items() if k != "OBLETH_GATEWAY_OPEN"}
    env["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    out = subprocess.run(
        [sys.executable, "-c", "from tests import settings; print(settings.OBLETH_GATEWAY_OPEN)"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "False"


def test_only_revoked_or_expired_keys_leave_it_closed(gateway: GatewayClient) -> None:
    revoked = keys.create_key("old")
    keys.revoke_key(revoked.key)
    expired = keys.create_key("short", expires_at=timezone.now() + dt.timedelta(hours=1))
    GatewayKey.objects.filter(pk=expired.key.pk).update(
        expires_at=timezone.now() - dt.timedelta(seconds=1)
    )
    keys.invalidate_keys()
    response = gateway.get("/v1/models", **bearer(expired.secret))
    assert response.status_code == 401
    assert error_of(response)["code"] == "no_gateway_keys"


def test_static_keys_still_work(gateway: GatewayClient, settings: Any) -> None:
    settings.OBLETH_GATEWAY_API_KEYS = ["static-key-0123456789"]
    make_model(name="m")
    assert gateway.get("/v1/models").status_code == 401
    ok = gateway.get("/v1/models", **bearer("static-key-0123456789"))
    assert ok.status_code == 200
    assert [m["id"] for m in ok.json()["data"]] == ["m"]


def test_open_mode_lets_requests_in_without_a_key(gateway: GatewayClient, settings: Any) -> None:
    settings.OBLETH_GATEWAY_OPEN = True
    make_model(name="m")
    assert gateway.get("/v1/models").status_code == 200
    assert chat(gateway, "m").status_code == 503  # passed auth; no endpoint behind it


def test_open_mode_banner_on_every_admin_page(admin_client: Client, settings: Any) -> None:
    pages = ["/admin/", "/admin/gateway/gatewaykey/", "/admin/core/model/"]
    for page in pages:
        response = admin_client.get(page)
        assert response.status_code == 200
        assert b"gateway-open-banner" not in response.content
    settings.OBLETH_GATEWAY_OPEN = True
    for page in pages:
        body = admin_client.get(page).content.decode()
        assert 'id="gateway-open-banner"' in body, page
        assert "OBLETH_GATEWAY_OPEN=1" in body
    assert b"gateway-open-banner" in Client().get("/admin/login/").content


def _check_deploy(open_value: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OBLETH_GATEWAY")}
    env["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    if open_value is not None:
        env["OBLETH_GATEWAY_OPEN"] = open_value
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_reports_an_open_gateway() -> None:
    opened = _check_deploy("1")
    text = opened.stdout + opened.stderr
    assert "obleth.gateway.W001" in text, text
    assert "OBLETH_GATEWAY_OPEN=1" in text
    closed = _check_deploy(None)
    assert "obleth.gateway.W001" not in closed.stdout + closed.stderr


def _row_text(key_id: Any) -> str:
    with connection.cursor() as cur:
        cur.execute("SELECT row_to_json(k)::text FROM gateway_gatewaykey k WHERE id = %s", [key_id])
        return str(cur.fetchone()[0])


def test_api_shows_the_secret_once_and_stores_only_its_digest(api_client: Any) -> None:
    make_model(name="m")
    created = api_client.post(
        "/api/v1/gateway-keys", {"name": "team-a", "models": ["m"]}, format="json"
    )
    assert created.status_code == 201, created.content
    assert created["Cache-Control"] == "no-store"
    body = created.json()
    secret = body["secret"]
    assert secret.startswith("obk_") and len(secret) == 47
    assert body["prefix"] == secret[:12] and body["models"] == ["m"]
    row = _row_text(body["id"])
    assert secret not in row and secret[12:] not in row
    assert hashlib.sha256(secret.encode()).hexdigest() in row
    listed = api_client.get("/api/v1/gateway-keys")
    one = api_client.get(f"/api/v1/gateway-keys/{body['id']}")
    for answer in (listed, one):
        assert answer.status_code == 200
        assert secret not in answer.content.decode()
        assert b'"secret"' not in answer.content and b"digest" not in answer.content
    assert one.json()["status"] == "active"


def test_admin_shows_the_secret_once(admin_client: Client, gateway: GatewayClient) -> None:
    model = make_model(name="m")
    response = admin_client.post(
        "/admin/gateway/gatewaykey/add/",
        {"name": "from-admin", "allowed_models": [str(model.pk)], "expires_at_0": ""},
    )
    assert response.status_code == 200, response.content[:2000]
    assert "no-store" in response["Cache-Control"]
    key = GatewayKey.objects.get(name="from-admin")
    body = response.content.decode()
    secret = body.split('id="gateway-key-secret" readonly size="60" value="')[1].split('"')[0]
    assert keys.digest_of(secret) == key.digest and secret not in _row_text(key.pk)
    assert key.created_by == "admin"
    assert [m.name for m in key.allowed_models.all()] == ["m"]
    for page in ("/admin/gateway/gatewaykey/", f"/admin/gateway/gatewaykey/{key.pk}/change/"):
        shown = admin_client.get(page).content.decode()
        assert secret not in shown and key.digest not in shown
        assert key.prefix in shown
    assert gateway.get("/v1/models", **bearer(secret)).status_code == 200


def test_command_prints_the_secret_once(settings: Any) -> None:
    make_model(name="a")
    make_model(name="b")
    out = StringIO()
    call_command(
        "create_gateway_key", "--name", "cli", "--models", "a,b", "--expires-days", "3", stdout=out
    )
    key = GatewayKey.objects.get(name="cli")
    secret = next(w for w in out.getvalue().split() if w.startswith("obk_") and len(w) == 47)
    assert keys.digest_of(secret) == key.digest and secret not in _row_text(key.pk)
    assert sorted(m.name for m in key.allowed_models.all()) == ["a", "b"]
    assert key.expires_at is not None
    assert dt.timedelta(days=2.9) < key.expires_at - timezone.now() < dt.timedelta(days=3.1)
    quiet = StringIO()
    call_command("create_gateway_key", "--name", "q", "--quiet", stdout=quiet)
    assert keys.SECRET_RE.fullmatch(quiet.getvalue().strip())


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--name", "x", "--models", "nope,also-nope"], "'nope', 'also-nope'"),
        (["--name", "x", "--expires-days", "0"], "--expires-days"),
        (["--name", "bad\nname"], "control character"),
        (["--name", "   "], "Give the key a name"),
    ],
)
def test_command_refuses_bad_arguments(args: list[str], fragment: str) -> None:
    with pytest.raises(CommandError, match=fragment.replace("-", r"\-")):
        call_command("create_gateway_key", *args, stdout=StringIO())
    assert not GatewayKey.objects.exists()


def test_command_secret_env_registers_once(monkeypatch: Any) -> None:
    secret = keys.new_secret()
    monkeypatch.setenv("DEMO_KEY", secret)
    for _ in range(3):
        call_command("create_gateway_key", "--name", "demo", "--secret-env", "DEMO_KEY")
    (key,) = GatewayKey.objects.all()
    assert key.digest == keys.digest_of(secret)
    monkeypatch.setenv("DEMO_KEY", "too-short")
    with pytest.raises(CommandError, match="43 URL-safe"):
        call_command("create_gateway_key", "--name", "demo", "--secret-env", "DEMO_KEY")


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"name": "x", "secret": "obk_mine"}, "secret"),
        ({"name": "x", "prefix": "obk_AAAAAAAA"}, "prefix"),
        ({"name": "x", "model": ["m"]}, "model"),
        ({"name": "line\r\nbreak"}, "name"),
        ({"name": "nul\x00"}, "name"),
        ({"name": "x" * 201}, "name"),
        ({"name": "x", "models": ["no-such-model"]}, "models"),
        ({"name": "x", "expires_at": "2001-01-01T00:00:00Z"}, "expires_at"),
    ],
)
def test_api_refuses_bad_input_naming_the_field(
    api_client: Any, payload: dict[str, Any], field: str
) -> None:
    make_model(name="m")
    response = api_client.post("/api/v1/gateway-keys", payload, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["fields"]
    assert not GatewayKey.objects.exists()


def test_api_needs_an_operator(anon_client: Any) -> None:
    assert anon_client.get("/api/v1/gateway-keys").status_code in (401, 403)
    assert anon_client.post("/api/v1/gateway-keys", {"name": "x"}, format="json").status_code in (
        401,
        403,
    )
    assert not GatewayKey.objects.exists()


def test_allowed_models_limit_listing_and_calls(gateway: GatewayClient) -> None:
    make_model(name="a")
    make_model(name="b")
    limited = keys.create_key("limited", models=keys.resolve_models(["a"]))
    everything = keys.create_key("all")
    listed = gateway.get("/v1/models", **bearer(limited.secret)).json()
    assert [m["id"] for m in listed["data"]] == ["a"]
    full = gateway.get("/v1/models", **bearer(everything.secret)).json()
    assert [m["id"] for m in full["data"]] == ["a", "b"]
    assert gateway.get("/v1/models/a", **bearer(limited.secret)).status_code == 200
    for name in ("b", "no-such-model"):  # the same answer: a key learns nothing of other models
        for response in (
            gateway.get(f"/v1/models/{name}", **bearer(limited.secret)),
            chat(gateway, name, **bearer(limited.secret)),
        ):
            assert response.status_code == 403
            error = error_of(response)
            assert error["code"] == "model_not_allowed" and error["param"] == "model"
    assert chat(gateway, "a", **bearer(limited.secret)).status_code == 503  # allowed, no endpoint
    assert chat(gateway, "b", **bearer(everything.secret)).status_code == 503


def test_deleting_a_keys_only_model_never_widens_it(
    gateway: GatewayClient, api_client: Any
) -> None:
    only = make_model(name="only")
    make_model(name="other")
    limited = keys.create_key("limited", models=[only])
    only.delete()
    assert gateway.get("/v1/models", **bearer(limited.secret)).json()["data"] == []
    assert gateway.get("/v1/models/other", **bearer(limited.secret)).status_code == 403
    shown = api_client.get(f"/api/v1/gateway-keys/{limited.key.pk}").json()
    assert shown["models"] == [] and shown["models_limited"] is True
    # clearing the list on purpose (PATCH models: []) is what opens a key to every model
    api_client.patch(f"/api/v1/gateway-keys/{limited.key.pk}", {"models": []}, format="json")
    assert gateway.get("/v1/models/other", **bearer(limited.secret)).status_code == 200


def test_admin_edit_of_models_limits_the_key(admin_client: Client, gateway: GatewayClient) -> None:
    a = make_model(name="model-alpha")
    make_model(name="model-beta")
    created = keys.create_key("k")
    response = admin_client.post(
        f"/admin/gateway/gatewaykey/{created.key.pk}/change/",
        {"name": "k", "allowed_models": [str(a.pk)], "expires_at_0": "", "expires_at_1": ""},
    )
    assert response.status_code == 302, response.content[:3000]
    assert gateway.get("/v1/models/model-beta", **bearer(created.secret)).status_code == 403
    assert gateway.get("/v1/models/model-alpha", **bearer(created.secret)).status_code == 200
    assert GatewayKey.objects.get().models_limited is True
    listing = admin_client.get("/admin/gateway/gatewaykey/").content.decode()
    assert '<td class="field-models_shown">model-alpha</td>' in listing


def test_changing_a_keys_models_takes_effect_at_once(
    api_client: Any, gateway: GatewayClient
) -> None:
    make_model(name="a")
    make_model(name="b")
    created = api_client.post("/api/v1/gateway-keys", {"name": "k", "models": ["a"]}, format="json")
    secret, key_id = created.json()["secret"], created.json()["id"]
    assert gateway.get("/v1/models/b", **bearer(secret)).status_code == 403
    patched = api_client.patch(
        f"/api/v1/gateway-keys/{key_id}", {"models": ["a", "b"]}, format="json"
    )
    assert patched.status_code == 200 and patched.json()["models"] == ["a", "b"]
    assert gateway.get("/v1/models/b", **bearer(secret)).status_code == 200


def test_expired_key_is_refused(gateway: GatewayClient) -> None:
    keys.create_key("keeps-it-open")
    created = keys.create_key("soon", expires_at=timezone.now() + dt.timedelta(hours=1))
    assert gateway.get("/v1/models", **bearer(created.secret)).status_code == 200
    created.key.expires_at = timezone.now() - dt.timedelta(seconds=1)
    created.key.save()
    response = gateway.get("/v1/models", **bearer(created.secret))
    assert response.status_code == 401
    error = error_of(response)
    assert error["code"] == "expired_api_key" and created.key.prefix in error["message"]


def test_revoked_key_is_refused_at_once(api_client: Any, gateway: GatewayClient) -> None:
    keys.create_key("keeps-it-open")
    created = api_client.post("/api/v1/gateway-keys", {"name": "k"}, format="json").json()
    assert gateway.get("/v1/models", **bearer(created["secret"])).status_code == 200
    revoked = api_client.post(f"/api/v1/gateway-keys/{created['id']}/revoke")
    assert revoked.status_code == 200 and revoked.json()["status"] == "revoked"
    response = gateway.get("/v1/models", **bearer(created["secret"]))
    assert response.status_code == 401
    assert error_of(response)["code"] == "revoked_api_key"
    # a revoked key is a known key, not a guess: it does not count towards a lockout
    assert not AuthFailureWindow.objects.filter(scope=keys.SCOPE).exists()


def test_admin_action_revokes(admin_client: Client, gateway: GatewayClient) -> None:
    keys.create_key("keeps-it-open")
    created = keys.create_key("victim")
    response = admin_client.post(
        "/admin/gateway/gatewaykey/",
        {"action": "revoke_selected", "_selected_action": [str(created.key.pk)]},
        follow=True,
    )
    assert b"Revoked 1 gateway key" in response.content
    assert gateway.get("/v1/models", **bearer(created.secret)).status_code == 401


def test_other_processes_see_a_revocation_within_the_cache_time(
    gateway: GatewayClient, settings: Any
) -> None:
    """Another web process revoking a key is a database write with no signal in this one."""
    settings.OBLETH_GATEWAY_KEY_CACHE_MS = 60_000
    keys.create_key("keeps-it-open")
    created = keys.create_key("k")
    assert gateway.get("/v1/models", **bearer(created.secret)).status_code == 200
    GatewayKey.objects.filter(pk=created.key.pk).update(revoked_at=timezone.now())
    assert gateway.get("/v1/models", **bearer(created.secret)).status_code == 200  # cached
    settings.OBLETH_GATEWAY_KEY_CACHE_MS = 0
    assert gateway.get("/v1/models", **bearer(created.secret)).status_code == 401


def test_last_used_is_written_at_most_once_a_minute(
    gateway: GatewayClient, monkeypatch: Any
) -> None:
    make_model(name="m")
    created = keys.create_key("k")
    assert GatewayKey.objects.get().last_used_at is None
    assert gateway.get("/v1/models", **bearer(created.secret)).status_code == 200
    first = GatewayKey.objects.get().last_used_at
    assert first is not None and timezone.now() - first < dt.timedelta(seconds=30)
    with CaptureQueriesContext(connection) as queries:  # steady state: key table cached
        for _ in range(5):
            assert gateway.get("/v1/models", **bearer(created.secret)).status_code == 200
    gateway_queries = [q["sql"] for q in queries.captured_queries if "gateway" in q["sql"]]
    assert gateway_queries == []
    assert GatewayKey.objects.get().last_used_at == first
    monkeypatch.setattr(keys, "TOUCH_EVERY_SECS", 0.0)  # a minute later
    assert gateway.get("/v1/models", **bearer(created.secret)).status_code == 200
    assert GatewayKey.objects.get().last_used_at > first


def test_a_valid_key_costs_no_query_in_steady_state(gateway: GatewayClient) -> None:
    make_model(name="m")
    created = keys.create_key("k")
    gateway.get("/v1/models", **bearer(created.secret))  # builds the tables, writes last use
    gateway.auto_reload = False  # the routing table stays loaded, as in a gateway process
    with CaptureQueriesContext(connection) as queries:
        for _ in range(20):
            assert gateway.get("/v1/models", **bearer(created.secret)).status_code == 200
    assert queries.captured_queries == []


def test_api_put_and_delete(api_client: Any, gateway: GatewayClient) -> None:
    make_model(name="a")
    keys.create_key("keeps-it-open")
    created = api_client.post("/api/v1/gateway-keys", {"name": "k"}, format="json").json()
    url = f"/api/v1/gateway-keys/{created['id']}"
    put = api_client.put(url, {"name": "renamed", "models": ["a"]}, format="json")
    assert put.status_code == 200 and put.json()["name"] == "renamed"
    assert gateway.get("/v1/models", **bearer(created["secret"])).json()["data"][0]["id"] == "a"
    assert api_client.patch(url, {"name": "x\ny"}, format="json").status_code == 400
    assert api_client.delete(url).status_code == 204
    assert gateway.get("/v1/models", **bearer(created["secret"])).status_code == 401
    assert api_client.get("/api/v1/gateway-keys/not-a-uuid").status_code == 404


def test_admin_add_form_renders_and_refuses_bad_names(admin_client: Client) -> None:
    assert admin_client.get("/admin/gateway/gatewaykey/add/").status_code == 200
    past = (timezone.now() - dt.timedelta(days=1)).strftime("%Y-%m-%d")
    for data, message in (
        ({"name": "two\nlines"}, "control character"),
        ({"name": "ok", "expires_at_0": past, "expires_at_1": "00:00:00"}, "in the past"),
    ):
        response = admin_client.post("/admin/gateway/gatewaykey/add/", data)
        assert response.status_code == 200
        assert message in response.content.decode()
    assert not GatewayKey.objects.exists()


def test_a_view_only_staff_user_cannot_revoke(client: Client) -> None:
    from django.contrib.auth.models import Permission, User

    viewer = User.objects.create_user("viewer", password="pw-viewer-123", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_gatewaykey"))
    keys.create_key("keeps-it-open")
    created = keys.create_key("victim")
    client.force_login(viewer)
    assert client.get("/admin/gateway/gatewaykey/").status_code == 200
    client.post(
        "/admin/gateway/gatewaykey/",
        {"action": "revoke_selected", "_selected_action": [str(created.key.pk)]},
    )
    assert GatewayKey.objects.get(pk=created.key.pk).revoked_at is None
    assert client.get("/admin/gateway/gatewaykey/add/").status_code == 403
