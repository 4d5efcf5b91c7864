"""Fixtures and helpers of the Management API tests."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from typing import Any

import jwt
import pytest
from django.urls import URLPattern, URLResolver, get_resolver

from provisioner.slurm.fake import FakeSlurmrestd

API = "/api/v1"


def make_jwt(*, exp: dt.datetime | None, user: str = "obleth", marker: str = "") -> str:
    """A JWT shaped like `scontrol token` makes (HS256, exp/iat/sun claims)."""
    claims: dict[str, Any] = {"iat": 1_700_000_000, "sun": user}
    if exp is not None:
        claims["exp"] = int(exp.timestamp())
    if marker:
        claims["marker"] = marker
    return jwt.encode(claims, "not-the-slurm-key-" + uuid.uuid4().hex, algorithm="HS256")


def api_routes() -> list[tuple[str, str, dict[str, str]]]:
    """Every route of the URLconf under /api/: (full regex/route text, url name, group names).

    Walks the real resolver, so a route added later is covered without editing a list.
    """
    found: list[tuple[str, str, dict[str, str]]] = []

    def walk(patterns: list[Any], prefix: str, namespace: str) -> None:
        for p in patterns:
            text = prefix + str(p.pattern)
            if isinstance(p, URLResolver):
                ns = namespace
                if p.namespace:
                    ns = f"{namespace}:{p.namespace}" if namespace else p.namespace
                walk(p.url_patterns, text, ns)
            elif isinstance(p, URLPattern):
                clean = text.replace("^", "").replace("$", "")
                if not clean.startswith("api/"):
                    continue
                groups = {name: "" for name in p.pattern.regex.groupindex}
                name = f"{namespace}:{p.name}" if namespace and p.name else (p.name or "")
                found.append((clean, name, groups))

    walk(get_resolver().url_patterns, "", "")
    return found


@pytest.fixture
def staff_client(db: Any) -> Any:
    """A DRF client logged in as an active staff user (session authentication)."""
    from django.contrib.auth import get_user_model
    from rest_framework.test import APIClient

    user = get_user_model().objects.create_user("operator", password="x", is_staff=True)
    client = APIClient()
    client.force_login(user)
    return client


@pytest.fixture
def fake_slurmrestd() -> Iterator[FakeSlurmrestd]:
    """An in-process fake slurmrestd (v0.0.38 shapes recorded from the real 22.05)."""
    token = make_jwt(exp=dt.datetime.now(dt.UTC) + dt.timedelta(hours=1))
    server = FakeSlurmrestd(token=token, user="obleth").start()
    server.test_token = token  # type: ignore[attr-defined]
    try:
        yield server
    finally:
        server.stop()
