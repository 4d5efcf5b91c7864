"""An engine that names the model differently (Ollama's ``qwen2.5:0.5b`` for obleth's
``qwen2.5-0.5b``) answers the endpoint check with 404 model_not_found. It answered, so it is up:
for a Slurm model it counts as serving (seed 000), the check says the names differ and how to fix
it, and it never feeds the zombie restart.

The engine is a small stdlib HTTP server on 127.0.0.1 answering like Ollama's OpenAI surface
(404 with a JSON error for an unknown model, its catalog on GET /v1/models): the project's test
engine accepts any model name, so it cannot show the mismatch.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from obleth.core.choices import HealthStatus
from obleth.core.models import Endpoint, Model
from obleth.gateway.health import check_endpoint, classify
from provisioner.domain import CancelReason, EndpointView
from provisioner.plan import plan
from tests.plugins.factories import make_endpoint, make_model, make_slurm_model
from tests.provisioner.test_plan import NOW, served, snap, spec

pytestmark = pytest.mark.django_db

ENGINE_NAME = "qwen2.5:0.5b"
OBLETH_NAME = "qwen2.5-0.5b"


class _Ollama(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": ENGINE_NAME, "object": "model"}]})
        else:
            self._send(404, {"error": "not found"})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        name = body.get("model")
        if name == ENGINE_NAME:
            self._send(200, {"choices": [{"message": {"content": "p"}}]})
            return
        self._send(
            404,
            {
                "error": {
                    "message": f'model "{name}" not found, try pulling it first',
                    "type": "api_error",
                    "code": "model_not_found",
                }
            },
        )


@pytest.fixture
def ollama() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Ollama)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def test_a_renamed_model_counts_as_serving_and_says_how_to_fix_it(ollama: str) -> None:
    model = make_slurm_model(name=OBLETH_NAME)
    ep = make_endpoint(model, api_base=ollama)
    for _ in range(3):  # more than the zombie signal's two consecutive failures
        verdict = check_endpoint(Endpoint.objects.get(pk=ep.pk))
        assert verdict.http_status == 404
        assert verdict.status != HealthStatus.UNHEALTHY, verdict.message
        assert verdict.status == HealthStatus.DEGRADED
    row = Endpoint.objects.get(pk=ep.pk)
    assert row.consecutive_failures == 0
    assert row.health_status == HealthStatus.DEGRADED
    assert ENGINE_NAME in row.last_message and OBLETH_NAME in row.last_message
    assert "upstream model name" in row.last_message
    badge = Model.objects.get(pk=model.pk)
    assert badge.health_status == HealthStatus.HEALTHY, badge.health_message


def test_setting_the_upstream_name_makes_it_healthy(ollama: str) -> None:
    model = make_slurm_model(name=OBLETH_NAME, upstream_model=ENGINE_NAME)
    ep = make_endpoint(model, api_base=ollama)
    assert check_endpoint(ep).status == HealthStatus.HEALTHY


def test_a_static_model_not_found_upstream_stays_unhealthy(ollama: str) -> None:
    """A static endpoint's 404 is a misconfiguration of that endpoint: routing to it fails."""
    ep = make_endpoint(make_model(name=OBLETH_NAME), api_base=ollama)
    verdict = check_endpoint(ep)
    assert verdict.status == HealthStatus.UNHEALTHY
    assert "upstream model name" in verdict.message


@pytest.mark.parametrize(
    ("status", "catalog", "answered_is_serving", "expected"),
    [
        (404, frozenset({ENGINE_NAME}), True, HealthStatus.DEGRADED),
        (400, frozenset({ENGINE_NAME}), True, HealthStatus.DEGRADED),
        (422, None, True, HealthStatus.DEGRADED),  # catalog unreadable: it still answered
        (404, frozenset({"*"}), True, HealthStatus.DEGRADED),
        (404, frozenset({ENGINE_NAME}), False, HealthStatus.UNHEALTHY),
        (404, frozenset({OBLETH_NAME}), True, HealthStatus.DEGRADED),  # listed: model_type?
        (401, None, True, HealthStatus.UNHEALTHY),  # the key is wrong: not serving our traffic
    ],
)
def test_classification_of_answers(
    status: int, catalog: frozenset[str] | None, answered_is_serving: bool, expected: str
) -> None:
    verdict, message = classify(
        status,
        "model not found",
        listed=lambda: catalog,
        forwarded_name=OBLETH_NAME,
        answered_is_serving=answered_is_serving,
    )
    assert verdict == expected, message


def test_an_answered_check_never_restarts_the_replica() -> None:
    """Even an unhealthy verdict that came with an HTTP answer (the engine is up) is no zombie
    signal: only checks that got no answer (timeout, refused) are."""
    replica, job, endpoint = served(1, "101")
    failing = dataclasses.replace(
        endpoint,
        health_status="unhealthy",
        consecutive_failures=5,
        last_checked_at=NOW - dt.timedelta(seconds=30),
    )

    def restarts(e: EndpointView) -> list[Any]:
        actions = plan(snap(specs=[spec()], replicas=[replica], jobs=[job], endpoints=[e]))
        return [a for a in actions if getattr(a, "reason", None) is CancelReason.GATEWAY_UNHEALTHY]

    assert restarts(dataclasses.replace(failing, last_http_status=404)) == []
    # The same verdict without an answer (a hung engine) is the zombie signal.
    assert len(restarts(failing)) == 1
