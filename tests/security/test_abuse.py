"""Abuse limits of the admin console, security headers, and secrets kept out of dumps.

Everything runs for real: the Django admin login form through the test client, the shared
limiter on PostgreSQL, django-csp's middleware, ``manage.py dumpdata`` (our override) and, for
the header settings, ``obleth.settings`` imported in a fresh interpreter with its own
environment. The end of a lockout is waited for in real time (a 2-second lockout), not faked.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from obleth.core import limits
from obleth.core.auth_throttle import SCOPE
from obleth.core.models import Endpoint, Model, SlurmSettings
from obleth.core.secret_fields import MASK, declare, is_secret, label

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "the-Right-passw0rd-for-admin"
BAD = "wrong-Pa55-NEVER-IN-LOGS"


@pytest.fixture(autouse=True)
def _limits(settings: Any, db: Any) -> None:
    settings.OBLETH_AUTH_MAX_FAILURES = 10
    settings.OBLETH_AUTH_FAILURE_WINDOW_SECS = 300
    settings.OBLETH_AUTH_LOCKOUT_SECS = 300
    limits.reset()


@pytest.fixture
def admin_user(db: Any) -> User:
    return User.objects.create_superuser("root-admin", "root@example.org", PASSWORD)


def login(client: Client, username: str, password: str, address: str = "198.51.100.7") -> Any:
    return client.post(
        reverse("admin:login"),
        {"username": username, "password": password, "next": "/admin/"},
        REMOTE_ADDR=address,
    )


# ----------------------------------------------------------------------------- login throttle


def test_200_bad_passwords_then_429_even_for_the_right_one(admin_user: User) -> None:
    client = Client()
    statuses = [login(client, "root-admin", f"{BAD}{i}").status_code for i in range(200)]
    # The first ten are ordinary failures (the form again, with its error); then 429.
    assert statuses[:10] == [200] * 10
    assert set(statuses[10:]) == {429}
    refused = login(client, "root-admin", PASSWORD)
    assert refused.status_code == 429
    assert 0 < int(refused["Retry-After"]) <= 300
    text = refused.content.decode()
    assert "Too many failed logins" in text and "even with the right password" in text
    assert "_auth_user_id" not in client.session  # not logged in
    # The same account from another address is refused too (per-account block) ...
    assert login(Client(), "root-admin", PASSWORD, address="192.0.2.99").status_code == 429
    # ... and another account from the blocked address (per-address block).
    User.objects.create_superuser("other-admin", "o@example.org", PASSWORD)
    assert login(Client(), "other-admin", PASSWORD).status_code == 429
    # Another account from another address is not affected.
    ok = login(Client(), "other-admin", PASSWORD, address="192.0.2.100")
    assert ok.status_code == 302 and ok["Location"] == "/admin/"


def test_the_right_password_works_again_when_the_lockout_ends(
    settings: Any, admin_user: User
) -> None:
    settings.OBLETH_AUTH_LOCKOUT_SECS = 2
    client = Client()
    for i in range(10):
        assert login(client, "root-admin", f"{BAD}{i}").status_code == 200
    refused = login(client, "root-admin", PASSWORD)
    assert refused.status_code == 429 and refused["Retry-After"] in {"1", "2"}
    time.sleep(2.2)
    accepted = login(client, "root-admin", PASSWORD)
    assert accepted.status_code == 302, accepted.content[:300]
    assert client.session["_auth_user_id"] == str(admin_user.pk)


def test_per_account_block_from_many_addresses(admin_user: User) -> None:
    """An attacker spreading guesses over addresses still locks the account, not more."""
    for i in range(10):
        login(Client(), "root-admin", BAD, address=f"203.0.113.{i + 1}")
    assert login(Client(), "root-admin", PASSWORD, address="203.0.113.200").status_code == 429
    User.objects.create_superuser("bystander", "b@example.org", PASSWORD)
    assert login(Client(), "bystander", PASSWORD, address="203.0.113.1").status_code == 302


def test_success_resets_the_count(admin_user: User) -> None:
    client = Client()
    for _ in range(9):
        login(client, "root-admin", BAD)
    assert login(client, "root-admin", PASSWORD).status_code == 302
    for _ in range(9):
        assert login(Client(), "root-admin", BAD).status_code == 200
    assert login(Client(), "root-admin", PASSWORD).status_code == 302


@pytest.mark.parametrize("variant", [" root-admin", "root-admin ", "\troot-admin\n", "ｒoot-admin"])
def test_spelling_variants_of_a_blocked_account_are_blocked(variant: str, admin_user: User) -> None:
    """Variants that the login form turns into the same username (whitespace stripped, NFKC
    normalised) must not dodge the account's block."""
    for i in range(10):
        login(Client(), "root-admin", BAD, address=f"203.0.113.{i + 1}")
    assert login(Client(), variant, PASSWORD, address="192.0.2.77").status_code == 429


def test_unknown_usernames_are_throttled_like_real_ones(admin_user: User) -> None:
    """A block does not tell whether the account exists."""
    for _ in range(10):
        login(Client(), "no-such-user", BAD, address="198.51.100.50")
    assert login(Client(), "no-such-user", BAD, address="198.51.100.51").status_code == 429


def login_via_proxy(username: str, password: str, forwarded_for: str) -> Any:
    return Client().post(
        reverse("admin:login"),
        {"username": username, "password": password, "next": "/admin/"},
        REMOTE_ADDR="10.1.2.3",  # the Ingress controller / nginx
        HTTP_X_FORWARDED_FOR=forwarded_for,
    )


def test_behind_a_trusted_proxy_each_client_has_its_own_budget(
    settings: Any, admin_user: User
) -> None:
    settings.OBLETH_TRUSTED_PROXY_COUNT = 1
    User.objects.create_superuser("other-admin", "o@example.org", PASSWORD)
    for _ in range(10):
        login_via_proxy("nobody", BAD, "198.51.100.66")
    assert login_via_proxy("other-admin", PASSWORD, "198.51.100.66").status_code == 429
    # Another client behind the same proxy is not blocked ...
    assert login_via_proxy("root-admin", PASSWORD, "198.51.100.67").status_code == 302
    # ... and the blocked one cannot dodge it by claiming another address further left.
    spoofed = login_via_proxy("other-admin", PASSWORD, "192.0.2.1, 198.51.100.66")
    assert spoofed.status_code == 429


def test_without_trusted_proxies_x_forwarded_for_is_ignored(admin_user: User) -> None:
    for i in range(10):
        login_via_proxy("nobody", BAD, f"198.51.100.{i + 1}")
    # Every attempt came from the proxy's address: it is blocked whatever the header says.
    assert login_via_proxy("root-admin", PASSWORD, "198.51.100.99").status_code == 429


@pytest.mark.parametrize("header", ["", "not-an-ip", "1.2.3.4.5", "\x00", "999.1.1.1"])
def test_a_bad_forwarded_for_falls_back_to_the_proxy_address(
    header: str, settings: Any, admin_user: User
) -> None:
    from obleth.core.limits import client_address

    settings.OBLETH_TRUSTED_PROXY_COUNT = 1
    request = Client().get("/healthz", REMOTE_ADDR="10.1.2.3", HTTP_X_FORWARDED_FOR=header)
    assert client_address(request.wsgi_request) == "10.1.2.3"


def test_two_trusted_proxies_take_the_second_entry_from_the_right(settings: Any) -> None:
    from django.test import RequestFactory

    from obleth.core.limits import client_address

    settings.OBLETH_TRUSTED_PROXY_COUNT = 2
    request = RequestFactory().get(
        "/", REMOTE_ADDR="10.1.2.3", HTTP_X_FORWARDED_FOR="6.6.6.6, 203.0.113.5, 10.9.9.9"
    )
    assert client_address(request) == "203.0.113.5"
    short = RequestFactory().get("/", REMOTE_ADDR="10.1.2.3", HTTP_X_FORWARDED_FOR="203.0.113.5")
    assert client_address(short) == "10.1.2.3"


def test_get_of_the_login_page_still_works_while_blocked(admin_user: User) -> None:
    client = Client()
    for _ in range(10):
        login(client, "root-admin", BAD)
    page = client.get(reverse("admin:login"), REMOTE_ADDR="198.51.100.7")
    assert page.status_code == 200


def test_throttle_is_off_with_zero(settings: Any, admin_user: User) -> None:
    settings.OBLETH_AUTH_MAX_FAILURES = 0
    client = Client()
    for _ in range(15):
        assert login(client, "root-admin", BAD).status_code == 200
    assert login(client, "root-admin", PASSWORD).status_code == 302


@pytest.mark.parametrize(
    ("username", "checked"),
    [
        ("x" * 10_000, True),
        ("evil\nWARNING forged line", True),
        ("$(touch /tmp/x)", True),
        ("ÅDMİN", True),
        # Refused by the form before any password is checked: nothing to throttle.
        ("a\x00b", False),
        ("", False),
    ],
    ids=["huge", "newline", "shell", "unicode", "nul", "empty"],
)
def test_hostile_usernames(username: str, checked: bool, admin_user: User) -> None:
    client = Client()
    for _ in range(10):
        assert login(client, username, BAD).status_code == 200
    assert login(client, username, BAD).status_code == (429 if checked else 200)
    # A hostile name never blocks the real account.
    assert login(Client(), "root-admin", PASSWORD, address="192.0.2.1").status_code == 302


def test_failed_login_is_logged_without_the_password(
    admin_user: User, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="obleth.auth"):
        login(Client(), "root-admin", BAD, address="198.51.100.23")
        login(Client(), "evil\nWARNING obleth.auth: forged", BAD, address="198.51.100.23")
    lines = [r.getMessage() for r in caplog.records if r.name == "obleth.auth"]
    assert lines[0] == "failed admin login for user 'root-admin' from 198.51.100.23"
    assert all(r.levelno == logging.WARNING for r in caplog.records if r.name == "obleth.auth")
    assert all("\n" not in line for line in lines)
    assert BAD not in caplog.text and PASSWORD not in caplog.text


def test_the_blocking_failure_and_refusals_are_logged(
    admin_user: User, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="obleth.auth"):
        for _ in range(11):
            login(Client(), "root-admin", BAD)
    messages = [r.getMessage() for r in caplog.records if r.name == "obleth.auth"]
    assert messages[9].endswith("; blocked for 300 s")
    assert messages[10].startswith("refused admin login for user 'root-admin' from 198.51.100.7")
    assert BAD not in caplog.text


def test_a_good_login_is_not_logged_as_a_failure(
    admin_user: User, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="obleth.auth"):
        assert login(Client(), "root-admin", PASSWORD).status_code == 302
    assert not [r for r in caplog.records if r.name == "obleth.auth"]


def test_authentication_elsewhere_is_not_counted_as_an_admin_login(admin_user: User) -> None:
    """Another door calling authenticate(request, ...) (e.g. a token backend) counts itself."""
    from django.contrib.auth import authenticate
    from django.test import RequestFactory

    request = RequestFactory().post("/api/v1/models", REMOTE_ADDR="198.51.100.8")
    for _ in range(20):
        assert authenticate(request, username="root-admin", password=BAD) is None
    assert limits.retry_after(SCOPE, "ip:198.51.100.8", "user:root-admin") is None


def test_login_without_a_request_is_not_counted(admin_user: User) -> None:
    """Management commands and Client.login call authenticate() without a request."""
    client = Client()
    for _ in range(20):
        assert client.login(username="root-admin", password=BAD) is False
    assert limits.retry_after(SCOPE, "user:root-admin") is None


# ----------------------------------------------------------------------------- headers


def test_csp_and_security_headers_on_pages(admin_user: User) -> None:
    response = Client().get(reverse("admin:login"))
    csp = response["Content-Security-Policy"]
    directives = dict(
        (part.split()[0], part.split()[1:]) for part in csp.split(";") if part.strip()
    )
    assert directives["script-src"] == ["'self'"]  # no inline script, no eval
    assert directives["default-src"] == ["'self'"]
    assert directives["object-src"] == ["'none'"]
    assert directives["frame-ancestors"] == ["'none'"]
    assert directives["style-src-elem"] == ["'self'"]
    assert response["X-Frame-Options"] == "DENY"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Referrer-Policy"] == "same-origin"
    assert "Strict-Transport-Security" not in response  # test settings: no TLS switch


def test_api_docs_page_has_no_inline_script_or_style(admin_user: User) -> None:
    client = Client()
    client.force_login(admin_user)
    page = client.get("/api/docs/")
    assert page.status_code == 200
    html = page.content.decode()
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html), "inline <script> in /api/docs/"
    assert "<style" not in html
    script = re.search(r'<script src="(/api/docs/\?[^"]*script=[^"]*)"', html)
    assert script, html
    js = client.get(script.group(1).replace("&amp;", "&"))
    assert js.status_code == 200 and js["Content-Type"].startswith("application/javascript")
    assert "SwaggerUIBundle" in js.content.decode()
    css = client.get("/static/obleth/api-docs.css")
    assert css.status_code == 200


def _headers_with_env(env: dict[str, str]) -> dict[str, Any]:
    """Import obleth.settings with ``env`` in a fresh interpreter and fetch pages with Django's
    test client there (no database: /healthz answers 503, which is enough to see headers)."""
    script = """
import json, django
from django.test import Client
django.setup()
from django.conf import settings
c = Client()
secure = c.get("/admin/login/", secure=True, HTTP_HOST="obleth.example.org")
plain = c.get("/admin/login/", HTTP_HOST="obleth.example.org")
probe = c.get("/healthz", HTTP_HOST="obleth.example.org")
print(json.dumps({
    "secure": dict(secure.headers), "plain_status": plain.status_code,
    "plain_location": plain.headers.get("Location"), "probe_status": probe.status_code,
    "cookie_secure": [settings.SESSION_COOKIE_SECURE, settings.CSRF_COOKIE_SECURE],
}))
"""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OBLETH_", "DJANGO_"))}
    base = {
        "DJANGO_SETTINGS_MODULE": "obleth.settings",
        "OBLETH_SECRET_KEY": "s" * 60,
        "OBLETH_ENCRYPTION_KEY": "e" * 40,
        "OBLETH_ALLOWED_HOSTS": "obleth.example.org",
        "DATABASE_URL": "postgres://nobody@127.0.0.1:1/none",
    }
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**clean, **base, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def test_tls_switch_turns_on_hsts_redirect_and_secure_cookies() -> None:
    on = _headers_with_env({"OBLETH_TLS": "1"})
    assert on["secure"]["Strict-Transport-Security"] == "max-age=31536000; includeSubDomains"
    assert on["plain_status"] == 301
    assert on["plain_location"] == "https://obleth.example.org/admin/login/"
    assert on["probe_status"] != 301  # probes speak plain HTTP: /healthz is not redirected
    assert on["cookie_secure"] == [True, True]
    assert "script-src 'self'" in on["secure"]["Content-Security-Policy"]


def test_without_tls_no_hsts_and_no_redirect() -> None:
    off = _headers_with_env({})
    assert "Strict-Transport-Security" not in off["secure"]
    assert off["plain_status"] == 200
    assert off["cookie_secure"] == [False, False]


def test_secure_cookie_switch_alone_sends_hsts_but_does_not_redirect() -> None:
    """OBLETH_SECURE_COOKIES=1 (the older switch) means HTTPS clients: HSTS on HTTPS answers;
    no redirect, which would loop behind a proxy that does not send X-Forwarded-Proto."""
    cookies = _headers_with_env({"OBLETH_SECURE_COOKIES": "1"})
    assert "max-age=31536000" in cookies["secure"]["Strict-Transport-Security"]
    assert cookies["plain_status"] == 200


def test_hsts_knobs() -> None:
    custom = _headers_with_env(
        {
            "OBLETH_TLS": "1",
            "OBLETH_HSTS_SECONDS": "600",
            "OBLETH_HSTS_INCLUDE_SUBDOMAINS": "0",
            "OBLETH_HSTS_PRELOAD": "1",
            "OBLETH_SSL_REDIRECT": "0",
        }
    )
    assert custom["secure"]["Strict-Transport-Security"] == "max-age=600; preload"
    assert custom["plain_status"] == 200


def test_tls_forwarded_proto_is_trusted_only_when_switched_on() -> None:
    script = """
import django
from django.test import Client
django.setup()
r = Client().get("/admin/login/", HTTP_HOST="obleth.example.org", HTTP_X_FORWARDED_PROTO="https")
print(r.status_code, r.headers.get("Strict-Transport-Security"))
"""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OBLETH_", "DJANGO_"))}
    env = {
        **clean,
        "DJANGO_SETTINGS_MODULE": "obleth.settings",
        "OBLETH_SECRET_KEY": "s" * 60,
        "OBLETH_ENCRYPTION_KEY": "e" * 40,
        "OBLETH_ALLOWED_HOSTS": "obleth.example.org",
        "OBLETH_TLS": "1",
    }
    behind = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**env, "OBLETH_TRUST_X_FORWARDED_PROTO": "1"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert behind.stdout.split() == ["200", "max-age=31536000;", "includeSubDomains"], behind.stderr
    untrusted = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert untrusted.stdout.split() == ["301", "None"], untrusted.stderr


def test_bad_tls_values_name_the_variable() -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OBLETH_", "DJANGO_"))}
    for name, value in (("OBLETH_TLS", "maybe"), ("OBLETH_HSTS_SECONDS", "-1")):
        proc = subprocess.run(
            [sys.executable, "-c", "import obleth.settings"],
            cwd=ROOT,
            env={**clean, "OBLETH_SECRET_KEY": "s" * 60, "OBLETH_ENCRYPTION_KEY": "e", name: value},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert proc.returncode != 0 and name in proc.stderr, proc.stderr


# ----------------------------------------------------------------------------- dumpdata


@pytest.fixture
def secrets_in_db(admin_user: User) -> dict[str, str]:
    values = {
        "jwt": "eyJ-SLURM-JWT-IN-CLEAR",
        "hf_token": "hf_TOKEN_IN_CLEAR",
        "api_key": "sk-ENDPOINT-KEY-IN-CLEAR",
    }
    slurm, _ = SlurmSettings.objects.get_or_create(id=1)
    slurm.jwt, slurm.hf_token = values["jwt"], values["hf_token"]
    slurm.save()
    model = Model.objects.create(name="dump-model")
    Endpoint.objects.create(
        model=model, name="e1", api_base="http://127.0.0.1:9/v1", api_key=values["api_key"]
    )
    Endpoint.objects.create(model=model, name="e2", api_base="http://127.0.0.1:9/v1")
    return values


def dump(*args: str, fmt: str = "json") -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("dumpdata", "core", "auth.user", f"--format={fmt}", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@pytest.mark.parametrize("fmt", ["json", "jsonl", "xml", "yaml"])
def test_dumpdata_masks_secrets_by_default(fmt: str, secrets_in_db: dict[str, str]) -> None:
    out, err = dump(fmt=fmt)
    for value in secrets_in_db.values():
        assert value not in out, f"{value} in a {fmt} dump"
    admin_hash = User.objects.get(username="root-admin").password
    assert admin_hash not in out
    assert out.count(MASK) == 4  # jwt, hf_token, one endpoint key, one password hash
    assert "dump-model" in out  # the rest is dumped as usual
    assert "--include-secrets" in err


def test_dumpdata_masks_api_token_and_gateway_key_hashes(admin_user: User) -> None:
    from obleth.accounts.services import create_token
    from obleth.gateway import keys

    token = create_token(admin_user, "laptop")
    key = keys.create_key("team-a")
    out = io.StringIO()
    call_command("dumpdata", "accounts", "gateway", stdout=out, stderr=io.StringIO())
    text = out.getvalue()
    for value in (token.token.token_hash, key.key.digest, token.secret, key.secret):
        assert value not in text
    rows = {r["model"]: r["fields"] for r in json.loads(text)}
    assert rows["accounts.apitoken"]["token_hash"] == MASK
    assert rows["gateway.gatewaykey"]["digest"] == MASK
    assert rows["gateway.gatewaykey"]["prefix"] == key.key.prefix  # names it, not secret
    full = io.StringIO()
    call_command("dumpdata", "gateway", "--include-secrets", stdout=full, stderr=io.StringIO())
    assert key.key.digest in full.getvalue()


def test_dumpdata_masked_json_keeps_empty_secrets_empty(secrets_in_db: dict[str, str]) -> None:
    rows = json.loads(dump()[0])
    endpoints = {r["fields"]["name"]: r["fields"] for r in rows if r["model"] == "core.endpoint"}
    assert endpoints["e1"]["api_key"] == MASK
    assert endpoints["e2"]["api_key"] == ""
    [slurm] = [r["fields"] for r in rows if r["model"] == "core.slurmsettings"]
    assert slurm["jwt"] == MASK and slurm["hf_token"] == MASK
    # Masking did not touch the database.
    assert SlurmSettings.objects.get(id=1).jwt == secrets_in_db["jwt"]


def test_dumpdata_include_secrets_writes_them_in_clear(
    secrets_in_db: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="obleth.audit"):
        out, err = dump("--include-secrets")
    assert "dumpdata --include-secrets run by OS user" in caplog.text
    for value in secrets_in_db.values():
        assert value in out
    assert User.objects.get(username="root-admin").password in out
    assert MASK not in out
    assert "IN CLEAR" in err


def test_dumpdata_include_secrets_round_trips(
    secrets_in_db: dict[str, str], tmp_path: Path
) -> None:
    path = tmp_path / "backup.json"
    path.write_text(dump("--include-secrets")[0])
    SlurmSettings.objects.filter(id=1).update(jwt="changed")
    call_command("loaddata", str(path), stdout=io.StringIO())
    assert SlurmSettings.objects.get(id=1).jwt == secrets_in_db["jwt"]


def test_dumpdata_masks_when_writing_to_a_file(
    secrets_in_db: dict[str, str], tmp_path: Path
) -> None:
    path = tmp_path / "dump.json"
    call_command("dumpdata", "core", "--output", str(path), stderr=io.StringIO())
    text = path.read_text()
    assert secrets_in_db["jwt"] not in text and MASK in text


def test_dumpdata_leaves_sessions_out_unless_secrets_are_included(admin_user: User) -> None:
    client = Client()
    client.force_login(admin_user)
    session_key = client.session.session_key
    assert session_key
    out = io.StringIO()
    call_command("dumpdata", "sessions", stdout=out, stderr=io.StringIO())
    assert session_key not in out.getvalue()
    out = io.StringIO()
    call_command("dumpdata", "sessions", "--include-secrets", stdout=out, stderr=io.StringIO())
    assert session_key in out.getvalue()


def test_dumpdata_serializer_registry_is_restored(secrets_in_db: dict[str, str]) -> None:
    from django.core import serializers

    dump()
    text = serializers.serialize("json", SlurmSettings.objects.all())
    assert secrets_in_db["jwt"] in text  # only dumpdata masks; other callers are untouched


def test_dumpdata_unknown_format_is_djangos_error(db: Any) -> None:
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="Unknown serialization format"):
        dump(fmt="nope")


def test_declared_and_model_marked_secret_fields() -> None:
    endpoint_key = Endpoint._meta.get_field("api_key")
    assert is_secret(endpoint_key) and label(endpoint_key) == "core.endpoint.api_key"
    assert is_secret(User._meta.get_field("password"))
    assert not is_secret(Endpoint._meta.get_field("api_base"))
    name = Endpoint._meta.get_field("name")
    declare("core.endpoint.name")
    try:
        assert is_secret(name)
    finally:
        from obleth.core.secret_fields import DECLARED

        DECLARED.discard("core.endpoint.name")


#: Fields whose names look like secrets but are not, with the reason.
NOT_SECRET = {
    "core.authfailurewindow.key": "a throttled address or account name, not a credential",
    "core.alert.key": "the name an alert is de-duplicated by",
    "accounts.auditentry.token_prefix": "the public prefix naming the token that made a change",
}
SECRET_LOOKING = re.compile(r"(secret|token|passw|jwt|key|hash|digest|salt|credential)", re.I)


def test_every_secret_looking_field_is_declared() -> None:
    """A model field named like a secret must be declared secret (encrypted, DECLARED, or the
    model's ``obleth_secret_fields``) or listed in NOT_SECRET above with a reason: a new
    hashed-token field must not reach ``dumpdata`` in clear by omission."""
    undeclared = []
    for model in apps.get_models(include_auto_created=True):
        for field in model._meta.concrete_fields:
            if field.is_relation or field.primary_key:
                continue
            if not SECRET_LOOKING.search(field.name):
                continue
            if is_secret(field) or label(field) in NOT_SECRET:
                continue
            undeclared.append(label(field))
    assert not undeclared, (
        "fields that look like secrets but are not declared in obleth/core/secret_fields.py "
        f"(or NOT_SECRET in this test): {undeclared}"
    )


# ----------------------------------------------------------------------------- diffsettings


@pytest.mark.parametrize("output", ["hash", "unified"])
def test_diffsettings_masks_secret_settings(output: str) -> None:
    """``manage.py diffsettings`` in a fresh interpreter with secrets in its environment."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OBLETH_", "DJANGO_"))}
    secret_values = {
        "OBLETH_SECRET_KEY": "DJANGO-SECRET-" + "s" * 50,
        "OBLETH_ENCRYPTION_KEY": "ENCRYPTION-KEY-7878",
        "OBLETH_ADMIN_TOKEN": "ADMIN-TOKEN-0123456789",
        "OBLETH_EMAIL_PASSWORD": "SMTP-PASSWORD-9090",
        "DATABASE_URL": "postgres://obleth:DB-PASSWORD-1212@db.example:5432/obleth",
        "OBLETH_REDIS_URL": "redis://:REDIS-PASSWORD-3434@redis.example:6379/0",
        "OBLETH_ALERT_WEBHOOK_URL": "https://hooks.example/services/WEBHOOK-SECRET-5656",
    }
    proc = subprocess.run(
        [sys.executable, "manage.py", "diffsettings", "--output", output],
        cwd=ROOT,
        env={**clean, "DJANGO_SETTINGS_MODULE": "obleth.settings", **secret_values},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    leaked = [
        marker
        for marker in (
            "DJANGO-SECRET",
            "ENCRYPTION-KEY-7878",
            "ADMIN-TOKEN-0123456789",
            "SMTP-PASSWORD-9090",
            "DB-PASSWORD-1212",
            "REDIS-PASSWORD-3434",
            "WEBHOOK-SECRET-5656",
        )
        if marker in proc.stdout
    ]
    assert not leaked, leaked
    # Still useful: which settings are set, and the non-secret parts of URLs.
    assert re.search(r"SECRET_KEY = '\*+'", proc.stdout)
    assert "postgres://obleth:********************@db.example:5432/obleth" in proc.stdout
    assert "ROOT_URLCONF = 'obleth.urls'" in proc.stdout
