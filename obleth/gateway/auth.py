"""Client authentication for /v1: gateway keys, closed by default.

- A key is accepted only as ``Authorization: Bearer <key>`` (what every OpenAI client sends).
  ``x-api-key`` is not read (one way in, one thing to audit); a request that sends only that header
  is told to use ``Authorization``. A key in the query string (``?api_key=``...) is refused with a
  400 (query strings end up in access logs and browser histories); it is never logged.
- Keys are the database rows (:mod:`obleth.gateway.keys`) plus the static
  ``OBLETH_GATEWAY_API_KEYS``. With none of either, every request gets a 401 saying how to create
  one, unless ``OBLETH_GATEWAY_OPEN=1``: then keys are not checked at all.
- Unknown keys count as failures per client address (``obleth.core.limits``, scope
  ``gateway-key``): past the limit that address gets 429 with ``Retry-After``, the right key
  included, until the lockout ends. Each refusal logs one line naming the address, never the key.
- The happy path costs no query: the key table and the lockouts come from the per-process cache.
- :func:`check_credentials` is the decision, framework-neutral: the gateway service
  (:mod:`obleth.gateway.service`) calls it with the header, the client address and the query
  parameter names, as any other front door would.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

from django.conf import settings
from django.http import HttpResponse

from obleth.core import limits
from obleth.gateway import keys
from obleth.gateway.keys import KeyEntry
from obleth.gateway.proxy import openai_error

log = logging.getLogger(__name__)

#: Query parameters that look like a credential; any of them is refused (case-insensitive).
QUERY_KEY_NAMES = frozenset({"api_key", "api-key", "apikey", "key", "access_token", "token"})
HOW_TO_CREATE = (
    "Create one in the admin (Gateway keys, /admin/gateway/gatewaykey/add/), with the Management "
    "API (POST /api/v1/gateway-keys) or with 'manage.py create_gateway_key --name NAME', "
    "then send 'Authorization: Bearer <key>'."
)

MAX_REMEMBERED_FAILURES = 10_000
_failed_lock = threading.Lock()
_failed_recently: dict[str, float] = {}  # limits key -> time.monotonic() of this process's failure


@dataclass(frozen=True)
class Caller:
    """Who is calling /v1: a key, or nobody (open gateway)."""

    key: KeyEntry | None

    def allows(self, model_name: str) -> bool:
        return self.key is None or self.key.allows(model_name)


OPEN_CALLER = Caller(None)


def gateway_open() -> bool:
    return bool(getattr(settings, "OBLETH_GATEWAY_OPEN", False))


@dataclass(frozen=True)
class Refusal:
    """An authentication failure, as any front door answers it (OpenAI error shape)."""

    status: int
    message: str
    code: str
    kind: str = "invalid_request_error"
    headers: tuple[tuple[str, str], ...] = ()

    def response(self) -> HttpResponse:
        return openai_error(
            self.status, self.message, kind=self.kind, code=self.code, headers=dict(self.headers)
        )


def _unauthorized(message: str, code: str = "invalid_api_key") -> Refusal:
    return Refusal(401, message, code, headers=(("WWW-Authenticate", 'Bearer realm="obleth"'),))


def _throttled(wait: int) -> Refusal:
    return Refusal(
        429,
        f"Too many failed gateway keys from this address: try again in {wait} s.",
        "too_many_failed_keys",
        kind="rate_limit_error",
        headers=(("Retry-After", str(wait)),),
    )


def check_credentials(
    authorization: str,
    *,
    address: str,
    path: str = "",
    query_names: Iterable[str] = (),
    has_x_api_key: bool = False,
) -> Caller | Refusal:
    """The whole decision for one /v1 request, independent of the web framework.

    ``authorization`` is the Authorization header ('' when absent), ``query_names`` the names of
    the query-string parameters, ``address`` the client address. No query on the happy path
    (cached key table); an unknown key costs the lockout bookkeeping (a few queries).
    """
    decision = _decide(
        authorization,
        address=address,
        path=path,
        query_names=query_names,
        has_x_api_key=has_x_api_key,
        blocking=True,
    )
    assert decision is not None  # blocking: every case is decided
    return decision


def check_credentials_cached(
    authorization: str, *, address: str, query_names: Iterable[str] = ()
) -> Caller | Refusal | None:
    """The same decision when it needs no database and no log line: a valid key in the cached
    key table, from an address with no failures to reset (or an open gateway). None otherwise:
    then call :func:`check_credentials` off the event loop. The gateway service calls this
    first, so the usual request never leaves its event loop: on the loop, the minute's write of
    a key's last use and the rebuild of a table past its cache time go to a thread while the
    request goes on (with no loop, both make it None as before). Before, every request that
    found the write due went to the thread pool together: 1,000 streams starting at once
    waited up to 9 s for their first byte (bench/gateway_bench.py)."""
    return _decide(authorization, address=address, query_names=query_names, blocking=False)


def _decide(
    authorization: str,
    *,
    address: str,
    path: str = "",
    query_names: Iterable[str] = (),
    has_x_api_key: bool = False,
    blocking: bool,
) -> Caller | Refusal | None:
    if any(name.lower() in QUERY_KEY_NAMES for name in query_names):
        if not blocking:
            return None
        log.warning(
            "gateway: refused a request from %s with a key in the query string (path %s); "
            "the key is not logged",
            address,
            path,
        )
        return Refusal(
            400,
            "Do not put the key in the URL (query strings are logged by proxies and servers): "
            "send it as 'Authorization: Bearer <key>', and consider this key exposed: revoke it "
            "and create a new one.",
            "api_key_in_query",
        )
    if gateway_open():
        return OPEN_CALLER
    stale = False
    table: keys.KeyTable | None
    if blocking:
        table = keys.get_key_table()
    else:
        table = keys.cached_key_table()
        if table is None:  # past its cache time: a key it finds valid goes on, see below
            table, stale = keys.stale_key_table(), True
    if table is None:
        return None
    if not table.configured():
        if not blocking:
            return None
        return _unauthorized(
            "This gateway has no API key yet, so it refuses every request. " + HOW_TO_CREATE,
            code="no_gateway_keys",
        )
    scheme, _, supplied = str(authorization).partition(" ")
    supplied = supplied.strip()
    if scheme.lower() != "bearer" or not supplied:
        if not blocking:
            return None
        hint = " This gateway does not read 'x-api-key'." if has_x_api_key else ""
        return _unauthorized(f"Send your gateway key as 'Authorization: Bearer <key>'.{hint}")
    limits_key = f"ip:{address}"
    entry = table.lookup(supplied)
    if entry is None:
        return _unknown_key(address, limits_key) if blocking else None
    wait = table.blocked_for(limits_key)
    if wait:
        return _throttled(wait)
    if not blocking and (
        entry.revoked
        or (entry.expires_at is not None and entry.expired())
        or limits_key in _failed_recently
    ):
        return None  # a log line or a reset of failures: off the event loop
    if not blocking:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # called outside the gateway's event loop
            return None if stale or keys.touch_due(entry) else Caller(entry)
        if keys.claim_touch(entry):  # the minute's write of its last use, in a thread
            loop.run_in_executor(None, keys.write_touch, entry)
        if stale:  # a valid key in a table past its cache time: rebuilt in a thread meanwhile
            keys.refresh_in_background(loop)
        return Caller(entry)
    if entry.revoked:
        log.info("gateway: revoked key %s used from %s", entry.label, address)
        return _unauthorized(f"This gateway key ({entry.prefix}…) was revoked.", "revoked_api_key")
    if entry.expires_at is not None and entry.expired():
        log.info("gateway: expired key %s used from %s", entry.label, address)
        return _unauthorized(
            f"This gateway key ({entry.prefix}…) expired at {entry.expires_at.isoformat()}.",
            "expired_api_key",
        )
    _clear_failures(limits_key)
    keys.touch(entry)
    return Caller(entry)


def _unknown_key(address: str, limits_key: str) -> Refusal:
    wait = limits.retry_after(keys.SCOPE, limits_key)
    if wait:
        return _throttled(wait)
    wait = limits.record_failure(keys.SCOPE, limits_key)
    if wait:
        log.warning(
            "gateway: unknown key from %s; too many failures, address locked out for %s s",
            address,
            wait,
        )
        keys.invalidate_keys()  # this process sees the lockout at once
        return _throttled(wait)
    log.warning("gateway: unknown key from %s (the key is not logged)", address)
    with _failed_lock:
        if len(_failed_recently) >= MAX_REMEMBERED_FAILURES:  # many addresses: forget, stay small
            _failed_recently.clear()
        _failed_recently[limits_key] = time.monotonic()
    return _unauthorized("Invalid gateway key.")


def _clear_failures(limits_key: str) -> None:
    """After failures seen by this process, a right key resets the count (one query, once)."""
    with _failed_lock:
        if _failed_recently.pop(limits_key, None) is None:
            return
    limits.record_success(keys.SCOPE, limits_key)
