"""Every Management API route refuses callers without the admin token or a staff session."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.test import override_settings
from django.urls import reverse

from tests.api.conftest import api_routes
from tests.plugins.factories import ADMIN_TOKEN

METHODS = ("get", "post", "put", "patch", "delete")


def _url(name: str, groups: dict[str, str]) -> str:
    kwargs = {g: str(uuid.uuid4()) for g in groups if g != "format"}
    return reverse(name, kwargs=kwargs)


ROUTES = api_routes()


def test_the_resolver_walk_finds_the_management_api() -> None:
    names = {name for _, name, _ in ROUTES}
    # A sanity floor so that an empty walk cannot pass the tests below vacuously.
    assert {"api:model-list", "api:slurm-settings", "api:schema", "api:docs"} <= names
    assert len(ROUTES) >= 25


@pytest.mark.django_db
@pytest.mark.parametrize(("route", "name", "groups"), ROUTES, ids=[r[1] for r in ROUTES])
@pytest.mark.parametrize("method", METHODS)
def test_every_route_answers_401_without_credentials(
    anon_client: Any, route: str, name: str, groups: dict[str, str], method: str
) -> None:
    url = _url(name, groups)
    response = getattr(anon_client, method)(url, data={}, format="json")
    assert response.status_code == 401, (method, url, response.status_code)
    assert response["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.django_db
@pytest.mark.parametrize(("route", "name", "groups"), ROUTES, ids=[r[1] for r in ROUTES])
def test_every_route_refuses_a_wrong_token(route: str, name: str, groups: dict[str, str]) -> None:
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer " + ADMIN_TOKEN[:-1] + "x")
    assert client.get(_url(name, groups)).status_code == 401


@pytest.mark.django_db
@pytest.mark.parametrize(("route", "name", "groups"), ROUTES, ids=[r[1] for r in ROUTES])
def test_every_route_refuses_a_logged_in_non_staff_user(
    route: str, name: str, groups: dict[str, str]
) -> None:
    from django.contrib.auth import get_user_model
    from rest_framework.test import APIClient

    user = get_user_model().objects.create_user("someone", password="x", is_staff=False)
    client = APIClient()
    client.force_login(user)
    # The drain-signal route takes only a replica's key: a session is no credential there.
    expected = 401 if name == "api:replica-drain-signal" else 403
    assert client.get(_url(name, groups)).status_code == expected


@pytest.mark.django_db
def test_the_admin_token_and_a_staff_session_with_a_role_are_accepted(
    api_client: Any, staff_client: Any
) -> None:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from rest_framework.test import APIClient

    url = reverse("api:model-list")
    assert api_client.get(url).status_code == 200
    # Staff status alone grants nothing (as in the admin): a role does.
    assert staff_client.get(url).status_code == 403
    viewer = get_user_model().objects.create_user("a-viewer", password="x", is_staff=True)
    viewer.groups.add(Group.objects.get(name="viewer"))
    client = APIClient()
    client.force_login(viewer)
    assert client.get(url).status_code == 200


@pytest.mark.django_db
def test_other_authorization_schemes_are_not_credentials(anon_client: Any) -> None:
    anon_client.credentials(HTTP_AUTHORIZATION=f"Token {ADMIN_TOKEN}")
    assert anon_client.get(reverse("api:model-list")).status_code == 401


@pytest.mark.django_db
@override_settings(OBLETH_ADMIN_TOKEN="")
def test_bearer_tokens_are_refused_when_no_admin_token_is_configured(anon_client: Any) -> None:
    anon_client.credentials(HTTP_AUTHORIZATION="Bearer ")
    response = anon_client.get(reverse("api:model-list"))
    assert response.status_code == 401
    assert "OBLETH_ADMIN_TOKEN" in response.json()["error"]


@pytest.mark.django_db
def test_trailing_slash_is_optional(api_client: Any) -> None:
    assert api_client.get("/api/v1/models").status_code == 200
    assert api_client.get("/api/v1/models/").status_code == 200
    assert api_client.get("/api/v1/settings/slurm/").status_code == 200
