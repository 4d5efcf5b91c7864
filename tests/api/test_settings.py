"""GET/PUT /settings/slurm: masked secrets, keep-on-blank, validation, provisioner status."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.utils import timezone

from obleth.core import services
from obleth.core.models import ProvisionerStatus, SlurmSettings
from tests.api.conftest import API, make_jwt

pytestmark = pytest.mark.django_db
URL = f"{API}/settings/slurm"

ENABLED = {"enabled": True, "slurmrestd_url": "http://127.0.0.1:6820", "user": "obleth"}


def _error_field(response: Any) -> str:
    body = response.json()
    assert response.status_code == 400, body
    return next(iter(body["fields"]))


def test_get_masks_the_secrets_and_reads_the_jwt_expiry(api_client: Any) -> None:
    exp = (timezone.now() + dt.timedelta(hours=2)).replace(microsecond=0)
    token = make_jwt(exp=exp)
    response = api_client.put(
        URL, {**ENABLED, "jwt": token, "hf_token": "hf_secretvalue9876"}, format="json"
    )
    assert response.status_code == 200, response.json()
    body = api_client.get(URL).json()
    assert token not in str(body) and "hf_secretvalue9876" not in str(body)
    assert "jwt" not in body and "hf_token" not in body
    assert body["jwt_set"] is True
    assert body["jwt_last4"] == token[-4:]
    assert dt.datetime.fromisoformat(body["jwt_expires_at"]) == exp
    assert body["jwt_expired"] is False
    assert (body["hf_token_set"], body["hf_token_last4"]) == (True, "9876")
    assert SlurmSettings.load().jwt == token


def test_an_expired_or_unreadable_jwt_is_reported(api_client: Any) -> None:
    expired = make_jwt(exp=timezone.now() - dt.timedelta(minutes=5))
    api_client.put(URL, {"jwt": expired}, format="json")
    body = api_client.get(URL).json()
    assert body["jwt_expired"] is True

    api_client.put(URL, {"jwt": "not-a-jwt-at-all"}, format="json")
    body = api_client.get(URL).json()
    assert body["jwt_set"] is True
    assert body["jwt_expires_at"] is None
    assert body["jwt_expired"] is None

    no_exp = make_jwt(exp=None)
    api_client.put(URL, {"jwt": no_exp}, format="json")
    assert api_client.get(URL).json()["jwt_expires_at"] is None


def test_empty_or_omitted_secrets_keep_the_stored_ones_and_clear_flags_remove_them(
    api_client: Any,
) -> None:
    token = make_jwt(exp=timezone.now() + dt.timedelta(hours=1))
    api_client.put(URL, {**ENABLED, "jwt": token, "hf_token": "hf_keepme_1234"}, format="json")

    api_client.put(URL, {**ENABLED, "cache_dir": "/shared/cache"}, format="json")
    api_client.put(URL, {**ENABLED, "jwt": "", "hf_token": "   "}, format="json")
    stored = SlurmSettings.load()
    assert (stored.jwt, stored.hf_token, stored.cache_dir) == (
        token,
        "hf_keepme_1234",
        "/shared/cache",
    )

    api_client.put(URL, {"jwt_clear": True}, format="json")
    stored = SlurmSettings.load()
    assert (stored.jwt, stored.hf_token) == ("", "hf_keepme_1234")
    api_client.patch(URL, {"hf_token_clear": True}, format="json")
    stored = SlurmSettings.load()
    assert stored.hf_token == ""
    body = api_client.get(URL).json()
    assert (body["jwt_set"], body["hf_token_set"]) == (False, False)


def test_fields_left_out_keep_their_value_and_the_url_is_trimmed(api_client: Any) -> None:
    response = api_client.put(
        URL,
        {
            **ENABLED,
            "slurmrestd_url": "  http://127.0.0.1:6820/  ",
            "user": " obleth ",
            "images": {"vllm": "vllm.sif"},
            "setup": "module load cuda",
        },
        format="json",
    )
    assert response.status_code == 200, response.json()
    api_client.put(URL, {"log_dir": "/shared/logs"}, format="json")
    body = api_client.get(URL).json()
    assert body["slurmrestd_url"] == "http://127.0.0.1:6820"
    assert body["user"] == "obleth"
    assert body["images"] == {"vllm": "vllm.sif"}
    assert (body["setup"], body["log_dir"], body["enabled"]) == (
        "module load cuda",
        "/shared/logs",
        True,
    )


@pytest.mark.parametrize(
    ("payload", "field", "needle"),
    [
        ({"enabled": True, "user": "obleth"}, "slurmrestd_url", "URL"),
        ({"enabled": True, "slurmrestd_url": "http://127.0.0.1:6820"}, "user", "user"),
        ({"slurmrestd_url": "slurm-head:6820"}, "slurmrestd_url", "http"),
        ({"api_version": "../admin"}, "api_version", "letters, digits and dots"),
        ({"api_version": "v0.0.40/jobs"}, "api_version", "letters, digits and dots"),
        ({"api_version": "v0 0 40"}, "api_version", "letters, digits and dots"),
        ({"node_addresses": {"gpu7": "gpu7.cluster.local"}}, "node_addresses", "gpu7"),
        ({"node_addresses": {"gpu7": "10.0.0.300"}}, "node_addresses", "IP"),
        ({"node_addresses": ["gpu7", "10.0.0.1"]}, "node_addresses", "mapping"),
        ({"images": {"vllm": ""}}, "images", "vllm"),
        ({"images": "vllm.sif"}, "images", "mapping"),
    ],
)
def test_each_rule_rejects_bad_input_naming_the_field(
    api_client: Any, payload: dict[str, Any], field: str, needle: str
) -> None:
    response = api_client.put(URL, payload, format="json")
    assert _error_field(response) == field
    assert response.json()["error"].startswith(f"{field}: ")
    assert needle in response.json()["error"]
    assert SlurmSettings.load().enabled is False


def test_blank_api_version_means_detect_and_ip_overrides_are_kept(api_client: Any) -> None:
    response = api_client.put(
        URL,
        {"api_version": "", "node_addresses": {"gpu7": "10.0.0.24", "gpu8": "fd00::24"}},
        format="json",
    )
    assert response.status_code == 200, response.json()
    stored = SlurmSettings.load()
    assert stored.api_version == ""
    assert stored.node_addresses == {"gpu7": "10.0.0.24", "gpu8": "fd00::24"}


def test_disabling_needs_no_url(api_client: Any) -> None:
    assert api_client.put(URL, {"enabled": False}, format="json").status_code == 200


# ------------------------------------------------------------------------------ provisioner status


def _heartbeat(seconds_ago: float, **fields: Any) -> ProvisionerStatus:
    status = ProvisionerStatus.load()
    status.heartbeat_at = timezone.now() - dt.timedelta(seconds=seconds_ago)
    for name, value in fields.items():
        setattr(status, name, value)
    status.save()
    return status


def test_status_never_seen_is_not_running(api_client: Any) -> None:
    body = api_client.get(f"{API}/provisioner/status").json()
    assert (body["state"], body["label"], body["running"]) == ("not_running", "not running", False)
    assert body["last_seen_secs"] is None
    assert api_client.get(URL).json()["provisioner"]["state"] == "not_running"


def test_status_running_with_ok_passes(api_client: Any) -> None:
    now = timezone.now()
    _heartbeat(10, version="1.2.3", last_pass_status="ok", last_pass_at=now, last_ok_at=now)
    body = api_client.get(f"{API}/provisioner/status").json()
    assert (body["state"], body["label"], body["version"]) == ("running", "running", "1.2.3")
    assert body["held_secs"] is None
    assert api_client.get(URL).json()["provisioner"]["label"] == "running"


def test_status_running_but_failing_since(api_client: Any) -> None:
    since = timezone.now() - dt.timedelta(minutes=12)
    _heartbeat(
        5,
        last_pass_status="error",
        last_pass_detail="slurmrestd: connection refused",
        non_ok_since=since,
        last_ok_at=since,
    )
    body = api_client.get(f"{API}/provisioner/status").json()
    assert body["state"] == "failing"
    assert body["label"].startswith("running but failing since ")
    assert f"{timezone.localtime(since):%Y-%m-%d %H:%M}" in body["label"]
    assert body["held_secs"] >= 12 * 60
    assert body["last_pass_detail"] == "slurmrestd: connection refused"


def test_status_stale_heartbeat_is_not_running(api_client: Any) -> None:
    _heartbeat(120, last_pass_status="ok")
    assert api_client.get(f"{API}/provisioner/status").json()["state"] == "not_running"


def test_running_window_is_60_seconds_inclusive() -> None:
    status = ProvisionerStatus(heartbeat_at=timezone.now(), last_pass_status="ok")
    at = status.heartbeat_at
    assert services.provisioner_view(
        status, slurm_enabled=True, now=at + dt.timedelta(seconds=60)
    ).running
    late = at + dt.timedelta(seconds=61)
    assert not services.provisioner_view(status, slurm_enabled=True, now=late).running


def test_idle_counts_as_failing_only_while_slurm_is_enabled() -> None:
    now = timezone.now()
    status = ProvisionerStatus(
        heartbeat_at=now, last_pass_status="idle", non_ok_since=now - dt.timedelta(seconds=30)
    )
    assert services.provisioner_view(status, slurm_enabled=False, now=now).state == "running"
    assert services.provisioner_view(status, slurm_enabled=True, now=now).state == "failing"
