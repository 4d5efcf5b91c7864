"""Personal API tokens: create (the secret is shown once), authenticate, revoke.

A token reads ``obt_<prefix>_<secret>``: 12 characters of prefix that find the row, 43 of
secret (256 bits). The database keeps the prefix and the SHA-256 of the whole token, never the
token. A token acts with its owner's permissions at the time of the request, so changing a
user's role changes what their tokens may do; an inactive or non-staff owner's tokens stop.

Failed attempts count against the client address (and the token prefix, when it names a real
token) in :mod:`obleth.core.limits`, scope ``api-token``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import hmac
import logging
import re
import secrets
import string
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from obleth.accounts.models import ApiToken
from obleth.core import limits

logger = logging.getLogger("obleth.security")

TOKEN_SCHEME = "obt"
PREFIX_LEN = 12
PREFIX_ALPHABET = string.ascii_lowercase + string.digits
TOKEN_RE = re.compile(rf"^{TOKEN_SCHEME}_([a-z0-9]{{{PREFIX_LEN}}})_([A-Za-z0-9_-]{{43}})$")
THROTTLE_SCOPE = "api-token"
DEFAULT_DAYS = 90
MAX_DAYS = 366
MAX_ACTIVE_PER_USER = 50
LAST_USED_EVERY = dt.timedelta(seconds=60)


@dataclasses.dataclass(frozen=True)
class NewToken:
    """A token just made: ``secret`` is the whole token, shown to its owner this once."""

    token: ApiToken
    secret: str


class TokenRefused(Exception):
    """Authentication failed; ``message`` is safe to show (it never repeats the token)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class TokenThrottled(Exception):
    def __init__(self, wait: int) -> None:
        super().__init__(f"Too many failed token attempts; retry in {wait} s.")
        self.wait = wait


def looks_like_personal_token(value: str) -> bool:
    return value.startswith(f"{TOKEN_SCHEME}_")


def hash_token(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()


def _new_prefix() -> str:
    return "".join(secrets.choice(PREFIX_ALPHABET) for _ in range(PREFIX_LEN))


def validate_name(name: Any) -> str:
    text = str(name or "").strip()
    if not text:
        raise ValidationError({"name": ["Name the token after what uses it (e.g. 'CI deploys')."]})
    if len(text) > 100 or any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise ValidationError(
            {"name": ["Use at most 100 printable characters (no newlines or control characters)."]}
        )
    return text


def validate_days(days: Any) -> int:
    if days is None or days == "":
        return DEFAULT_DAYS
    if isinstance(days, bool) or not isinstance(days, int):
        raise ValidationError(
            {"expires_in_days": [f"Give a whole number of days, 1 to {MAX_DAYS}."]}
        )
    if not 1 <= days <= MAX_DAYS:
        raise ValidationError(
            {"expires_in_days": [f"A token lives 1 to {MAX_DAYS} days; got {days}."]}
        )
    return days


def create_token(
    user: Any, name: Any, *, expires_in_days: Any = None, now: dt.datetime | None = None
) -> NewToken:
    """Make a token for ``user`` (themself: there is no way to make one for somebody else)."""
    if user is None or getattr(user, "pk", None) is None:
        raise PermissionDenied(
            "A personal token belongs to a user: log in as yourself (the bootstrap admin token "
            "has no user to own one)."
        )
    if not user.is_active or not user.is_staff:
        raise PermissionDenied("Only active staff users can hold API tokens.")
    clean_name = validate_name(name)
    days = validate_days(expires_in_days)
    now = now or timezone.now()
    active = ApiToken.objects.filter(user=user, revoked_at__isnull=True, expires_at__gt=now)
    if active.count() >= MAX_ACTIVE_PER_USER:
        raise ValidationError(
            {"name": [f"You hold {MAX_ACTIVE_PER_USER} live tokens already: revoke one first."]}
        )
    for _ in range(5):
        prefix = _new_prefix()
        secret = f"{TOKEN_SCHEME}_{prefix}_{secrets.token_urlsafe(32)}"
        if not ApiToken.objects.filter(prefix=prefix).exists():
            break
    token = ApiToken.objects.create(
        user=user,
        name=clean_name,
        prefix=prefix,
        token_hash=hash_token(secret),
        expires_at=now + dt.timedelta(days=days),
    )
    logger.info(
        "API token %s created by %s (expires %s)", prefix, user.get_username(), token.expires_at
    )
    return NewToken(token=token, secret=secret)


def _refuse(address: str, reason: str, prefix: str | None) -> TokenRefused:
    keys = [f"ip:{address}"]
    if prefix:
        keys.append(f"token:{prefix}")
    limits.record_failure(THROTTLE_SCOPE, *keys)
    # Never the token; the prefix only when it names a real token (so it is not attacker text).
    logger.warning(
        "API token refused from %s: %s%s", address, reason, f" (token {prefix})" if prefix else ""
    )
    return TokenRefused("Invalid or expired API token.")


def check_throttle(address: str) -> None:
    wait = limits.retry_after(THROTTLE_SCOPE, f"ip:{address}")
    if wait:
        raise TokenThrottled(wait)


def record_failure(address: str, reason: str) -> TokenRefused:
    """A bad credential that is not a personal token (e.g. a wrong bootstrap token)."""
    return _refuse(address, reason, None)


def authenticate(value: str, address: str, now: dt.datetime | None = None) -> ApiToken:
    """The live token ``value`` names, or TokenRefused / TokenThrottled. Marks it used."""
    check_throttle(address)
    match = TOKEN_RE.match(value)
    if match is None:
        raise _refuse(address, "malformed token", None)
    prefix = match.group(1)
    wait = limits.retry_after(THROTTLE_SCOPE, f"token:{prefix}")
    if wait:
        raise TokenThrottled(wait)
    token = ApiToken.objects.select_related("user").filter(prefix=prefix).first()
    if token is None:
        raise _refuse(address, "unknown token", None)
    if not hmac.compare_digest(token.token_hash, hash_token(value)):
        raise _refuse(address, "wrong secret", prefix)
    now = now or timezone.now()
    if token.revoked_at is not None:
        raise _refuse(address, "revoked token", prefix)
    if token.expires_at <= now:
        raise _refuse(address, "expired token", prefix)
    user = token.user
    if not user.is_active or not user.is_staff:
        raise _refuse(address, "owner inactive or not staff", prefix)
    # Bookkeeping, not a user write: a plain update (no audit entry), at most once a minute
    # per token and address so a busy script does not write on every call.
    stale = token.last_used_at is None or now - token.last_used_at >= LAST_USED_EVERY
    if stale or token.last_used_from != address:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now, last_used_from=address)
        token.last_used_at, token.last_used_from = now, address
    return token


def visible_tokens(user: Any) -> Any:
    """The tokens a user may list: their own; all of them with accounts.view_apitoken."""
    qs = ApiToken.objects.select_related("user")
    if getattr(user, "has_perm", None) and user.has_perm("accounts.view_apitoken"):
        return qs
    if getattr(user, "pk", None) is None:
        return qs.none()
    return qs.filter(user=user)


def may_revoke(user: Any, token: ApiToken) -> bool:
    if getattr(user, "pk", None) is not None and token.user_id == user.pk:
        return True
    return bool(user.has_perm("accounts.change_apitoken"))


def revoke_token(user: Any, token: ApiToken, now: dt.datetime | None = None) -> ApiToken:
    """Revoke now (the row stays, for the audit). Revoking twice keeps the first time."""
    if not may_revoke(user, token):
        raise PermissionDenied("You can revoke only your own tokens.")
    with transaction.atomic():
        fresh = ApiToken.objects.select_for_update().get(pk=token.pk)
        if fresh.revoked_at is None:
            fresh.revoked_at = now or timezone.now()
            fresh.save(update_fields=["revoked_at"])
    logger.info("API token %s revoked by %s", fresh.prefix, getattr(user, "username", user))
    return fresh
