"""The endpoint check (one-token inference) and the model badge.

Checks run against the real test engine or the stdlib recorder on 127.0.0.1. Only the status
code classification table uses respx (a mocked httpx transport): scripting every status code
with a real server adds nothing, and respx lets the test count attempts and backoff sleeps.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import httpx
import pytest
import respx
from django.test.utils import override_settings
from django.utils import timezone

from obleth.core.choices import HealthStatus, ModelType
from obleth.core.models import Endpoint, Model
from obleth.gateway.health import (
    ProbeTarget,
    aggregate_pool,
    aggregate_static,
    check_endpoint,
    check_model_endpoints,
    probe,
    run_due_checks,
)
from obleth.gateway.tasks import check_due_endpoints, check_endpoint_now
from tests.gateway.conftest import Engine, Recorder, Script
from tests.plugins.factories import make_endpoint, make_model, make_slurm_model

pytestmark = pytest.mark.django_db


def fresh(endpoint: Endpoint) -> Endpoint:
    return Endpoint.objects.get(pk=endpoint.pk)


# ----------------------------------------------------------------------------- real engine


@override_settings(OBLETH_MODEL_HEALTH_INTERVAL_SECS=900)
def test_healthy_engine_is_healthy_and_recorded(engine: Engine) -> None:
    ep = make_endpoint(make_model(name="ok-model"), api_base=engine.api_base)
    Endpoint.objects.filter(pk=ep.pk).update(consecutive_failures=4)
    before = timezone.now()
    verdict = check_endpoint(fresh(ep))
    assert verdict.status == HealthStatus.HEALTHY
    assert verdict.http_status == 200
    row = fresh(ep)
    assert row.health_status == HealthStatus.HEALTHY
    assert row.consecutive_failures == 0
    assert row.last_http_status == 200
    assert row.last_latency_ms is not None
    assert row.last_checked_at is not None and row.last_checked_at >= before
    assert "/chat/completions" in row.last_message
    assert row.next_check_at is not None
    assert (
        row.last_checked_at + timedelta(seconds=900)
        <= row.next_check_at
        <= row.last_checked_at + timedelta(seconds=990)
    )
    assert engine.inference_count("/v1/chat/completions") == 1


@override_settings(OBLETH_MODEL_HEALTH_TIMEOUT_SECS=1)
def test_hanging_inference_is_unhealthy_and_failures_count_up(
    engine_factory: Any,
) -> None:
    """The zombie: /health and /v1/models answer, inference hangs. Two checks -> 2 failures;
    once inference answers again, one check clears it."""
    engine = engine_factory("--hang-inference", "--control")
    assert httpx.get(engine.root + "/health", timeout=5).status_code == 200
    ep = make_endpoint(make_slurm_model(name="zombie"), api_base=engine.api_base)
    first = check_endpoint(fresh(ep))
    assert first.status == HealthStatus.UNHEALTHY
    assert first.http_status is None
    assert first.attempts == 3
    assert "no answer" in first.message
    assert fresh(ep).consecutive_failures == 1
    check_endpoint(fresh(ep))
    row = fresh(ep)
    assert row.health_status == HealthStatus.UNHEALTHY
    assert row.consecutive_failures == 2
    assert row.last_http_status is None
    assert Model.objects.get(pk=ep.model_id).health_status == HealthStatus.UNHEALTHY

    engine.control(hang_inference=False)
    assert check_endpoint(fresh(ep)).status == HealthStatus.HEALTHY
    assert fresh(ep).consecutive_failures == 0
    assert Model.objects.get(pk=ep.model_id).health_status == HealthStatus.HEALTHY


def test_dead_health_route_does_not_matter_when_inference_works(engine_factory: Any) -> None:
    engine = engine_factory("--dead-health")
    assert httpx.get(engine.root + "/health", timeout=5).status_code == 500
    ep = make_endpoint(make_model(name="odd"), api_base=engine.api_base)
    assert check_endpoint(fresh(ep)).status == HealthStatus.HEALTHY


def test_refused_connection_is_unhealthy(closed_port_base: str) -> None:
    ep = make_endpoint(make_model(name="nobody"), api_base=closed_port_base)
    verdict = check_endpoint(fresh(ep))
    assert verdict.status == HealthStatus.UNHEALTHY
    assert verdict.attempts == 3
    assert "could not connect" in verdict.message
    assert fresh(ep).consecutive_failures == 1


def test_embedding_model_is_checked_with_embeddings(engine: Engine) -> None:
    model = make_model(name="emb", model_type=ModelType.EMBEDDING)
    ep = make_endpoint(model, api_base=engine.api_base)
    assert check_endpoint(fresh(ep)).status == HealthStatus.HEALTHY
    assert engine.inference_count("/v1/embeddings") == 1
    assert engine.inference_count("/v1/chat/completions") == 0


@pytest.mark.parametrize(
    ("model_type", "path", "expected"),
    [
        (
            ModelType.CHAT,
            "/v1/chat/completions",
            {
                "messages": [{"role": "user", "content": "ping"}],
                "max_tokens": 1,
                "temperature": 0,
            },
        ),
        (ModelType.COMPLETION, "/v1/completions", {"prompt": "ping", "max_tokens": 1}),
        (ModelType.EMBEDDING, "/v1/embeddings", {"input": "ping"}),
    ],
)
def test_probe_request_by_model_type(
    recorder: Recorder, model_type: str, path: str, expected: dict[str, Any]
) -> None:
    model = make_model(name=f"typed-{model_type}", upstream_model="up/name", model_type=model_type)
    ep = make_endpoint(model, api_base=recorder.api_base, api_key="sk-check-key-1234")
    assert check_endpoint(fresh(ep)).status == HealthStatus.HEALTHY
    (seen,) = recorder.inference_requests()
    assert seen.path == path
    assert seen.body == {"model": "up/name", **expected}
    assert seen.headers["authorization"] == "Bearer sk-check-key-1234"
    assert "sk-check-key-1234" not in fresh(ep).last_message


def test_disabled_endpoint_is_recorded_without_a_call(recorder: Recorder) -> None:
    ep = make_endpoint(make_model(name="dis"), api_base=recorder.api_base, enabled=False)
    verdict = check_endpoint(fresh(ep))
    assert verdict.status == HealthStatus.DISABLED
    assert recorder.requests == []
    row = fresh(ep)
    assert row.health_status == HealthStatus.DISABLED
    assert row.last_checked_at is not None and row.next_check_at is not None


def test_404_refined_with_the_real_catalog(recorder: Recorder) -> None:
    """The recorder answers 404 to inference and a catalog to GET /models (same script body)."""
    recorder.script = Script(status=404, body={"error": {"message": "no such model"}})
    ep = make_endpoint(make_model(name="r404"), api_base=recorder.api_base)
    verdict = check_endpoint(fresh(ep))
    assert verdict.status == HealthStatus.UNHEALTHY  # the catalog is unreadable (404 too)
    assert [r.path for r in recorder.requests] == ["/v1/chat/completions", "/v1/models"]


# ----------------------------------------------------------------------------- classification

BASE = "http://upstream.invalid/v1"


def target(model_type: str = ModelType.CHAT) -> ProbeTarget:
    return ProbeTarget("ep", "m", BASE, "", model_type, "served-name")


CATALOG_LISTED = {"data": [{"id": "served-name"}, {"id": "other"}]}
CATALOG_OTHER = {"data": [{"id": "other"}]}
CATALOG_WILDCARD = {"data": [{"id": "*"}]}


@pytest.mark.parametrize(
    ("answers", "catalog", "status", "attempts", "catalog_calls"),
    [
        ([200], None, HealthStatus.HEALTHY, 1, 0),
        ([204], None, HealthStatus.HEALTHY, 1, 0),
        ([400], CATALOG_LISTED, HealthStatus.DEGRADED, 1, 1),
        ([400], CATALOG_OTHER, HealthStatus.UNHEALTHY, 1, 1),
        ([404], CATALOG_LISTED, HealthStatus.DEGRADED, 1, 1),
        ([404], CATALOG_OTHER, HealthStatus.UNHEALTHY, 1, 1),
        ([404], CATALOG_WILDCARD, HealthStatus.UNHEALTHY, 1, 1),
        ([422], CATALOG_LISTED, HealthStatus.DEGRADED, 1, 1),
        ([401], CATALOG_LISTED, HealthStatus.UNHEALTHY, 1, 0),
        ([403], CATALOG_LISTED, HealthStatus.UNHEALTHY, 1, 0),
        ([408, 408, 408], None, HealthStatus.DEGRADED, 3, 0),
        ([429, 429, 429], None, HealthStatus.DEGRADED, 3, 0),
        ([500, 502, 503], None, HealthStatus.DEGRADED, 3, 0),
        ([503, 200], None, HealthStatus.HEALTHY, 2, 0),
        ([429, 503, 404], CATALOG_OTHER, HealthStatus.UNHEALTHY, 3, 1),
        ([418], None, HealthStatus.DEGRADED, 1, 0),
        ([301], None, HealthStatus.DEGRADED, 1, 0),
    ],
)
def test_status_classification(
    answers: list[int],
    catalog: dict[str, Any] | None,
    status: str,
    attempts: int,
    catalog_calls: int,
) -> None:
    """respx mock (see module docstring)."""
    sleeps: list[float] = []
    with respx.mock(assert_all_called=False) as mock:
        infer = mock.post(f"{BASE}/chat/completions").mock(
            side_effect=[httpx.Response(code, json={"error": {"message": "x"}}) for code in answers]
        )
        models = mock.get(f"{BASE}/models").mock(
            return_value=httpx.Response(200, json=catalog or {"data": []})
        )
        with httpx.Client() as client:
            verdict = probe(target(), timeout=1, client=client, sleep=sleeps.append)
    assert verdict.status == status
    assert verdict.http_status == answers[-1]
    assert verdict.attempts == attempts == infer.call_count
    assert models.call_count == catalog_calls
    assert sleeps == [0.1, 0.2][: attempts - 1]


@pytest.mark.parametrize(
    "error", [httpx.ConnectError("refused"), httpx.ReadTimeout("slow"), httpx.ConnectTimeout("x")]
)
def test_no_answer_is_retried_then_unhealthy(error: Exception) -> None:
    """respx mock (see module docstring)."""
    sleeps: list[float] = []
    with respx.mock() as mock:
        infer = mock.post(f"{BASE}/embeddings").mock(side_effect=error)
        with httpx.Client() as client:
            verdict = probe(
                target(ModelType.EMBEDDING), timeout=1, client=client, sleep=sleeps.append
            )
    assert verdict.status == HealthStatus.UNHEALTHY
    assert verdict.http_status is None
    assert infer.call_count == 3
    assert sleeps == [0.1, 0.2]


def test_timeout_then_answer_is_healthy() -> None:
    """respx mock (see module docstring)."""
    with respx.mock() as mock:
        mock.post(f"{BASE}/completions").mock(
            side_effect=[httpx.ReadTimeout("slow"), httpx.Response(200, json={})]
        )
        with httpx.Client() as client:
            verdict = probe(
                target(ModelType.COMPLETION), timeout=1, client=client, sleep=lambda s: None
            )
    assert verdict.status == HealthStatus.HEALTHY
    assert verdict.attempts == 2


# ----------------------------------------------------------------------------- model badge


@pytest.mark.parametrize(
    ("statuses", "floor", "expected"),
    [
        (["healthy", "healthy"], 2, "healthy"),
        (["healthy", "degraded"], 2, "healthy"),  # degraded still serves
        (["healthy", "unhealthy"], 2, "degraded"),
        (["healthy", "unknown"], 2, "degraded"),
        (["healthy", "unhealthy"], 1, "healthy"),
        (["healthy"], 0, "healthy"),  # the floor is at least 1
        (["unhealthy", "unhealthy"], 1, "unhealthy"),
        (["unknown", "unknown"], 1, "unknown"),
        (["unknown", "unhealthy"], 1, "unhealthy"),
        ([], 1, "unhealthy"),
        (["disabled", "disabled"], 1, "unhealthy"),
        (["healthy", "disabled"], 2, "degraded"),
    ],
)
def test_pool_aggregate(statuses: list[str], floor: int, expected: str) -> None:
    assert aggregate_pool(statuses, floor).status == expected


def test_static_aggregate_is_the_best_endpoint() -> None:
    assert aggregate_static([("a", "unhealthy", ""), ("b", "degraded", "slow")]).status == (
        "degraded"
    )
    assert aggregate_static([("a", "unknown", ""), ("b", "unhealthy", "")]).status == "unknown"
    assert aggregate_static([("a", "disabled", "")]).status == "unhealthy"


def test_slurm_model_badge_follows_the_pool_vs_min_replicas(
    engine: Engine, closed_port_base: str
) -> None:
    model = make_slurm_model(name="pool", spec={"min_replicas": 2, "target_replicas": 3})
    make_endpoint(model, api_base=engine.api_base)
    make_endpoint(model, api_base=closed_port_base)
    result = check_model_endpoints(model.pk)
    assert sorted(v.status for v in result.verdicts.values()) == ["healthy", "unhealthy"]
    assert result.health.status == HealthStatus.DEGRADED
    row = Model.objects.get(pk=model.pk)
    assert row.health_status == HealthStatus.DEGRADED
    assert "1 of 2 serving" in row.health_message
    assert row.health_checked_at is not None

    make_endpoint(model, api_base=engine.api_base)
    assert check_model_endpoints(model.pk).health.status == HealthStatus.HEALTHY
    assert Model.objects.get(pk=model.pk).health_consecutive_failures == 0


def test_static_model_badge_is_its_best_endpoint(engine: Engine, closed_port_base: str) -> None:
    model = make_model(name="static")
    make_endpoint(model, api_base=closed_port_base)
    make_endpoint(model, api_base=engine.api_base)
    assert check_model_endpoints(model.pk).health.status == HealthStatus.HEALTHY
    Endpoint.objects.filter(model=model, api_base=engine.api_base).delete()
    # OBLETH_MODEL_UNHEALTHY_AFTER_FAILURES (2): one failed check leaves a serving model degraded.
    result = check_model_endpoints(model.pk)
    assert result.health.status == HealthStatus.DEGRADED
    assert "failed check 1 of 2" in result.health.message
    assert Model.objects.get(pk=model.pk).health_consecutive_failures == 1
    result = check_model_endpoints(model.pk)
    assert result.health.status == HealthStatus.UNHEALTHY
    row = Model.objects.get(pk=model.pk)
    assert row.health_consecutive_failures == 2


def test_deleting_an_endpoint_asks_for_a_badge_refresh(engine: Engine) -> None:
    model = make_slurm_model(name="shrinking")
    ep = make_endpoint(model, api_base=engine.api_base)
    check_model_endpoints(model.pk)
    assert Model.objects.get(pk=model.pk).health_next_check_at is not None
    ep.delete()
    assert Model.objects.get(pk=model.pk).health_next_check_at is None
    run_due_checks()
    row = Model.objects.get(pk=model.pk)
    assert row.health_status == HealthStatus.UNHEALTHY
    assert "no live endpoint" in row.health_message


# ----------------------------------------------------------------------------- scheduling


def test_due_run_checks_new_and_due_endpoints_only(engine: Engine, recorder: Recorder) -> None:
    model = make_slurm_model(name="sched")
    new = make_endpoint(model, api_base=engine.api_base)
    due = make_endpoint(model, api_base=engine.api_base)
    later = make_endpoint(model, api_base=recorder.api_base)
    off = make_endpoint(model, api_base=recorder.api_base, enabled=False)
    now = timezone.now()
    Endpoint.objects.filter(pk=due.pk).update(next_check_at=now - timedelta(seconds=1))
    Endpoint.objects.filter(pk=later.pk).update(next_check_at=now + timedelta(minutes=5))
    result = check_due_endpoints()
    assert result["checked"] == 3
    assert fresh(new).health_status == HealthStatus.HEALTHY
    assert fresh(due).health_status == HealthStatus.HEALTHY
    assert fresh(later).health_status == HealthStatus.UNKNOWN
    assert fresh(off).health_status == HealthStatus.DISABLED
    assert recorder.requests == []
    assert engine.inference_count("/v1/chat/completions") == 2
    assert Model.objects.get(pk=model.pk).health_status == HealthStatus.HEALTHY
    # Nothing is due any more: a second run checks nothing.
    assert check_due_endpoints()["checked"] == 0
    assert engine.inference_count("/v1/chat/completions") == 2


def test_due_run_skips_when_health_checks_are_off(engine: Engine) -> None:
    ep = make_endpoint(make_model(name="quiet"), api_base=engine.api_base)
    with override_settings(OBLETH_MODEL_HEALTH_ENABLED=False):
        assert check_due_endpoints()["skipped"] is True
    assert fresh(ep).health_status == HealthStatus.UNKNOWN
    assert engine.inference_count("/v1/chat/completions") == 0


def test_due_run_marks_disabled_models_and_leaves_their_endpoints(engine: Engine) -> None:
    model = make_model(name="parked", enabled=False)
    ep = make_endpoint(model, api_base=engine.api_base)
    assert run_due_checks().checked == 0
    assert Model.objects.get(pk=model.pk).health_status == HealthStatus.DISABLED
    assert fresh(ep).health_status == HealthStatus.UNKNOWN
    assert engine.inference_count("/v1/chat/completions") == 0


def test_check_endpoint_now_task(engine: Engine) -> None:
    ep = make_endpoint(make_model(name="now"), api_base=engine.api_base)
    assert check_endpoint_now.delay(str(ep.pk)).get()["status"] == HealthStatus.HEALTHY
    assert fresh(ep).health_status == HealthStatus.HEALTHY
    assert check_endpoint_now(str(ep.model_id)) is None  # not an endpoint id


def test_probes_run_concurrently(engine_factory: Any) -> None:
    """Four hanging engines and a 1 s timeout: checked in one pool, every probe is in flight at
    once (the engines' own counters show all four hanging at the same moment)."""
    engines = [engine_factory("--hang-inference") for _ in range(4)]
    model = make_slurm_model(name="many")
    for e in engines:
        make_endpoint(model, api_base=e.api_base)
    seen_hanging: list[int] = []
    with override_settings(OBLETH_MODEL_HEALTH_TIMEOUT_SECS=2):
        done = threading.Event()

        def watch() -> None:
            while not done.is_set():
                seen_hanging.append(sum(e.stats()["hanging"] for e in engines))
                done.wait(0.2)

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            assert run_due_checks().checked == 4
        finally:
            done.set()
            watcher.join()
    assert max(seen_hanging) == 4
    assert all(fresh(ep).consecutive_failures == 1 for ep in Endpoint.objects.filter(model=model))
