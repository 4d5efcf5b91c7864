"""Executing handover/rollout actions against the database and an in-process slurmrestd.

Slurm is the FakeSlurmrestd (provisioner/slurm/fake.py): only the cancel call is needed here,
and the real cluster runs the whole handover in tests/e2e/test_handover_real_slurm.py.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.utils import timezone

from obleth.core.choices import ReplicaState
from obleth.core.models import Endpoint, Launch, ManagedSpec, Model, Replica, SlurmSettings
from provisioner.domain import (
    Cancel,
    CancelReason,
    Knobs,
    Promote,
    Retire,
    SetTransition,
    Submit,
)
from provisioner.execute import Executor
from provisioner.slurm.client import SlurmClient
from provisioner.slurm.fake import FakeNode, FakeSlurmrestd
from provisioner.slurm.types import JobSubmission
from provisioner.spec_fingerprint import spec_fingerprint
from tests.plugins.factories import make_endpoint, make_slurm_model

TOKEN = "fake-slurm-token"


@pytest.fixture
def executor(db: Any) -> Iterator[tuple[Executor, FakeSlurmrestd, Model]]:
    with FakeSlurmrestd(token=TOKEN, start_delay=0, nodes=[FakeNode("localhost")]) as fake:
        slurm = SlurmSettings.load()
        slurm.enabled, slurm.slurmrestd_url, slurm.user, slurm.jwt = True, fake.url, "obleth", TOKEN
        slurm.api_version = "v0.0.38"
        slurm.save()
        model = make_slurm_model(name=f"m{uuid.uuid4().hex[:6]}")
        spec = ManagedSpec.objects.select_related("model").get(pk=model.pk)
        client = SlurmClient(fake.url, "obleth", TOKEN, "v0.0.38", timeout=5)
        yield (
            Executor(
                client=client,
                slurm=slurm,
                knobs=Knobs(),
                specs={model.pk: spec},
                model_types={model.pk: "chat"},
            ),
            fake,
            model,
        )


def _serving(model: Model) -> tuple[Replica, Endpoint]:
    replica = Replica.objects.create(
        model_id=model.pk,
        model_name=model.name,
        state=ReplicaState.HEALTHY,
        job_id="",
        job_name="obleth-x",
    )
    endpoint = make_endpoint(model, replica_id=replica.id)
    Replica.objects.filter(pk=replica.pk).update(endpoint_id=endpoint.id)
    Launch.objects.create(id=replica.id, model_id=model.pk, model_name=model.name, job_name="j")
    replica.refresh_from_db()
    return replica, endpoint


def test_retire_leaves_routing_first_and_keeps_the_job(executor: Any) -> None:
    run, fake, model = executor
    replica, endpoint = _serving(model)
    deadline = timezone.now() + dt.timedelta(seconds=30)
    [result] = run.run([Retire(model.pk, replica.id, deadline, "handed over", endpoint.id)])
    assert result.ok, result.detail
    assert not Endpoint.objects.filter(pk=endpoint.pk).exists()
    replica.refresh_from_db()
    assert replica.state == ReplicaState.DRAINING and replica.endpoint_id is None
    assert replica.drain_deadline == deadline and replica.last_message == "handed over"
    assert "DELETE" not in {method for method, _ in fake.requests}, fake.requests
    assert Launch.objects.get(pk=replica.pk).ended_at is None  # the job still serves in-flight


def test_retire_of_a_row_that_stopped_serving_does_nothing(executor: Any) -> None:
    run, _fake, model = executor
    replica, endpoint = _serving(model)
    Replica.objects.filter(pk=replica.pk).update(state=ReplicaState.LOST)
    [result] = run.run([Retire(model.pk, replica.id, timezone.now(), "x", endpoint.id)])
    assert result.ok and "nothing to retire" in result.detail
    assert Replica.objects.get(pk=replica.pk).state == ReplicaState.LOST


def test_cancel_after_the_drain_bound_ends_the_drain(executor: Any) -> None:
    run, fake, model = executor
    replica, endpoint = _serving(model)
    job_id = run.client.submit(
        JobSubmission(name="obleth-x", script="#!/bin/bash\nsleep 1000\n", partition="debug")
    )
    Replica.objects.filter(pk=replica.pk).update(job_id=job_id)
    run.run([Retire(model.pk, replica.id, timezone.now(), "handed over", endpoint.id)])
    message = "handed over: drain bound passed, job cancelled"
    [result] = run.run([Cancel(model.pk, replica.id, job_id, CancelReason.HANDED_OVER, message)])
    assert result.ok, result.detail
    replica.refresh_from_db()
    assert replica.state == ReplicaState.DRAINING and replica.drain_deadline is None
    assert replica.last_message == message
    assert fake.jobs[int(job_id)].state == "CANCELLED"
    assert Launch.objects.get(pk=replica.pk).end_state == "cancelled:handed-over"


def test_set_transition_is_shown_in_the_managed_spec_answer(executor: Any, api_client: Any) -> None:
    run, _fake, model = executor
    note = "successor still pending (Resources); the current replica ends at 14:05 UTC"
    run.run([SetTransition(model.pk, handover=note, rollout="rolling out the edited spec: ...")])
    answer = api_client.get(f"/api/v1/models/{model.pk}/managed")
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert body["handover_message"] == note
    assert body["rollout_message"] == "rolling out the edited spec: ..."
    assert body["handover_secs"] is None


def test_submit_records_the_fingerprint_and_the_predecessor(executor: Any) -> None:
    run, _fake, model = executor
    old, _ = _serving(model)
    new_id = uuid.uuid4()
    action = Submit(model.pk, new_id, "obleth-succ", 18008, successor_of=old.id)
    [result] = run.run([action])
    assert result.ok, result.detail
    row = Replica.objects.get(pk=new_id)
    assert row.successor_of == old.id
    assert row.spec_fingerprint == spec_fingerprint(ManagedSpec.objects.get(pk=model.pk))
    assert row.job_id


def test_handover_secs_is_validated_on_write(executor: Any, api_client: Any) -> None:
    _run, _fake, model = executor
    url = f"/api/v1/models/{model.pk}/managed"
    for bad in (-1, 10**9, "soon"):
        answer = api_client.patch(url, {"handover_secs": bad}, format="json")
        assert answer.status_code == 400, (bad, answer.content)
        assert "handover_secs" in answer.content.decode()
    answer = api_client.patch(url, {"handover_secs": 120}, format="json")
    assert answer.status_code == 200, answer.content
    assert ManagedSpec.objects.get(pk=model.pk).handover_secs == 120


def test_promote_records_the_job_start_the_pass_never_saw(executor: Any) -> None:
    run, _fake, model = executor
    replica, _ = _serving(model)
    Replica.objects.filter(pk=replica.pk).update(state=ReplicaState.PENDING, endpoint_id=None)
    started = int(timezone.now().timestamp()) - 40
    action = Promote(
        model.pk,
        replica.id,
        "localhost",
        "127.0.0.1",
        18000,
        "http://127.0.0.1:18000/v1",
        f"ep-{replica.id}",
        job_started_at=started,
    )
    [result] = run.run([action])
    assert result.ok, result.detail
    launch = Launch.objects.get(pk=replica.pk)
    assert launch.started_at is not None and int(launch.started_at.timestamp()) == started
    assert launch.healthy_at is not None and launch.healthy_at >= launch.started_at
