"""Logging helpers: the filter that keeps secrets out of every log line, request and pass ids,
and the plain and JSON formats (``OBLETH_LOG_FORMAT``).

Secrets are never logged on purpose; ``RedactSecretsFilter`` is the second line of defence: it
masks JWTs, bearer tokens and values registered at runtime (the configured JWT, tokens, API
keys). It runs first on every handler, so the formatters only ever see redacted text.

Ids: the web middleware (``obleth.requestid``) binds ``request_id`` for a request and a pass
binds ``pass_id`` (contextvars, so threads and tasks keep their own); ``ContextFilter`` copies
them onto every record.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import json
import logging
import re
import threading
import traceback
import uuid
from collections.abc import Iterator

_JWT = re.compile(r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*")
_BEARER = re.compile(r"(?i)(bearer\s+)[^\s'\"]+")
_HEADER = re.compile(r"(?i)(x-slurm-user-token['\"]?\s*[:=]\s*['\"]?)[^\s'\",}]+")

_known: set[str] = set()
_lock = threading.Lock()


def register_secret(value: str | None) -> None:
    """Remember a secret so that it is masked if it ever reaches a log line."""
    if value and len(value) >= 6:
        with _lock:
            _known.add(value)


def redact(text: str) -> str:
    text = _JWT.sub("[redacted-jwt]", text)
    text = _BEARER.sub(r"\1[redacted]", text)
    text = _HEADER.sub(r"\1[redacted]", text)
    for secret in tuple(_known):
        if secret in text:
            text = text.replace(secret, "[redacted]")
    return text


class RedactSecretsFilter(logging.Filter):
    """Masks secrets in the message AND in any traceback or stack attached to the record."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message:
            record.msg = cleaned
            record.args = None
        if record.exc_info and record.exc_info[0] is not None:
            text = "".join(traceback.format_exception(*record.exc_info))
            record.exc_text = redact(text).rstrip("\n")
            record.exc_info = None
        elif record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


# ------------------------------------------------------------------ request and pass ids

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("obleth_request_id", default="")
pass_id: contextvars.ContextVar[str] = contextvars.ContextVar("obleth_pass_id", default="")

_REQUEST_ID_OK = re.compile(r"[A-Za-z0-9._:@/+=-]{1,128}")


def clean_request_id(value: str | None) -> str:
    """An incoming ``X-Request-ID`` when it is a plain token (letters, digits, ``._:@/+=-``, at
    most 128 characters), else a new one: a header value never injects text into log lines."""
    text = (value or "").strip()
    if _REQUEST_ID_OK.fullmatch(text):
        return text
    return uuid.uuid4().hex


def new_pass_id() -> str:
    return uuid.uuid4().hex[:12]


@contextlib.contextmanager
def bound(var: contextvars.ContextVar[str], value: str) -> Iterator[str]:
    """Set ``var`` to ``value`` for the block (a request, a pass), restoring it after."""
    token = var.set(value)
    try:
        yield value
    finally:
        var.reset(token)


class ContextFilter(logging.Filter):
    """Puts the current request id and pass id on every record (``""`` when there is none)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.__dict__["request_id"] = request_id.get()
        record.__dict__["pass_id"] = pass_id.get()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message, request_id,
    pass_id, and the traceback as ``exc`` when there is one (``OBLETH_LOG_FORMAT=json``)."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, object] = {
            "time": dt.datetime.fromtimestamp(record.created, tz=dt.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in ("request_id", "pass_id"):
            value = getattr(record, key, "")
            if value:
                data[key] = value
        if record.exc_info and record.exc_info[0] is not None:
            data["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            data["exc"] = record.exc_text
        if record.stack_info:
            data["stack"] = record.stack_info
        return json.dumps(data, ensure_ascii=False, default=str)


class PlainFormatter(logging.Formatter):
    """``time LEVEL logger: message``, with ``[pass …]``/``[req …]`` when a pass or request is
    under way."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        ids = []
        if getattr(record, "pass_id", ""):
            ids.append(f"pass={record.__dict__['pass_id']}")
        if getattr(record, "request_id", ""):
            ids.append(f"req={record.__dict__['request_id']}")
        if not ids:
            return text
        head, sep, tail = text.partition("\n")
        return f"{head} [{' '.join(ids)}]{sep}{tail}"
