"""The OpenAI side of the test engine: reading chat, completion, embedding and ``/_control``
request bodies (:class:`BadRequest` names the field at fault), the deterministic "generation"
(the fixed words, hash-derived vectors), the OpenAI error envelope and the answers themselves
(:class:`OpenAIAnswers`: completions, streamed or not, and embeddings).

Part of the test engine (``server.py``): standard library only."""

from __future__ import annotations

import base64
import hashlib
import json
import struct
import time
from dataclasses import dataclass
from typing import Any, Final, TypeGuard

if __package__:  # imported as provisioner.testengine.<module>
    from .engine_config import (
        ENGINE_NAME,
        MAX_EMBEDDING_DIM,
        MAX_TOKENS_LIMIT,
        WORDS,
        EngineConfig,
    )
    from .engine_http import (
        Reply,
        json_reply,
    )
else:  # run as a script (python3 server.py): the modules sit side by side
    from engine_config import (  # type: ignore[import-not-found,no-redef]
        ENGINE_NAME,
        MAX_EMBEDDING_DIM,
        MAX_TOKENS_LIMIT,
        WORDS,
        EngineConfig,
    )
    from engine_http import (  # type: ignore[import-not-found,no-redef]
        Reply,
        json_reply,
    )

JsonObject = dict[str, Any]


class BadRequest(Exception):
    """A request body is malformed; ``param`` names the field at fault."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


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


class OpenAIAnswers:
    """The answers to inference requests, for :class:`engine_core.Engine` (which inherits
    them): chat and text completions, streamed or not, and embeddings, with ids counted per
    engine."""

    config: EngineConfig
    counter: int

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
