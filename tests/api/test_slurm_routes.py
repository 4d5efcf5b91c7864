"""POST /settings/slurm/test and GET /slurm/resources.

Run against the in-process FakeSlurmrestd (answers recorded from the real Slurm 22.05) for the
fault cases, and against the REAL local slurmrestd for the happy path (marker ``slurm``).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.utils import timezone

from obleth.core.models import SlurmSettings
from provisioner.slurm.fake import FakeSlurmrestd
from tests.api.conftest import API, make_jwt

pytestmark = pytest.mark.django_db
TEST_URL = f"{API}/settings/slurm/test"
RESOURCES_URL = f"{API}/slurm/resources"


def _configure(url: str, token: str, *, enabled: bool = True, api_version: str = "") -> None:
    settings = SlurmSettings.load()
    settings.enabled = enabled
    settings.slurmrestd_url = url
    settings.user = "obleth"
    settings.jwt = token
    settings.api_version = api_version
    settings.save()


def test_test_connection_without_a_url_is_400_naming_slurmrestd_url(api_client: Any) -> None:
    response = api_client.post(TEST_URL)
    assert response.status_code == 400
    assert next(iter(response.json()["fields"])) == "slurmrestd_url"
    assert response.json()["error"].startswith("slurmrestd_url: ")


def test_test_connection_against_the_fake(api_client: Any, fake_slurmrestd: FakeSlurmrestd) -> None:
    token = fake_slurmrestd.test_token  # type: ignore[attr-defined]
    _configure(fake_slurmrestd.url, token)
    response = api_client.post(TEST_URL)
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["ok"] is True, body
    assert body["api_version"] == body["detected_api_version"] == "v0.0.38"
    assert isinstance(body["latency_ms"], float) and body["latency_ms"] >= 0
    assert body["jwt"]["set"] is True
    assert body["jwt"]["expired"] is False
    assert token not in response.content.decode()
    stored = SlurmSettings.load()
    assert stored.detected_api_version == "v0.0.38"
    assert stored.detected_release == body["slurm_release"]


def test_test_connection_reports_a_refused_token_without_leaking_it(
    api_client: Any, fake_slurmrestd: FakeSlurmrestd, caplog: Any
) -> None:
    caplog.set_level("DEBUG")
    token = fake_slurmrestd.test_token  # type: ignore[attr-defined]
    _configure(fake_slurmrestd.url, token, api_version="v0.0.38")
    fake_slurmrestd.auth_failure = True
    body = api_client.post(TEST_URL).json()
    assert body["ok"] is False
    assert body["detail"]
    assert token not in str(body)
    assert token not in caplog.text


def test_test_connection_when_slurmrestd_is_down(
    api_client: Any, fake_slurmrestd: FakeSlurmrestd
) -> None:
    _configure(fake_slurmrestd.url, fake_slurmrestd.test_token)  # type: ignore[attr-defined]
    fake_slurmrestd.set_down(True)
    response = api_client.post(TEST_URL)
    assert response.status_code == 200
    body = response.json()
    assert body["ok"] is False
    assert "version detection failed" in body["detail"]


def test_test_connection_with_an_unsupported_pinned_version(
    api_client: Any, fake_slurmrestd: FakeSlurmrestd
) -> None:
    _configure(fake_slurmrestd.url, fake_slurmrestd.test_token, api_version="v0.0.99")  # type: ignore[attr-defined]
    body = api_client.post(TEST_URL).json()
    assert body["ok"] is False
    assert "v0.0.99" in body["detail"]


def test_test_connection_reports_an_expired_jwt(
    api_client: Any, fake_slurmrestd: FakeSlurmrestd
) -> None:
    expired = make_jwt(exp=timezone.now() - dt.timedelta(hours=1))
    fake_slurmrestd.add_token(expired, "obleth")
    _configure(fake_slurmrestd.url, expired)
    body = api_client.post(TEST_URL).json()
    assert body["jwt"]["expired"] is True
    assert body["jwt"]["expires_at"] is not None


@pytest.mark.slurm
def test_test_connection_against_the_real_slurmrestd(api_client: Any, real_slurm: Any) -> None:
    _configure(real_slurm.url, real_slurm.fresh_token(600))
    body = api_client.post(TEST_URL).json()
    assert body["ok"] is True, body["detail"]
    assert body["detected_api_version"] == real_slurm.api_version
    assert body["slurm_release"].startswith("22.05")
    assert body["jwt"]["expired"] is False


# --------------------------------------------------------------------------------------- resources


def test_resources_are_empty_with_a_reason_when_slurm_is_disabled(api_client: Any) -> None:
    body = api_client.get(RESOURCES_URL).json()
    assert body["partitions"] == body["nodes"] == body["accounts"] == []
    assert "disabled" in body["reason"]


def test_resources_from_the_fake(api_client: Any, fake_slurmrestd: FakeSlurmrestd) -> None:
    _configure(fake_slurmrestd.url, fake_slurmrestd.test_token)  # type: ignore[attr-defined]
    response = api_client.get(RESOURCES_URL)
    assert response.status_code == 200
    body = response.json()
    assert [p["name"] for p in body["partitions"]] == ["debug"]
    assert [n["name"] for n in body["nodes"]] == ["localhost"]
    assert body["api_version"] == "v0.0.38"
    assert isinstance(body["errors"], dict)


def test_resources_never_500_when_slurmrestd_is_down(
    api_client: Any, fake_slurmrestd: FakeSlurmrestd
) -> None:
    _configure(fake_slurmrestd.url, fake_slurmrestd.test_token)  # type: ignore[attr-defined]
    fake_slurmrestd.set_down(True)
    response = api_client.get(RESOURCES_URL)
    assert response.status_code == 200
    body = response.json()
    assert body["partitions"] == body["nodes"] == []
    assert set(body["errors"]) >= {"partitions", "nodes"}
    assert body["reason"]


def test_resources_never_500_with_an_unusable_token(api_client: Any) -> None:
    _configure("http://127.0.0.1:9", "")
    body = api_client.get(RESOURCES_URL).json()
    assert body["partitions"] == []
    assert "token" in body["reason"]


@pytest.mark.slurm
def test_resources_from_the_real_slurmrestd(api_client: Any, real_slurm: Any) -> None:
    _configure(real_slurm.url, real_slurm.fresh_token(600))
    body = api_client.get(RESOURCES_URL).json()
    assert body["partitions"], body
    assert body["nodes"], body
    assert all("name" in node for node in body["nodes"])
