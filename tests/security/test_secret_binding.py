"""Write-only secrets are bound to where they are sent.

Changing ``slurmrestd_url`` drops the stored JWT and Hugging Face token (the token travels in
every job's environment to that host), changing an endpoint's ``api_base`` drops its API key,
unless the same request sends the secret again or an admin sends ``keep_secret`` (the admin's
"Keep the stored token for the new URL" box). One rule, ``services.secret_for_destination``, for
the API, the admin and ``manage.py configure_slurm``.

The "new host" is a real stdlib HTTP server on 127.0.0.1 that records every header it receives,
so the tests see exactly what the connection test sent there. Nothing is faked.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from rest_framework.test import APIClient

from obleth.core import services
from obleth.core.models import Endpoint, SlurmSettings
from tests.plugins.factories import make_endpoint, make_model

pytestmark = pytest.mark.django_db

API = "/api/v1"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdW4iOiJvYmxldGgifQ.Ym91bmQtdG8tdGhlLW9sZC1ob3N0LXNpZw"
HF = "hf_bound_to_the_old_host_0000"
KEY = "sk-bound-to-the-old-address-1234"


class HeaderRecorder:
    """An HTTP server that answers 401 to everything and keeps every request's headers."""

    def __init__(self) -> None:
        self.headers: list[dict[str, str]] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _answer(self) -> None:
                recorder.headers.append({k.lower(): v for k, v in self.headers.items()})
                body = b'{"errors": [{"error": "unauthorized"}]}'
                self.send_response(401)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer  # noqa: N815 - stdlib naming

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def saw(self, secret: str) -> bool:
        return any(secret in value for headers in self.headers for value in headers.values())

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def new_host() -> Iterator[HeaderRecorder]:
    recorder = HeaderRecorder()
    try:
        yield recorder
    finally:
        recorder.close()


@pytest.fixture
def stored() -> SlurmSettings:
    return services.update_slurm_settings(
        {"slurmrestd_url": "http://127.0.0.1:9", "user": "obleth"}, jwt=JWT, hf_token=HF
    )


@pytest.fixture
def settings_editor(db: Any) -> APIClient:
    """A staff user allowed to change settings and endpoints, but not an admin."""
    user = get_user_model().objects.create_user("editor", password="x", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(
            codename__in=["change_slurmsettings", "view_slurmsettings", "change_endpoint"]
        )
    )
    client = APIClient()
    client.force_login(user)
    return client


# ------------------------------------------------------------------------------- the rule itself


@pytest.mark.parametrize(
    ("old", "new", "same"),
    [
        ("http://h:6820", "http://h:6820/", True),
        ("http://H:6820", "http://h:6820", True),
        ("http://h:6820", "http://h:6821", False),
        ("http://h:6820", "https://h:6820", False),
        ("http://h:8000/v1", "http://h:8000/v2", False),
        ("http://h:6820", "http://evil:6820", False),
    ],
)
def test_same_destination(old: str, new: str, same: bool) -> None:
    assert services.same_destination(old, new) is same


def test_secret_for_destination() -> None:
    rule = services.secret_for_destination
    assert rule("s", None, old_url="http://a", new_url="http://a").value == "s"
    moved = rule("s", None, old_url="http://a", new_url="http://b")
    assert moved.value == "" and moved.dropped
    assert rule("s", "", old_url="http://a", new_url="http://b").value == ""
    assert rule("s", "t", old_url="http://a", new_url="http://b").value == "t"
    assert (
        rule("s", None, old_url="http://a", new_url="http://b", keep_for_new_url=True).value == "s"
    )
    assert rule("s", None, old_url="", new_url="http://b").value == "s"  # never sent anywhere
    assert rule("s", "t", old_url="http://a", new_url="http://a", clear=True).value == ""


# ------------------------------------------------------------------------------------ Slurm, API


def test_api_new_url_drops_the_jwt_and_hf_token(api_client: APIClient, stored: Any) -> None:
    response = api_client.patch(
        f"{API}/settings/slurm", {"slurmrestd_url": "http://127.0.0.1:10"}, format="json"
    )
    assert response.status_code == 200, response.json()
    assert response.json()["jwt_set"] is False and response.json()["hf_token_set"] is False
    again = SlurmSettings.load()
    assert (again.jwt, again.hf_token) == ("", "")


def test_api_same_url_keeps_the_jwt(api_client: APIClient, stored: Any) -> None:
    body = {"slurmrestd_url": "http://127.0.0.1:9/", "user": "obleth"}
    assert api_client.patch(f"{API}/settings/slurm", body, format="json").status_code == 200
    assert SlurmSettings.load().jwt == JWT


def test_api_new_url_with_the_jwt_sent_again(api_client: APIClient, stored: Any) -> None:
    body = {"slurmrestd_url": "http://127.0.0.1:10", "jwt": JWT + "x"}
    assert api_client.patch(f"{API}/settings/slurm", body, format="json").status_code == 200
    again = SlurmSettings.load()
    assert again.jwt == JWT + "x" and again.hf_token == ""  # the HF token was not sent again


def test_api_keep_secret_from_the_admin_token(api_client: APIClient, stored: Any) -> None:
    body = {"slurmrestd_url": "http://127.0.0.1:10", "keep_secret": True}
    assert api_client.patch(f"{API}/settings/slurm", body, format="json").status_code == 200
    again = SlurmSettings.load()
    assert (again.jwt, again.hf_token, again.slurmrestd_url) == (JWT, HF, "http://127.0.0.1:10")


def test_api_keep_secret_from_a_non_admin_is_refused(
    settings_editor: APIClient, stored: Any
) -> None:
    body = {"slurmrestd_url": "http://127.0.0.1:10", "keep_secret": True}
    response = settings_editor.patch(f"{API}/settings/slurm", body, format="json")
    assert response.status_code == 400, response.json()
    assert "keep_secret" in response.json()["fields"]
    again = SlurmSettings.load()
    assert (again.jwt, again.slurmrestd_url) == (JWT, "http://127.0.0.1:9")  # nothing saved


def test_api_connection_test_never_sends_the_old_jwt_to_a_new_host(
    api_client: APIClient, stored: Any, new_host: HeaderRecorder
) -> None:
    body = {"slurmrestd_url": new_host.url}
    assert api_client.patch(f"{API}/settings/slurm", body, format="json").status_code == 200
    result = api_client.post(f"{API}/settings/slurm/test")
    assert result.status_code == 200
    assert "No JWT is set" in result.json()["detail"]
    assert not new_host.saw(JWT) and not new_host.saw(JWT.split(".")[2])

    # The control: an admin who keeps the token on purpose does send it there, so the recorder
    # would have seen it above.
    services.update_slurm_settings({"slurmrestd_url": "http://127.0.0.1:9"}, jwt=JWT)
    body = {"slurmrestd_url": new_host.url, "keep_secret": True}
    assert api_client.patch(f"{API}/settings/slurm", body, format="json").status_code == 200
    api_client.post(f"{API}/settings/slurm/test")
    assert new_host.saw(JWT)


# ---------------------------------------------------------------------------------- Slurm, admin


def _settings_form(url: str, **extra: str) -> dict[str, str]:
    return {
        "slurmrestd_url": url,
        "api_version": "",
        "user": "obleth",
        "new_jwt": "",
        "cache_dir": "",
        "images_dir": "",
        "log_dir": "",
        "setup": "",
        "images": "{}",
        "node_addresses": "{}",
        "new_hf_token": "",
        **extra,
    }


def test_admin_form_says_the_rule(admin_client: Any, stored: Any) -> None:
    html = admin_client.get("/admin/core/slurmsettings/1/change/").content.decode()
    assert "Keep the stored token for the new URL" in html
    assert "Changing the slurmrestd URL removes the stored JWT" in html


def test_admin_test_connection_after_a_url_change_sends_no_stored_jwt(
    admin_client: Any, stored: Any, new_host: HeaderRecorder
) -> None:
    saved = admin_client.post("/admin/core/slurmsettings/1/change/", _settings_form(new_host.url))
    assert saved.status_code == 302, saved.content.decode()[:1000]
    assert SlurmSettings.load().jwt == ""
    page = admin_client.get(saved["Location"], follow=True).content.decode()
    assert "were removed" in page
    tested = admin_client.post("/admin/core/slurmsettings/test-connection/", follow=True)
    assert "No JWT is set" in tested.content.decode()
    assert not new_host.saw(JWT)


def test_admin_keep_box_keeps_the_jwt_for_a_superuser(admin_client: Any, stored: Any) -> None:
    form = _settings_form("http://127.0.0.1:10", keep_secret_for_new_url="on")
    assert admin_client.post("/admin/core/slurmsettings/1/change/", form).status_code == 302
    assert SlurmSettings.load().jwt == JWT


def test_admin_keep_box_is_refused_to_a_non_admin(db: Any, client: Any, stored: Any) -> None:
    user = get_user_model().objects.create_user("editor", password="x", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(codename__in=["change_slurmsettings", "view_slurmsettings"])
    )
    client.force_login(user)
    form = _settings_form("http://127.0.0.1:10", keep_secret_for_new_url="on")
    response = client.post("/admin/core/slurmsettings/1/change/", form)
    assert response.status_code == 200
    assert "keep_secret_for_new_url" in response.context["adminform"].form.errors
    assert SlurmSettings.load().slurmrestd_url == "http://127.0.0.1:9"


# ------------------------------------------------------------------------------------- endpoints


@pytest.fixture
def endpoint() -> Endpoint:
    model = make_model(name="bound-static")
    return make_endpoint(model, name="ep", api_base="http://127.0.0.1:8000/v1", api_key=KEY)


def _ep_url(endpoint: Endpoint) -> str:
    return f"{API}/models/{endpoint.model_id}/endpoints/{endpoint.pk}"


def test_api_new_api_base_drops_the_key(api_client: APIClient, endpoint: Endpoint) -> None:
    response = api_client.patch(
        _ep_url(endpoint), {"api_base": "http://127.0.0.1:8001/v1"}, format="json"
    )
    assert response.status_code == 200 and response.json()["api_key_set"] is False
    endpoint.refresh_from_db()
    assert endpoint.api_key == ""


def test_api_new_api_base_with_the_key_or_keep_secret(
    api_client: APIClient, endpoint: Endpoint
) -> None:
    body = {"api_base": "http://127.0.0.1:8001/v1", "api_key": "sk-new-1111"}
    assert api_client.patch(_ep_url(endpoint), body, format="json").status_code == 200
    endpoint.refresh_from_db()
    assert endpoint.api_key == "sk-new-1111"
    body = {"api_base": "http://127.0.0.1:8002/v1", "keep_secret": True}
    assert api_client.patch(_ep_url(endpoint), body, format="json").status_code == 200
    endpoint.refresh_from_db()
    assert endpoint.api_key == "sk-new-1111"


def test_api_endpoint_keep_secret_from_a_non_admin_is_refused(
    settings_editor: APIClient, endpoint: Endpoint
) -> None:
    body = {"api_base": "http://127.0.0.1:8001/v1", "keep_secret": True}
    response = settings_editor.patch(_ep_url(endpoint), body, format="json")
    assert response.status_code == 400 and "keep_secret" in response.json()["fields"]
    endpoint.refresh_from_db()
    assert (endpoint.api_key, endpoint.api_base) == (KEY, "http://127.0.0.1:8000/v1")


def _endpoint_form(endpoint: Endpoint, api_base: str, **extra: str) -> dict[str, str]:
    return {
        "model": str(endpoint.model_id),
        "name": endpoint.name,
        "api_base": api_base,
        "priority": "100",
        "weight": "100",
        "enabled": "on",
        "new_api_key": "",
        **extra,
    }


def test_admin_endpoint_new_api_base_drops_the_key(admin_client: Any, endpoint: Endpoint) -> None:
    url = f"/admin/core/endpoint/{endpoint.pk}/change/"
    html = admin_client.get(url).content.decode()
    assert "Keep the stored token for the new URL" in html and "Changing api_base" in html
    response = admin_client.post(url, _endpoint_form(endpoint, "http://127.0.0.1:8001/v1"))
    assert response.status_code == 302
    endpoint.refresh_from_db()
    assert endpoint.api_key == ""


def test_admin_endpoint_same_api_base_keeps_and_the_box_keeps(
    admin_client: Any, endpoint: Endpoint
) -> None:
    url = f"/admin/core/endpoint/{endpoint.pk}/change/"
    assert admin_client.post(url, _endpoint_form(endpoint, endpoint.api_base)).status_code == 302
    endpoint.refresh_from_db()
    assert endpoint.api_key == KEY
    form = _endpoint_form(endpoint, "http://127.0.0.1:8009/v1", keep_secret_for_new_url="on")
    assert admin_client.post(url, form).status_code == 302
    endpoint.refresh_from_db()
    assert (endpoint.api_key, endpoint.api_base) == (KEY, "http://127.0.0.1:8009/v1")


def test_admin_endpoint_inline_on_the_model_page_drops_the_key(
    admin_client: Any, endpoint: Endpoint
) -> None:
    """The model page edits api_base inline, without the key fields: the rule holds there too."""
    model = endpoint.model
    prefix = "endpoints"
    data = {
        "name": model.name,
        "upstream_model": "",
        "model_type": model.model_type,
        "enabled": "on",
        f"{prefix}-TOTAL_FORMS": "1",
        f"{prefix}-INITIAL_FORMS": "1",
        f"{prefix}-MIN_NUM_FORMS": "0",
        f"{prefix}-MAX_NUM_FORMS": "1000",
        f"{prefix}-0-id": str(endpoint.pk),
        f"{prefix}-0-model": str(model.pk),
        f"{prefix}-0-name": endpoint.name,
        f"{prefix}-0-api_base": "http://127.0.0.1:8005/v1",
        f"{prefix}-0-priority": "100",
        f"{prefix}-0-weight": "100",
        f"{prefix}-0-enabled": "on",
    }
    response = admin_client.post(f"/admin/core/model/{model.pk}/change/", data)
    assert response.status_code == 302, response.content.decode()[:3000]
    endpoint.refresh_from_db()
    assert (endpoint.api_base, endpoint.api_key) == ("http://127.0.0.1:8005/v1", "")
