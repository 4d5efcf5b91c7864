"""Gateway keys: creating, revoking and recognising them, with an in-memory table for /v1.

- A secret is ``obk_`` + 43 URL-safe characters (256 random bits). It is returned once by
  :func:`create_key` and never stored: the row keeps its SHA-256 digest and its first
  :data:`PREFIX_LEN` characters (the prefix names the key in lists and logs).
- The request path never queries for a key: each gateway process keeps a :class:`KeyTable` (digests
  of the database keys and of ``OBLETH_GATEWAY_API_KEYS``, plus the client addresses currently
  locked out by ``obleth.core.limits``) and rebuilds it when it is older than
  ``OBLETH_GATEWAY_KEY_CACHE_MS`` (default 1 s; three queries). The process that changes a key
  drops its table at once (signals), so a revocation is immediate there and within the cache time
  in every other process.
- ``last_used_at`` is written at most once a minute per key and process (one UPDATE).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import logging
import math
import re
import secrets
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import DatabaseError, IntegrityError, transaction
from django.utils import timezone

from obleth.core.models import AuthFailureWindow, Model
from obleth.gateway.models import GatewayKey
from obleth.logging import register_secret

log = logging.getLogger(__name__)

SCOPE = "gateway-key"  # the obleth.core.limits scope of failed gateway keys
SECRET_START = "obk_"
PREFIX_LEN = 12  # "obk_" + 8 random characters
SECRET_RE = re.compile(r"obk_[A-Za-z0-9_-]{43}")
MAX_SECRET_LEN = 256  # longer values are refused without being hashed
MAX_NAME_LEN = 200
TOUCH_EVERY_SECS = 60.0
DEFAULT_CACHE_SECS = 1.0
STATIC_NAME = "OBLETH_GATEWAY_API_KEYS"


# ----------------------------------------------------------------------------- secrets


def new_secret() -> str:
    return SECRET_START + secrets.token_urlsafe(32)


def digest_of(secret: str) -> str:
    """SHA-256 (hex) of a secret as sent; never raises, whatever the characters."""
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def validate_key_name(value: object) -> str:
    """The one validator of a key's name (admin, API, management command)."""
    if not isinstance(value, str):
        raise ValidationError("The key's name must be text.")
    name = value.strip()
    if not name:
        raise ValidationError("Give the key a name (who or what uses it), e.g. 'team-search'.")
    if len(name) > MAX_NAME_LEN:
        raise ValidationError(f"The key's name is longer than {MAX_NAME_LEN} characters.")
    if any(not ch.isprintable() for ch in name):
        raise ValidationError(
            "The key's name contains a control character (newline, NUL, tab...): use plain text."
        )
    return name


def validate_expiry(value: dt.datetime | None) -> dt.datetime | None:
    if value is not None and value <= timezone.now():
        raise ValidationError("The expiry is in the past: give a future time, or none.")
    return value


def resolve_models(names: Iterable[str]) -> list[Model]:
    """Models by name; every unknown name is named in one error."""
    wanted = [n.strip() for n in names if n and n.strip()]
    found = {m.name: m for m in Model.objects.filter(name__in=wanted)}
    missing = [n for n in wanted if n not in found]
    if missing:
        raise ValidationError(
            f"No model named {', '.join(repr(n) for n in missing)}: give names from "
            "GET /api/v1/models (or the admin's model list)."
        )
    return [found[n] for n in dict.fromkeys(wanted)]


@dataclass(frozen=True)
class CreatedKey:
    key: GatewayKey
    secret: str = field(repr=False)


def create_key(
    name: str,
    models: Iterable[Model] = (),
    expires_at: dt.datetime | None = None,
    actor: str = "",
) -> CreatedKey:
    """A new key; its secret is in the result and nowhere else."""
    name = validate_key_name(name)
    validate_expiry(expires_at)
    for _ in range(3):  # a prefix clash is a 1 in 2^48 event: draw again
        key = GatewayKey(name=name, expires_at=expires_at, created_by=actor[:200])
        secret = issue_secret(key)
        try:
            with transaction.atomic():
                key.save()
                set_models(key, models)
        except IntegrityError:
            continue
        invalidate_keys()
        register_secret(secret)
        log.info("gateway key %s (%s) created by %s", key.prefix, key.name, actor or "?")
        return CreatedKey(key, secret)
    raise RuntimeError("could not draw a unique gateway key prefix")


def set_models(key: GatewayKey, models: Iterable[Model]) -> None:
    """Limit a saved key to these models; none given: every model. A limited key whose models are
    all deleted later may call none (deleting a model never widens a key)."""
    chosen = list(models)
    key.allowed_models.set(chosen)
    if key.models_limited != bool(chosen):
        key.models_limited = bool(chosen)
        key.save(update_fields=["models_limited"])
    invalidate_keys()


def issue_secret(key: GatewayKey) -> str:
    """Give an unsaved key a fresh secret (its prefix and digest); returns the secret."""
    secret = new_secret()
    key.prefix = secret[:PREFIX_LEN]
    key.digest = digest_of(secret)
    return secret


def ensure_key(name: str, secret: str, actor: str = "") -> tuple[GatewayKey, bool]:
    """Register a secret generated elsewhere (scripts/run's demo key), once: the key whose digest
    it is, and whether it was created now. The secret must be one :func:`new_secret` could make."""
    name = validate_key_name(name)
    if not SECRET_RE.fullmatch(secret or ""):
        raise ValidationError(
            "The secret must be 'obk_' followed by 43 URL-safe characters, e.g. "
            "python3 -c 'import secrets; print(\"obk_\" + secrets.token_urlsafe(32))'."
        )
    register_secret(secret)
    existing = GatewayKey.objects.filter(digest=digest_of(secret)).first()
    if existing is not None:
        return existing, False
    key = GatewayKey.objects.create(
        name=name, prefix=secret[:PREFIX_LEN], digest=digest_of(secret), created_by=actor[:200]
    )
    invalidate_keys()
    log.info("gateway key %s (%s) registered by %s", key.prefix, key.name, actor or "?")
    return key, True


def revoke_key(key: GatewayKey, actor: str = "") -> bool:
    """Revoke a key (for good); False when it already was."""
    if key.revoked_at is not None:
        return False
    key.revoked_at = timezone.now()
    key.save(update_fields=["revoked_at"])
    invalidate_keys()
    log.info("gateway key %s (%s) revoked by %s", key.prefix, key.name, actor or "?")
    return True


# ----------------------------------------------------------------------------- the key table


@dataclass(frozen=True)
class KeyEntry:
    """A key as the request path needs it (no ORM object)."""

    id: uuid.UUID | None  # None: a static key from OBLETH_GATEWAY_API_KEYS
    name: str
    prefix: str
    models: frozenset[str] | None  # None: every model
    expires_at: dt.datetime | None
    revoked: bool

    def allows(self, model_name: str) -> bool:
        return self.models is None or model_name in self.models

    def expired(self, now: dt.datetime | None = None) -> bool:
        return self.expires_at is not None and self.expires_at <= (now or timezone.now())

    @property
    def label(self) -> str:
        return f"{self.prefix}… ({self.name})"


@dataclass(frozen=True)
class KeyTable:
    by_digest: dict[str, KeyEntry]
    has_static: bool
    has_unexpiring: bool  # an active database key without expiry
    latest_expiry: dt.datetime | None  # of the active database keys that expire
    blocked: dict[str, float]  # limits key ("ip:...") -> time.time() the lockout ends
    built_at: float

    def lookup(self, secret: str) -> KeyEntry | None:
        if not secret or len(secret) > MAX_SECRET_LEN:
            return None
        return self.by_digest.get(digest_of(secret))

    def configured(self, now: dt.datetime | None = None) -> bool:
        """Whether any key can be used at all (else the gateway is closed with a how-to)."""
        if self.has_static or self.has_unexpiring:
            return True
        return self.latest_expiry is not None and self.latest_expiry > (now or timezone.now())

    def blocked_for(self, limits_key: str) -> int | None:
        until = self.blocked.get(limits_key)
        if until is None:
            return None
        left = until - time.time()
        return math.ceil(left) if left > 0 else None


_lock = threading.Lock()
_table: KeyTable | None = None
_rebuilding = False
_generation = 0  # bumped by invalidate_keys: a rebuild begun before it is not kept
_touch_lock = threading.Lock()
_touched: dict[uuid.UUID, float] = {}
_refresh_scheduled = False
_refresh_lock = threading.Lock()


def _cache_secs() -> float:
    millis = getattr(settings, "OBLETH_GATEWAY_KEY_CACHE_MS", None)
    return DEFAULT_CACHE_SECS if millis is None else float(millis) / 1000.0


def build_key_table() -> KeyTable:
    """Read the keys and the current lockouts (three queries)."""
    now = timezone.now()
    by_digest: dict[str, KeyEntry] = {}
    for static in settings.OBLETH_GATEWAY_API_KEYS:
        register_secret(static)  # masked if it ever reaches a log line
        by_digest[digest_of(static)] = KeyEntry(None, STATIC_NAME, "static", None, None, False)
    allowed: dict[uuid.UUID, set[str]] = {}
    through = GatewayKey.allowed_models.through
    for key_id, model_name in through.objects.values_list("gatewaykey_id", "model__name"):
        allowed.setdefault(key_id, set()).add(model_name)
    has_unexpiring = False
    latest: dt.datetime | None = None
    rows = GatewayKey.objects.values_list(
        "id", "name", "prefix", "digest", "models_limited", "expires_at", "revoked_at"
    )
    for key_id, name, prefix, digest, limited, expires_at, revoked_at in rows:
        entry = KeyEntry(
            id=key_id,
            name=name,
            prefix=prefix,
            models=frozenset(allowed.get(key_id, ())) if limited else None,
            expires_at=expires_at,
            revoked=revoked_at is not None,
        )
        by_digest.setdefault(digest, entry)  # a static key with the same value wins
        if not entry.revoked:
            if entry.expires_at is None:
                has_unexpiring = True
            elif entry.expires_at > now and (latest is None or entry.expires_at > latest):
                latest = entry.expires_at
    blocked = {
        key: until.timestamp()
        for key, until in AuthFailureWindow.objects.filter(
            scope=SCOPE, blocked_until__gt=now
        ).values_list("key", "blocked_until")
        if until is not None
    }
    return KeyTable(
        by_digest=by_digest,
        has_static=bool(settings.OBLETH_GATEWAY_API_KEYS),
        has_unexpiring=has_unexpiring,
        latest_expiry=latest,
        blocked=blocked,
        built_at=time.monotonic(),
    )


def get_key_table() -> KeyTable:
    """The cached key table. When it is older than the cache time, one request rebuilds it while
    the others keep using the old one (no request waits for another's rebuild); after
    :func:`invalidate_keys` (a change in this process) every request waits for the new table."""
    global _table, _rebuilding
    table = _table
    if table is not None and time.monotonic() - table.built_at < _cache_secs():
        return table
    with _lock:
        table = _table
        if table is None:
            table = _table = build_key_table()
            return table
        if _rebuilding or time.monotonic() - table.built_at < _cache_secs():
            return table
        _rebuilding = True
        generation = _generation
    try:
        fresh = build_key_table()
    finally:
        with _lock:
            _rebuilding = False
    with _lock:
        if _generation == generation:  # not invalidated meanwhile (else the next request builds)
            _table = fresh
        return fresh


def cached_key_table() -> KeyTable | None:
    """The key table when reading it costs no query: fresh, or stale while another request
    rebuilds it (which :func:`get_key_table` would hand out too). None when this request would
    have to rebuild it: call :func:`get_key_table` off the event loop then."""
    table = _table
    if table is None:
        return None
    if _rebuilding or time.monotonic() - table.built_at < _cache_secs():
        return table
    return None


def stale_key_table() -> KeyTable | None:
    """The key table whatever its age (None when there is none): for a key it finds valid the
    gateway goes on and calls :func:`refresh_in_background`."""
    return _table


def refresh_in_background(loop: asyncio.AbstractEventLoop) -> None:
    """Rebuild a stale key table in a thread of ``loop`` (once at a time)."""
    global _refresh_scheduled
    with _refresh_lock:  # never _lock here: a thread may hold it across a query
        if _refresh_scheduled:
            return
        _refresh_scheduled = True
    loop.run_in_executor(None, _refresh)


def _refresh() -> None:
    global _refresh_scheduled
    try:
        get_key_table()
    finally:
        with _refresh_lock:
            _refresh_scheduled = False


def touch_due(entry: KeyEntry) -> bool:
    """Whether :func:`touch` would write (a database key not recorded in the last minute)."""
    if entry.id is None:
        return False
    last = _touched.get(entry.id)
    return last is None or time.monotonic() - last >= TOUCH_EVERY_SECS


def invalidate_keys() -> None:
    """Drop the cached table: the next request reads the database again."""
    global _table, _generation
    with _lock:
        _table = None
        _generation += 1


def touch(entry: KeyEntry) -> None:
    """Record that a database key was used: one UPDATE per key per minute in this process."""
    if claim_touch(entry):
        write_touch(entry)


def claim_touch(entry: KeyEntry) -> bool:
    """Whether this caller is the one to write the key's last use now (then it must call
    :func:`write_touch`); every other caller in the minute gets False at once."""
    with _touch_lock:
        if entry.id is None or not touch_due(entry):
            return False
        _touched[entry.id] = time.monotonic()
    return True


def write_touch(entry: KeyEntry) -> None:
    """The UPDATE of a claimed last use (blocking: not on the event loop)."""
    if entry.id is None:
        return
    try:
        GatewayKey.objects.filter(pk=entry.id).update(last_used_at=timezone.now())
    except DatabaseError:
        log.warning("could not record the last use of gateway key %s", entry.prefix)


def forget_touches() -> None:
    """Tests: forget when keys were last written, so the next use writes again."""
    with _touch_lock:
        _touched.clear()
