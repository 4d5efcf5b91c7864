"""A pass at once when a gateway asks: the wake of a model scaled to zero.

The gateway publishes the model id on ``obleth:provisioner:trigger``
(:meth:`obleth.gateway.inflight.InflightCounter.wake`). The provisioner loop
(``provisioner.services.run_loop``) listens in a thread and, instead of sleeping to its next pass,
runs one as soon as a message arrives. Best effort: with Redis down the loop keeps its own
interval (a fast pass every second by default), so a wake is at most that late. With Celery beat
the fast passes on the beat schedule play that part.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["PassTrigger"]

POLL_SECS = 0.25  # how often a wait looks at the stop flag


class PassTrigger:
    """Listens for pass requests; :meth:`wait` sleeps until one arrives, stop, or the timeout."""

    def __init__(self, url: str | None = None) -> None:
        self._url = url
        self.event = threading.Event()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        self.received = 0

    def start(self) -> PassTrigger:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._listen, name="provisioner-trigger", daemon=True
            )
            self._thread.start()
        return self

    def close(self) -> None:
        self._closed.set()

    def wait(self, stop: threading.Event, timeout: float) -> bool:
        """Sleep up to ``timeout``; True when a pass was asked for meanwhile."""
        deadline = time.monotonic() + max(timeout, 0.0)
        while not stop.is_set() and not self._closed.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if self.event.wait(min(left, POLL_SECS)):
                self.event.clear()
                return True
        return False

    def _url_or_settings(self) -> str:
        if self._url:
            return self._url
        from django.conf import settings

        return str(getattr(settings, "REDIS_URL", "") or "redis://127.0.0.1:6379/0")

    def _listen(self) -> None:
        import redis

        from obleth.gateway.inflight import TRIGGER

        delay, failing = 0.5, ""
        while not self._closed.is_set():
            client: Any = None
            try:
                client = redis.Redis.from_url(
                    self._url_or_settings(), socket_connect_timeout=2, socket_timeout=5
                )
                pubsub = client.pubsub(ignore_subscribe_messages=True)
                pubsub.subscribe(TRIGGER)
                if failing:
                    log.info("pass requests from the gateways received again")
                delay, failing = 0.5, ""
                while not self._closed.is_set():
                    message = pubsub.get_message(timeout=1.0)
                    if message is not None and message.get("type") == "message":
                        self.received += 1
                        self.event.set()
            except Exception as exc:  # noqa: BLE001 - Redis down: the loop's interval covers it
                text = f"{type(exc).__name__}: {exc}"
                if text != failing:
                    log.warning("pass requests from the gateways unavailable (%s)", text)
                failing = text
            finally:
                if client is not None:
                    with contextlib.suppress(Exception):  # closing a broken connection
                        client.close()
            self._closed.wait(delay)
            delay = min(delay * 2, 10.0)
