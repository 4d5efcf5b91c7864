"""Pass outcomes, heartbeat and the held/recovered alerts on the real test database.

Time is passed in as ``now`` (passes ten minutes apart without waiting). E-mail goes to Django's
locmem backend (tests/settings.py)."""

from __future__ import annotations

import datetime as dt
import socket
from typing import Any

import pytest
from django.core import mail

from obleth.build import version_label
from obleth.core.models import Alert, ProvisionerStatus, SlurmSettings
from obleth.logging import register_secret
from provisioner import status

pytestmark = pytest.mark.django_db

T0 = dt.datetime(2026, 1, 5, 12, 0, tzinfo=dt.UTC)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


@pytest.fixture(autouse=True)
def _settings(settings: Any) -> None:
    settings.OBLETH_PROVISIONER_HELD_ALERT_SECS = 600
    settings.OBLETH_ALERT_MIN_INTERVAL_SECS = 300
    settings.OBLETH_ALERT_EMAIL_TO = ["ops@example.com"]
    settings.OBLETH_ALERT_WEBHOOK_URL = ""


def slurm(enabled: bool) -> None:
    SlurmSettings.objects.update_or_create(pk=1, defaults={"enabled": enabled})


def row() -> ProvisionerStatus:
    return ProvisionerStatus.objects.get(pk=1)


def test_ok_pass() -> None:
    status.record_pass("ok", "", 42, now=at(0))
    r = row()
    assert r.last_pass_status == "ok" and r.last_pass_detail == "" and r.last_pass_ms == 42
    assert r.last_ok_at == at(0) and r.last_pass_at == at(0) and r.heartbeat_at == at(0)
    assert r.non_ok_since is None and r.held_alert_active is False
    assert r.version == version_label() and r.host == socket.gethostname()[:200]


def test_non_ok_streak_keeps_its_start_and_last_ok() -> None:
    status.record_pass("ok", "", 5, now=at(0))
    status.record_pass("error", "slurm job lookup failed", 7, now=at(15))
    status.record_pass("idle", "slurm enabled but slurmrestd_url is empty", 1, now=at(30))
    r = row()
    assert r.non_ok_since == at(15)
    assert r.last_ok_at == at(0)
    assert r.last_pass_status == "idle"
    assert r.last_pass_detail == "slurm enabled but slurmrestd_url is empty"
    status.record_pass("ok", "", 5, now=at(45))
    r = row()
    assert r.non_ok_since is None and r.last_ok_at == at(45)


def test_held_alert_fires_once_then_recovers() -> None:
    slurm(True)
    status.record_pass("ok", "", 5, now=at(-15))
    status.record_pass("error", "GET job 17 answered HTTP 502", 9, now=at(0))
    status.record_pass("error", "GET job 17 answered HTTP 502", 9, now=at(599))
    assert not Alert.objects.exists()
    status.record_pass("error", "GET job 17 answered HTTP 502", 9, now=at(600))
    held = Alert.objects.get()
    assert held.key == "slurm_reconcile_held"
    assert held.title == "Provisioner passes are failing: replica states are frozen"
    assert "10 minutes" in held.detail
    assert "error" in held.detail and "GET job 17 answered HTTP 502" in held.detail
    assert "frozen" in held.detail
    assert row().held_alert_active is True
    assert len(mail.outbox) == 1

    # still held, long after the de-duplication interval: no second alert
    for minute in range(11, 40):
        status.record_pass("error", "still failing", 9, now=at(minute * 60))
    assert Alert.objects.count() == 1

    status.record_pass("ok", "", 5, now=at(40 * 60))
    recovered = Alert.objects.get(key="slurm_reconcile_recovered")
    assert "40 minutes" in recovered.detail
    r = row()
    assert r.held_alert_active is False and r.non_ok_since is None
    status.record_pass("ok", "", 5, now=at(41 * 60))
    assert Alert.objects.count() == 2


def test_no_held_alert_when_slurm_is_disabled() -> None:
    slurm(False)
    status.record_pass("idle", "slurm disabled in settings", 1, now=at(0))
    status.record_pass("idle", "slurm disabled in settings", 1, now=at(3600))
    assert not Alert.objects.exists()
    assert row().held_alert_active is False
    status.record_pass("ok", "", 1, now=at(3700))
    assert not Alert.objects.exists()  # nothing was held, so nothing recovers


def test_no_settings_row_means_disabled() -> None:
    SlurmSettings.objects.all().delete()
    status.record_pass("error", "x", 1, now=at(0))
    status.record_pass("error", "x", 1, now=at(1200))
    assert not Alert.objects.exists()
    assert not SlurmSettings.objects.exists()  # not created as a side effect


def test_detail_is_redacted_and_capped() -> None:
    register_secret("very-secret-hf-token")
    jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJzbHVybSJ9.c2lnbmF0dXJlLXNpZ25hdHVyZQ"
    status.record_pass("error", f"auth {jwt} failed, hf very-secret-hf-token", 1, now=at(0))
    detail = row().last_pass_detail
    assert jwt not in detail and "very-secret-hf-token" not in detail
    assert "failed" in detail
    status.record_pass("error", "x" * 5000, 1, now=at(1))
    assert len(row().last_pass_detail) == 2000


def test_bad_status_is_refused() -> None:
    with pytest.raises(ValueError, match="status"):
        status.record_pass("held", "", 1)  # type: ignore[arg-type]


def test_describe_status() -> None:
    never = status.describe_status(now=at(0))
    assert never["state"] == "not running" and never["text"] == "not running"
    assert never["heartbeat_age_secs"] is None and never["frozen"] is False

    status.record_pass("ok", "", 12, now=at(0))
    running = status.describe_status(now=at(60))
    assert running["state"] == "running" and running["text"] == "running"
    assert running["heartbeat_age_secs"] == 60
    assert running["last_pass_status"] == "ok" and running["held_secs"] is None
    assert running["last_ok_at"] == at(0).isoformat()
    assert running["frozen"] is False

    status.record_pass("error", "slurmrestd answered 502", 12, now=at(100))
    failing = status.describe_status(now=at(130))
    assert failing["state"] == "failing"
    assert failing["text"] == f"running but failing since {at(100).isoformat()}"
    assert failing["held_secs"] == 30
    assert failing["last_pass_detail"] == "slurmrestd answered 502"
    assert failing["frozen"] is True

    gone = status.describe_status(now=at(161))
    assert gone["state"] == "not running" and gone["heartbeat_age_secs"] == 61
    assert gone["frozen"] is True


def test_heartbeat() -> None:
    status.heartbeat(now=at(0))
    r = row()
    assert r.heartbeat_at == at(0) and r.version == version_label()
    assert r.last_pass_status == ""
    assert status.describe_status(now=at(10))["state"] == "running"
