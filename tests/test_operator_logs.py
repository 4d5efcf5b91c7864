"""Logs an operator can read: request and pass ids, the JSON format, gateway refusals at INFO
(never Django's ERROR line), one INFO line per pass that changed something and none at idle.

Nothing is faked except Slurm in the pass tests (the in-process FakeSlurmrestd: jobs stay
PENDING, so no engine is needed); logging, the middleware and the gateway service (in this
process: tests/plugins/gateway_client.py) are the real ones.
"""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client

from obleth.core.models import ManagedSpec, SlurmSettings
from obleth.logging import (
    ContextFilter,
    JsonFormatter,
    PlainFormatter,
    RedactSecretsFilter,
    bound,
    clean_request_id,
    pass_id,
    register_secret,
    request_id,
)
from provisioner.reconcile import run_pass
from provisioner.slurm.fake import FakeNode, FakeSlurmrestd
from tests.plugins.factories import make_model, make_slurm_model
from tests.plugins.gateway_client import GatewayClient
from tests.test_settings_env import BASE_ENV, load

JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJvYmxldGgifQ.c2lnbmF0dXJlLXZhbHVl"


class Capture:
    """A handler wired like LOGGING's console handler (redact first, then ids), in memory."""

    def __init__(self, formatter: logging.Formatter) -> None:
        self.stream = io.StringIO()
        self.handler = logging.StreamHandler(self.stream)
        self.handler.addFilter(RedactSecretsFilter())
        self.handler.addFilter(ContextFilter())
        self.handler.setFormatter(formatter)

    def lines(self) -> list[str]:
        return [line for line in self.stream.getvalue().splitlines() if line.strip()]


@pytest.fixture
def json_log() -> Iterator[Capture]:
    capture = Capture(JsonFormatter())
    root = logging.getLogger()
    root.addHandler(capture.handler)
    old = root.level
    root.setLevel(logging.DEBUG)
    try:
        yield capture
    finally:
        root.removeHandler(capture.handler)
        root.setLevel(old)


# ----------------------------------------------------------------------------- formats


def test_json_lines_carry_ids_and_are_redacted_first(json_log: Capture) -> None:
    log = logging.getLogger("obleth.test")
    register_secret("database-loaded-secret-123")
    with bound(request_id, "req-1"), bound(pass_id, "pass-1"):
        log.info("token %s and %s\nsecond line", JWT, "database-loaded-secret-123")
        try:
            raise RuntimeError(f"boom {JWT}")
        except RuntimeError:
            log.exception("failed")
    log.warning("outside")
    records = [json.loads(line) for line in json_log.lines()]
    assert len(records) == 3  # one line each: the newline is escaped inside the JSON string
    first, failed, outside = records
    assert first["request_id"] == "req-1" and first["pass_id"] == "pass-1"
    assert first["level"] == "INFO" and first["logger"] == "obleth.test"
    assert JWT not in json_log.stream.getvalue()
    assert "database-loaded-secret-123" not in json_log.stream.getvalue()
    assert "[redacted-jwt]" in first["message"] and "\nsecond line" in first["message"]
    assert "RuntimeError: boom [redacted-jwt]" in failed["exc"]
    assert "request_id" not in outside and "pass_id" not in outside
    assert first["time"].endswith("+00:00")


def test_plain_format_appends_ids_only_when_there_are_some() -> None:
    capture = Capture(PlainFormatter("%(levelname)s %(name)s: %(message)s"))
    log = logging.getLogger("obleth.plain")
    log.addHandler(capture.handler)
    try:
        with bound(pass_id, "abc123"):
            log.warning("in a pass")
        log.warning("not in a pass")
    finally:
        log.removeHandler(capture.handler)
    assert capture.lines() == [
        "WARNING obleth.plain: in a pass [pass=abc123]",
        "WARNING obleth.plain: not in a pass",
    ]


def test_log_format_setting() -> None:
    expr = "s.LOGGING['handlers']['console']['formatter']"
    assert load(BASE_ENV, expr).stdout.strip() == "plain"
    assert load({**BASE_ENV, "OBLETH_LOG_FORMAT": "JSON"}, expr).stdout.strip() == "json"
    bad = load({**BASE_ENV, "OBLETH_LOG_FORMAT": "xml"}, "1")
    assert bad.returncode != 0 and "OBLETH_LOG_FORMAT='xml'" in bad.stderr
    assert (
        load(BASE_ENV, "s.LOGGING['handlers']['console']['filters'][0]").stdout.strip() == "redact"
    )


def test_json_format_in_a_real_process_prints_one_object_per_line() -> None:
    code = (
        "import django, logging; django.setup(); "
        "from obleth.logging import bound, pass_id\n"
        "with bound(pass_id, 'p-42'):\n"
        "    logging.getLogger('provisioner.x').warning('hello %s', 'world')\n"
    )
    env = {**BASE_ENV, "OBLETH_LOG_FORMAT": "json", "DJANGO_SETTINGS_MODULE": "obleth.settings"}
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=load.__globals__["ROOT"],
        env={
            **{k: v for k, v in __import__("os").environ.items() if not k.startswith("OBLETH_")},
            **env,
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    line = json.loads(result.stderr.strip().splitlines()[-1])
    assert line["message"] == "hello world" and line["pass_id"] == "p-42"
    assert line["logger"] == "provisioner.x" and line["level"] == "WARNING"


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        ("abc-123", True),
        ("trace:01HXYZ/span=7", True),
        ("x" * 128, True),
        ("x" * 129, False),
        ("two words", False),
        ("line\nbreak", False),
        ("nul\x00byte", False),
        ("", False),
        ("<script>", False),
    ],
)
def test_request_ids_are_plain_tokens(given: str, kept: bool) -> None:
    cleaned = clean_request_id(given)
    if kept:
        assert cleaned == given
    else:
        assert cleaned != given and len(cleaned) == 32 and cleaned.isalnum()


# ----------------------------------------------------------------------------- the gateway


@pytest.fixture
def open_gateway(db: Any, settings: Any) -> None:
    settings.OBLETH_GATEWAY_API_KEYS = []
    settings.OBLETH_GATEWAY_OPEN = True  # closed by default since gateway keys


def chat(gateway: GatewayClient, name: str, **headers: str) -> Any:
    """Through the gateway service (in this process: tests/plugins/gateway_client.py)."""
    body = {"model": name, "messages": [{"role": "user", "content": "hi"}]}
    return gateway.post("/v1/chat/completions", data=json.dumps(body), **headers)


def test_request_id_is_honoured_and_returned(
    open_gateway: None, gateway: GatewayClient, client: Client
) -> None:
    answer = chat(gateway, "nope", HTTP_X_REQUEST_ID="client-id-7")
    assert answer["X-Request-ID"] == "client-id-7"
    made = chat(gateway, "nope")["X-Request-ID"]
    assert len(made) == 32 and made != chat(gateway, "nope")["X-Request-ID"]
    forged = chat(gateway, "nope", HTTP_X_REQUEST_ID="a b\tc")["X-Request-ID"]
    assert forged != "a b\tc" and len(forged) == 32
    assert gateway.get("/healthz")["X-Request-ID"]
    assert client.get("/healthz")["X-Request-ID"]  # the web process too


def answer_lines(caplog: pytest.LogCaptureFixture, status: int) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.name == "obleth.gateway.service" and r.getMessage().startswith(f"gateway: {status} ")
    ]


@pytest.mark.parametrize(
    ("setup", "status", "code"),
    [
        pytest.param("none", 404, "model_not_found", id="unknown model: 404"),
        pytest.param("no-endpoint", 503, "no_endpoint", id="no endpoint: 503"),
        pytest.param("stopped", 503, "model_stopped", id="breaker: 503"),
        pytest.param("bad-json", 400, "invalid_request_error", id="bad body: 400"),
        pytest.param("dead-endpoint", 502, "upstream_unreachable", id="unreachable: 502"),
    ],
)
def test_gateway_refusals_are_one_info_line_never_error(
    open_gateway: None,
    gateway: GatewayClient,
    caplog: pytest.LogCaptureFixture,
    json_log: Capture,
    setup: str,
    status: int,
    code: str,
) -> None:
    """A client's 4xx and a model's 503 are the client's or the model's condition: one INFO
    line with the model and the reason, never an ERROR."""
    name = f"m-{uuid.uuid4().hex[:6]}"
    if setup == "stopped":
        model = make_slurm_model(name=name)
        ManagedSpec.objects.filter(pk=model.pk).update(breaker_message="Stopped launching.")
    elif setup != "none":
        model = make_model(name=name)
        if setup == "dead-endpoint":
            model.endpoints.create(name="dead", api_base="http://127.0.0.1:9/v1")
    with caplog.at_level(logging.DEBUG):
        if setup == "bad-json":
            answer = gateway.post("/v1/chat/completions", data="{", HTTP_X_REQUEST_ID="rid-1")
        else:
            answer = chat(gateway, name, HTTP_X_REQUEST_ID="rid-1")
    assert answer.status_code == status
    error = json.loads(answer.content)["error"]
    assert code in (error["code"], error["type"])
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not [r for r in caplog.records if r.name == "django.request"]
    lines = answer_lines(caplog, status)
    assert len(lines) == 1 and lines[0].levelno == logging.INFO
    text = lines[0].getMessage()
    assert f"gateway: {status} POST /v1/chat/completions" in text and code in text
    if setup != "bad-json":
        assert f"model={name}" in text
    gateway_json = [
        json.loads(x) for x in json_log.lines() if f"gateway: {status} POST /v1/chat" in x
    ]
    assert [r["request_id"] for r in gateway_json] == ["rid-1"]


def test_a_real_server_error_is_still_logged_at_error(
    open_gateway: None,
    gateway: GatewayClient,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: Any,
) -> None:
    """An exception in the gateway is a bug: logged at ERROR with its traceback; the client
    gets an OpenAI-shaped 500 naming the request id."""
    from obleth.gateway import service

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("bug")

    gateway.reload()
    gateway.auto_reload = False
    monkeypatch.setattr(service, "not_found", broken)
    with caplog.at_level(logging.INFO):
        answer = chat(gateway, "x", HTTP_X_REQUEST_ID="rid-bug")
    assert answer.status_code == 500
    assert answer.json()["error"]["code"] == "gateway_error"
    assert "rid-bug" in answer.json()["error"]["message"]
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and errors[0].name == "obleth.gateway.service"
    assert "RuntimeError: bug" in (errors[0].exc_text or "")  # the traceback, redacted first


def test_the_web_process_points_v1_at_the_gateway(
    db: Any, client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    """/v1 is the gateway service's: the web process answers a short OpenAI-shaped 404 naming
    the service and its address setting, for any method, logged at INFO (not a WARNING)."""
    with caplog.at_level(logging.INFO):
        answers = [
            client.get("/v1/models"),
            client.post("/v1/chat/completions", data="{}", content_type="application/json"),
            client.get("/v1"),
            client.delete("/v1/anything/else"),
        ]
    for answer in answers:
        assert answer.status_code == 404
        error = json.loads(answer.content)["error"]
        assert error["code"] == "served_by_gateway"
        assert "obleth.gateway.serve" in error["message"]
        assert "OBLETH_GATEWAY_BIND" in error["message"]
        assert answer["Content-Type"] == "application/json"
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


# ----------------------------------------------------------------------------- passes


@pytest.fixture
def fake_slurm(db: Any, settings: Any) -> Iterator[FakeSlurmrestd]:
    settings.OBLETH_PROVISIONER_JOB_PREFIX = f"obl{uuid.uuid4().hex[:6]}-"
    settings.OBLETH_PROVISIONER_DISPATCH = "inline"
    settings.OBLETH_PROVISIONER_WARMUP_TIMEOUT_SECS = 0
    settings.OBLETH_MODEL_HEALTH_ENABLED = False
    with FakeSlurmrestd(token="tok-123456", start_delay=3600, nodes=[FakeNode("n1")]) as fake:
        slurm = SlurmSettings.load()
        slurm.enabled, slurm.slurmrestd_url, slurm.user = True, fake.url, "obleth"
        slurm.jwt, slurm.api_version = "tok-123456", "v0.0.38"
        slurm.save()
        yield fake


def test_a_pass_logs_one_info_line_when_it_acts_and_none_at_idle(
    fake_slurm: FakeSlurmrestd, json_log: Capture
) -> None:
    make_slurm_model(name="quiet", spec={"target_replicas": 2})
    json_log.handler.setLevel(logging.INFO)
    assert run_pass(dispatch="inline").status == "ok"
    acted = [json.loads(line) for line in json_log.lines()]
    summaries = [r for r in acted if r["logger"] == "provisioner.reconcile"]
    assert len(summaries) == 1, acted
    assert "submitted 2" in summaries[0]["message"] and summaries[0]["level"] == "INFO"
    assert all(
        r.get("pass_id") == summaries[0]["pass_id"]
        for r in acted
        if r["logger"].startswith("provisioner")
    )

    json_log.stream.truncate(0)
    json_log.stream.seek(0)
    for fast in (False, True, True):  # the jobs stay queued: nothing changes any more
        assert run_pass(dispatch="inline", fast=fast).status == "ok"
    assert json_log.lines() == []

    json_log.handler.setLevel(logging.DEBUG)
    assert run_pass(dispatch="inline", fast=True).status == "ok"
    debug = [json.loads(line) for line in json_log.lines()]
    assert any("nothing changed" in r["message"] and r["level"] == "DEBUG" for r in debug)
