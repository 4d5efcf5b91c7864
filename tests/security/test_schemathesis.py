"""Schemathesis against the Management API's own OpenAPI schema (``/api/schema/``), in-process.

The WSGI application is called directly (no server, no port). With the admin token every
operation is fuzzed with valid and invalid data and must answer without a 5xx, with a status
code, content type, headers and body the schema documents. Without credentials every operation
must answer 401.

Faked, because it cannot run here: slurmrestd. Schemathesis may point ``slurmrestd_url`` at any
host, so the Slurm client of ``obleth.core.services`` is replaced by one that fails like an
unreachable server (the connection test and cluster discovery then take their error paths,
which are what a fuzzer should reach anyway).

The example count is bounded (``OBLETH_SCHEMATHESIS_EXAMPLES``, default 15 per operation) so
the run takes a minute or two in CI.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.conf import settings
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

EXAMPLES = int(os.environ.get("OBLETH_SCHEMATHESIS_EXAMPLES", "15"))
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


class UnreachableSlurm:
    """A Slurm client whose every call fails the way a host that does not answer does."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def _fail(self) -> Any:
        raise ConnectionError("slurmrestd is not reachable (replaced in this test)")

    def ping(self) -> Any:
        return self._fail()

    def detect_version(self) -> Any:
        return self._fail()

    def discover(self) -> Any:
        return self._fail()


def auth_headers() -> dict[str, str]:
    return {"Authorization": f"Bearer {settings.OBLETH_ADMIN_TOKEN}"}


@pytest.fixture
def wsgi_app(db: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The real WSGI application. Like Django's test client, requests do not close the database
    connection at their end (it holds the test's transaction)."""
    from django.core import signals
    from django.core.wsgi import get_wsgi_application
    from django.db import close_old_connections

    from obleth.core import services

    monkeypatch.setattr(services, "make_slurm_client", UnreachableSlurm)
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    try:
        yield get_wsgi_application()
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)


@pytest.fixture
def world(db: Any) -> dict[str, str]:
    """One object of every kind, so fuzzed requests reach real rows and not only 404s."""
    from obleth.core.models import Alert, Launch, Recipe, Replica
    from tests.plugins.factories import make_endpoint, make_model, make_slurm_model

    static = make_model(name="fuzz-static")
    slurm = make_slurm_model(name="fuzz-slurm")
    endpoint = make_endpoint(static, name="fuzz-ep", api_base="http://127.0.0.1:9/v1")
    replica = Replica.objects.create(model_id=slurm.pk, model_name=slurm.name, job_name="j")
    launch = Launch.objects.create(
        id=replica.pk, model_id=slurm.pk, model_name=slurm.name, job_name="j"
    )
    recipe = Recipe.objects.create(
        name="fuzz-recipe", body="---\nname: tiny\nengine: custom\nport: 8000\n---\necho hi\n"
    )
    alert = Alert.objects.create(key="k", title="t")
    return {
        "static": str(static.pk),
        "slurm": str(slurm.pk),
        "endpoint": str(endpoint.pk),
        "replica": str(replica.pk),
        "launch": str(launch.pk),
        "recipe": str(recipe.pk),
        "alert": str(alert.pk),
    }


def aim_at_real_rows(case: Any, world: dict[str, str]) -> None:
    """Most examples address the world's rows (a random UUID only ever finds a 404)."""
    params = case.path_parameters or {}
    if not params or zlib.crc32(repr(case.body).encode()) % 4 == 0:
        return  # a quarter keep their generated ids: the 404 answers are fuzzed too
    path = case.operation.path
    if "model_id" in params:
        scoped = "static" if "/endpoints" in path else "slurm"
        params["model_id"] = world[scoped]
    if "id" in params:
        kind = next(
            (k for k, part in KINDS.items() if part in path.replace("{model_id}", "")), "static"
        )
        params["id"] = world[kind]
    case.path_parameters = params


KINDS = {
    "endpoint": "/endpoints/",
    "replica": "/replicas/",
    "launch": "/launches/",
    "recipe": "/recipes/",
    "alert": "/alerts/",
    "static": "/models/",
}


@pytest.fixture
def api_schema(wsgi_app: Any, world: dict[str, str]) -> Any:
    config = schemathesis.Config.from_dict(
        {"generation": {"mode": "all", "max-examples": EXAMPLES}}
    )
    return schemathesis.openapi.from_wsgi(
        "/api/schema/?format=json", wsgi_app, headers=auth_headers(), config=config
    )


schema = schemathesis.pytest.from_fixture("api_schema")

FUZZ_SETTINGS = hypothesis_settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)


@schema.parametrize()
@FUZZ_SETTINGS
def test_every_operation_conforms_with_the_admin_token(case: Any, world: dict[str, str]) -> None:
    aim_at_real_rows(case, world)
    case.call_and_validate(headers=auth_headers(), checks=CHECKS)


@schema.parametrize()
@hypothesis_settings(FUZZ_SETTINGS, max_examples=3)
def test_every_operation_is_401_without_credentials(case: Any) -> None:
    case.headers = {
        k: v
        for k, v in (case.headers or {}).items()
        if k.lower() not in {"authorization", "cookie"}
    }
    response = case.call()
    assert response.status_code == 401, (
        case.method,
        case.formatted_path,
        response.status_code,
        response.text[:300],
    )
    assert "error" in response.json()
