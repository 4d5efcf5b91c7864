"""Throttling and logging of failed admin console logins.

Two pieces, both on the shared limiter (:mod:`obleth.core.limits`, scope ``admin-login``, keys
``ip:<address>`` and ``user:<username>``):

* :func:`record_failed_login` (on Django's ``user_login_failed`` signal) counts a failure for
  the client address and for the username, and logs it at WARNING with both, never the
  password. :func:`record_login` (on ``user_logged_in``) clears the counts of a good login.
* :class:`AdminLoginThrottleMiddleware` answers a login POST with 429 and ``Retry-After`` while
  the address or the account is blocked, before any password is checked: the right password
  is refused too until the lockout ends.

The signals only count authentications made by the admin login form (``authenticate(request,
...)`` on the admin's login URL); other callers (``authenticate()`` without a request in
management commands, ``Client.login`` in tests, another door's own backend) are not counted.
"""

from __future__ import annotations

import logging
import unicodedata
from typing import Any

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string
from django.urls import NoReverseMatch, reverse
from django.utils.deprecation import MiddlewareMixin

from obleth.core import limits

logger = logging.getLogger("obleth.auth")

SCOPE = "admin-login"
#: Longest username kept in a key or a log line (Django's own field is 150 characters).
MAX_USERNAME = 150


def clean_username(raw: object) -> str:
    """The username as Django's login form passes it on (stripped, NFKC), clipped, NUL and
    control characters gone: the middleware's key must equal the one the failure was counted
    under, or ``"admin "`` would dodge the block of ``"admin"``."""
    text = unicodedata.normalize("NFKC", str(raw or "").strip())
    text = "".join(ch for ch in text if ch.isprintable())
    return text[:MAX_USERNAME]


def keys_for(request: HttpRequest, username: str) -> list[str]:
    keys = [f"ip:{limits.client_address(request)}"]
    if username:
        keys.append(f"user:{username}")
    return keys


def _username_from(credentials: dict[str, Any]) -> str:
    field = get_user_model().USERNAME_FIELD
    return clean_username(credentials.get(field, credentials.get("username", "")))


@receiver(user_login_failed, dispatch_uid="obleth-admin-login-failed")
def record_failed_login(
    sender: Any, credentials: dict[str, Any], request: HttpRequest | None = None, **kwargs: Any
) -> None:
    """Count and log one failed login (``credentials`` has the password already masked).
    Only the admin login form's: other doors (API tokens, gateway keys) count their own."""
    if request is None or request.path not in _login_paths():
        return
    username = _username_from(credentials)
    address = limits.client_address(request)
    blocked = limits.record_failure(SCOPE, *keys_for(request, username))
    # %r quotes the username: a newline or an ANSI escape in it cannot forge a log line.
    logger.warning(
        "failed admin login for user %r from %s%s",
        username,
        address,
        f"; blocked for {blocked} s" if blocked else "",
    )


@receiver(user_logged_in, dispatch_uid="obleth-admin-login-succeeded")
def record_login(sender: Any, request: HttpRequest | None, user: Any, **kwargs: Any) -> None:
    if request is None or request.path not in _login_paths():
        return
    username = clean_username(user.get_username())
    limits.record_success(SCOPE, *keys_for(request, username))


def _login_paths() -> set[str]:
    try:
        return {reverse("admin:login")}
    except NoReverseMatch:  # no admin site in this URLconf
        return set()


def wait_text(wait: int) -> str:
    minutes, seconds = divmod(wait, 60)
    if not minutes:
        return f"{seconds} s"
    return f"{minutes} min {seconds} s" if seconds else f"{minutes} min"


def throttled_response(request: HttpRequest, wait: int) -> HttpResponse:
    """429 with ``Retry-After``, in the admin's look."""
    message = (
        "Too many failed logins from this address or for this account. Logins are refused, "
        f"even with the right password, for {wait_text(wait)}. Try again later, or ask an "
        "administrator to unblock you (admin: Authentication failure windows)."
    )
    context = {
        **admin.site.each_context(request),
        "title": "Too many failed logins",
        "message": message,
        "login_url": request.path,
    }
    response = HttpResponse(
        render_to_string("admin/login_throttled.html", context, request=request),
        status=429,
        content_type="text/html; charset=utf-8",
    )
    response["Retry-After"] = str(wait)
    return response


class AdminLoginThrottleMiddleware(MiddlewareMixin):
    """Refuse admin login POSTs from a blocked address or for a blocked account with 429."""

    def process_view(
        self, request: HttpRequest, view_func: Any, view_args: Any, view_kwargs: Any
    ) -> HttpResponse | None:
        if request.method != "POST" or request.path not in _login_paths():
            return None
        username = clean_username(request.POST.get(get_user_model().USERNAME_FIELD, ""))
        wait = limits.retry_after(SCOPE, *keys_for(request, username))
        if not wait:
            return None
        logger.warning(
            "refused admin login for user %r from %s: blocked for %s s more",
            username,
            limits.client_address(request),
            wait,
        )
        return throttled_response(request, wait)
