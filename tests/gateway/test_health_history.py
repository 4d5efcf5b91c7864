"""Health history: endpoint checks and replica promotions/losses/cancels stored and pruned; the
badge's failure threshold; model down/recovery alerts; the API route and the admin page.

Checks run against the real test engine on 127.0.0.1 (serving) and a closed 127.0.0.1 port
(connection refused). Replica events come from the real executor (provisioner/execute.py)
against the in-process FakeSlurmrestd, which stands in for slurmrestd; alerts go through the
real alert machinery (stored Alert rows, log channel).
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client
from django.utils import timezone

from obleth.core import health_history as history
from obleth.core.choices import HealthStatus
from obleth.core.models import Alert, Endpoint, HealthEvent, Model, Replica, SlurmSettings
from obleth.gateway.health import check_endpoint, check_model_endpoints, run_due_checks
from provisioner.domain import Knobs, Promote
from provisioner.execute import Executor
from provisioner.reconcile import run_pass, slurm_client_for
from provisioner.slurm.fake import FakeNode, FakeSlurmrestd
from tests.gateway.conftest import Engine
from tests.plugins.factories import make_endpoint, make_model, make_slurm_model

pytestmark = pytest.mark.django_db

TOKEN = "fake-slurm-token"


@pytest.fixture(autouse=True)
def _alerts_every_time(settings: Any) -> None:
    settings.OBLETH_ALERT_MIN_INTERVAL_SECS = 0
    settings.OBLETH_MODEL_DOWN_ALERT_SECS = 300
    settings.OBLETH_MODEL_UNHEALTHY_AFTER_FAILURES = 2
    history.reset_prune_clock()


def events(model: Model, kind: str | None = None) -> list[HealthEvent]:
    rows = history.timeline(model.pk)
    return list(rows.filter(kind=kind) if kind else rows)


# ----------------------------------------------------------------------------- checks


def test_each_check_is_stored_with_its_verdict(engine: Engine, closed_port_base: str) -> None:
    model = make_model(name="hist")
    good = make_endpoint(model, api_base=engine.api_base, name="good")
    bad = make_endpoint(model, api_base=closed_port_base, name="bad")
    check_model_endpoints(model.pk)
    check_endpoint(Endpoint.objects.get(pk=good.pk))
    rows = events(model, "check")
    assert len(rows) == 3
    assert rows[0].endpoint_name == "good"  # newest first
    by_name = {r.endpoint_name: r for r in rows[1:]}
    assert by_name["good"].outcome == HealthStatus.HEALTHY and by_name["good"].http_status == 200
    assert by_name["good"].latency_ms is not None and "/chat/completions" in by_name["good"].message
    assert by_name["bad"].outcome == HealthStatus.UNHEALTHY and by_name["bad"].http_status is None
    assert "could not connect" in by_name["bad"].message
    assert by_name["bad"].endpoint_id == bad.pk


def test_a_disabled_endpoint_is_not_history(engine: Engine) -> None:
    model = make_model(name="hist-off")
    make_endpoint(model, api_base=engine.api_base, enabled=False)
    check_model_endpoints(model.pk)
    assert events(model) == []


def test_history_outlives_the_endpoint(engine: Engine) -> None:
    model = make_model(name="hist-gone")
    ep = make_endpoint(model, api_base=engine.api_base)
    check_endpoint(ep)
    Endpoint.objects.filter(pk=ep.pk).delete()
    assert len(events(model, "check")) == 1


# ----------------------------------------------------------------------------- retention


def test_prune_keeps_the_retention_window(settings: Any) -> None:
    settings.OBLETH_HEALTH_HISTORY_DAYS = 14
    model = make_model(name="prune")
    now = timezone.now()
    for days in (20, 15, 13, 1):
        HealthEvent.objects.create(
            model_id=model.pk, kind="check", at=now - dt.timedelta(days=days), outcome="healthy"
        )
    assert history.prune(now) == 2
    left = sorted(round((now - e.at).total_seconds() / 86400) for e in events(model))
    assert left == [1, 13]


def test_the_check_run_prunes_at_most_every_ten_minutes(settings: Any) -> None:
    model = make_model(name="prune-run", enabled=True)
    old = timezone.now() - dt.timedelta(days=30)
    HealthEvent.objects.create(model_id=model.pk, kind="check", at=old, outcome="healthy")
    run_due_checks()
    assert events(model) == []
    HealthEvent.objects.create(model_id=model.pk, kind="check", at=old, outcome="healthy")
    run_due_checks()  # within ten minutes of the last prune: not again
    assert len(events(model)) == 1


# ----------------------------------------------------------------------------- threshold


@pytest.mark.parametrize(
    ("computed", "previous", "in_a_row", "threshold", "checks_failed", "expected"),
    [
        (HealthStatus.UNHEALTHY, HealthStatus.HEALTHY, 1, 2, True, HealthStatus.DEGRADED),
        (HealthStatus.UNHEALTHY, HealthStatus.DEGRADED, 1, 3, True, HealthStatus.DEGRADED),
        (HealthStatus.UNHEALTHY, HealthStatus.DEGRADED, 2, 3, True, HealthStatus.DEGRADED),
        (HealthStatus.UNHEALTHY, HealthStatus.DEGRADED, 3, 3, True, HealthStatus.UNHEALTHY),
        (HealthStatus.UNHEALTHY, HealthStatus.HEALTHY, 1, 1, True, HealthStatus.UNHEALTHY),
        # never served (new model, or already unhealthy): no grace
        (HealthStatus.UNHEALTHY, HealthStatus.UNKNOWN, 1, 3, True, HealthStatus.UNHEALTHY),
        (HealthStatus.UNHEALTHY, HealthStatus.UNHEALTHY, 1, 3, True, HealthStatus.UNHEALTHY),
        # no endpoint registered at all: a fact, not a flaky check
        (HealthStatus.UNHEALTHY, HealthStatus.HEALTHY, 1, 3, False, HealthStatus.UNHEALTHY),
        (HealthStatus.HEALTHY, HealthStatus.UNHEALTHY, 0, 3, True, HealthStatus.HEALTHY),
        (HealthStatus.DEGRADED, HealthStatus.HEALTHY, 0, 3, True, HealthStatus.DEGRADED),
    ],
)
def test_badge_threshold(
    computed: str, previous: str, in_a_row: int, threshold: int, checks_failed: bool, expected: str
) -> None:
    shown = history.badge_after_threshold(
        history.BadgeState(computed, "none of 1 endpoint(s) serving"),
        previous_status=previous,
        failures_in_a_row=in_a_row,
        threshold=threshold,
        checks_failed=checks_failed,
    )
    assert shown.status == expected
    if expected != computed:
        assert f"failed check {in_a_row} of {threshold}" in shown.message


def test_the_badge_turns_unhealthy_after_the_setting(
    engine: Engine, closed_port_base: str, settings: Any
) -> None:
    settings.OBLETH_MODEL_UNHEALTHY_AFTER_FAILURES = 3
    model = make_slurm_model(name="thresh")
    ep = make_endpoint(model, api_base=engine.api_base)
    assert check_model_endpoints(model.pk).health.status == HealthStatus.HEALTHY
    Endpoint.objects.filter(pk=ep.pk).update(api_base=closed_port_base)
    seen = [check_model_endpoints(model.pk).health.status for _ in range(3)]
    assert seen == [HealthStatus.DEGRADED, HealthStatus.DEGRADED, HealthStatus.UNHEALTHY]


# ----------------------------------------------------------------------------- down alerts


def _serve_then_fail(engine: Engine, closed: str, name: str) -> tuple[Model, Endpoint]:
    model = make_slurm_model(name=name)
    ep = make_endpoint(model, api_base=engine.api_base)
    assert check_model_endpoints(model.pk).health.status == HealthStatus.HEALTHY
    Endpoint.objects.filter(pk=ep.pk).update(api_base=closed)
    check_model_endpoints(model.pk)
    return Model.objects.get(pk=model.pk), ep


def test_a_model_down_longer_than_the_threshold_alerts_once_then_recovers(
    engine: Engine, closed_port_base: str
) -> None:
    model, ep = _serve_then_fail(engine, closed_port_base, "downy")
    assert model.health_down_since is not None
    down_key, up_key = f"model_down:{model.pk}", f"model_recovered:{model.pk}"
    assert not Alert.objects.filter(key=down_key).exists()  # not yet 5 minutes

    Model.objects.filter(pk=model.pk).update(
        health_down_since=timezone.now() - dt.timedelta(minutes=6)
    )
    assert history.fire_due_down_alerts() == 1
    alert = Alert.objects.get(key=down_key)
    assert alert.severity == "critical" and "downy" in alert.title
    assert "6 minutes" in alert.detail
    check_model_endpoints(model.pk)  # still down: no second alert
    assert history.fire_due_down_alerts() == 0
    assert Alert.objects.filter(key=down_key).count() == 1
    assert [e.outcome for e in events(model, "down")] == ["down"]

    Endpoint.objects.filter(pk=ep.pk).update(api_base=engine.api_base)
    assert check_model_endpoints(model.pk).health.status == HealthStatus.HEALTHY
    assert Alert.objects.filter(key=up_key).count() == 1
    assert "serving again" in Alert.objects.get(key=up_key).title
    row = Model.objects.get(pk=model.pk)
    assert row.health_down_since is None and not row.health_down_alerted
    assert [e.outcome for e in events(model, "recovered")] == ["recovered"]


def test_a_short_outage_raises_nothing(engine: Engine, closed_port_base: str) -> None:
    model, ep = _serve_then_fail(engine, closed_port_base, "blip")
    Endpoint.objects.filter(pk=ep.pk).update(api_base=engine.api_base)
    check_model_endpoints(model.pk)
    assert history.fire_due_down_alerts() == 0
    assert not Alert.objects.filter(key__endswith=str(model.pk)).exists()
    assert Model.objects.get(pk=model.pk).health_down_since is None


def test_a_model_that_never_served_raises_no_down_alert(closed_port_base: str) -> None:
    model = make_slurm_model(name="never")
    make_endpoint(model, api_base=closed_port_base)
    for _ in range(3):
        check_model_endpoints(model.pk)
    assert Model.objects.get(pk=model.pk).health_down_since is None
    assert history.fire_due_down_alerts(timezone.now() + dt.timedelta(hours=1)) == 0


def test_the_check_run_raises_due_down_alerts(engine: Engine, closed_port_base: str) -> None:
    model, _ = _serve_then_fail(engine, closed_port_base, "run-down")
    Model.objects.filter(pk=model.pk).update(
        health_down_since=timezone.now() - dt.timedelta(minutes=10)
    )
    run_due_checks()
    assert Alert.objects.filter(key=f"model_down:{model.pk}").count() == 1


def test_a_disabled_model_ends_its_down_streak_quietly(
    engine: Engine, closed_port_base: str
) -> None:
    model, _ = _serve_then_fail(engine, closed_port_base, "off")
    Model.objects.filter(pk=model.pk).update(
        enabled=False, health_down_since=timezone.now() - dt.timedelta(hours=1)
    )
    run_due_checks()
    row = Model.objects.get(pk=model.pk)
    assert row.health_down_since is None
    assert not Alert.objects.filter(key__endswith=str(model.pk)).exists()


# ----------------------------------------------------------------------------- replica events


@pytest.fixture
def fake(settings: Any) -> Iterator[FakeSlurmrestd]:
    settings.OBLETH_PROVISIONER_JOB_PREFIX = f"ohh{uuid.uuid4().hex[:6]}-"
    settings.OBLETH_PROVISIONER_DISPATCH = "inline"
    settings.OBLETH_PROVISIONER_WARMUP_TIMEOUT_SECS = 0
    settings.OBLETH_MODEL_HEALTH_ENABLED = False
    with FakeSlurmrestd(token=TOKEN, start_delay=3600, nodes=[FakeNode("localhost")]) as server:
        slurm = SlurmSettings.load()
        slurm.enabled, slurm.slurmrestd_url, slurm.user = True, server.url, "obleth"
        slurm.jwt, slurm.api_version = TOKEN, "v0.0.38"
        slurm.save()
        yield server


def test_promotion_loss_and_restart_are_history(fake: FakeSlurmrestd) -> None:
    model = make_slurm_model(name="reps", spec={"max_job_failures": 0})
    run_pass(dispatch="inline")
    [row] = Replica.objects.filter(model_id=model.pk)
    slurm = SlurmSettings.load()
    client = slurm_client_for(slurm)
    try:
        executor = Executor(client=client, slurm=slurm, knobs=Knobs(), specs={}, model_types={})
        api_base = "http://127.0.0.1:18000/v1"
        done = executor.run(
            [Promote(model.pk, row.pk, "localhost", "127.0.0.1", 18000, api_base, "reps-ep")]
        )
    finally:
        client.close()
    assert done[0].ok, done
    [promoted] = events(model, "promoted")
    assert promoted.replica_id == row.pk and promoted.job_id == row.job_id
    assert promoted.endpoint_name == "reps-ep" and "localhost:18000" in promoted.message

    # An operator restart: the pass cancels it (a "restarted" row), then its job ends.
    Replica.objects.filter(pk=row.pk).update(cancel_requested=True)
    run_pass(dispatch="inline")
    [restarted] = events(model, "restarted")
    assert restarted.outcome.startswith("cancelled") and restarted.job_id == row.job_id

    # A replacement that fails before it served: a "lost" row saying it was a failed launch.
    [new] = Replica.objects.filter(model_id=model.pk).exclude(pk=row.pk).exclude(state="draining")
    fake.set_job_state(new.job_id, "FAILED", exit_code=1)
    run_pass(dispatch="inline")
    [lost] = events(model, "lost")
    assert lost.replica_id == new.pk and lost.outcome == "failed launch"
    assert "FAILED" in lost.message


# ----------------------------------------------------------------------------- API and admin


def _staff(name: str, role: str | None) -> Client:
    user = get_user_model().objects.create_user(name, password="x", is_staff=True)
    if role:
        user.groups.add(Group.objects.get(name=role))
    client = Client()
    client.force_login(user)
    return client


def _history_rows(model: Model, n: int) -> None:
    now = timezone.now()
    HealthEvent.objects.bulk_create(
        HealthEvent(
            model_id=model.pk,
            kind="check" if i % 2 else "lost",
            at=now - dt.timedelta(minutes=i),
            outcome="unhealthy" if i % 2 else "lost",
            message=f"event {i} <script>alert(1)</script>",
        )
        for i in range(n)
    )


def test_the_api_lists_the_history_newest_first_paginated() -> None:
    model = make_model(name="api-hist")
    _history_rows(model, 60)
    viewer = _staff("hist-viewer", "viewer")
    url = f"/api/v1/models/{model.pk}/health-history"
    body = viewer.get(url).json()
    assert body["count"] == 60 and len(body["results"]) == 50 and body["next"]
    first = body["results"][0]
    assert first["message"].startswith("event 0 ") and first["kind"] == "lost"
    times = [r["at"] for r in body["results"]]
    assert times == sorted(times, reverse=True)
    assert set(first) >= {"at", "kind", "endpoint_name", "outcome", "http_status", "message"}
    only = viewer.get(url + "?kind=check").json()
    assert only["count"] == 30 and {r["kind"] for r in only["results"]} == {"check"}


def test_the_api_refuses_bad_input_and_unknown_models() -> None:
    model = make_model(name="api-bad")
    viewer = _staff("hist-viewer2", "viewer")
    answer = viewer.get(f"/api/v1/models/{model.pk}/health-history?kind=nope%00")
    assert answer.status_code == 400, answer.content
    assert "kind" in answer.json()["error"], answer.json()
    answer = viewer.get(f"/api/v1/models/{model.pk}/health-history?kind=nope")
    assert answer.status_code == 400 and "kind" in answer.json()["fields"]
    assert "use one of check" in answer.json()["error"]
    assert viewer.get(f"/api/v1/models/{uuid.uuid4()}/health-history").status_code == 404
    assert (
        _staff("nobody", None).get(f"/api/v1/models/{model.pk}/health-history").status_code == 403
    )
    assert Client().get(f"/api/v1/models/{model.pk}/health-history").status_code == 401


def test_the_admin_health_page(client: Client) -> None:
    model = make_model(name="adm-hist")
    _history_rows(model, 60)
    viewer = _staff("adm-viewer", "viewer")
    url = f"/admin/core/model/{model.pk}/health/"
    page = viewer.get(url)
    assert page.status_code == 200
    html = page.content.decode()
    assert "Health of adm-hist" in html and "page 1 of 2" in html
    assert html.index("event 0 ") < html.index("event 1 ")  # newest first
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;" in html
    assert "event 55" in viewer.get(url + "?page=2").content.decode()
    filtered = viewer.get(url + "?kind=lost").content.decode()
    assert "event 1 " not in filtered and "event 2 " in filtered

    assert _staff("adm-nobody", None).get(url).status_code == 403
    anonymous = Client().get(url)
    assert anonymous.status_code == 302 and "/admin/login/" in anonymous["Location"]
    assert Client().get(f"/admin/core/model/{uuid.uuid4()}/health/").status_code == 302
    assert viewer.get(f"/admin/core/model/{uuid.uuid4()}/health/").status_code == 404


def test_the_model_page_links_to_its_health_page() -> None:
    model = make_model(name="adm-link")
    admin_client = _staff("adm-admin", "admin")
    html = admin_client.get(f"/admin/core/model/{model.pk}/change/").content.decode()
    assert f"/admin/core/model/{model.pk}/health/" in html
