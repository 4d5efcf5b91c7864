"""The fake slurmrestd itself: its settings, fault switches and bookkeeping, and its lifecycle
(start, stop, going down and up again on the same port).

The job state lives in :mod:`.state`, the request handling in :mod:`.routes`, the HTTP server in
:mod:`.server`; this class joins them.
"""

from __future__ import annotations

import collections
import contextlib
import socket
import threading
from collections.abc import Iterable
from typing import ClassVar

from provisioner.slurm.fake import answers
from provisioner.slurm.fake.routes import Routes
from provisioner.slurm.fake.server import _Handler, _Server
from provisioner.slurm.fake.state import FakeJob, FakeNode, JobState


class FakeSlurmrestd(Routes, JobState):
    """A threaded fake slurmrestd on 127.0.0.1 (``port=0`` picks a free port)."""

    api_version: ClassVar[str] = answers.API

    def __init__(
        self,
        port: int = 0,
        *,
        token: str = "fake-slurm-token",  # noqa: S107 - a fake server's test token
        user: str = "obleth",
        start_delay: float = 0.2,
        requeue_delay: float = 0.2,
        time_scale: float = 1.0,
        purge_after: float | None = None,
        nodes: Iterable[FakeNode] | None = None,
        default_partition: str = "debug",
    ) -> None:
        self.port = port
        self.tokens: dict[str, str] = {token: user}
        self.start_delay = start_delay
        self.requeue_delay = requeue_delay
        self.time_scale = time_scale
        self.purge_after = purge_after
        self.nodes: list[FakeNode] = list(nodes) if nodes else [FakeNode("localhost")]
        self.default_partition = default_partition
        # fault switches
        self.down = False
        self.slow_seconds = 0.0
        self.auth_failure = False
        self.controller_down = False
        self.controller_delay = 0.0
        self.html_502 = False
        self.raw_answer: tuple[int, str, bytes] | None = None
        # bookkeeping
        self.jobs: dict[int, FakeJob] = {}
        self.request_count = 0
        self.requests: collections.deque[tuple[str, str]] = collections.deque(maxlen=10000)
        self._next_id = 1
        self._live: set[int] = set()
        self._lock = threading.RLock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._sockets: set[socket.socket] = set()
        self._rr = 0

    # ---- lifecycle -----------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeSlurmrestd:
        server = _Server(("127.0.0.1", self.port), _Handler)
        server.fake = self
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, name=f"fake-slurmrestd-{self.port}", daemon=True
        )
        self._thread.start()
        self.down = False
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        self._close_connections()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def set_down(self, down: bool) -> None:
        """``True``: stop listening and drop open connections (connection refused);
        ``False``: listen again on the same port."""
        if down and self._server is not None:
            self.stop()
            self.down = True
        elif not down and self._server is None:
            self.start()

    def __enter__(self) -> FakeSlurmrestd:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _track(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets = {s for s in self._sockets if s.fileno() != -1}
            self._sockets.add(sock)

    def _close_connections(self) -> None:
        with self._lock:
            sockets, self._sockets = self._sockets, set()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    # ---- test helpers --------------------------------------------------------------------

    def add_token(self, token: str, user: str) -> None:
        self.tokens[token] = user
