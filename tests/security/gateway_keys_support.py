"""Helpers shared by the gateway-key tests (test_gateway_keys.py, test_gateway_key_abuse.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from obleth.gateway import keys
from tests.plugins.gateway_client import GatewayClient

ROOT = Path(__file__).resolve().parents[2]
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}


@pytest.fixture
def closed_gateway(settings: Any) -> Iterator[None]:
    """The shipped default (closed, no static key), small limits, fresh key caches."""
    settings.OBLETH_GATEWAY_OPEN = False
    settings.OBLETH_GATEWAY_API_KEYS = []
    settings.OBLETH_AUTH_MAX_FAILURES = 3
    settings.OBLETH_AUTH_FAILURE_WINDOW_SECS = 60
    settings.OBLETH_AUTH_LOCKOUT_SECS = 120
    keys.invalidate_keys()
    keys.forget_touches()
    yield
    keys.invalidate_keys()


def bearer(secret: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {secret}"}


def chat(gateway: GatewayClient, model: str, **extra: Any) -> Any:
    return gateway.post(
        "/v1/chat/completions",
        data=json.dumps({"model": model, **CHAT}),
        content_type="application/json",
        **extra,
    )


def error_of(response: Any) -> dict[str, Any]:
    payload = json.loads(response.content)
    assert set(payload) == {"error"}
    assert {"message", "type", "param", "code"} <= set(payload["error"])
    return dict(payload["error"])


def all_log_text(caplog: pytest.LogCaptureFixture) -> str:
    parts = []
    for record in caplog.records:
        parts.append(record.getMessage())
        if record.exc_text:
            parts.append(record.exc_text)
    return "\n".join(parts)
