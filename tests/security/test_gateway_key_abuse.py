"""Gateway keys under attack: keys in the query string, guessing (throttling), hostile headers
and query strings, and the key cache under concurrent rebuilds. Real database, the gateway
service (in this process: tests/plugins/gateway_client.py) and obleth.core.limits; only the slow
database of the cache test is faked (said there).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
import time
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from obleth.core import limits
from obleth.core.models import AuthFailureWindow
from obleth.gateway import keys
from tests.plugins.gateway_client import GatewayClient
from tests.security.gateway_keys_support import (
    CHAT,
    all_log_text,
    bearer,
    chat,
    closed_gateway,  # noqa: F401  (the fixture, by name)
    error_of,
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("closed_gateway")]


@pytest.mark.parametrize("param", ["api_key", "API_KEY", "key", "access_token"])
def test_key_in_query_string_is_refused_and_never_logged(
    gateway: GatewayClient, caplog: pytest.LogCaptureFixture, param: str
) -> None:
    created = keys.create_key("k")
    caplog.set_level(logging.DEBUG)
    for response in (
        gateway.get(f"/v1/models?{param}={created.secret}"),
        gateway.get(f"/v1/models?{param}={created.secret}", **bearer(created.secret)),
        gateway.post(
            f"/v1/chat/completions?{param}={created.secret}",
            data=json.dumps({"model": "m", **CHAT}),
            content_type="application/json",
        ),
    ):
        assert response.status_code == 400
        error = error_of(response)
        assert error["code"] == "api_key_in_query"
        assert "Authorization: Bearer" in error["message"]
        assert created.secret not in response.content.decode()
    text = all_log_text(caplog)
    assert "query string" in text
    assert created.secret not in text and created.secret[4:20] not in text


def test_bad_keys_are_throttled_then_the_right_key_waits_for_the_lockout(
    gateway: GatewayClient, caplog: pytest.LogCaptureFixture
) -> None:
    limits.reset(keys.SCOPE)
    created = keys.create_key("k")
    caplog.set_level(logging.INFO)
    bad = ["obk_wrong-guess-1", "obk_wrong-guess-2", "obk_wrong-guess-3"]
    first = gateway.get("/v1/models", **bearer(bad[0]))
    second = gateway.get("/v1/models", **bearer(bad[1]))
    assert first.status_code == second.status_code == 401
    assert error_of(first)["code"] == "invalid_api_key"
    third = gateway.get("/v1/models", **bearer(bad[2]))
    assert third.status_code == 429
    assert 0 < int(third["Retry-After"]) <= 120
    error = error_of(third)
    assert error["type"] == "rate_limit_error" and error["code"] == "too_many_failed_keys"
    right = gateway.get("/v1/models", **bearer(created.secret))
    assert right.status_code == 429 and 0 < int(right["Retry-After"]) <= 120
    # another process (empty cache) reads the lockout from the database
    keys.invalidate_keys()
    assert gateway.get("/v1/models", **bearer(created.secret)).status_code == 429
    # another address is not blocked
    other = gateway.get("/v1/models", REMOTE_ADDR="192.0.2.55", **bearer(created.secret))
    assert other.status_code == 200
    text = all_log_text(caplog)
    assert "unknown key from 127.0.0.1" in text and "locked out" in text
    for guess in bad:
        assert guess not in text
    assert created.secret not in text
    # the lockout ends
    AuthFailureWindow.objects.filter(scope=keys.SCOPE).update(
        blocked_until=timezone.now() - dt.timedelta(seconds=1)
    )
    keys.invalidate_keys()
    assert gateway.get("/v1/models", **bearer(created.secret)).status_code == 200


def test_behind_a_trusted_proxy_each_client_has_its_own_lockout(
    gateway: GatewayClient, settings: Any
) -> None:
    """The address is the one the outermost trusted proxy saw (OBLETH_TRUSTED_PROXY_COUNT), as
    for the admin login: one client's guesses never lock out the others behind the proxy."""
    settings.OBLETH_TRUSTED_PROXY_COUNT = 1
    limits.reset(keys.SCOPE)
    created = keys.create_key("k")

    def via_proxy(forwarded_for: str, secret: str) -> Any:
        return gateway.get(
            "/v1/models",
            REMOTE_ADDR="10.0.0.5",
            HTTP_X_FORWARDED_FOR=forwarded_for,
            **bearer(secret),
        )

    for n in range(3):
        via_proxy("198.51.100.66", f"obk_wrong-guess-{n}")
    assert via_proxy("198.51.100.66", created.secret).status_code == 429
    assert via_proxy("198.51.100.67", created.secret).status_code == 200
    # the blocked one cannot dodge it by claiming another address further left
    assert via_proxy("192.0.2.1, 198.51.100.66", created.secret).status_code == 429
    assert AuthFailureWindow.objects.filter(scope=keys.SCOPE, key="ip:198.51.100.66").exists()


def test_a_right_key_resets_the_count(gateway: GatewayClient) -> None:
    limits.reset(keys.SCOPE)
    created = keys.create_key("k")
    for _ in range(2):
        assert gateway.get("/v1/models", **bearer("obk_typo")).status_code == 401
    assert gateway.get("/v1/models", **bearer(created.secret)).status_code == 200
    for _ in range(2):
        assert gateway.get("/v1/models", **bearer("obk_typo")).status_code == 401
    assert gateway.get("/v1/models", **bearer(created.secret)).status_code == 200


HOSTILE = [
    "Bearer \x00",
    "Bearer obk_\x00abc",
    "\x00",
    "Bearer obk_abc\r\nX-Injected: 1",
    "Bearer \r\n",
    "Bearer " + "A" * 1_000_000,
    "Bearer ключ-доступа",
    "Bearer 🔑🔑🔑",
    "Bearer \udcff\udcfe",
    "Bearer",
    "Bearer      ",
    "Basic dXNlcjpwYXNz",
    "bearer obk_x extra words",
    "   ",
]


@pytest.mark.parametrize("value", HOSTILE, ids=[repr(v)[:30] for v in HOSTILE])
def test_hostile_authorization_headers_never_500(
    gateway: GatewayClient, value: str, settings: Any
) -> None:
    settings.OBLETH_AUTH_MAX_FAILURES = 0  # count nothing: each value alone
    created = keys.create_key("k")
    for response in (
        gateway.get("/v1/models", HTTP_AUTHORIZATION=value),
        chat(gateway, "m", HTTP_AUTHORIZATION=value),
    ):
        assert response.status_code == 401, (value[:40], response.content[:300])
        error = error_of(response)
        assert created.secret not in error["message"]
        assert "\r" not in response["WWW-Authenticate"] and "\n" not in response["WWW-Authenticate"]


def test_x_api_key_alone_is_told_to_use_authorization(gateway: GatewayClient) -> None:
    created = keys.create_key("k")
    response = gateway.get("/v1/models", HTTP_X_API_KEY=created.secret)
    assert response.status_code == 401
    assert "x-api-key" in error_of(response)["message"]


def test_query_string_key_is_refused_in_open_mode_too(
    gateway: GatewayClient, settings: Any
) -> None:
    settings.OBLETH_GATEWAY_OPEN = True
    response = gateway.get("/v1/models?api_key=obk_anything")
    assert response.status_code == 400
    assert error_of(response)["code"] == "api_key_in_query"


def test_one_request_rebuilds_a_stale_table_while_the_others_use_the_old_one(
    settings: Any, monkeypatch: Any
) -> None:
    """The slow database is faked (a build that waits on an event); the cache logic is real."""
    keys.create_key("k")
    settings.OBLETH_GATEWAY_KEY_CACHE_MS = 0  # every table is stale from now on
    old = keys.get_key_table()  # (the setting change dropped it; this one is built now)
    entered, release = threading.Event(), threading.Event()
    real_build = keys.build_key_table
    built: list[keys.KeyTable] = []

    def slow_build() -> keys.KeyTable:
        entered.set()
        release.wait(10)
        table = real_build()
        built.append(table)
        return table

    monkeypatch.setattr(keys, "build_key_table", slow_build)

    def rebuild() -> None:
        try:
            keys.get_key_table()
        finally:
            connection.close()  # this thread's own connection

    rebuilder = threading.Thread(target=rebuild)
    rebuilder.start()
    try:
        assert entered.wait(10)
        started = time.monotonic()
        assert keys.get_key_table() is old  # served at once, not waiting for the rebuild
        assert time.monotonic() - started < 5
    finally:
        release.set()
        rebuilder.join(10)
    assert len(built) == 1
    monkeypatch.setattr(keys, "build_key_table", real_build)
    keys.invalidate_keys()
    assert keys.get_key_table() is not old  # after a change in this process: a fresh table


@pytest.mark.parametrize(
    "query",
    ["api%00_key=x", "%ff%fe=1", "API_KEY", "x=" + "%0d%0a" * 1000, "&".join(["a=1"] * 2000)],
    ids=["nul-name", "bad-utf8", "bare-name", "crlf", "too-many-fields"],
)
def test_hostile_query_strings_never_500(gateway: GatewayClient, query: str) -> None:
    created = keys.create_key("k")
    response = gateway.get(f"/v1/models?{query}", **bearer(created.secret))
    assert response.status_code in (200, 400), (query[:40], response.status_code)


def test_the_decision_is_callable_without_django_requests() -> None:
    """What another front door of /v1 (not a Django view) calls; the same rules apply."""
    from obleth.gateway.auth import Caller, Refusal, check_credentials

    created = keys.create_key("k", models=[])
    ok = check_credentials(f"Bearer {created.secret}", address="192.0.2.9")
    assert isinstance(ok, Caller) and ok.key is not None and ok.key.name == "k"
    in_query = check_credentials("", address="192.0.2.9", query_names=["Api_Key"])
    assert isinstance(in_query, Refusal) and in_query.status == 400
    missing = check_credentials("", address="192.0.2.9", has_x_api_key=True)
    assert isinstance(missing, Refusal) and missing.status == 401
    assert "x-api-key" in missing.message
    assert missing.response().status_code == 401
