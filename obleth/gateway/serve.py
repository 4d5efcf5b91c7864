"""Run the /v1 gateway service: ``python -m obleth.gateway.serve [--bind HOST:PORT] [--workers N]``.

uvicorn with uvloop (accepting new connections in batches, :mod:`obleth.gateway.accept`) and
httptools, one event loop per worker process. On SIGTERM uvicorn stops
accepting, lets requests and streams in flight finish for up to
``OBLETH_GATEWAY_SHUTDOWN_GRACE_SECS``, then closes what is left.

A client must send its request head within ``OBLETH_GATEWAY_HEADER_TIMEOUT_SECS`` of connecting
(or of the previous answer on a kept-alive connection), else the connection is closed:
:class:`HeaderTimeoutProtocol` adds that timer to uvicorn's httptools protocol, which has none.
Slow-loris connections then cost a socket for a few seconds, not a worker.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import multiprocessing
import os
import shutil
import sys
import tempfile
from typing import Any, cast

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from obleth.gateway.answers import BODY_WRITER
from obleth.parent_death import die_with_parent


class CycleBodyWriter:
    """The :class:`obleth.gateway.answers.BodyWriter` of one request on uvicorn's httptools
    protocol: a relayed stream's chunk goes from the endpoint's socket callback straight to the
    client's socket, encoded as uvicorn's own ``send`` encodes it (HTTP/1.1 chunked), skipping
    a future, a task step and two coroutines per chunk. It steps aside (``ready()`` False) for
    anything but a started, unfinished, chunked answer to a connected client that is reading;
    then the relay falls back to ``send``, which waits for the client. It reads attributes of
    uvicorn's ``RequestResponseCycle`` (uvicorn is pinned in requirements/base.txt; the
    gateway's tests relay through a real uvicorn process)."""

    __slots__ = ("cycle",)

    def __init__(self, cycle: RequestResponseCycle) -> None:
        self.cycle = cycle

    def ready(self) -> bool:
        cycle = self.cycle
        return bool(
            cycle.response_started
            and not cycle.response_complete
            and cycle.chunked_encoding
            and not cycle.disconnected
            and not cycle.flow.write_paused
        )

    def write(self, data: bytes) -> None:
        self.cycle.transport.write(b"%x\r\n%s\r\n" % (len(data), data))


class HeaderTimeoutProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, plus: the request head must arrive in time, and each
    request's scope offers a :class:`CycleBodyWriter`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None
        from django.conf import settings

        self.header_timeout = float(settings.OBLETH_GATEWAY_HEADER_TIMEOUT_SECS)

    def _arm(self) -> None:
        self._disarm()
        if self.header_timeout > 0:
            self._head_timer = self.loop.call_later(self.header_timeout, self._head_too_slow)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_too_slow(self) -> None:
        self._head_timer = None
        if not self.transport.is_closing():
            self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._head_timer is None:
            self._arm()

    def on_headers_complete(self) -> None:
        self._disarm()
        before = self.cycle
        super().on_headers_complete()  # makes the cycle and schedules its task (not run yet)
        if self.cycle is not None and self.cycle is not before:
            scope = cast(dict[str, Any], self.cycle.scope)
            scope.setdefault("extensions", {})[BODY_WRITER] = CycleBodyWriter(self.cycle)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # The next request head on this kept-alive connection starts uvicorn's keep-alive timer;
        # once bytes arrive, on_message_begin arms ours.

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)


def worker_dies_with_main() -> None:
    """In a uvicorn worker process (``--workers`` > 1): be killed by the kernel when the uvicorn
    main process dies, SIGKILL included (:mod:`obleth.parent_death`). Otherwise orphaned
    workers would keep the port and serve with nobody supervising them."""
    parent = multiprocessing.parent_process()
    if parent is not None and parent.pid is not None:
        die_with_parent(parent.pid)
    # else: the main process itself (workers=1); scripts/die-with-parent covers it


def create_app() -> Any:
    """The uvicorn factory: Django is set up once per worker process, then the service made."""
    import django

    worker_dies_with_main()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "obleth.settings")
    django.setup()
    from obleth.gateway.service import GatewayService

    service = GatewayService()
    # Django, the settings and the service are made once and live as long as the process: move
    # them out of the collector's reach, so a full collection (about 20-40 ms over these ~90,000
    # objects, measured on this machine) never stalls the event loop under thousands of streams.
    gc.collect()
    gc.freeze()
    return service


def _split_bind(bind: str) -> tuple[str, int]:
    host, _, port = bind.rpartition(":")
    if not host or not port.isdigit():
        raise SystemExit(f"--bind must be HOST:PORT, got {bind!r}")
    return host.strip("[]"), int(port)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="obleth's /v1 gateway service")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "obleth.settings")
    from django.conf import settings

    parser.add_argument("--bind", default=settings.OBLETH_GATEWAY_BIND)
    parser.add_argument("--workers", type=int, default=settings.OBLETH_GATEWAY_WORKERS)
    args = parser.parse_args(argv)
    host, port = _split_bind(args.bind)
    workers = max(1, args.workers)
    metrics_dir = None
    if workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        metrics_dir = tempfile.mkdtemp(prefix="obleth-gateway-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir

    import uvicorn

    try:
        uvicorn.run(
            "obleth.gateway.serve:create_app",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            loop="obleth.gateway.accept:new_event_loop",  # uvloop, accepting in batches
            http=HeaderTimeoutProtocol,
            lifespan="on",
            access_log=False,
            timeout_keep_alive=settings.OBLETH_GATEWAY_KEEPALIVE_SECS,
            timeout_graceful_shutdown=settings.OBLETH_GATEWAY_SHUTDOWN_GRACE_SECS,
            backlog=4096,
            log_level="warning",
        )
    finally:
        if metrics_dir:
            shutil.rmtree(metrics_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
