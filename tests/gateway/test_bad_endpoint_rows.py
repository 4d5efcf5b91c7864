"""Endpoint rows written before validation existed (an api_base with CR/LF, a non-ASCII API key)
must not turn a model's requests into 500s: the gateway skips them, logs why, and fails over to
the model's healthy endpoints.

The rows are written with ``QuerySet.update`` (no validation), as old rows were. Requests go
through the gateway service in this process (tests/plugins/gateway_client.py); the healthy
endpoint is the real stdlib recorder server of tests/gateway/conftest.py; nothing is mocked.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from obleth.core.models import Endpoint
from tests.gateway.conftest import Recorder
from tests.plugins.factories import make_endpoint, make_model
from tests.plugins.gateway_client import GatewayClient

pytestmark = pytest.mark.django_db

CHAT = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 3}

BAD_ROWS = [
    pytest.param({"api_base": "http://127.0.0.1:9/v1\r\nX-Injected: 1"}, id="api_base-crlf"),
    pytest.param({"api_base": "http://127.0.0.1:9/v1\n"}, id="api_base-lf"),
    pytest.param({"api_base": "http://[::1/v1"}, id="api_base-broken-ipv6"),
    pytest.param({"api_key": "sk-clé-non-ascii"}, id="api_key-non-ascii"),
    pytest.param({"api_key": "sk-line\r\nX-Injected: 1"}, id="api_key-crlf"),
]


@pytest.fixture(autouse=True)
def _open_gateway(settings: Any) -> None:
    settings.OBLETH_GATEWAY_API_KEYS = []
    settings.OBLETH_GATEWAY_OPEN = True  # the gateway-keys work closes it by default


def _post(gateway: GatewayClient) -> Any:
    return gateway.post(
        "/v1/chat/completions",
        data=json.dumps({"model": "robust", **CHAT}),
        content_type="application/json",
    )


@pytest.mark.parametrize("bad", BAD_ROWS)
def test_a_bad_row_is_skipped_and_the_request_fails_over(
    gateway: GatewayClient,
    recorder: Recorder,
    bad: dict[str, str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="obleth.gateway.service")
    model = make_model(name="robust")
    broken = make_endpoint(model, name="broken", api_base="http://127.0.0.1:9/v1", priority=1)
    Endpoint.objects.filter(pk=broken.pk).update(**bad)  # as a row from before validation
    if "api_key" in bad:  # the key column is encrypted: set it through the model, unvalidated
        broken.refresh_from_db()
        broken.api_key = bad["api_key"]
        broken.save(update_fields=["api_key"])
    make_endpoint(model, name="healthy", api_base=recorder.api_base, priority=2)

    response = _post(gateway)

    assert response.status_code == 200, response.content[:300]
    assert len(recorder.inference_requests()) == 1  # the healthy endpoint took it
    sent = recorder.inference_requests()[0]
    assert "x-injected" not in sent.headers
    skipped = [r for r in caplog.records if "skipped" in r.getMessage()]
    assert skipped and str(broken.pk) in skipped[0].getMessage()
    for record in caplog.records:  # the reason never carries the key
        assert "clé" not in record.getMessage() and "sk-line" not in record.getMessage()


def test_only_bad_rows_is_a_502_that_says_so(gateway: GatewayClient) -> None:
    model = make_model(name="robust")
    broken = make_endpoint(model, name="broken", api_base="http://127.0.0.1:9/v1")
    Endpoint.objects.filter(pk=broken.pk).update(api_base="http://127.0.0.1:9/v1\r\nX: 1")
    response = _post(gateway)
    assert response.status_code == 502
    error = json.loads(response.content)["error"]
    assert error["code"] == "upstream_misconfigured"
    assert "misconfigured" in error["message"]


def test_a_bad_row_does_not_use_up_the_tries(gateway: GatewayClient, recorder: Recorder) -> None:
    """Three broken rows ahead of the healthy one: skipping them costs no try (MAX_TRIES=3)."""
    model = make_model(name="robust")
    for n in range(3):
        ep = make_endpoint(model, name=f"broken-{n}", api_base="http://127.0.0.1:9/v1", priority=1)
        Endpoint.objects.filter(pk=ep.pk).update(api_base=f"http://127.0.0.1:9/v{n}\n")
    make_endpoint(model, name="healthy", api_base=recorder.api_base, priority=5)
    assert _post(gateway).status_code == 200
    assert len(recorder.inference_requests()) == 1


@pytest.mark.parametrize("bad", BAD_ROWS)
def test_the_health_check_marks_a_bad_row_unhealthy_instead_of_crashing(
    recorder: Recorder, bad: dict[str, str]
) -> None:
    from obleth.core.choices import HealthStatus
    from obleth.gateway import health

    model = make_model(name="robust")
    broken = make_endpoint(model, name="broken", api_base="http://127.0.0.1:9/v1")
    Endpoint.objects.filter(pk=broken.pk).update(**{k: v for k, v in bad.items() if k != "api_key"})
    broken.refresh_from_db()
    if "api_key" in bad:
        broken.api_key = bad["api_key"]
        broken.save(update_fields=["api_key"])
    healthy = make_endpoint(model, name="healthy", api_base=recorder.api_base)
    targets = [
        health.ProbeTarget.of(Endpoint.objects.get(pk=pk), model) for pk in (broken.pk, healthy.pk)
    ]
    verdicts = health.probe_many(targets)
    assert verdicts[str(broken.pk)].status == HealthStatus.UNHEALTHY
    assert "misconfigured" in verdicts[str(broken.pk)].message
    assert verdicts[str(healthy.pk)].status != HealthStatus.UNHEALTHY
