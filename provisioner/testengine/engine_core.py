"""The test engine itself: :class:`Engine`, the state every port shares (the fault switches
and their ``/_control`` changes, the loading phase, counters for ``/_stats``), the routes (health,
models, the API key check, inference: its answers are :class:`engine_openai.OpenAIAnswers`)
and the connection loop; and :func:`log`.

Part of the test engine (``server.py``): standard library only."""

from __future__ import annotations

import asyncio
import hmac
import json
import sys
import time

if __package__:  # imported as provisioner.testengine.<module>
    from .engine_config import (
        ENGINE_NAME,
        EXIT_AFTER_CODE,
        HEALTH_PATHS,
        IDLE_TIMEOUT_SECS,
        INFERENCE_PATHS,
        EngineConfig,
    )
    from .engine_http import (
        ProtocolError,
        Reply,
        Request,
        _head,
        json_reply,
        read_request,
    )
    from .engine_openai import (
        BadRequest,
        ChatRequest,
        CompletionRequest,
        EmbeddingRequest,
        JsonObject,
        OpenAIAnswers,
        error_body,
        parse_chat,
        parse_completion,
        parse_control,
        parse_embeddings,
    )
else:  # run as a script (python3 server.py): the modules sit side by side
    from engine_config import (  # type: ignore[import-not-found,no-redef]
        ENGINE_NAME,
        EXIT_AFTER_CODE,
        HEALTH_PATHS,
        IDLE_TIMEOUT_SECS,
        INFERENCE_PATHS,
        EngineConfig,
    )
    from engine_http import (  # type: ignore[import-not-found,no-redef]
        ProtocolError,
        Reply,
        Request,
        _head,
        json_reply,
        read_request,
    )
    from engine_openai import (  # type: ignore[import-not-found,no-redef]
        BadRequest,
        ChatRequest,
        CompletionRequest,
        EmbeddingRequest,
        JsonObject,
        OpenAIAnswers,
        error_body,
        parse_chat,
        parse_completion,
        parse_control,
        parse_embeddings,
    )


class Engine(OpenAIAnswers):
    """State shared by every port: fault switches, counters, and the request handlers."""

    def __init__(self, config: EngineConfig, stop: asyncio.Event) -> None:
        self.config = config
        self.stop = stop
        self.exit_code = 0
        self.dead_health = config.dead_health
        self.hang_inference = config.hang_inference
        self.latency_ms = config.latency_ms
        self.loading_until: float | None = None  # set when the engine starts listening
        self.unhung = asyncio.Event()
        if not self.hang_inference:
            self.unhung.set()
        self.requests: dict[str, int] = {}
        self.requests_by_port: dict[int, int] = {}
        self.warmup_seen = False
        self.warmup_answered = False
        self.unauthorized_count = 0
        self.hanging = 0
        self.counter = 0
        self.created = int(time.time())

    # -- lifecycle ---------------------------------------------------------------------------

    def request_exit(self, code: int, why: str) -> None:
        if not self.stop.is_set():
            log(f"obleth test engine: {why}; exiting with code {code}")
            self.exit_code = code
            self.stop.set()

    def start_loading(self, seconds: float) -> None:
        self.loading_until = time.monotonic() + seconds if seconds > 0 else None

    def loading_left(self) -> float:
        if self.loading_until is None:
            return 0.0
        left = self.loading_until - time.monotonic()
        if left <= 0:
            self.loading_until = None
            return 0.0
        return left

    def set_hang(self, value: bool) -> None:
        self.hang_inference = value
        if value:
            self.unhung.clear()
        else:
            self.unhung.set()

    # -- dispatch ----------------------------------------------------------------------------

    async def answer(self, req: Request, reader: asyncio.StreamReader) -> Reply | None:
        """Route one request. None means the client went away while we held the request."""
        self.requests[req.path] = self.requests.get(req.path, 0) + 1
        if self.config.port_count > 1:
            self.requests_by_port[req.port] = self.requests_by_port.get(req.port, 0) + 1
        if req.path == "/_stats":
            return self._only(req, ("GET",)) or json_reply(200, self.stats())
        if req.path == "/_control" and self.config.control:
            return self._only(req, ("POST",)) or self.control(req)
        if self.latency_ms > 0:
            await asyncio.sleep(self.latency_ms / 1000)
        if req.path in HEALTH_PATHS:
            return self._only(req, ("GET", "HEAD")) or self.health()
        refused = self.unauthorized(req)
        if refused is not None:
            return refused
        if req.path == "/v1/models":
            return self._only(req, ("GET", "HEAD")) or self.models()
        if req.path in INFERENCE_PATHS:
            return self._only(req, ("POST",)) or await self.inference(req, reader)
        return json_reply(
            404,
            error_body(f"Invalid URL ({req.method} {req.path})", "invalid_request_error"),
        )

    def unauthorized(self, req: Request) -> Reply | None:
        """401 for a /v1 request without the engine's key (None: let it through)."""
        key = self.config.api_key
        if not key or not req.path.startswith("/v1/"):
            return None
        scheme, _, given = req.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(
            given.strip().encode("latin-1"), key.encode("latin-1")
        ):
            return None
        self.unauthorized_count += 1
        return json_reply(
            401,
            error_body(
                "Missing or wrong API key: send 'Authorization: Bearer <key>'.",
                "invalid_request_error",
                code="invalid_api_key",
            ),
            {"WWW-Authenticate": "Bearer"},
        )

    @staticmethod
    def _only(req: Request, methods: tuple[str, ...]) -> Reply | None:
        if req.method in methods:
            return None
        return json_reply(
            405,
            error_body(
                f"{req.method} is not allowed on {req.path}; use {' or '.join(methods)}",
                "invalid_request_error",
            ),
            {"Allow": ", ".join(methods)},
        )

    def health(self) -> Reply:
        if self.dead_health:
            return json_reply(
                500, error_body("health check failing (--dead-health)", "server_error")
            )
        if self.loading_left() > 0:
            if self.config.loading_status == 503:
                # llama.cpp's answer while its model loads.
                return json_reply(
                    503,
                    {
                        "error": {
                            "code": 503,
                            "message": "Loading model",
                            "type": "unavailable_error",
                        }
                    },
                )
            return json_reply(200, {"status": "loading"})
        return json_reply(200, {"status": "ok"})

    def models(self) -> Reply:
        entry = {
            "id": self.config.model,
            "object": "model",
            "created": self.created,
            "owned_by": ENGINE_NAME,
        }
        return json_reply(200, {"object": "list", "data": [entry]})

    def stats(self) -> JsonObject:
        result: JsonObject = {
            "requests": dict(self.requests),
            "warmup_seen": self.warmup_seen,
            "warmup_answered": self.warmup_answered,
            "hanging": self.hanging,
            "switches": self.switches(),
            "api_key_required": bool(self.config.api_key),
            "unauthorized": self.unauthorized_count,
        }
        if self.config.port_count > 1:
            result["requests_by_port"] = {str(k): v for k, v in self.requests_by_port.items()}
        return result

    def switches(self) -> JsonObject:
        return {
            "hang_inference": self.hang_inference,
            "dead_health": self.dead_health,
            "latency_ms": self.latency_ms,
            "loading": round(self.loading_left(), 3),
        }

    def control(self, req: Request) -> Reply:
        try:
            changes = parse_control(json.loads(req.body or b"null"))
        except (json.JSONDecodeError, UnicodeDecodeError):
            return json_reply(400, error_body("the body is not JSON", "invalid_request_error"))
        except BadRequest as exc:
            return json_reply(400, error_body(exc.message, "invalid_request_error", exc.param))
        if "hang_inference" in changes:
            self.set_hang(bool(changes["hang_inference"]))
        if "dead_health" in changes:
            self.dead_health = bool(changes["dead_health"])
        if "latency_ms" in changes:
            self.latency_ms = int(changes["latency_ms"])
        if "loading" in changes:
            self.start_loading(float(changes["loading"]))
        do_exit = bool(changes.get("exit", False))
        reply = json_reply(200, self.switches() | {"exiting": do_exit})
        if do_exit:
            code = int(changes.get("exit_code", EXIT_AFTER_CODE))
            reply.after = lambda: self.request_exit(code, "exit requested on /_control")
        return reply

    async def inference(self, req: Request, reader: asyncio.StreamReader) -> Reply | None:
        try:
            body = json.loads(req.body or b"null")
        except (json.JSONDecodeError, UnicodeDecodeError):
            return json_reply(
                400, error_body("the request body is not valid JSON", "invalid_request_error")
            )
        parsed: ChatRequest | CompletionRequest | EmbeddingRequest
        try:
            if req.path == "/v1/chat/completions":
                parsed = parse_chat(body)
                if parsed.is_warmup:
                    self.warmup_seen = True
            elif req.path == "/v1/completions":
                parsed = parse_completion(body)
            else:
                parsed = parse_embeddings(body)
        except BadRequest as exc:
            return json_reply(400, error_body(exc.message, "invalid_request_error", exc.param))
        if self.loading_left() > 0:
            return json_reply(
                503,
                error_body("Loading model", "unavailable_error", code=503),
                {"Retry-After": str(max(1, round(self.loading_left())))},
            )
        if self.hang_inference and not await self._hang(reader):
            return None
        if isinstance(parsed, EmbeddingRequest):
            return self.embeddings(parsed)
        reply = self.completion(parsed)
        if isinstance(parsed, ChatRequest) and parsed.is_warmup:
            self.warmup_answered = True
        return reply

    async def _hang(self, reader: asyncio.StreamReader) -> bool:
        """Hold the request until the hang is lifted (True) or the client leaves (False)."""
        self.hanging += 1
        gone = asyncio.ensure_future(reader.read(1))
        lifted = asyncio.ensure_future(self.unhung.wait())
        try:
            await asyncio.wait({gone, lifted}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self.hanging -= 1
        client_left = gone.done()
        for task in (gone, lifted):
            task.cancel()
        # Let the cancelled read finish so the next request can read from the stream.
        await asyncio.wait({gone, lifted})
        if client_left and not gone.cancelled():
            gone.exception()  # retrieved so asyncio does not warn about it
        return not client_left

    # -- connections -------------------------------------------------------------------------

    async def handle_connection(
        self, port: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            while True:
                try:
                    req = await asyncio.wait_for(
                        read_request(reader, writer, port), IDLE_TIMEOUT_SECS
                    )
                except ProtocolError as exc:
                    refusal = json_reply(exc.status, error_body(str(exc), "invalid_request_error"))
                    await self._write(writer, refusal, head_only=False, keep_alive=False)
                    return
                except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
                    return
                if req is None:
                    return
                started = time.monotonic()
                reply = await self.answer(req, reader)
                elapsed = (time.monotonic() - started) * 1000
                if reply is None:
                    self._log_request(req, 499, elapsed, " (client gave up)")
                    return
                keep_alive = (
                    req.version == "HTTP/1.1"
                    and req.headers.get("connection", "").lower() != "close"
                )
                await self._write(writer, reply, req.method == "HEAD", keep_alive, req.version)
                self._log_request(req, reply.status, (time.monotonic() - started) * 1000)
                if reply.after is not None:
                    reply.after()
                if not keep_alive:
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()

    async def _write(
        self,
        writer: asyncio.StreamWriter,
        reply: Reply,
        head_only: bool,
        keep_alive: bool,
        version: str = "HTTP/1.1",
    ) -> None:
        headers = {
            "Content-Type": reply.content_type,
            "X-Obleth-Test-Engine": "1",
            "Server": ENGINE_NAME,
            **reply.headers,
        }
        if reply.events is None:
            headers["Content-Length"] = str(len(reply.body))
            headers["Connection"] = "keep-alive" if keep_alive else "close"
            writer.write(_head(reply.status, headers))
            if not head_only:
                writer.write(reply.body)
            await writer.drain()
            return
        headers["Cache-Control"] = "no-cache"
        chunked = version == "HTTP/1.1"
        if chunked:
            headers["Transfer-Encoding"] = "chunked"
        headers["Connection"] = "keep-alive" if keep_alive and chunked else "close"
        writer.write(_head(reply.status, headers))
        await writer.drain()
        for data in reply.events:
            writer.write(b"%x\r\n%s\r\n" % (len(data), data) if chunked else data)
            await writer.drain()
        if chunked:
            writer.write(b"0\r\n\r\n")
            await writer.drain()

    def _log_request(self, req: Request, status: int, ms: float, note: str = "") -> None:
        if self.config.quiet:
            return
        where = f" port={req.port}" if self.config.port_count > 1 else ""
        log(f"{req.method} {req.path} {status} {ms:.1f}ms{where}{note}")


def log(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
