"""Personal API tokens: shown once, hashed at rest, expiry, revocation, last used, throttling.

Real database, real throttle rows (obleth.core.limits), real admin pages. Time is moved by
passing ``now`` or editing ``expires_at``, never by sleeping.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connection
from django.test import Client, override_settings
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from obleth.accounts import services
from obleth.accounts.models import ApiToken
from tests.plugins.factories import ADMIN_TOKEN

pytestmark = pytest.mark.django_db

MODELS = "/api/v1/models"


def _user(name: str = "tok-user", role: str | None = "viewer", **extra: Any) -> Any:
    user = get_user_model().objects.create_user(name, password="x", is_staff=True, **extra)
    if role:
        user.groups.add(Group.objects.get(name=role))
    return user


def _bearer(secret: str, address: str = "198.51.100.7") -> APIClient:
    client = APIClient(REMOTE_ADDR=address)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


def _session(user: Any) -> APIClient:
    client = APIClient()
    client.force_login(user)
    return client


def test_created_through_the_api_shown_once_and_hashed_at_rest() -> None:
    user = _user()
    client = _session(user)
    made = client.post("/api/v1/tokens", {"name": "CI", "expires_in_days": 30}, format="json")
    assert made.status_code == 201, made.content
    secret = made.json()["token"]
    assert secret.startswith("obt_") and len(secret) > 50
    row = ApiToken.objects.get(pk=made.json()["id"])
    assert row.user == user
    assert row.token_hash == hashlib.sha256(secret.encode()).hexdigest()
    # Nowhere in the table, in any column: only the hash and the (non-secret) prefix.
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM accounts_apitoken")
        dump = repr(cursor.fetchall())
    assert secret not in dump
    assert secret.split("_", 2)[2] not in dump
    # Never again: not in the list, not in the detail.
    listing = client.get("/api/v1/tokens")
    detail = client.get(f"/api/v1/tokens/{row.pk}")
    assert secret not in listing.content.decode() and secret not in detail.content.decode()
    assert "token" not in detail.json()
    assert dt.timedelta(days=29) < row.expires_at - timezone.now() <= dt.timedelta(days=30)
    # It works, with its owner's role.
    assert _bearer(secret).get(MODELS).status_code == 200
    assert _bearer(secret).post(MODELS, {"name": "x"}, format="json").status_code == 403


def test_bad_creation_requests_are_400s_naming_the_field() -> None:
    client = _session(_user())
    for body, field in (
        ({}, "name"),
        ({"name": "  "}, "name"),
        ({"name": "a\nb"}, "name"),
        ({"name": "x", "expires_in_days": 0}, "expires_in_days"),
        ({"name": "x", "expires_in_days": 10_000}, "expires_in_days"),
        ({"name": "x", "expiry": 3}, "expiry"),
    ):
        answer = client.post("/api/v1/tokens", body, format="json")
        assert answer.status_code == 400, (body, answer.content)
        assert field in answer.json()["fields"], (body, answer.json())
    assert not ApiToken.objects.exists()


def test_a_token_cannot_mint_tokens_nor_the_bootstrap_token() -> None:
    made = services.create_token(_user(), "t")
    assert (
        _bearer(made.secret).post("/api/v1/tokens", {"name": "child"}, format="json").status_code
        == 403
    )
    admin = APIClient()
    admin.credentials(HTTP_AUTHORIZATION=f"Bearer {ADMIN_TOKEN}")
    assert admin.post("/api/v1/tokens", {"name": "x"}, format="json").status_code == 403
    assert ApiToken.objects.count() == 1


def test_expired_tokens_stop_working() -> None:
    made = services.create_token(_user(), "t", expires_in_days=1)
    assert _bearer(made.secret).get(MODELS).status_code == 200
    ApiToken.objects.filter(pk=made.token.pk).update(
        expires_at=timezone.now() - dt.timedelta(seconds=1)
    )
    answer = _bearer(made.secret).get(MODELS)
    assert answer.status_code == 401
    assert made.secret not in answer.content.decode()


def test_revocation_through_the_api_stops_the_token_at_once() -> None:
    user = _user()
    made = services.create_token(user, "t")
    assert _bearer(made.secret).get(MODELS).status_code == 200
    assert _session(user).delete(f"/api/v1/tokens/{made.token.pk}").status_code == 204
    assert _bearer(made.secret).get(MODELS).status_code == 401
    row = ApiToken.objects.get(pk=made.token.pk)
    assert row.revoked_at is not None


def test_users_see_and_revoke_only_their_own_tokens_admins_all() -> None:
    alice, bob = _user("alice"), _user("bob")
    theirs = services.create_token(bob, "bob's")
    mine = services.create_token(alice, "alice's")
    alice_client = _session(alice)
    names = [t["name"] for t in alice_client.get("/api/v1/tokens").json()["results"]]
    assert names == ["alice's"]
    assert alice_client.delete(f"/api/v1/tokens/{theirs.token.pk}").status_code == 404
    assert ApiToken.objects.get(pk=theirs.token.pk).revoked_at is None
    admin = _session(_user("root", "admin"))
    everyone = {t["name"] for t in admin.get("/api/v1/tokens").json()["results"]}
    assert everyone == {"bob's", "alice's"}
    assert admin.delete(f"/api/v1/tokens/{mine.token.pk}").status_code == 204
    assert _bearer(mine.secret).get(MODELS).status_code == 401


def test_a_token_follows_its_owners_role_and_status() -> None:
    user = _user(role="viewer")
    made = services.create_token(user, "t")
    assert _bearer(made.secret).post(f"{MODELS}", {"name": "m"}, format="json").status_code == 403
    user.groups.set([Group.objects.get(name="operator")])
    assert _bearer(made.secret).post(f"{MODELS}", {"name": "m"}, format="json").status_code == 201
    user.is_active = False
    user.save()
    assert _bearer(made.secret).get(MODELS).status_code == 401


def test_last_used_time_and_address_are_recorded() -> None:
    made = services.create_token(_user(), "t")
    assert made.token.last_used_at is None
    before = timezone.now()
    assert _bearer(made.secret, "203.0.113.9").get(MODELS).status_code == 200
    row = ApiToken.objects.get(pk=made.token.pk)
    assert row.last_used_at is not None and row.last_used_at >= before
    assert row.last_used_from == "203.0.113.9"


def test_hostile_bearer_values_are_401s_never_500s() -> None:
    made = services.create_token(_user(), "t")
    prefix = made.token.prefix
    for value in (
        "obt_",
        "obt___",
        f"obt_{prefix}_",
        f"obt_{prefix}_{'A' * 43}",  # right prefix, wrong secret
        f"obt_{prefix}_" + "é" * 43,
        "obt_" + "x" * 10_000,
        made.secret + "\x00",
        made.secret[:-1],
        "obt_$(touch x)_`id`",
    ):
        assert _bearer(value).get(MODELS).status_code == 401, value[:60]


@override_settings(OBLETH_AUTH_MAX_FAILURES=5, OBLETH_AUTH_LOCKOUT_SECS=120)
def test_failed_attempts_are_throttled_per_address_then_429_with_retry_after(
    caplog: Any,
) -> None:
    caplog.set_level(logging.INFO)
    made = services.create_token(_user(), "t")
    wrong = f"obt_{made.token.prefix}_{'B' * 43}"
    codes = [_bearer(wrong, "192.0.2.50").get(MODELS).status_code for _ in range(5)]
    assert codes == [401] * 5
    blocked = _bearer(made.secret, "192.0.2.50").get(MODELS)  # even the right token now
    assert blocked.status_code == 429
    assert 0 < int(blocked["Retry-After"]) <= 120
    admin = _bearer(ADMIN_TOKEN, "192.0.2.50").get(MODELS)  # the bootstrap token too
    assert admin.status_code == 429
    # Another address is not affected ... except that the token itself was attacked: its
    # prefix is locked too, wherever the next attempt comes from.
    assert _bearer(made.secret, "192.0.2.51").get(MODELS).status_code == 429
    other = services.create_token(_user("other"), "t2")
    assert _bearer(other.secret, "192.0.2.51").get(MODELS).status_code == 200
    # Logged without the token, with the address and the reason.
    lines = [r.getMessage() for r in caplog.records if r.name == "obleth.security"]
    assert any("192.0.2.50" in line and "wrong secret" in line for line in lines)
    assert not any(wrong in line or "B" * 43 in line for line in lines)
    assert not any(made.secret in r.getMessage() for r in caplog.records)


@override_settings(OBLETH_AUTH_MAX_FAILURES=3)
def test_wrong_bootstrap_tokens_count_too() -> None:
    for _ in range(3):
        assert _bearer("not-the-admin-token-at-all", "192.0.2.60").get(MODELS).status_code == 401
    assert _bearer(ADMIN_TOKEN, "192.0.2.60").get(MODELS).status_code == 429


def test_the_admin_page_shows_the_token_once_and_revokes() -> None:
    user = _user("page-user", "viewer")
    client = Client()
    client.force_login(user)
    add = client.post(
        reverse("admin:accounts_apitoken_add"), {"name": "laptop", "expires_in_days": "7"}
    )
    assert add.status_code == 200
    assert "no-store" in add["Cache-Control"]
    row = ApiToken.objects.get(user=user)
    body = add.content.decode()
    start = body.index("obt_" + row.prefix)
    secret = body[start : start + len("obt_") + services.PREFIX_LEN + 1 + 43]
    assert row.token_hash == services.hash_token(secret)
    change = client.get(reverse("admin:accounts_apitoken_change", args=[row.pk]))
    listing = client.get(reverse("admin:accounts_apitoken_changelist"))
    assert secret not in change.content.decode() and secret not in listing.content.decode()
    assert _bearer(secret).get(MODELS).status_code == 200
    client.post(
        reverse("admin:accounts_apitoken_changelist"),
        {"action": "revoke_selected", "_selected_action": [str(row.pk)], "index": 0},
    )
    assert ApiToken.objects.get(pk=row.pk).revoked_at is not None
    assert _bearer(secret).get(MODELS).status_code == 401


def test_the_admin_lists_only_your_own_tokens() -> None:
    services.create_token(_user("someone-else"), "not yours")
    mine = _user("me")
    services.create_token(mine, "yours")
    client = Client()
    client.force_login(mine)
    page = client.get(reverse("admin:accounts_apitoken_changelist")).content.decode()
    assert "yours" in page and "not yours" not in page
