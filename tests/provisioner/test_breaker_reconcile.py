"""The failed-launch breaker end to end through passes: churn is replaced and not counted, a
failed launch trips the breaker, which raises an alert, logs a WARNING, shows on the API and in
the gateway's 503 with how to resume; "Try once more" (clear-lost) resumes at once.

Slurm is the in-process FakeSlurmrestd (provisioner/slurm/fake.py): it stands in for Slurm
ending jobs in a chosen state (PREEMPTED, FAILED), which the real cluster cannot be made to do
on demand. A replica "served" is set on its row (healthy_at), as the executor's promotion does;
the fake's jobs never run an engine to probe.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.utils import timezone

from obleth.core import services
from obleth.core.models import Alert, Launch, ManagedSpec, Replica, SlurmSettings
from provisioner.reconcile import run_pass
from provisioner.slurm.fake import FakeNode, FakeSlurmrestd
from tests.plugins.factories import make_slurm_model
from tests.plugins.gateway_client import GatewayClient

TOKEN = "fake-slurm-token"


@pytest.fixture
def fake(db: Any, settings: Any) -> Iterator[FakeSlurmrestd]:
    settings.OBLETH_PROVISIONER_JOB_PREFIX = f"obk{uuid.uuid4().hex[:6]}-"
    settings.OBLETH_PROVISIONER_DISPATCH = "inline"
    settings.OBLETH_PROVISIONER_WARMUP_TIMEOUT_SECS = 0
    settings.OBLETH_MODEL_HEALTH_ENABLED = False
    settings.OBLETH_GATEWAY_API_KEYS = []
    settings.OBLETH_GATEWAY_OPEN = True  # closed by default since gateway keys
    with FakeSlurmrestd(token=TOKEN, start_delay=3600, nodes=[FakeNode("localhost")]) as server:
        slurm = SlurmSettings.load()
        slurm.enabled, slurm.slurmrestd_url, slurm.user = True, server.url, "obleth"
        slurm.jwt, slurm.api_version = TOKEN, "v0.0.38"
        slurm.save()
        yield server


def only_live_job(model_id: Any) -> Replica:
    rows = list(Replica.objects.filter(model_id=model_id).exclude(state="lost"))
    assert len(rows) == 1, rows
    return rows[0]


def serve(row: Replica) -> None:
    """What a promotion writes (the fake runs no engine to probe)."""
    Replica.objects.filter(pk=row.pk).update(state="healthy", healthy_at=timezone.now())


def chat(gateway: GatewayClient, name: str) -> Any:
    """Through the gateway service (in this process: tests/plugins/gateway_client.py)."""
    return gateway.post(
        "/v1/chat/completions",
        data=json.dumps({"model": name, "messages": [{"role": "user", "content": "hi"}]}),
        content_type="application/json",
    )


def test_churn_is_replaced_failed_launch_trips_and_try_once_more_resumes(
    fake: FakeSlurmrestd,
    gateway: GatewayClient,
    caplog: pytest.LogCaptureFixture,
    api_client: Any,
) -> None:
    model = make_slurm_model(name="brk", spec={"max_job_failures": 1, "target_replicas": 1})
    assert run_pass(dispatch="inline").status == "ok"
    first = only_live_job(model.pk)
    serve(first)

    # 1. A replica that served is preempted: churn. Replaced at once, not counted.
    fake.set_job_state(first.job_id, "PREEMPTED")
    assert run_pass(dispatch="inline").status == "ok"
    ended = Launch.objects.get(pk=first.pk)
    assert (ended.end_state, ended.failed_launch) == ("PREEMPTED", False)
    assert "churn" in Replica.objects.get(pk=first.pk).last_message
    second = only_live_job(model.pk)
    assert second.pk != first.pk and second.job_id
    assert ManagedSpec.objects.get(pk=model.pk).breaker_message == ""
    history = api_client.get(f"/api/v1/deployments/launches?model_id={model.pk}").json()
    rows = history["results"] if isinstance(history, dict) else history
    shown = {r["id"]: (r["end_state"], r["failed_launch"]) for r in rows}
    assert shown[str(first.pk)] == ("PREEMPTED", False)

    # 2. The replacement fails before it ever served: a failed launch; the limit is 1.
    fake.set_job_state(second.job_id, "FAILED", exit_code=1)
    with caplog.at_level(logging.INFO):
        assert run_pass(dispatch="inline").status == "ok"
    spec = ManagedSpec.objects.get(pk=model.pk)
    assert spec.breaker_message.startswith("Stopped launching replicas after 1 failed launches")
    assert "Try once more" in spec.breaker_message and spec.breaker_tripped_at is not None
    assert Launch.objects.get(pk=second.pk).failed_launch is True
    assert not Replica.objects.filter(model_id=model.pk).exclude(state="lost").exists()
    alert = Alert.objects.get(key=f"failed_launch_breaker:{model.pk}")
    assert alert.severity == "critical" and "brk" in alert.title
    warnings = [
        r for r in caplog.records if r.levelno == logging.WARNING and "breaker tripped" in r.message
    ]
    assert len(warnings) == 1 and "brk" in warnings[0].getMessage()

    # A second pass changes nothing: no new alert, no submit, no write.
    posts = sum(1 for r in list(fake.requests) if r[0] == "POST")
    assert run_pass(dispatch="inline").status == "ok"
    assert Alert.objects.filter(key=f"failed_launch_breaker:{model.pk}").count() == 1
    assert sum(1 for r in list(fake.requests) if r[0] == "POST") == posts

    # 3. The gateway's 503 says the model was stopped and how to resume; the API shows it.
    answer = chat(gateway, "brk")
    assert answer.status_code == 503
    error = json.loads(answer.content)["error"]
    assert error["code"] == "model_stopped"
    assert "Try once more" in error["message"] and "Retry in" not in error["message"]
    assert f"POST /api/v1/models/{model.pk}/replicas/clear-lost/" in error["message"]
    assert "retry-after" not in answer.headers  # retrying cannot help until someone acts

    # 4. Try once more: the breaker clears at once, the next pass launches again.
    assert services.clear_lost(model.pk, actor="test") == 2
    assert ManagedSpec.objects.get(pk=model.pk).breaker_message == ""
    resumed = chat(gateway, "brk")
    assert resumed.json()["error"]["code"] == "no_replica_ready"
    assert resumed["Retry-After"] == "30"
    assert run_pass(dispatch="inline").status == "ok"
    assert only_live_job(model.pk).job_id


def test_the_api_answer_carries_the_breaker_state(fake: FakeSlurmrestd, api_client: Any) -> None:
    model = make_slurm_model(name="brk-api", spec={"max_job_failures": 1})
    ManagedSpec.objects.filter(pk=model.pk).update(
        breaker_message="Stopped launching replicas after 1 failed launches.",
        breaker_tripped_at=timezone.now(),
    )
    answer = api_client.get(f"/api/v1/models/{model.pk}/managed")
    assert answer.status_code == 200, answer.content
    data = answer.json()
    assert data["breaker_message"].startswith("Stopped launching")
    assert data["breaker_tripped_at"] and data["storm_message"] == ""
    # read-only: a client cannot clear it by writing the field
    api_client.patch(f"/api/v1/models/{model.pk}/managed", {"breaker_message": ""}, format="json")
    assert ManagedSpec.objects.get(pk=model.pk).breaker_message.startswith("Stopped")


def test_a_replacement_storm_slows_replacement_alerts_and_never_stops(
    fake: FakeSlurmrestd, settings: Any
) -> None:
    settings.OBLETH_PROVISIONER_STORM_LOSSES = 3
    model = make_slurm_model(name="stormy", spec={"max_job_failures": 1, "target_replicas": 1})
    ended = timezone.now()
    for n in range(3):  # three serving replicas of this model lost in the last minutes
        Launch.objects.create(
            id=uuid.uuid4(),
            model_id=model.pk,
            model_name="stormy",
            job_name=f"old-{n}",
            healthy_at=ended,
            ended_at=ended,
            end_state="PREEMPTED",
            failed_launch=False,
        )
    assert run_pass(dispatch="inline").status == "ok"
    row = only_live_job(model.pk)
    serve(row)
    fake.set_job_state(row.job_id, "PREEMPTED")
    assert run_pass(dispatch="inline").status == "ok"  # the 4th loss: storm, backoff 15 s
    spec = ManagedSpec.objects.get(pk=model.pk)
    assert spec.storm_message.startswith("Replacement storm: 4 serving replicas lost")
    assert spec.storm_since is not None and spec.breaker_message == ""  # churn: not counted
    assert Alert.objects.filter(key=f"replacement_storm:{model.pk}").count() == 1
    assert not Replica.objects.filter(model_id=model.pk).exclude(state="lost").exists()

    # The backoff runs from the model's latest submit: 15 s later the replacement goes out.
    Replica.objects.filter(model_id=model.pk).update(
        submitted_at=timezone.now() - dt.timedelta(seconds=16)
    )
    assert run_pass(dispatch="inline").status == "ok"
    assert only_live_job(model.pk).job_id
    assert Alert.objects.filter(key=f"replacement_storm:{model.pk}").count() == 1
