#!/usr/bin/env python3
"""obleth test engine: a small OpenAI-compatible HTTP server that is NOT a model.

It answers the routes an inference server answers (health, models, chat completions,
completions, embeddings) with deterministic text and vectors, so the provisioner, the demo
recipe, the tests and the benchmark can run a replica anywhere, with no GPU, no model file and
no package: this file uses the Python 3.11 standard library only.

Run it as ``python3 server.py --port 8000`` (or with ``OBLETH_SERVING_PORT`` set), or as
``python -m provisioner.testengine``. ``--help`` lists the fault switches (slow start, a loading
phase, dead health, hung inference, exit after a delay, added latency) and the multi-port mode.
Every flag has an environment variable (``OBLETH_TESTENGINE_<FLAG>``); a flag wins over its
variable.

API key: with ``--api-key KEY`` (or, when no flag is given, the replica key the provisioner puts
in the job's environment as ``OBLETH_REPLICA_API_KEY``), every ``/v1/*`` route except
``/v1/health`` answers 401 unless the request carries ``Authorization: Bearer KEY``, as vLLM does;
``/health`` stays open. This is what lets the provisioner prove a port is its own replica.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import functools
import hashlib
import hmac
import json
import os
import signal
import struct
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Final, TypeGuard

ENGINE_NAME: Final = "obleth-test-engine"
ENV_PREFIX: Final = "OBLETH_TESTENGINE_"
PORT_ENV: Final = "OBLETH_SERVING_PORT"
# The per-replica secret the provisioner gives every job (used when --api-key is not given).
REPLICA_KEY_ENV: Final = "OBLETH_REPLICA_API_KEY"
# The text every completion is made of, one word per token, repeated as often as asked.
WORDS: Final = ("this", "is", "the", "obleth", "test", "engine,", "not", "a", "model")
DEFAULT_EMBEDDING_DIM: Final = 8
MAX_TOKENS_LIMIT: Final = 65536
MAX_EMBEDDING_DIM: Final = 65536
MAX_BODY_BYTES: Final = 16 * 1024 * 1024
MAX_HEAD_BYTES: Final = 64 * 1024
IDLE_TIMEOUT_SECS: Final = 300.0
EXIT_AFTER_CODE: Final = 3
INFERENCE_PATHS: Final = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/embeddings"})
HEALTH_PATHS: Final = frozenset({"/health", "/v1/health"})
TRUE_WORDS: Final = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS: Final = frozenset({"0", "false", "no", "off", ""})

JsonObject = dict[str, Any]


class ConfigError(Exception):
    """A flag or environment variable is missing or malformed; the message names it."""


class BadRequest(Exception):
    """A request body is malformed; ``param`` names the field at fault."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


@dataclass(frozen=True)
class EngineConfig:
    """Everything the engine was started with (flags over environment over defaults)."""

    host: str
    port: int
    port_count: int
    model: str
    embedding_dim: int = DEFAULT_EMBEDDING_DIM
    slow_start: float = 0.0
    loading: float = 0.0
    loading_status: int = 200
    dead_health: bool = False
    hang_inference: bool = False
    exit_after: float | None = None
    latency_ms: int = 0
    control: bool = False
    pid_file: str | None = None
    quiet: bool = False
    api_key: str = field(default="", repr=False)  # "" = no key asked

    @property
    def last_port(self) -> int:
        return self.port + self.port_count - 1


# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="obleth-test-engine",
        description=(
            "obleth test engine: an OpenAI-compatible server for tests and demos. It is NOT a "
            "model; it answers with fixed text and hash-derived vectors. Each flag can also be "
            f"set with an environment variable {ENV_PREFIX}<FLAG>; the flag wins."
        ),
    )
    bool_action = argparse.BooleanOptionalAction
    parser.add_argument("--host", help="address to bind (env OBLETH_TESTENGINE_HOST, 0.0.0.0)")
    parser.add_argument("--port", type=int, help=f"port to listen on (or env {PORT_ENV})")
    parser.add_argument("--model", help="model id to report (env ..._MODEL, test-engine)")
    parser.add_argument("--embedding-dim", type=int, help="embedding vector size (default 8)")
    parser.add_argument(
        "--ports-from", type=int, help="multi-port mode: first of N consecutive ports"
    )
    parser.add_argument("--ports-count", type=int, help="multi-port mode: how many ports")
    parser.add_argument("--slow-start", type=float, metavar="SECS", help="listen only after SECS")
    parser.add_argument(
        "--loading",
        type=float,
        metavar="SECS",
        help="for SECS after listening, /health says loading and inference answers 503",
    )
    parser.add_argument(
        "--loading-status",
        type=int,
        choices=(200, 503),
        help="/health status while loading: 200 {'status':'loading'} or 503 like llama.cpp",
    )
    parser.add_argument("--dead-health", action=bool_action, help="/health always answers 500")
    parser.add_argument(
        "--hang-inference",
        action=bool_action,
        help="inference requests never answer while /health and /v1/models do",
    )
    parser.add_argument(
        "--exit-after", type=float, metavar="SECS", help=f"exit with code {EXIT_AFTER_CODE}"
    )
    parser.add_argument("--latency-ms", type=int, metavar="N", help="delay every answer by N ms")
    parser.add_argument(
        "--control", action=bool_action, help="accept POST /_control to flip fault switches"
    )
    parser.add_argument("--pid-file", help="write the process id to this file")
    parser.add_argument("--quiet", action=bool_action, help="no per-request log lines")
    parser.add_argument(
        "--api-key",
        metavar="KEY",
        help=(
            "answer /v1/* only to 'Authorization: Bearer KEY' (401 otherwise; /health stays "
            f"open). Default: ${REPLICA_KEY_ENV}, then {ENV_PREFIX}API_KEY; empty: no key"
        ),
    )
    return parser


def _env_str(environ: Mapping[str, str], name: str) -> str | None:
    value = environ.get(name)
    if value is None or value.strip() == "":
        return None
    return value.strip()


def _env_int(environ: Mapping[str, str], name: str) -> int | None:
    value = _env_str(environ, name)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"{name}={value!r} is not a whole number; set it to e.g. 8000") from None


def _env_float(environ: Mapping[str, str], name: str) -> float | None:
    value = _env_str(environ, name)
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        raise ConfigError(f"{name}={value!r} is not a number of seconds; set e.g. 5") from None


def _env_bool(environ: Mapping[str, str], name: str) -> bool | None:
    value = environ.get(name)
    if value is None:
        return None
    word = value.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ConfigError(f"{name}={value!r} is not a yes/no value; use 1 or 0")


def _pick(flag: Any, env_value: Any, default: Any) -> Any:
    if flag is not None:
        return flag
    if env_value is not None:
        return env_value
    return default


def _check_port(value: int, name: str) -> int:
    if not 1 <= value <= 65535:
        raise ConfigError(f"{name}={value} is not a TCP port; use a number from 1 to 65535")
    return value


def _check_non_negative(value: float, name: str) -> float:
    if value < 0:
        raise ConfigError(f"{name}={value} is negative; give 0 or more seconds")
    return value


def parse_config(argv: Sequence[str], environ: Mapping[str, str]) -> EngineConfig:
    """Build the configuration from command-line flags and environment variables.

    Raises ConfigError (naming the flag and variable) when something is missing or invalid;
    ``--help`` and unknown flags exit through argparse as usual.
    """
    args = _build_parser().parse_args(list(argv))
    e = ENV_PREFIX

    ports_from = _pick(args.ports_from, _env_int(environ, e + "PORTS_FROM"), None)
    ports_count = _pick(args.ports_count, _env_int(environ, e + "PORTS_COUNT"), None)
    if args.port is not None and args.ports_from is not None:
        raise ConfigError("give either --port or --ports-from/--ports-count, not both")
    if ports_from is not None or ports_count is not None:
        if ports_from is None or ports_count is None:
            raise ConfigError(
                "multi-port mode needs both --ports-from P and --ports-count N "
                f"(or {e}PORTS_FROM and {e}PORTS_COUNT)"
            )
        port = _check_port(int(ports_from), "--ports-from")
        count = int(ports_count)
        if count < 1:
            raise ConfigError(f"--ports-count={count} must be 1 or more")
        _check_port(port + count - 1, "--ports-from + --ports-count - 1")
    else:
        raw_port = _pick(args.port, _env_int(environ, PORT_ENV), None)
        if raw_port is None:
            raise ConfigError(
                f"no port given: pass --port PORT or set {PORT_ENV} "
                "(or --ports-from P --ports-count N for multi-port mode)"
            )
        port = _check_port(int(raw_port), "--port" if args.port is not None else PORT_ENV)
        count = 1

    host = _pick(args.host, _env_str(environ, e + "HOST"), "0.0.0.0")
    model = _pick(args.model, _env_str(environ, e + "MODEL"), "test-engine")
    dim = int(_pick(args.embedding_dim, _env_int(environ, e + "EMBEDDING_DIM"), 8))
    if not 1 <= dim <= MAX_EMBEDDING_DIM:
        raise ConfigError(f"--embedding-dim={dim} must be from 1 to {MAX_EMBEDDING_DIM}")
    loading_status = int(_pick(args.loading_status, _env_int(environ, e + "LOADING_STATUS"), 200))
    if loading_status not in (200, 503):
        raise ConfigError(f"{e}LOADING_STATUS={loading_status} must be 200 or 503")
    exit_after = _pick(args.exit_after, _env_float(environ, e + "EXIT_AFTER"), None)
    if exit_after is not None:
        _check_non_negative(float(exit_after), "--exit-after")
    latency_ms = int(_pick(args.latency_ms, _env_int(environ, e + "LATENCY_MS"), 0))
    if latency_ms < 0:
        raise ConfigError(f"--latency-ms={latency_ms} is negative; give 0 or more")
    api_key = str(
        _pick(
            args.api_key,
            _env_str(environ, REPLICA_KEY_ENV) or _env_str(environ, e + "API_KEY"),
            "",
        )
    ).strip()
    if api_key and not all(33 <= ord(c) < 127 for c in api_key):
        raise ConfigError("--api-key must be printable ASCII without spaces")
    return EngineConfig(
        host=str(host),
        port=port,
        port_count=count,
        model=str(model),
        embedding_dim=dim,
        slow_start=_check_non_negative(
            float(_pick(args.slow_start, _env_float(environ, e + "SLOW_START"), 0.0)),
            "--slow-start",
        ),
        loading=_check_non_negative(
            float(_pick(args.loading, _env_float(environ, e + "LOADING"), 0.0)), "--loading"
        ),
        loading_status=loading_status,
        dead_health=bool(_pick(args.dead_health, _env_bool(environ, e + "DEAD_HEALTH"), False)),
        hang_inference=bool(
            _pick(args.hang_inference, _env_bool(environ, e + "HANG_INFERENCE"), False)
        ),
        exit_after=None if exit_after is None else float(exit_after),
        latency_ms=latency_ms,
        control=bool(_pick(args.control, _env_bool(environ, e + "CONTROL"), False)),
        pid_file=_pick(args.pid_file, _env_str(environ, e + "PID_FILE"), None),
        quiet=bool(_pick(args.quiet, _env_bool(environ, e + "QUIET"), False)),
        api_key=api_key,
    )


# --------------------------------------------------------------------------------------------
# Deterministic "generation"
# --------------------------------------------------------------------------------------------


def make_tokens(count: int) -> list[str]:
    """The first ``count`` tokens of the engine's fixed text, with their leading spaces."""
    return [
        (WORDS[i % len(WORDS)] if i == 0 else " " + WORDS[i % len(WORDS)]) for i in range(count)
    ]


def count_words(text: str) -> int:
    return len(text.split())


def embed(key: str, dim: int) -> list[float]:
    """A unit-length vector of ``dim`` floats derived from SHA-256 of ``key``."""
    raw = b""
    block = 0
    while len(raw) < dim * 4:
        raw += hashlib.sha256(f"{block}:{key}".encode()).digest()
        block += 1
    values = [(n / 0xFFFFFFFF) * 2.0 - 1.0 for n in struct.unpack(f"<{dim}I", raw[: dim * 4])]
    norm = sum(v * v for v in values) ** 0.5 or 1.0
    return [v / norm for v in values]


def _require_object(body: Any) -> JsonObject:
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    return body


def _optional_int(body: JsonObject, name: str, low: int, high: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise BadRequest(f"'{name}' must be a whole number from {low} to {high}", name)
    return value


def _optional_bool(body: JsonObject, name: str) -> bool:
    value = body.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise BadRequest(f"'{name}' must be true or false", name)
    return value


def _check_common(body: JsonObject) -> None:
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise BadRequest("'model' must be a string (the id from GET /v1/models)", "model")
    n = body.get("n")
    if n is not None and n != 1:
        raise BadRequest("'n' must be 1: the test engine returns one choice", "n")
    for name in ("temperature", "top_p"):
        value = body.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise BadRequest(f"'{name}' must be a number", name)


def _include_usage(body: JsonObject) -> bool:
    options = body.get("stream_options")
    if options is None:
        return False
    if not isinstance(options, dict):
        raise BadRequest("'stream_options' must be an object", "stream_options")
    value = options.get("include_usage", False)
    if not isinstance(value, bool):
        raise BadRequest(
            "'stream_options.include_usage' must be true or false", "stream_options.include_usage"
        )
    return value


def _message_text(content: Any, index: int) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for part in content:
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                raise BadRequest(
                    f"'messages[{index}].content' parts must be objects with a 'type'",
                    f"messages[{index}].content",
                )
            text = part.get("text")
            if isinstance(text, str):
                parts.append(text)
        return " ".join(parts)
    raise BadRequest(
        f"'messages[{index}].content' must be a string, a list of parts or null",
        f"messages[{index}].content",
    )


@dataclass(frozen=True)
class ChatRequest:
    prompt_tokens: int
    max_tokens: int | None
    stream: bool
    include_usage: bool
    is_warmup: bool


def parse_chat(body_any: Any) -> ChatRequest:
    body = _require_object(body_any)
    _check_common(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list of {role, content}", "messages")
    prompt_tokens = 0
    texts: list[tuple[str, Any]] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise BadRequest(f"'messages[{i}]' must be an object with a 'role'", f"messages[{i}]")
        prompt_tokens += count_words(_message_text(message.get("content"), i))
        texts.append((message["role"], message.get("content")))
    max_tokens = _optional_int(body, "max_completion_tokens", 1, MAX_TOKENS_LIMIT)
    if max_tokens is None:
        max_tokens = _optional_int(body, "max_tokens", 1, MAX_TOKENS_LIMIT)
    stream = _optional_bool(body, "stream")
    return ChatRequest(
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        stream=stream,
        include_usage=_include_usage(body) if stream else False,
        is_warmup=texts == [("user", "warmup")],
    )


@dataclass(frozen=True)
class CompletionRequest:
    prompt_tokens: int
    max_tokens: int | None
    stream: bool
    include_usage: bool


def _is_token_list(value: Any) -> TypeGuard[list[int]]:
    return isinstance(value, list) and all(
        isinstance(t, int) and not isinstance(t, bool) for t in value
    )


def parse_completion(body_any: Any) -> CompletionRequest:
    body = _require_object(body_any)
    _check_common(body)
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        prompt_tokens = count_words(prompt)
    elif _is_token_list(prompt):
        prompt_tokens = len(prompt)
    elif isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt_tokens = count_words(prompt[0])
    elif isinstance(prompt, list) and len(prompt) == 1 and _is_token_list(prompt[0]):
        prompt_tokens = len(prompt[0])
    else:
        raise BadRequest(
            "'prompt' must be a string or a list of token ids (one prompt per request)", "prompt"
        )
    stream = _optional_bool(body, "stream")
    return CompletionRequest(
        prompt_tokens=prompt_tokens,
        max_tokens=_optional_int(body, "max_tokens", 1, MAX_TOKENS_LIMIT),
        stream=stream,
        include_usage=_include_usage(body) if stream else False,
    )


@dataclass(frozen=True)
class EmbeddingRequest:
    keys: list[str]
    prompt_tokens: int
    dimensions: int | None
    base64: bool


def parse_embeddings(body_any: Any) -> EmbeddingRequest:
    body = _require_object(body_any)
    _check_common(body)
    value = body.get("input")
    items: list[Any]
    if isinstance(value, str) or (_is_token_list(value) and value):
        items = [value]
    elif isinstance(value, list) and value:
        items = value
    else:
        raise BadRequest(
            "'input' must be a string, a non-empty list of strings or of token-id lists", "input"
        )
    keys: list[str] = []
    tokens = 0
    for i, item in enumerate(items):
        if isinstance(item, str):
            keys.append(item)
            tokens += count_words(item)
        elif _is_token_list(item):
            keys.append("tokens:" + ",".join(str(t) for t in item))
            tokens += len(item)
        else:
            raise BadRequest(f"'input[{i}]' must be a string or a list of token ids", f"input[{i}]")
    encoding = body.get("encoding_format", "float")
    if encoding not in ("float", "base64", None):
        raise BadRequest("'encoding_format' must be 'float' or 'base64'", "encoding_format")
    return EmbeddingRequest(
        keys=keys,
        prompt_tokens=tokens,
        dimensions=_optional_int(body, "dimensions", 1, MAX_EMBEDDING_DIM),
        base64=encoding == "base64",
    )


CONTROL_KEYS: Final = "hang_inference, dead_health, latency_ms, loading, exit, exit_code"


def parse_control(body_any: Any) -> JsonObject:
    """Validate a POST /_control body; returns the switches to change."""
    body = _require_object(body_any)
    for key, value in body.items():
        if key in ("hang_inference", "dead_health", "exit"):
            if not isinstance(value, bool):
                raise BadRequest(f"'{key}' must be true or false", key)
        elif key in ("exit_code", "latency_ms"):
            high = 255 if key == "exit_code" else 3_600_000
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high:
                raise BadRequest(f"'{key}' must be a whole number from 0 to {high}", key)
        elif key == "loading":
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise BadRequest("'loading' must be a number of seconds, 0 or more", key)
        else:
            raise BadRequest(f"unknown control '{key}'; use {CONTROL_KEYS}", key)
    return body


def error_body(message: str, kind: str, param: str | None = None, code: Any = None) -> JsonObject:
    """The OpenAI error envelope."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


# --------------------------------------------------------------------------------------------
# HTTP plumbing
# --------------------------------------------------------------------------------------------


@dataclass
class Request:
    method: str
    path: str
    version: str
    headers: dict[str, str]
    body: bytes
    port: int


@dataclass
class Reply:
    status: int
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    events: list[bytes] | None = None  # server-sent events, for streaming answers
    after: Callable[[], None] | None = None  # run once the answer is written


def json_reply(status: int, payload: Any, headers: dict[str, str] | None = None) -> Reply:
    return Reply(status, json.dumps(payload).encode(), headers=headers or {})


class ProtocolError(Exception):
    """The client sent something that is not HTTP/1.x we can read; answer 400 and close."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


async def read_request(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, port: int
) -> Request | None:
    """Read one request; None when the client closed the connection between requests."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if exc.partial.strip():
            raise ProtocolError("incomplete request head") from None
        return None
    except asyncio.LimitOverrunError:
        raise ProtocolError("request head too large", 431) from None
    lines = head.decode("latin-1").lstrip("\r\n").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise ProtocolError("malformed request line")
    method, target, version = parts
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise ProtocolError("malformed header line")
        headers[name.strip().lower()] = value.strip()
    if headers.get("expect", "").lower() == "100-continue":
        # Clients such as curl wait for this before they send a large body.
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        await writer.drain()
    body = b""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = await _read_chunked(reader)
    elif "content-length" in headers:
        try:
            length = int(headers["content-length"])
        except ValueError:
            raise ProtocolError("Content-Length is not a number") from None
        if length < 0:
            raise ProtocolError("Content-Length is negative")
        if length > MAX_BODY_BYTES:
            raise ProtocolError("request body too large", 413)
        body = await reader.readexactly(length)
    path = target.split("?", 1)[0].split("#", 1)[0] or "/"
    return Request(method.upper(), path, version, headers, body, port)


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    body = bytearray()
    while True:
        size_line = await reader.readuntil(b"\r\n")
        try:
            size = int(size_line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise ProtocolError("malformed chunk size") from None
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":
                pass  # trailers, ignored
            return bytes(body)
        if len(body) + size > MAX_BODY_BYTES:
            raise ProtocolError("request body too large", 413)
        body += await reader.readexactly(size)
        await reader.readexactly(2)


def _head(status: int, headers: Mapping[str, str]) -> bytes:
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Status"
    lines = [f"HTTP/1.1 {status} {phrase}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


# --------------------------------------------------------------------------------------------
# The engine
# --------------------------------------------------------------------------------------------


class Engine:
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

    def _next_id(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}-obleth-test-{self.counter}"

    def completion(self, parsed: ChatRequest | CompletionRequest) -> Reply:
        chat = isinstance(parsed, ChatRequest)
        count = parsed.max_tokens if parsed.max_tokens is not None else len(WORDS)
        finish = "length" if parsed.max_tokens is not None else "stop"
        tokens = make_tokens(count)
        usage = {
            "prompt_tokens": parsed.prompt_tokens,
            "completion_tokens": count,
            "total_tokens": parsed.prompt_tokens + count,
        }
        base: JsonObject = {
            "id": self._next_id("chatcmpl" if chat else "cmpl"),
            "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()),
            "model": self.config.model,
            "system_fingerprint": ENGINE_NAME,
        }
        if not parsed.stream:
            text = "".join(tokens)
            choice: JsonObject = {"index": 0, "logprobs": None, "finish_reason": finish}
            if chat:
                choice["message"] = {"role": "assistant", "content": text}
            else:
                choice["text"] = text
            return json_reply(200, base | {"choices": [choice], "usage": usage})

        chunk = base | {"object": "chat.completion.chunk" if chat else "text_completion"}

        def event(choice: JsonObject | None, extra: JsonObject | None = None) -> bytes:
            payload = chunk | {"choices": [] if choice is None else [choice]} | (extra or {})
            return b"data: " + json.dumps(payload).encode() + b"\n\n"

        def piece(text: str, reason: str | None) -> JsonObject:
            if chat:
                delta = {"content": text} if text or reason is None else {}
                return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}
            return {"index": 0, "text": text, "logprobs": None, "finish_reason": reason}

        events: list[bytes] = []
        if chat:
            events.append(
                event(
                    {
                        "index": 0,
                        "delta": {"role": "assistant", "content": ""},
                        "logprobs": None,
                        "finish_reason": None,
                    }
                )
            )
        events += [event(piece(token, None)) for token in tokens]
        events.append(event(piece("", finish)))
        if parsed.include_usage:
            events.append(event(None, {"usage": usage}))
        events.append(b"data: [DONE]\n\n")
        return Reply(200, content_type="text/event-stream", events=events)

    def embeddings(self, parsed: EmbeddingRequest) -> Reply:
        dim = parsed.dimensions or self.config.embedding_dim
        data: list[JsonObject] = []
        for i, key in enumerate(parsed.keys):
            vector = embed(key, dim)
            value: Any = vector
            if parsed.base64:
                value = base64.b64encode(struct.pack(f"<{dim}f", *vector)).decode()
            data.append({"object": "embedding", "index": i, "embedding": value})
        usage = {"prompt_tokens": parsed.prompt_tokens, "total_tokens": parsed.prompt_tokens}
        payload = {
            "object": "list",
            "data": data,
            "model": self.config.model,
            "system_fingerprint": ENGINE_NAME,
            "usage": usage,
        }
        return json_reply(200, payload)

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


# --------------------------------------------------------------------------------------------
# Process
# --------------------------------------------------------------------------------------------


def _raise_fd_limit(needed: int) -> None:
    try:
        import resource
    except ImportError:  # not on Unix; nothing to raise
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(hard, max(needed, soft))
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        if target < needed:
            raise ConfigError(
                f"{needed} open files are needed for the ports but the limit is {target}; "
                "raise it (ulimit -n) or use fewer ports"
            )


async def serve(config: EngineConfig) -> int:
    """Run the engine until SIGTERM, --exit-after or /_control exit; return the exit code."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    engine = Engine(config, stop)
    for sig, name in ((signal.SIGTERM, "SIGTERM"), (signal.SIGINT, "SIGINT")):
        loop.add_signal_handler(sig, engine.request_exit, 0, f"{name} received")
    if config.exit_after is not None:
        loop.call_later(
            config.exit_after,
            engine.request_exit,
            EXIT_AFTER_CODE,
            f"--exit-after {config.exit_after:g}s reached",
        )
    if config.slow_start > 0:
        log(
            f"obleth test engine (not a model) slow start: not listening for {config.slow_start:g}s"
        )
        try:
            await asyncio.wait_for(stop.wait(), config.slow_start)
            return engine.exit_code
        except TimeoutError:
            pass

    servers: list[asyncio.Server] = []
    try:
        for port in range(config.port, config.last_port + 1):
            try:
                server = await asyncio.start_server(
                    functools.partial(engine.handle_connection, port),
                    config.host,
                    port,
                    backlog=128 if config.port_count == 1 else 32,
                    limit=MAX_HEAD_BYTES,
                )
            except OSError as exc:
                log(f"obleth test engine: cannot listen on {config.host}:{port}: {exc}")
                return 1
            servers.append(server)
        engine.start_loading(config.loading)
        where = (
            f"{config.host}:{config.port}"
            if config.port_count == 1
            else f"{config.host}:{config.port}-{config.last_port} ({config.port_count} ports)"
        )
        log(
            f"obleth test engine (not a model) listening on {where} model={config.model}"
            + (f" loading={config.loading:g}s" if config.loading > 0 else "")
        )
        await stop.wait()
        return engine.exit_code
    finally:
        for server in servers:
            server.close()


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Command-line entry point; returns the process exit code."""
    try:
        config = parse_config(sys.argv[1:] if argv is None else argv, environ or os.environ)
        if config.port_count > 1:
            _raise_fd_limit(config.port_count + 256)
    except ConfigError as exc:
        log(f"obleth test engine: {exc}")
        return 2
    pid_written = False
    if config.pid_file:
        try:
            with open(config.pid_file, "w", encoding="ascii") as handle:
                handle.write(f"{os.getpid()}\n")
            pid_written = True
        except OSError as exc:
            log(f"obleth test engine: cannot write --pid-file {config.pid_file}: {exc}")
            return 2
    try:
        return asyncio.run(serve(config))
    finally:
        if pid_written and config.pid_file:
            with contextlib.suppress(OSError):
                os.unlink(config.pid_file)


if __name__ == "__main__":
    raise SystemExit(main())
