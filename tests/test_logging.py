"""Secrets never reach a log line: not in messages, not in tracebacks, in any process."""

from __future__ import annotations

import logging

import pytest

from obleth.core.models import SlurmSettings
from obleth.logging import RedactSecretsFilter, redact


def _format(record: logging.LogRecord) -> str:
    RedactSecretsFilter().filter(record)
    return logging.Formatter("%(message)s").format(record)


@pytest.mark.django_db
def test_a_secret_loaded_from_the_database_is_masked_in_a_logged_traceback() -> None:
    secret = "hf_loadedfromdb_0123456789abcdef"
    SlurmSettings.objects.update_or_create(pk=1, defaults={"hf_token": secret})
    SlurmSettings.objects.get(pk=1)  # loading it registers it, as a worker would
    try:
        raise RuntimeError(f"upstream refused token {secret}")
    except RuntimeError:
        record = logging.getLogger("t").makeRecord(
            "t",
            logging.ERROR,
            __file__,
            1,
            "failed: %s",
            ("x",),
            exc_info=__import__("sys").exc_info(),
        )
    text = _format(record)
    assert "RuntimeError" in text and secret not in text and "[redacted]" in text


def test_jwts_and_bearer_tokens_are_masked_without_registration() -> None:
    jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdW4iOiJvYmxldGgifQ.c2lnbmF0dXJlLXN0dWZm"
    assert jwt not in redact(f"token={jwt}")
    assert "abc123secret" not in redact("Authorization: Bearer abc123secret")
