"""The usual /v1 request is authenticated on the gateway's event loop, with no thread hop.

``check_credentials_cached`` decides from the process's cached key table when that needs no
query and no log line; every other case answers None and the service hands the request to
``check_credentials`` in a thread (the same decision as before). Real database, real key table,
the in-process gateway service (tests/plugins/gateway_client.py); nothing is mocked except a
counting wrapper around ``check_credentials`` to see which requests left the loop.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
from django.utils import timezone

from obleth.gateway import auth, keys, service
from obleth.gateway.auth import Caller, Refusal, check_credentials_cached
from tests.plugins.gateway_client import GatewayClient
from tests.security.gateway_keys_support import (
    bearer,
    closed_gateway,  # noqa: F401  (the fixture, by name)
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("closed_gateway")]


def warm(secret: str) -> None:
    """What the first request of a key does off the loop: build the table, record the use."""
    decision = auth.check_credentials(f"Bearer {secret}", address="10.0.0.1")
    assert isinstance(decision, Caller)


def test_a_known_key_in_a_fresh_table_is_decided_without_io() -> None:
    created = keys.create_key("k")
    warm(created.secret)
    decision = check_credentials_cached(f"Bearer {created.secret}", address="10.0.0.1")
    assert isinstance(decision, Caller) and decision.key is not None
    assert decision.key.prefix == created.key.prefix


def revoke(created: keys.CreatedKey) -> None:
    created.key.revoked_at = timezone.now()
    created.key.save()
    keys.create_key("keeps-it-closed-not-empty")


def expire(created: keys.CreatedKey) -> None:
    created.key.expires_at = timezone.now() - dt.timedelta(seconds=1)
    created.key.save()


def stale_table(created: keys.CreatedKey) -> None:
    assert keys._table is not None
    keys._table = dataclasses.replace(keys._table, built_at=0.0)  # older than the cache time


def failures_to_reset(created: keys.CreatedKey) -> None:
    assert isinstance(auth.check_credentials("Bearer obk_wrong", address="10.0.0.1"), Refusal)


def use_due(created: keys.CreatedKey) -> None:
    keys.forget_touches()


@pytest.mark.parametrize(
    ("change", "authorization", "query_names"),
    [
        (None, "Bearer obk_" + "x" * 43, ()),  # unknown key: lockout bookkeeping
        (None, "", ()),  # no header: a refusal with a how-to
        (None, "Basic abc", ()),
        (None, None, ["api_key"]),  # a key in the URL: refused and logged
        (None, None, ["TOKEN"]),
        (revoke, None, ()),  # logged
        (expire, None, ()),  # logged
        (stale_table, None, ()),  # the table must be rebuilt (queries)
        (failures_to_reset, None, ()),  # one query resets the count
        (use_due, None, ()),  # last use to record (one UPDATE)
    ],
    ids=[
        "unknown-key",
        "no-header",
        "not-bearer",
        "query-api_key",
        "query-TOKEN",
        "revoked",
        "expired",
        "stale-table",
        "failures-to-reset",
        "use-to-record",
    ],
)
def test_every_case_needing_io_or_a_log_line_is_left_to_the_thread(
    change: Callable[[keys.CreatedKey], None] | None,
    authorization: str | None,
    query_names: tuple[str, ...] | list[str],
) -> None:
    created = keys.create_key("k")
    warm(created.secret)
    if change is not None:
        change(created)
        if keys._table is None:  # a save in this process dropped the table: rebuild it, as a
            keys.get_key_table()  # request would, so only the case itself is left
    header = f"Bearer {created.secret}" if authorization is None else authorization
    assert check_credentials_cached(header, address="10.0.0.1", query_names=query_names) is None
    # ... and the thread's decision is what it always was (never a Caller for these but one).
    full = auth.check_credentials(header, address="10.0.0.1", query_names=query_names)
    expected_caller = change in (stale_table, failures_to_reset, use_due)
    assert isinstance(full, Caller) is expected_caller, full


def test_an_open_gateway_needs_no_table(settings: Any) -> None:
    settings.OBLETH_GATEWAY_OPEN = True
    assert check_credentials_cached("", address="10.0.0.1") is auth.OPEN_CALLER
    assert check_credentials_cached("", address="10.0.0.1", query_names=["key"]) is None


def test_only_the_first_request_of_a_key_leaves_the_event_loop(
    gateway: GatewayClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    created = keys.create_key("k")
    off_loop: list[str] = []
    real = service.check_credentials

    def counting(*args: Any, **kwargs: Any) -> Caller | Refusal:
        off_loop.append(str(args[0])[:12])
        return real(*args, **kwargs)

    monkeypatch.setattr(service, "check_credentials", counting)
    gateway.auto_reload = False
    statuses = [gateway.get("/v1/models", **bearer(created.secret)).status_code for _ in range(20)]
    assert statuses == [200] * 20
    assert len(off_loop) == 1, off_loop  # built the table and recorded the use; then none
    assert gateway.get("/v1/models", HTTP_AUTHORIZATION="Bearer obk_wrong").status_code == 401
    assert len(off_loop) == 2  # a wrong key is still decided (and counted) in the thread


def test_on_the_event_loop_a_due_write_of_last_use_goes_to_a_thread_once(
    transactional_db: Any,
) -> None:
    """On the gateway's loop a valid key whose last use is due to be written is decided at
    once; one caller claims the write, which runs in the loop's thread pool, and the others
    of that minute claim nothing (before, each of them went to the thread pool: 1,000 streams
    starting together waited up to 9 s for a first byte)."""
    import asyncio

    from obleth.gateway.models import GatewayKey

    created = keys.create_key("k")
    warm(created.secret)
    keys.forget_touches()
    header = f"Bearer {created.secret}"

    async def many() -> list[object]:
        decisions = [check_credentials_cached(header, address="10.0.0.1") for _ in range(200)]
        for _ in range(100):  # the thread's UPDATE lands
            await asyncio.sleep(0.02)
            row = await asyncio.to_thread(GatewayKey.objects.get, pk=created.key.pk)
            if row.last_used_at is not None:
                break
        return list(decisions)

    before = timezone.now()
    decisions = asyncio.run(many())
    assert all(isinstance(d, Caller) for d in decisions)
    row = GatewayKey.objects.get(pk=created.key.pk)
    assert row.last_used_at is not None and row.last_used_at >= before
    assert not keys.claim_touch(keys.get_key_table().lookup(created.secret))  # claimed: once


def test_on_the_event_loop_a_stale_table_serves_a_valid_key_and_is_rebuilt_in_a_thread(
    transactional_db: Any,
) -> None:
    """A valid key in a table past its cache time goes on; one thread rebuilds the table. A
    key the stale table does not know (wrong, or just created by another process:
    tests/gateway/test_service.py's closed-by-default case) is still left to the thread,
    which rebuilds before deciding."""
    import asyncio

    created = keys.create_key("k")
    warm(created.secret)
    assert keys._table is not None
    keys._table = dataclasses.replace(keys._table, built_at=0.0)

    async def run() -> tuple[object, object, float]:
        ok = check_credentials_cached(f"Bearer {created.secret}", address="10.0.0.1")
        for _ in range(100):
            await asyncio.sleep(0.02)
            table = keys._table
            if table is not None and table.built_at > 0:
                break
        wrong = check_credentials_cached("Bearer obk_" + "w" * 43, address="10.0.0.1")
        table = keys._table
        return ok, wrong, table.built_at if table else 0.0

    ok, wrong, built_at = asyncio.run(run())
    assert isinstance(ok, Caller)
    assert wrong is None  # an unknown key: the thread decides (lockout bookkeeping)
    assert built_at > 0  # rebuilt in the background
