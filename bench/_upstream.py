"""A fake OpenAI upstream for the gateway benchmark: as cheap as a Python server can be, so the
figures are the proxies' and not the upstream's.

    python bench/_upstream.py --port P [--chunks 100 --interval-ms 20]

Raw asyncio (a Protocol: no task per connection, a timer per event) on uvloop, HTTP/1.1
keep-alive. ``POST .../chat/completions`` answers a fixed completion; with ``"stream": true``
it sends ``--chunks`` SSE events ``--interval-ms`` apart (0: all at once) and ``data: [DONE]``.
``GET .../models`` lists one model. Prints ``ready <port>`` once listening.
"""

from __future__ import annotations

import argparse
import asyncio
import json

ANSWER = json.dumps(
    {
        "id": "cmpl-bench",
        "object": "chat.completion",
        "created": 1,
        "model": "bench",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "ok"},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
    }
).encode()
MODELS = json.dumps({"object": "list", "data": [{"id": "bench", "object": "model"}]}).encode()
EVENT = (
    b'data: {"id":"cmpl-bench","object":"chat.completion.chunk","created":1,"model":"bench",'
    b'"choices":[{"index":0,"delta":{"content":"tok "},"finish_reason":null}]}\n\n'
)


def _plain(body: bytes, status: bytes = b"200 OK") -> bytes:
    return (
        b"HTTP/1.1 "
        + status
        + b"\r\nContent-Type: application/json\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class Upstream(asyncio.Protocol):
    """One client connection. A stream's events are written by a timer per event (no task, no
    sleep, no drain per event), each ``interval`` after the last, as an engine's decode steps;
    a client that stops reading pauses its stream instead of growing a buffer."""

    def __init__(self, chunks: int, interval: float) -> None:
        self.loop = asyncio.get_running_loop()
        self.chunks, self.interval = chunks, interval
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.left = 0  # events still to send on the running stream
        self.due = 0.0
        self.paused = False
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while not self.left:  # one request at a time on a connection (HTTP/1.1 keep-alive)
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end]
            length = 0
            for line in head.split(b"\r\n")[1:]:
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            if len(self.buffer) < end + 4 + length:
                return
            body = self.buffer[end + 4 : end + 4 + length]
            self.buffer = self.buffer[end + 4 + length :]
            self.answer(head, body)

    def answer(self, head: bytes, body: bytes) -> None:
        assert self.transport is not None
        method, path = head.split(b"\r\n", 1)[0].split(b" ")[:2]
        if method == b"GET" and path.endswith(b"/models"):
            self.transport.write(_plain(MODELS))
        elif b'"stream": true' in body or b'"stream":true' in body:
            self.transport.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n"
            )
            if self.interval <= 0:
                self.transport.write(
                    _chunk(EVENT * self.chunks) + _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"
                )
            else:
                self.left = self.chunks
                self.due = self.loop.time()
                self.tick()
        else:
            self.transport.write(_plain(ANSWER))

    def tick(self) -> None:
        self.timer = None
        if self.transport is None or self.transport.is_closing():
            return
        if self.paused:
            return  # resume_writing goes on
        self.transport.write(_chunk(EVENT))
        self.left -= 1
        if self.left:
            self.due += self.interval
            self.timer = self.loop.call_at(self.due, self.tick)
            return
        self.transport.write(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        if self.buffer:
            self.data_received(b"")

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        if self.left and self.timer is None:
            self.due = self.loop.time()
            self.tick()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.transport = None


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--chunks", type=int, default=5)
    parser.add_argument("--interval-ms", type=float, default=0)
    args = parser.parse_args()
    interval = args.interval_ms / 1000.0
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: Upstream(args.chunks, interval), "127.0.0.1", args.port, backlog=4096
    )
    print(f"ready {args.port}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(main())
