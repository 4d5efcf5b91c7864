"""Alerts: always logged, stored as ``Alert`` rows, and delivered by e-mail
(``OBLETH_ALERT_EMAIL_TO``) and a Slack-compatible webhook (``OBLETH_ALERT_WEBHOOK_URL``) when
configured.

``fire`` de-duplicates per key: an alert whose key fired less than
``OBLETH_ALERT_MIN_INTERVAL_SECS`` ago is suppressed (logged, not stored, not delivered). The
claim is a lease (``alert:<key>``), so two workers firing at once deliver it once. A delivery
failure is logged and recorded in the row's ``channels``; it is never raised.
"""

from __future__ import annotations

import hashlib
import logging
from urllib.parse import urlsplit

import httpx
from django.conf import settings
from django.core.mail import get_connection, send_mail
from django.db import transaction

from obleth.core.models import Alert
from obleth.logging import redact
from provisioner import lease

__all__ = ["DELIVERY_TIMEOUT_SECS", "SEVERITIES", "fire"]

log = logging.getLogger(__name__)

SEVERITIES = ("info", "warning", "critical")
DELIVERY_TIMEOUT_SECS = 10.0
_KEY_MAX = Alert._meta.get_field("key").max_length or 200
_TITLE_MAX = Alert._meta.get_field("title").max_length or 300
_DETAIL_MAX = 4000


def _lease_name(key: str) -> str:
    name = f"alert:{key}"
    if len(name) <= 200:
        return name
    return "alert:" + hashlib.sha256(key.encode()).hexdigest()


def _webhook_where(url: str) -> str:
    """Where a webhook points, without its secret path (Slack webhook paths are credentials)."""
    try:
        parts = urlsplit(url)
        return f"{parts.scheme}://{parts.hostname or '?'}"
    except ValueError:
        return "the webhook"


def _send_email(recipients: list[str], title: str, detail: str, severity: str) -> None:
    connection = get_connection(fail_silently=False, timeout=DELIVERY_TIMEOUT_SECS)
    send_mail(
        subject=f"[obleth {severity}] {title}",
        message=detail or title,
        from_email=None,  # DEFAULT_FROM_EMAIL
        recipient_list=recipients,
        connection=connection,
    )


def _post_webhook(url: str, title: str, detail: str, severity: str) -> None:
    text = f"*[obleth {severity}] {title}*" + (f"\n{detail}" if detail else "")
    response = httpx.post(
        url, json={"text": text}, timeout=DELIVERY_TIMEOUT_SECS, follow_redirects=False
    )
    if not 200 <= response.status_code < 300:
        raise RuntimeError(f"HTTP {response.status_code}")


def fire(key: str, title: str, detail: str, severity: str = "warning") -> Alert | None:
    """Raise an alert; returns its row, or None when the same key fired within the interval."""
    key = (key or "alert").strip()[:_KEY_MAX]
    title = redact(title or key)[:_TITLE_MAX]
    detail = redact(detail or "")[:_DETAIL_MAX]
    severity = severity if severity in SEVERITIES else "warning"
    interval = float(getattr(settings, "OBLETH_ALERT_MIN_INTERVAL_SECS", 300))
    if interval > 0 and not lease.acquire(_lease_name(key), lease.make_owner(), interval):
        log.warning("alert %s suppressed (already sent within %ss): %s", key, int(interval), title)
        return None
    log.warning("ALERT [%s] %s: %s%s", severity, key, title, f" -- {detail}" if detail else "")
    alert = Alert.objects.create(
        key=key, title=title, detail=detail, severity=severity, channels="log"
    )
    if getattr(settings, "OBLETH_PROVISIONER_DISPATCH", "inline") == "celery":
        # Delivery is its own task: a slow mail server or webhook never holds up a pass.
        from provisioner.tasks import deliver_alert

        alert_id = alert.pk
        transaction.on_commit(lambda: deliver_alert.delay(alert_id))
    else:
        deliver(alert)
    return alert


def deliver(alert: Alert) -> Alert:
    """Send an alert by e-mail and to the webhook when configured; record where it went.

    Best effort: a failed channel is logged and recorded, never raised.
    """
    key, title, detail, severity = alert.key, alert.title, alert.detail, alert.severity
    channels = ["log"]
    recipients = [r for r in getattr(settings, "OBLETH_ALERT_EMAIL_TO", None) or [] if r]
    if recipients:
        try:
            _send_email(recipients, title, detail, severity)
            channels.append("email")
        except Exception as exc:  # delivery is best effort
            channels.append("email failed")
            log.warning(
                "alert %s: e-mail to %d recipient(s) failed: %s: %s",
                key,
                len(recipients),
                type(exc).__name__,
                redact(str(exc))[:200],
            )
    url = (getattr(settings, "OBLETH_ALERT_WEBHOOK_URL", "") or "").strip()
    if url:
        try:
            _post_webhook(url, title, detail, severity)
            channels.append("webhook")
        except Exception as exc:  # delivery is best effort; never log the URL's secret path
            channels.append("webhook failed")
            reason = str(exc).replace(url, _webhook_where(url))
            log.warning(
                "alert %s: webhook to %s failed: %s: %s",
                key,
                _webhook_where(url),
                type(exc).__name__,
                redact(reason)[:200],
            )
    alert.channels = ",".join(channels)
    Alert.objects.filter(pk=alert.pk).update(channels=alert.channels)
    return alert
