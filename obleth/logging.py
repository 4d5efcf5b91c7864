"""Log filter that keeps secrets out of every log line.

Secrets are never logged on purpose; this filter is the second line of defence: it masks JWTs,
bearer tokens and values registered at runtime (the configured JWT, tokens, API keys).
"""

from __future__ import annotations

import logging
import re
import threading
import traceback

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
