"""Who may read a ``/metrics`` page (the web process's and the gateway's): one rule.

Metrics name models and endpoints, so they are not for the public: with ``OBLETH_METRICS_TOKEN``
set, a scraper sends ``Authorization: Bearer <token>``; without it, only clients on this machine
(loopback addresses) are answered.
"""

from __future__ import annotations

import hmac

from django.conf import settings


def scrape_refusal(authorization: str, address: str) -> tuple[int, str] | None:
    """None when the caller may read metrics, else (HTTP status, message)."""
    token = str(getattr(settings, "OBLETH_METRICS_TOKEN", "") or "")
    if token:
        supplied = str(authorization).partition(" ")[2].strip()
        if hmac.compare_digest(supplied.encode("utf-8", "replace"), token.encode()):
            return None
        return 401, "Send 'Authorization: Bearer <OBLETH_METRICS_TOKEN>'."
    if address.startswith("127.") or address == "::1":
        return None
    return (
        403,
        "/metrics answers only this machine; set OBLETH_METRICS_TOKEN for a scraper elsewhere.",
    )
