"""A model's state changes reach the gateway: what publishes a change notice, and a gateway
process that hears one.

Saved or deleted rows publish through signals; the provisioner's ``QuerySet.update`` writes
(replica states, Slurm reasons, the breaker) publish once per pass that changed rows; Try once
more and Restart publish; the gateway's periodic reload covers what none of them sees.

The notices are recorded at the one function that sends them to Redis
(``obleth.gateway.table._publish_now``), after the transaction's commit callbacks ran; Slurm in
the pass tests is the in-process FakeSlurmrestd (its jobs stay PENDING, no engine needed). The
last test uses a real gateway process and real Redis pub/sub.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from django.utils import timezone

from obleth.core import services
from obleth.core.choices import ReplicaState
from obleth.core.models import ManagedSpec, Replica, SlurmSettings
from obleth.gateway import table
from provisioner.execute import ActionResult
from provisioner.reconcile import publish_if_changed, run_pass
from provisioner.slurm.fake import FakeNode, FakeSlurmrestd
from tests.plugins.factories import make_slurm_model

TOKEN = "fake-slurm-token"


@pytest.fixture
def published(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    sent: list[str] = []
    monkeypatch.setattr(table, "_publish_now", sent.append)
    return sent


def committed(capture: Any, published: list[str], action: Any) -> list[str]:
    """What ``action`` published once its transaction committed."""
    published.clear()
    with capture(execute=True):
        action()
    return list(published)


@pytest.mark.django_db
def test_saved_and_deleted_rows_publish(
    django_capture_on_commit_callbacks: Any, published: list[str]
) -> None:
    model = make_slurm_model(name="sig")
    spec = ManagedSpec.objects.get(pk=model.pk)

    def save_spec() -> None:
        spec.target_replicas = 3
        spec.save()

    def create_replica() -> None:
        Replica.objects.create(model_id=model.pk, model_name="sig", job_name="j")

    assert "routes" in committed(django_capture_on_commit_callbacks, published, save_spec)
    assert "replicas" in committed(django_capture_on_commit_callbacks, published, create_replica)
    delete = Replica.objects.filter(model_id=model.pk).delete
    assert "replicas" in committed(django_capture_on_commit_callbacks, published, delete)


@pytest.mark.django_db
def test_operator_actions_that_update_rows_publish(
    django_capture_on_commit_callbacks: Any, published: list[str]
) -> None:
    model = make_slurm_model(name="ops")
    ManagedSpec.objects.filter(pk=model.pk).update(breaker_message="Stopped launching.")
    row = Replica.objects.create(model_id=model.pk, model_name="ops", job_name="j", job_id="5")

    def try_once_more() -> None:
        services.clear_lost(model.pk, actor="test")

    def restart() -> None:
        services.restart_replica(row.pk, actor="test")

    assert committed(django_capture_on_commit_callbacks, published, try_once_more) == ["replicas"]
    assert "replicas" in committed(django_capture_on_commit_callbacks, published, restart)


@pytest.mark.django_db
def test_a_pass_publishes_only_when_it_changed_rows(
    django_capture_on_commit_callbacks: Any, published: list[str]
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        nothing = ActionResult("UpdateMessage", "r", True, "nothing to update")
        assert publish_if_changed([nothing]) is False
        assert publish_if_changed([ActionResult("model", "m", True, "busy: another pass")]) is False
        assert publish_if_changed([ActionResult("Submit", "r", False, "refused")]) is False
        assert published == []
        assert publish_if_changed([], observed=1) is True  # a new Slurm reason or probe outcome
        assert publish_if_changed([ActionResult("UpdateMessage", "r", True, "state starting")])
    assert published == ["replicas", "replicas"]


@pytest.fixture
def fake_slurm(db: Any, settings: Any) -> Iterator[FakeSlurmrestd]:
    settings.OBLETH_PROVISIONER_JOB_PREFIX = f"obg{uuid.uuid4().hex[:6]}-"
    settings.OBLETH_PROVISIONER_DISPATCH = "inline"
    settings.OBLETH_PROVISIONER_WARMUP_TIMEOUT_SECS = 0
    settings.OBLETH_MODEL_HEALTH_ENABLED = False
    with FakeSlurmrestd(token=TOKEN, start_delay=3600, nodes=[FakeNode("n1")]) as fake:
        slurm = SlurmSettings.load()
        slurm.enabled, slurm.slurmrestd_url, slurm.user = True, fake.url, "obleth"
        slurm.jwt, slurm.api_version = TOKEN, "v0.0.38"
        slurm.save()
        yield fake


def test_real_passes_publish_when_replicas_change_and_not_at_idle(
    fake_slurm: FakeSlurmrestd,
    django_capture_on_commit_callbacks: Any,
    published: list[str],
) -> None:
    make_slurm_model(name="passing", spec={"target_replicas": 2})

    def one_pass() -> None:
        assert run_pass(dispatch="inline").status == "ok"

    first = committed(django_capture_on_commit_callbacks, published, one_pass)
    assert "replicas" in first  # two jobs submitted: the 503 now says "pending"
    one_pass()  # the jobs' Slurm reasons are recorded (observed rows)
    for _ in range(2):  # the jobs stay queued: nothing changes any more
        assert committed(django_capture_on_commit_callbacks, published, one_pass) == []


@pytest.mark.django_db(transaction=True)
def test_a_gateway_process_hears_replica_changes_without_its_timer(gateway_factory: Any) -> None:
    """A gateway whose timer would wait a minute: a replica written by the provisioner's kind of
    write (``update``, no signal) reaches its 503 through the pass's notice, over Redis."""
    SlurmSettings.load()
    SlurmSettings.objects.filter(pk=1).update(enabled=True)
    model = make_slurm_model(name="heard")
    row = Replica.objects.create(  # a save: its signal publishes
        model_id=model.pk,
        model_name="heard",
        job_name="h",
        job_id="31",
        submitted_at=timezone.now(),
        slurm_reason="Priority",
    )
    gw = gateway_factory(OBLETH_GATEWAY_RELOAD_SECS="60")
    deadline = time.monotonic() + 10
    while int(gw.health()["reloads"]) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)  # the start's load, then the one when it began listening
    assert int(gw.health()["reloads"]) == 2, gw.log()

    def code_within(expected: str, secs: float = 5.0) -> str:
        body = {"model": "heard", "messages": [{"role": "user", "content": "hi"}]}
        deadline = time.monotonic() + secs
        code = ""
        while time.monotonic() < deadline:
            answer = httpx.post(gw.url + "/v1/chat/completions", json=body, timeout=5)
            code = answer.json()["error"]["code"]
            if code == expected:
                break
            time.sleep(0.05)
        return code

    assert code_within("model_pending") == "model_pending"
    Replica.objects.filter(pk=row.pk).update(state=ReplicaState.STARTING, started_at=timezone.now())
    publish_if_changed([ActionResult("UpdateMessage", str(row.pk), True, "state starting")])
    assert code_within("model_starting") == "model_starting", gw.log()
    assert int(gw.health()["reloads"]) >= 3  # a notice, not the timer
