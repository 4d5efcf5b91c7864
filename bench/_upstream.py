"""A fake OpenAI upstream for the gateway benchmark: as cheap as a Python server can be, so the
figures are the proxies' and not the upstream's.

    python bench/_upstream.py --port P [--chunks 100 --interval-ms 20]

Raw asyncio on uvloop, HTTP/1.1 keep-alive. ``POST .../chat/completions`` answers a fixed
completion; with ``"stream": true`` it sends ``--chunks`` SSE events ``--interval-ms`` apart
(0: all at once) and ``data: [DONE]``. ``GET .../models`` lists one model. Prints
``ready <port>`` once listening.
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


async def handle(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, chunks: int, interval: float
) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.split(b"\r\n")
            method, path = lines[0].split(b" ")[:2]
            length = 0
            for line in lines[1:]:
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            body = await reader.readexactly(length) if length else b""
            if method == b"GET" and path.endswith(b"/models"):
                writer.write(_plain(MODELS))
            elif b'"stream": true' in body or b'"stream":true' in body:
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                    b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n"
                )
                if interval <= 0:
                    writer.write(
                        _chunk(EVENT * chunks) + _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"
                    )
                else:
                    for _ in range(chunks):
                        writer.write(_chunk(EVENT))
                        await writer.drain()
                        await asyncio.sleep(interval)
                    writer.write(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
            else:
                writer.write(_plain(ANSWER))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, ValueError, IndexError):
        pass
    finally:
        writer.close()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--chunks", type=int, default=5)
    parser.add_argument("--interval-ms", type=float, default=0)
    args = parser.parse_args()
    interval = args.interval_ms / 1000.0

    async def on_client(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await handle(r, w, args.chunks, interval)

    server = await asyncio.start_server(on_client, "127.0.0.1", args.port, backlog=4096)
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
