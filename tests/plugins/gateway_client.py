"""The /v1 gateway service in the test's process: the ``gateway`` fixture.

Requests go through the real ASGI application (:class:`obleth.gateway.service.GatewayService`):
its routing, authentication (``check_credentials``), body limits, balancer, answers, and its
upstream client (obleth.gateway.upstream) over real TCP connections to the upstream servers the
test started. What differs from ``python -m obleth.gateway.serve``
(tests/gateway/test_service.py runs that one), and why:

- the service's event loop runs in a thread of this process, and this module plays the HTTP
  server's part of the ASGI protocol (scope, body, disconnect) in place of uvicorn;
- the service's blocking calls (``asyncio.to_thread``: authentication, the routing table load)
  run on the test's own thread, which waits for the answer anyway; so they use the test's
  database connection and see its rows in the test's transaction (pytest-django's ``db``), as
  Django's test client did;
- the routing table is reloaded before each request (``auto_reload``; set it False to check
  that a request alone costs no query), standing in for the change notices a gateway process
  gets over Redis (tests/gateway/test_service.py and test_state_changes.py cover those).

One request at a time per client: the waiting thread runs the service's blocking calls.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json as jsonlib
import queue
import threading
import urllib.parse
import weakref
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import httpx
import pytest

from obleth.gateway.routing import build_route_table
from obleth.gateway.service import GatewayService
from obleth.gateway.table import LiveTable

T = TypeVar("T")


class CallerThreadExecutor(concurrent.futures.ThreadPoolExecutor):
    """The loop's default executor: queues each call for the thread that waits on the loop."""

    def __init__(self) -> None:
        super().__init__(max_workers=1)
        self.calls: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self.calls.put((future, fn, args, kwargs))
        return future

    def wait_for(self, done: concurrent.futures.Future[T]) -> T:
        """Run queued calls on this thread until ``done`` has its result."""
        done.add_done_callback(lambda _: self.calls.put(None))
        while not done.done():
            item = self.calls.get()
            if item is None:
                continue
            future, fn, args, kwargs = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as exc:  # handed to the coroutine that awaits it
                future.set_exception(exc)
        return done.result()


class GatewayResponse:
    """An answer of the in-process gateway, read like Django's test response or httpx's."""

    def __init__(self, client: GatewayClient, exchange: _Exchange, start: dict[str, Any]) -> None:
        self._client = client
        self._exchange = exchange
        self.status_code: int = int(start["status"])
        self.headers = httpx.Headers([(bytes(k), bytes(v)) for k, v in start.get("headers", [])])
        self._content: bytes | None = None

    def __getitem__(self, name: str) -> str:
        return self.headers[name]

    def items(self) -> list[tuple[str, str]]:
        return list(self.headers.items())

    def iter_chunks(self) -> Iterator[bytes]:
        """The body as the service sent it, chunk by chunk, as it comes."""
        while True:
            message = self._client.run(self._exchange.next_message())
            if message is None:
                return
            chunk = bytes(message.get("body", b""))
            if chunk:
                yield chunk
            if not message.get("more_body"):
                return

    @property
    def content(self) -> bytes:
        if self._content is None:
            self._content = b"".join(self.iter_chunks())
            self.close()
        return self._content

    @property
    def text(self) -> str:
        return self.content.decode()

    def json(self) -> Any:
        return jsonlib.loads(self.content)

    def close(self) -> None:
        """The client goes away (a no-op once the answer is complete)."""
        self._client.run(self._exchange.finish())


class _Exchange:
    """One request on the service's loop: the ASGI receive/send pair and the app's task."""

    def __init__(self, app: GatewayService, scope: dict[str, Any], body: bytes) -> None:
        self.app, self.scope, self.body = app, scope, body
        self.sent: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self.gone = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> dict[str, Any] | None:
        body_sent = False

        async def receive() -> dict[str, Any]:
            nonlocal body_sent
            if not body_sent:
                body_sent = True
                return {"type": "http.request", "body": self.body, "more_body": False}
            await self.gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: Any) -> None:
            await self.sent.put(dict(message))

        async def run() -> None:
            try:
                await self.app(self.scope, receive, send)
            finally:
                await self.sent.put(None)

        self.task = asyncio.create_task(run())
        return await self.next_message()

    async def next_message(self) -> dict[str, Any] | None:
        message = await self.sent.get()
        if message is None:
            await self.sent.put(None)  # the end stays the end for later reads
            assert self.task is not None
            await self.task  # the app's own exception, if any, reaches the test
        return message

    async def finish(self) -> None:
        self.gone.set()
        if self.task is not None:
            await self.task


class GatewayClient:
    """Sends requests to an in-process :class:`GatewayService` (made at the first request, so
    settings the test changed before it apply). ``defaults``: Django-style keywords sent with
    every request (``GatewayClient(HTTP_AUTHORIZATION="Bearer ...")``). A context manager."""

    def __init__(self, **defaults: Any) -> None:
        _OPEN.add(self)
        self.defaults = defaults
        self.auto_reload = True
        self.executor = CallerThreadExecutor()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._service: GatewayService | None = None
        self._exchanges: list[_Exchange] = []

    # ------------------------------------------------------------------ the service

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        loop = self._ensure_loop()
        return self.executor.wait_for(asyncio.run_coroutine_threadsafe(coro, loop))

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            loop.set_default_executor(self.executor)
            self._thread = threading.Thread(target=loop.run_forever, daemon=True)
            self._thread.start()
            self._loop = loop
        return self._loop

    @property
    def service(self) -> GatewayService:
        if self._service is None:
            self._ensure_loop()

            async def make() -> GatewayService:
                service = GatewayService(table=LiveTable(loader=build_route_table))
                await service.startup(keep_fresh=False)
                return service

            self._service = self.run(make())
        return self._service

    def reload(self) -> None:
        """Read the routing table again (what a change notice makes a gateway process do)."""
        service = self.service
        assert self.run(service.table.reload()), service.table.last_error

    def __enter__(self) -> GatewayClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        _OPEN.discard(self)
        if self._loop is None:
            return
        for exchange in self._exchanges:  # streams a test left unread: the client goes away
            self.run(exchange.finish())
        if self._service is not None:
            self.run(self._service.shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        assert self._thread is not None
        self._thread.join(10)
        self._loop.close()
        self._loop = None

    # ------------------------------------------------------------------ requests

    def request(
        self,
        method: str,
        path: str,
        body: bytes = b"",
        *,
        headers: dict[str, str] | None = None,
        client: str = "127.0.0.1",
        stream: bool = False,
    ) -> GatewayResponse:
        """One request. ``stream``: return once the head arrived (read with iter_chunks)."""
        service = self.service
        if self.auto_reload:
            self.reload()
        raw_path, _, query = path.partition("?")
        sent = {"host": "testserver", **{k.lower(): v for k, v in (headers or {}).items()}}
        if body or method in ("POST", "PUT", "PATCH"):
            sent.setdefault("content-length", str(len(body)))
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": urllib.parse.unquote(raw_path),
            "raw_path": raw_path.encode(),
            "query_string": query.encode("latin-1", "replace"),
            "root_path": "",
            "headers": [
                (k.encode("latin-1"), v.encode("utf-8", "surrogateescape")) for k, v in sent.items()
            ],
            "client": (client, 50000),
            "server": ("testserver", 80),
        }
        exchange = _Exchange(service, scope, body)
        self._exchanges = [e for e in self._exchanges if e.task is None or not e.task.done()]
        self._exchanges.append(exchange)
        start = self.run(exchange.start())
        assert start is not None and start["type"] == "http.response.start", start
        response = GatewayResponse(self, exchange, start)
        if not stream:
            _ = response.content
        return response

    def get(self, path: str, **extra: Any) -> GatewayResponse:
        return self.request("GET", path, **self._options({**self.defaults, **extra}))

    def post(
        self,
        path: str,
        data: Any = None,
        content_type: str = "application/json",
        *,
        json: Any = None,
        **extra: Any,
    ) -> GatewayResponse:
        """``data``: bytes, text, or an object sent as JSON (as Django's client takes it)."""
        if json is not None:
            data = json
        if data is None:
            body = b""
        elif isinstance(data, bytes):
            body = data
        elif isinstance(data, str):
            body = data.encode()
        else:
            body = jsonlib.dumps(data).encode()
        options = self._options({**self.defaults, **extra})
        options["headers"].setdefault("content-type", content_type)
        return self.request("POST", path, body, **options)

    @staticmethod
    def _options(extra: dict[str, Any]) -> dict[str, Any]:
        """Django's test-client keywords (``HTTP_AUTHORIZATION=...``, ``REMOTE_ADDR=...``) and
        ``headers=``, ``stream=`` become request options."""
        headers = {k.lower(): v for k, v in (extra.pop("headers", None) or {}).items()}
        options: dict[str, Any] = {"headers": headers}
        for key, value in extra.items():
            if key.startswith("HTTP_"):
                headers[key[5:].replace("_", "-").lower()] = value
            elif key == "REMOTE_ADDR":
                options["client"] = value
            elif key == "stream":
                options["stream"] = bool(value)
            else:
                raise TypeError(f"GatewayClient does not take {key!r}")
        return options


_OPEN: weakref.WeakSet[GatewayClient] = weakref.WeakSet()


@pytest.fixture(autouse=True)
def _close_forgotten_gateways() -> Iterator[None]:
    """A client a test forgot to close would keep its service running in a thread: its load
    reports (obleth/gateway/inflight.py) would keep flushing to Redis for the rest of the run and
    other tests would count it as a live gateway process. Closed here after every test."""
    yield
    for client in list(_OPEN):
        client.close()


@pytest.fixture
def gateway() -> Iterator[GatewayClient]:
    """The /v1 gateway service in this process (see the module's docstring)."""
    client = GatewayClient()
    yield client
    client.close()
