"""What a model's 503 says when it has no routable endpoint: every state as a table of cases
(pure: obleth.gateway.availability), the state as the routing table loads it (the database, a
bounded number of queries), and the answer through the gateway service's ASGI application."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import uuid
from typing import Any

import pytest
from django.utils import timezone

from obleth.core.choices import ReplicaState
from obleth.core.models import ManagedSpec, Replica, SlurmSettings
from obleth.gateway.availability import ModelState, ReplicaFacts, explain
from obleth.gateway.proxy import no_replica_response
from obleth.gateway.routing import RouteModel, build_route_table, model_states
from tests.plugins.factories import make_model, make_slurm_model
from tests.plugins.gateway_client import GatewayClient

NOW = dt.datetime(2026, 3, 2, 12, 0, tzinfo=dt.UTC)
MODEL_ID = "0b8c3e2a-5d1f-4f6e-9a3b-2c7d8e9f0a1b"
MANAGED = ModelState(managed=True, target=1)
BREAKER = (
    "Stopped launching replicas after 3 failed launches (Stop after failed launches = 3) "
    '(last: FAILED exit 1). Fix the cause (the job logs say why), then press "Try once more" '
    "on the model's page (or POST /api/v1/models/<id>/replicas/clear-lost/), or raise \"Stop "
    'after failed launches" (0 never stops).'
)


def ago(secs: float) -> dt.datetime:
    return NOW - dt.timedelta(seconds=secs)


def starting(**kw: Any) -> ReplicaFacts:
    return ReplicaFacts(**{"job_id": "4242", "since": ago(185), **kw})


def pending(**kw: Any) -> ReplicaFacts:
    return ReplicaFacts(**{"job_id": "4243", "since": ago(42), "slurm_reason": "Priority", **kw})


@dataclasses.dataclass(frozen=True)
class Case:
    id: str
    state: ModelState
    code: str
    retry_after: int | None
    says: tuple[str, ...]
    never: tuple[str, ...] = ()


CASES = [
    Case(
        "model disabled",
        ModelState(enabled=False, managed=True, target=2, breaker=BREAKER),
        "model_disabled",
        None,
        ("is disabled", "the model off", "Ask an operator to enable it"),
        ("Retry",),
    ),
    Case(
        "provisioning disabled",
        dataclasses.replace(MANAGED, spec_enabled=False, pending=pending()),
        "model_disabled",
        None,
        ("is disabled", "its provisioning off"),
    ),
    Case(
        "static, no enabled endpoint",
        ModelState(),
        "no_endpoint",
        None,
        ("has no enabled endpoint", "add or enable one"),
    ),
    Case(
        "starting, engine loading",
        dataclasses.replace(
            MANAGED, starting=starting(last_probe="loading (HTTP 503, loading model) on port 8000")
        ),
        "model_starting",
        30,
        (
            "is starting: job 4242 has been running for 3 min 05 s",
            "The last health probe: The server is up and still loading the model.",
            "Retry in 30 s",
        ),
        ("8000", "(probe:"),
    ),
    Case(
        "starting, nothing listens yet",
        dataclasses.replace(
            MANAGED, starting=starting(last_probe="connection refused on all 8 ports (8000-8007)")
        ),
        "model_starting",
        30,
        ("Nothing listens on the replica's ports yet",),
        ("8000-8007",),
    ),
    Case(
        "starting, not probed yet",
        dataclasses.replace(MANAGED, starting=starting(since=None)),
        "model_starting",
        30,
        ("job 4242 has been running and", "has not been probed yet"),
    ),
    Case(
        "pending behind higher priorities",
        dataclasses.replace(MANAGED, pending=pending()),
        "model_pending",
        60,
        (
            "job 4243 has been waiting in the Slurm queue for 42 s",
            "Waiting behind jobs with a higher priority",
            "Retry in 60 s",
        ),
        ("expects",),
    ),
    Case(
        "pending, Slurm expects a start in 10 minutes",
        dataclasses.replace(
            MANAGED,
            pending=pending(
                slurm_reason="Resources", expected_start=NOW + dt.timedelta(minutes=10)
            ),
        ),
        "model_pending",
        600,
        ("Waiting for resources", "Slurm expects it to start at 2026-03-02 12:10 UTC"),
    ),
    Case(
        "pending, expected start in days: Retry-After capped at an hour",
        dataclasses.replace(
            MANAGED,
            pending=pending(slurm_reason="Resources", expected_start=NOW + dt.timedelta(days=3)),
        ),
        "model_pending",
        3600,
        ("Slurm expects it to start at 2026-03-05 12:00 UTC",),
    ),
    Case(
        "pending, expected start in seconds: Retry-After at least 30 s",
        dataclasses.replace(MANAGED, pending=pending(expected_start=NOW + dt.timedelta(seconds=4))),
        "model_pending",
        30,
        ("Slurm expects it to start",),
    ),
    Case(
        "pending, expected start already past: not shown",
        dataclasses.replace(MANAGED, pending=pending(expected_start=ago(60))),
        "model_pending",
        60,
        ("Waiting behind jobs",),
        ("expects",),
    ),
    Case(
        "pending on a node that is out: the node names stay in the admin",
        dataclasses.replace(
            MANAGED, pending=pending(slurm_reason="ReqNodeNotAvail, UnavailableNodes:gpu[01-02]")
        ),
        "model_pending",
        60,
        ("A node the job needs is unavailable",),
        ("gpu", "UnavailableNodes"),
    ),
    Case(
        "pending, not submitted yet",
        dataclasses.replace(MANAGED, pending=pending(job_id="")),
        "model_pending",
        30,
        ("its job is being submitted to Slurm",),
    ),
    Case(
        "stopped by the failed-launch breaker",
        dataclasses.replace(MANAGED, breaker=BREAKER),
        "model_stopped",
        None,
        (
            "Stopped launching replicas after 3 failed launches",
            '"Try once more"',
            f"POST /api/v1/models/{MODEL_ID}/replicas/clear-lost/",
        ),
        ("<id>", "Retry in"),
    ),
    Case(
        "breaker tripped but a replica is still starting: a retry can be answered",
        dataclasses.replace(MANAGED, breaker=BREAKER, starting=starting()),
        "model_starting",
        30,
        ("is starting",),
    ),
    Case(
        "Slurm refused the submit",
        dataclasses.replace(
            MANAGED, refusal="Slurm refused the job: Invalid partition name specified."
        ),
        "model_refused",
        None,
        ("Slurm refused the job: Invalid partition name specified", "fix its managed spec"),
    ),
    Case(
        "scaled to zero",
        dataclasses.replace(MANAGED, target=0),
        "model_scaled_to_zero",
        None,
        ("scaled to 0 replicas", "scale it up"),
    ),
    Case(
        "Slurm switched off",
        dataclasses.replace(MANAGED, slurm_enabled=False),
        "slurm_disabled",
        None,
        ("Slurm provisioning is switched off",),
    ),
    Case(
        "serving, its endpoint not routable yet",
        dataclasses.replace(MANAGED, serving=1),
        "no_replica_ready",
        5,
        ("just became ready", "Retry in 5 s"),
    ),
    Case(
        "nothing launched yet",
        MANAGED,
        "no_replica_ready",
        30,
        ("no replica ready yet", "has not launched one", "Retry in 30 s"),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_each_state_names_itself(case: Case) -> None:
    answer = explain("chat-7b", case.state, NOW, model_id=MODEL_ID)
    assert (answer.status, answer.code, answer.retry_after) == (503, case.code, case.retry_after)
    assert answer.message.startswith("Model 'chat-7b' ")
    for words in case.says:
        assert words in answer.message, answer.message
    for words in case.never:
        assert words not in answer.message, answer.message


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_the_answer_is_an_openai_error_with_retry_after_only_when_it_helps(case: Case) -> None:
    route = RouteModel(MODEL_ID, "chat-7b", "chat-7b", "chat", 0, (), case.state)
    response = no_replica_response(route, NOW)
    assert response.status_code == 503
    error = json.loads(response.content)["error"]
    assert error == {
        "message": explain("chat-7b", case.state, NOW, model_id=MODEL_ID).message,
        "type": "service_unavailable",
        "param": None,
        "code": case.code,
    }
    assert response.get("Retry-After") == (
        None if case.retry_after is None else str(case.retry_after)
    )
    assert response.obleth_model == "chat-7b"  # type: ignore[attr-defined]


def row(state: str, **kw: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "model_id": uuid.UUID(MODEL_ID),
        "state": state,
        "job_id": "1",
        "slurm_reason": "",
        "expected_start_at": None,
        "submitted_at": ago(300),
        "started_at": None,
        "created_at": ago(300),
        "last_probe": "",
    }
    return {**values, **kw}


SPEC = {
    "model_id": uuid.UUID(MODEL_ID),
    "enabled": True,
    "target_replicas": 3,
    "breaker_message": "",
    "last_provision_error": "",
}


def test_the_summary_keeps_the_most_advanced_replica_of_each_state() -> None:
    rows = [
        row("starting", job_id="11", started_at=ago(60), last_probe="loading"),
        row("starting", job_id="10", started_at=ago(90), last_probe="HTTP 503 on port 1"),
        row("pending", job_id="20", slurm_reason="Priority"),
        row("pending", job_id="21", slurm_reason="Resources", expected_start_at=NOW),
        row("pending", job_id="", slurm_reason=""),
        row("healthy", job_id="30"),
    ]
    (state,) = model_states([SPEC], rows, slurm_enabled=True).values()
    assert state.starting == ReplicaFacts(
        job_id="10", since=ago(90), last_probe="HTTP 503 on port 1"
    )
    assert state.pending == ReplicaFacts(
        job_id="21", since=ago(300), slurm_reason="Resources", expected_start=NOW
    )
    assert (state.managed, state.target, state.serving, state.slurm_enabled) == (True, 3, 1, True)
    without_estimate = model_states([SPEC], rows[2:3] + rows[4:5], slurm_enabled=False)
    only = without_estimate[uuid.UUID(MODEL_ID)]
    assert only.pending is not None and only.pending.job_id == "20"  # submitted beats unsent
    assert only.starting is None and only.slurm_enabled is False


@pytest.mark.django_db
def test_the_table_loads_every_models_state_in_five_queries(
    django_assert_num_queries: Any,
) -> None:
    SlurmSettings.load()
    SlurmSettings.objects.filter(pk=1).update(enabled=True)
    waiting = make_slurm_model(name="waiting")
    Replica.objects.create(
        model_id=waiting.pk,
        model_name="waiting",
        job_name="w",
        job_id="77",
        submitted_at=timezone.now(),
        slurm_reason="Resources",
    )
    stopped = make_slurm_model(name="stopped")
    ManagedSpec.objects.filter(pk=stopped.pk).update(breaker_message="Stopped launching.")
    make_slurm_model(name="zero", spec={"target_replicas": 0, "min_replicas": 0})
    make_model(name="static")
    make_model(name="off", enabled=False)
    for n in range(10):  # more models cost no more queries
        make_slurm_model(name=f"more-{n}")
    with django_assert_num_queries(5):
        table = build_route_table()
    assert set(table.models) == {"waiting", "stopped", "zero", "static"} | {
        f"more-{n}" for n in range(10)
    }
    assert set(table.disabled) == {"off"} and table.lookup("off") is not None
    now = timezone.now()
    codes = {name: explain(name, route.state, now).code for name, route in table.models.items()}
    assert codes["waiting"] == "model_pending"
    assert codes["stopped"] == "model_stopped"
    assert codes["zero"] == "model_scaled_to_zero"
    assert codes["static"] == "no_endpoint"
    assert codes["more-0"] == "no_replica_ready"
    assert explain("off", table.disabled["off"].state, now).code == "model_disabled"


@pytest.mark.django_db
def test_through_the_service_pending_then_starting_logged_at_info(
    gateway: GatewayClient, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The ASGI application answers from the state in its table (reloaded as a change notice
    makes a gateway process do); the answer line is INFO with the model and the reason."""
    settings.OBLETH_GATEWAY_OPEN = True
    SlurmSettings.load()
    SlurmSettings.objects.filter(pk=1).update(enabled=True)
    model = make_slurm_model(name="queued")
    expected = timezone.now() + dt.timedelta(minutes=20)
    replica = Replica.objects.create(
        model_id=model.pk,
        model_name="queued",
        job_name="q",
        job_id="9001",
        submitted_at=timezone.now() - dt.timedelta(minutes=2),
        slurm_reason="Resources",
        expected_start_at=expected,
    )
    body = {"model": "queued", "messages": [{"role": "user", "content": "hi"}]}
    with caplog.at_level(logging.DEBUG):
        answer = gateway.post("/v1/chat/completions", json=body)
    assert answer.status_code == 503
    error = answer.json()["error"]
    assert error["code"] == "model_pending" and error["type"] == "service_unavailable"
    assert "job 9001 has been waiting in the Slurm queue for 2 min" in error["message"]
    assert "Waiting for resources" in error["message"]
    assert f"Slurm expects it to start at {expected:%Y-%m-%d %H:%M} UTC" in error["message"]
    assert 1140 <= int(answer["Retry-After"]) <= 1200
    lines = [r for r in caplog.records if r.getMessage().startswith("gateway: 503 POST")]
    assert len(lines) == 1 and lines[0].levelno == logging.INFO
    assert "model=queued: model_pending: " in lines[0].getMessage()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]

    Replica.objects.filter(pk=replica.pk).update(
        state=ReplicaState.STARTING,
        started_at=timezone.now() - dt.timedelta(seconds=75),
        last_probe="loading (HTTP 503, Loading model) on port 18000",
    )
    answer = gateway.post("/v1/chat/completions", json=body)
    assert answer.status_code == 503 and answer["Retry-After"] == "30"
    error = answer.json()["error"]
    assert error["code"] == "model_starting"
    assert "job 9001 has been running for 1 min 1" in error["message"]
    assert "still loading the model" in error["message"] and "18000" not in error["message"]
