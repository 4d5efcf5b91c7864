"""Throttling of failed authentications, per client address and per account.

One implementation for every door: the admin login, Management API tokens and gateway keys.
A key (``"ip:203.0.113.7"``, ``"user:alice"``) that fails ``OBLETH_AUTH_MAX_FAILURES`` times
within ``OBLETH_AUTH_FAILURE_WINDOW_SECS`` is refused for ``OBLETH_AUTH_LOCKOUT_SECS`` even with
the right secret; callers answer 429 with ``Retry-After`` set to what :func:`retry_after` returns.

Usage::

    wait = limits.retry_after("api-token", f"ip:{addr}")
    if wait: -> 429, Retry-After: wait
    ... check the secret ...
    if bad: limits.record_failure("api-token", f"ip:{addr}")
    else:   limits.record_success("api-token", f"ip:{addr}")
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import math

from django.conf import settings
from django.db import IntegrityError, transaction
from django.http import HttpRequest
from django.utils import timezone

from obleth.core.models import AuthFailureWindow

MAX_KEY = 300


def _max_failures() -> int:
    return int(getattr(settings, "OBLETH_AUTH_MAX_FAILURES", 10))


def _window() -> dt.timedelta:
    return dt.timedelta(seconds=int(getattr(settings, "OBLETH_AUTH_FAILURE_WINDOW_SECS", 300)))


def _lockout() -> dt.timedelta:
    return dt.timedelta(seconds=int(getattr(settings, "OBLETH_AUTH_LOCKOUT_SECS", 300)))


def client_address(request: HttpRequest) -> str:
    """The caller's address: REMOTE_ADDR, or behind ``OBLETH_TRUSTED_PROXY_COUNT`` proxies the
    address the outermost of them saw (that many entries from the right of X-Forwarded-For;
    entries further left are the client's own claims and are never used). Without it, every
    client behind a proxy would share the proxy's address and one attacker could block all."""
    return address_of(
        str(request.META.get("REMOTE_ADDR") or ""),
        str(request.META.get("HTTP_X_FORWARDED_FOR", "")),
    )


def address_of(remote: str, forwarded_for: str) -> str:
    """:func:`client_address` from its two inputs (the peer's address, the X-Forwarded-For
    header), for front doors that are not Django views (the /v1 gateway service)."""
    remote = (remote or "unknown")[:100]
    hops = int(getattr(settings, "OBLETH_TRUSTED_PROXY_COUNT", 0))
    if hops <= 0:
        return remote
    chain = [part.strip() for part in forwarded_for.split(",")]
    chain = [part for part in chain if part]
    if len(chain) < hops:
        return remote  # not through all our proxies (a direct connection): what we see
    try:
        return str(ipaddress.ip_address(chain[-hops]))
    except ValueError:
        return remote


def _clip(key: str) -> str:
    return key.replace("\x00", "")[:MAX_KEY]


def retry_after(scope: str, *keys: str, now: dt.datetime | None = None) -> int | None:
    """Seconds until the first of ``keys`` may try again, or None when none is blocked."""
    if _max_failures() <= 0:
        return None
    now = now or timezone.now()
    rows = AuthFailureWindow.objects.filter(
        scope=scope, key__in=[_clip(k) for k in keys], blocked_until__gt=now
    ).values_list("blocked_until", flat=True)
    waits = [math.ceil((until - now).total_seconds()) for until in rows if until is not None]
    return max(waits) if waits else None


def record_failure(scope: str, *keys: str, now: dt.datetime | None = None) -> int | None:
    """Count one failure for each key; returns the wait when this failure blocked any of them."""
    if _max_failures() <= 0:
        return None
    now = now or timezone.now()
    blocked: int | None = None
    for key in {_clip(k) for k in keys}:
        for _ in range(2):  # a concurrent first failure may create the row under us: retry once
            try:
                with transaction.atomic():
                    row, _created = AuthFailureWindow.objects.select_for_update().get_or_create(
                        scope=scope, key=key, defaults={"window_started_at": now}
                    )
                    if now - row.window_started_at > _window():
                        row.failures, row.window_started_at = 0, now
                    row.failures += 1
                    if row.failures >= _max_failures():
                        row.blocked_until = now + _lockout()
                        row.failures, row.window_started_at = 0, now
                        blocked = max(blocked or 0, math.ceil(_lockout().total_seconds()))
                    row.save()
                break
            except IntegrityError:
                continue
    return blocked


def record_success(scope: str, *keys: str) -> None:
    """A correct secret clears the failure count of those keys (not an active block)."""
    AuthFailureWindow.objects.filter(
        scope=scope, key__in=[_clip(k) for k in keys], blocked_until__isnull=True
    ).delete()


def reset(scope: str | None = None) -> None:
    """Forget every count (tests, or an operator unblocking after an incident)."""
    qs = AuthFailureWindow.objects.all()
    if scope:
        qs = qs.filter(scope=scope)
    qs.delete()
