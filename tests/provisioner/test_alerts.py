"""Alerts: stored, logged, e-mailed (Django's locmem backend, set by tests/settings.py, and a
real SMTP attempt at a closed local port) and posted to a REAL local webhook server."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.core import mail
from django.utils import timezone

from obleth.core.models import Alert, Lease
from obleth.logging import register_secret
from provisioner import alerts

pytestmark = pytest.mark.django_db


@contextlib.contextmanager
def webhook(status: int = 200) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A Slack-compatible webhook receiver; yields (URL with a secret-like path, bodies)."""
    received: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - stdlib name
            length = int(self.headers.get("Content-Length") or 0)
            received.append(json.loads(self.rfile.read(length)))
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        yield f"http://127.0.0.1:{port}/services/T000/B000/sEcReTpAtH123", received
    finally:
        server.shutdown()
        server.server_close()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(autouse=True)
def _no_channels(settings: Any) -> None:
    settings.OBLETH_ALERT_EMAIL_TO = []
    settings.OBLETH_ALERT_WEBHOOK_URL = ""
    settings.OBLETH_ALERT_MIN_INTERVAL_SECS = 300


def test_logged_and_stored_without_channels(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="provisioner.alerts"):
        alert = alerts.fire("disk_full", "Disk full", "the disk is full")
    assert alert is not None
    row = Alert.objects.get(pk=alert.pk)
    assert (row.key, row.title, row.detail, row.severity, row.channels) == (
        "disk_full",
        "Disk full",
        "the disk is full",
        "warning",
        "log",
    )
    assert any(
        r.levelno == logging.WARNING and "Disk full" in r.getMessage() for r in caplog.records
    )
    assert mail.outbox == []


def test_email_and_webhook(settings: Any) -> None:
    settings.OBLETH_ALERT_EMAIL_TO = ["ops@example.com", "oncall@example.com"]
    with webhook() as (url, received):
        settings.OBLETH_ALERT_WEBHOOK_URL = url
        alert = alerts.fire("k1", "Something broke", "details here", severity="critical")
    assert alert is not None and alert.channels == "log,email,webhook"
    assert len(mail.outbox) == 1
    message = mail.outbox[0]
    assert message.to == ["ops@example.com", "oncall@example.com"]
    assert "Something broke" in message.subject and "critical" in message.subject
    assert "details here" in message.body
    assert len(received) == 1
    assert set(received[0]) == {"text"}
    assert "Something broke" in received[0]["text"] and "details here" in received[0]["text"]


def test_deduplicated_per_key_within_the_interval(settings: Any) -> None:
    settings.OBLETH_ALERT_EMAIL_TO = ["ops@example.com"]
    first = alerts.fire("held", "Held", "one")
    second = alerts.fire("held", "Held", "two")
    other = alerts.fire("other", "Other", "three")
    assert first is not None and other is not None
    assert second is None
    assert Alert.objects.filter(key="held").count() == 1
    assert len(mail.outbox) == 2
    # once the interval is over (its claim expired), the key fires again
    Lease.objects.filter(name="alert:held").update(
        expires_at=timezone.now() - dt.timedelta(seconds=1)
    )
    assert alerts.fire("held", "Held", "four") is not None
    assert Alert.objects.filter(key="held").count() == 2


def test_no_deduplication_when_the_interval_is_zero(settings: Any) -> None:
    settings.OBLETH_ALERT_MIN_INTERVAL_SECS = 0
    assert alerts.fire("k", "t", "d") is not None
    assert alerts.fire("k", "t", "d") is not None
    assert Alert.objects.filter(key="k").count() == 2


def test_webhook_failure_is_logged_never_raised_and_hides_the_url(
    settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with webhook(status=500) as (url, received), caplog.at_level(logging.WARNING):
        settings.OBLETH_ALERT_WEBHOOK_URL = url
        alert = alerts.fire("k500", "t", "d")
    assert alert is not None and alert.channels == "log,webhook failed"
    assert len(received) == 1
    assert any("HTTP 500" in r.getMessage() for r in caplog.records)
    assert "sEcReTpAtH123" not in caplog.text

    settings.OBLETH_ALERT_WEBHOOK_URL = f"http://127.0.0.1:{_closed_port()}/hooks/sEcReTpAtH123"
    with caplog.at_level(logging.WARNING):
        refused = alerts.fire("krefused", "t", "d")
    assert refused is not None and refused.channels == "log,webhook failed"
    assert "sEcReTpAtH123" not in caplog.text


def test_email_failure_is_logged_never_raised(settings: Any) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST = "127.0.0.1"
    settings.EMAIL_PORT = _closed_port()
    settings.OBLETH_ALERT_EMAIL_TO = ["ops@example.com"]
    with webhook() as (url, received):
        settings.OBLETH_ALERT_WEBHOOK_URL = url
        alert = alerts.fire("kmail", "t", "d")
    assert alert is not None and alert.channels == "log,email failed,webhook"
    assert len(received) == 1


def test_secrets_never_leave(settings: Any, caplog: pytest.LogCaptureFixture) -> None:
    settings.OBLETH_ALERT_EMAIL_TO = ["ops@example.com"]
    register_secret("sekrit-token-value-42")
    jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJzbHVybSJ9.c2lnbmF0dXJlLXNpZ25hdHVyZQ"
    with caplog.at_level(logging.WARNING):
        alert = alerts.fire("ksecret", "t", f"token sekrit-token-value-42 and jwt {jwt}")
    assert alert is not None
    for text in (alert.detail, mail.outbox[0].body, caplog.text):
        assert "sekrit-token-value-42" not in text
        assert jwt not in text


def test_long_and_odd_input_is_trimmed() -> None:
    alert = alerts.fire("k" * 500, "T" * 1000, "d" * 10_000, severity="bogus")
    assert alert is not None
    assert len(alert.key) == 200 and len(alert.title) == 300 and len(alert.detail) == 4000
    assert alert.severity == "warning"
    assert alerts.fire("k" * 500, "again", "") is None  # the same (trimmed) key is deduplicated


@pytest.mark.django_db(transaction=True)
def test_with_celery_dispatch_delivery_is_its_own_task(settings: Any) -> None:
    """With Celery dispatch the alert row is written at once and e-mail goes out from the
    deliver_alert task (eager in tests) after the commit."""
    from django.core import mail

    from provisioner import alerts

    settings.OBLETH_PROVISIONER_DISPATCH = "celery"
    settings.OBLETH_ALERT_EMAIL_TO = ["ops@example.org"]
    settings.OBLETH_ALERT_WEBHOOK_URL = ""
    alert = alerts.fire("task-delivery", "Title", "Detail")
    assert alert is not None
    alert.refresh_from_db()
    assert alert.channels == "log,email"
    assert len(mail.outbox) == 1 and mail.outbox[0].subject.endswith("Title")
