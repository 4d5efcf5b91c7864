"""Celery mode: a model task's failed actions reach the pass outcome (error), so a model whose
launches keep failing raises the held alert, and its recovery clears it.

Slurm is the in-process FakeSlurmrestd (it refuses a submit to an unknown partition like
slurmrestd does). Celery runs eagerly in the tests (tests/settings.py); the deferred case
captures the task's ``delay`` call and runs it afterwards, as a worker would, because no worker
runs here.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.utils import timezone

from obleth.core.models import Alert, ManagedSpec, ProvisionerStatus, SlurmSettings
from provisioner import status
from provisioner.reconcile import run_model_task, run_pass
from provisioner.slurm.fake import FakeNode, FakeSlurmrestd
from tests.plugins.factories import make_slurm_model

TOKEN = "fake-slurm-token"


@pytest.fixture
def fake(db: Any, settings: Any) -> Iterator[FakeSlurmrestd]:
    settings.OBLETH_PROVISIONER_JOB_PREFIX = f"otf{uuid.uuid4().hex[:6]}-"
    settings.OBLETH_PROVISIONER_DISPATCH = "celery"
    settings.OBLETH_PROVISIONER_WARMUP_TIMEOUT_SECS = 0
    settings.OBLETH_PROVISIONER_INTERVAL_SECS = 15
    settings.OBLETH_MODEL_HEALTH_ENABLED = False
    settings.OBLETH_ALERT_MIN_INTERVAL_SECS = 0
    with FakeSlurmrestd(token=TOKEN, start_delay=3600, nodes=[FakeNode("localhost")]) as server:
        slurm = SlurmSettings.load()
        slurm.enabled, slurm.slurmrestd_url, slurm.user = True, server.url, "obleth"
        slurm.jwt, slurm.api_version = TOKEN, "v0.0.38"
        slurm.save()
        yield server


def _held_for_11_minutes() -> None:
    ProvisionerStatus.objects.filter(pk=1).update(
        non_ok_since=timezone.now() - dt.timedelta(minutes=11)
    )


def _end_backoff(model_id: Any) -> None:
    ManagedSpec.objects.filter(pk=model_id).update(
        last_provision_error_at=timezone.now() - dt.timedelta(hours=1)
    )


def test_a_failing_model_task_turns_the_pass_to_error_and_raises_the_held_alert(
    fake: FakeSlurmrestd,
) -> None:
    model = make_slurm_model(name="badpart", spec={"partition": "nosuch"})
    report = run_pass(dispatch="celery")
    assert report.dispatched_models == 1
    assert report.status == "error", report.detail
    assert "badpart" in report.detail and "Invalid partition" in report.detail
    assert ProvisionerStatus.objects.get(pk=1).last_pass_status == "error"

    # Still failing ten minutes on: the held alert fires once.
    _held_for_11_minutes()
    _end_backoff(model.pk)
    assert run_pass(dispatch="celery").status == "error"
    held = Alert.objects.filter(key=status.HELD_ALERT_KEY)
    assert held.count() == 1 and "badpart" in held.get().detail

    # The operator fixes the partition: the next task succeeds, the pass is ok, recovery fires.
    ManagedSpec.objects.filter(pk=model.pk).update(partition="debug")
    _end_backoff(model.pk)
    report = run_pass(dispatch="celery")
    assert report.status == "ok", report.detail
    assert Alert.objects.filter(key=status.RECOVERED_ALERT_KEY).count() == 1
    assert ProvisionerStatus.objects.get(pk=1).model_task_failures == {}


def test_a_task_that_fails_after_its_pass_turns_the_next_pass_to_error(
    fake: FakeSlurmrestd, monkeypatch: pytest.MonkeyPatch
) -> None:
    from provisioner import tasks

    queued: list[tuple[Any, ...]] = []

    def delay(*args: Any, **kwargs: Any) -> None:
        queued.append((args, kwargs))

    monkeypatch.setattr(tasks.reconcile_model, "delay", delay)
    make_slurm_model(name="later", spec={"partition": "nosuch"})
    assert run_pass(dispatch="celery").status == "ok"  # the task has not run yet
    [(args, kwargs)] = queued
    outcome = run_model_task(*args, kwargs.get("pass_id", ""))  # the worker runs it now
    assert any(not r["ok"] for r in outcome["results"])

    report = run_pass(dispatch="celery")  # backoff: nothing dispatched, the failure is known
    assert report.status == "error", report.detail
    assert "later" in report.detail


def test_old_task_failures_expire(fake: FakeSlurmrestd) -> None:
    status.record_model_task(str(uuid.uuid4()), "gone-model", ["Submit: refused"])
    failures = ProvisionerStatus.objects.get(pk=1).model_task_failures
    [entry] = failures.values()
    assert entry["name"] == "gone-model"
    later = timezone.now() + dt.timedelta(hours=1)
    assert status.recent_model_task_failures(now=later) == []
    assert ProvisionerStatus.objects.get(pk=1).model_task_failures == {}
