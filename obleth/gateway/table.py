"""The gateway service's routing table: held in memory, reloaded when something changes.

A request never touches the database. The table (models, endpoints, each model's state for its
503: spec switches, breaker, refused submit, pending and starting replicas) is read by
:func:`obleth.gateway.routing.build_route_table` in a thread and swapped in whole:

- at once when a change message arrives on the Redis channel :func:`channel` (published by the
  web process, the provisioner and the endpoint check whenever an endpoint, a model, a managed
  spec, a replica or a key changes: :func:`publish_change`, see :mod:`obleth.gateway.signals`;
  the provisioner publishes once per pass that changed replica rows);
- every ``OBLETH_GATEWAY_RELOAD_SECS`` in any case, so a lost message (Redis restarting) or a
  change made behind Django's back costs at most that long.

If the database cannot be read, the last good table keeps serving and the failure is logged once
per outage.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import close_old_connections, transaction

from obleth.gateway.routing import RouteTable, build_route_table

log = logging.getLogger(__name__)

CHANNEL_PREFIX = "obleth:gateway:changed"


def redis_url() -> str:
    return str(getattr(settings, "REDIS_URL", "") or "redis://127.0.0.1:6379/0")


def channel() -> str:
    """``obleth:gateway:changed:<db>``: pub/sub channels are server-wide, not per database, so
    the Redis database number of REDIS_URL is in the name; installs that share a Redis server on
    different databases do not reload on each other's changes."""
    path = urllib.parse.urlsplit(redis_url()).path.strip("/")
    return f"{CHANNEL_PREFIX}:{path if path.isdigit() else '0'}"


_publisher: Any = None
_quiet_until = 0.0  # after a failed publish, none is tried until then (Redis is down)
QUIET_AFTER_FAILURE_SECS = 5.0


def _publish_now(what: str) -> None:
    global _publisher, _quiet_until
    if time.monotonic() < _quiet_until:
        return  # each try would cost a connect timeout; the gateways' timer covers the miss
    try:
        import redis

        if _publisher is None:
            _publisher = redis.Redis.from_url(
                redis_url(), socket_timeout=0.5, socket_connect_timeout=0.5
            )
        _publisher.publish(channel(), what)
    except Exception as exc:  # Redis down must never fail the write that changed
        _quiet_until = time.monotonic() + QUIET_AFTER_FAILURE_SECS
        log.debug("gateway change notice not published (%s); gateways reload on their timer", exc)


def publish_change(what: str = "routes") -> None:
    """Tell every gateway process to reload (best effort: the periodic reload covers a miss).

    Called from Django signal handlers in whichever process made the change; sent once the
    transaction commits, so a gateway that reloads at once sees the change.
    """
    transaction.on_commit(lambda: _publish_now(what))


def _load() -> RouteTable:
    close_old_connections()
    try:
        return build_route_table()
    finally:
        close_old_connections()


class LiveTable:
    """Holds the current table; :meth:`run` keeps it fresh until cancelled."""

    def __init__(
        self,
        loader: Callable[[], RouteTable] = _load,
        reload_secs: float | None = None,
    ) -> None:
        self._loader = loader
        self.reload_secs = (
            float(reload_secs)
            if reload_secs is not None
            else float(getattr(settings, "OBLETH_GATEWAY_RELOAD_SECS", 5))
        )
        self.table: RouteTable | None = None
        self.loaded_at: float = 0.0
        self.reloads = 0
        self.last_error: str = ""
        self._wake = asyncio.Event()
        self._listening = False
        self.on_reload: Callable[[RouteTable], None] | None = None

    @property
    def age_secs(self) -> float | None:
        return None if self.table is None else time.monotonic() - self.loaded_at

    async def reload(self) -> bool:
        try:
            table = await asyncio.to_thread(self._loader)
        except Exception as exc:  # keep serving the last good table
            message = f"{type(exc).__name__}: {exc}"
            if message != self.last_error:
                log.warning("gateway: routing table not reloaded (%s); serving the last one", exc)
            self.last_error = message
            return False
        if self.last_error:
            log.info("gateway: routing table reloaded again after: %s", self.last_error)
        self.table, self.loaded_at, self.last_error = table, time.monotonic(), ""
        self.reloads += 1
        if self.on_reload is not None:
            self.on_reload(table)
        return True

    def notify(self) -> None:
        """Reload soon (several notices in a burst cost one reload)."""
        self._wake.set()

    async def run(self) -> None:
        listener = asyncio.create_task(self._listen())
        try:
            while True:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=self.reload_secs)
                self._wake.clear()
                await self.reload()
        finally:
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await listener

    async def _listen(self) -> None:
        """Subscribe to change notices; reconnect with backoff when Redis goes away."""
        import redis.asyncio as aioredis

        delay = 0.5
        while True:
            client = aioredis.Redis.from_url(redis_url(), socket_connect_timeout=2)
            try:
                pubsub = client.pubsub()
                await pubsub.subscribe(channel())
                if not self._listening:
                    log.debug("gateway: listening for routing changes on %s", channel())
                self._listening, delay = True, 0.5
                self.notify()  # anything may have changed while we were not listening
                async for message in pubsub.listen():
                    if message.get("type") == "message":
                        self.notify()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis down: the timer keeps us fresh
                if self._listening:
                    log.warning(
                        "gateway: change notices unavailable (%s); reloading every %.0f s",
                        exc,
                        self.reload_secs,
                    )
                self._listening = False
            finally:
                with contextlib.suppress(Exception):
                    await client.aclose()
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10.0)
