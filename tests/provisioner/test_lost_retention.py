"""Lost replicas are kept ``lost_retention_secs`` from when their job ENDED (``lost_at``), not
from when the row was created; the failed-launch breaker counts the kept ones, so its window is
measured from the job's end too.

The table tests drive the pure planner. The pass test uses the in-process FakeSlurmrestd
(provisioner/slurm/fake.py) because the real cluster cannot be made to fail a job that has
already lived 20 minutes on demand; the row's creation time is moved back in the database.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.utils import timezone

from obleth.core.models import ManagedSpec, Replica, SlurmSettings
from provisioner.domain import Action, Knobs, ReplicaView, Snapshot
from provisioner.plan import plan
from provisioner.reconcile import run_pass
from provisioner.slurm.fake import FakeNode, FakeSlurmrestd
from tests.plugins.factories import make_slurm_model
from tests.provisioner.test_plan import L, ago, delete, guard, rep, snap, spec

TOKEN = "fake-slurm-token"
KEEP = "lost replica past its retention"


def lost_row(n: int, *, age: float, lost: float | None, message: str = "job ended: FAILED") -> Any:
    """A lost replica created ``age`` s ago whose job ended ``lost`` s ago (None: unknown)."""
    row = rep(n, L, str(100 + n), age=age, message=message, nodes=())
    return dataclasses.replace(row, lost_at=None if lost is None else ago(lost))


RETENTION_CASES: list[tuple[str, Snapshot, list[Action]]] = [
    (
        "lived 20 min, ended 1 min ago: kept (retention counts from the job's end)",
        snap(specs=[spec(target=0)], replicas=[lost_row(1, age=1200, lost=60)]),
        [],
    ),
    (
        "ended exactly the retention ago: deleted",
        snap(specs=[spec(target=0)], replicas=[lost_row(1, age=5000, lost=900)]),
        [delete(1, KEEP)],
    ),
    (
        "ended one second short of the retention: kept",
        snap(specs=[spec(target=0)], replicas=[lost_row(1, age=5000, lost=899)]),
        [],
    ),
    (
        "young row that ended long ago (clock moved): deleted by lost_at",
        snap(specs=[spec(target=0)], replicas=[lost_row(1, age=10, lost=1000)]),
        [delete(1, KEEP)],
    ),
    (
        "no lost_at (row from before the field): falls back to the creation time",
        snap(specs=[spec(target=0)], replicas=[lost_row(1, age=900, lost=None)]),
        [delete(1, KEEP)],
    ),
    (
        "retention 0: every lost row goes at once",
        snap(
            specs=[spec(target=0)],
            replicas=[lost_row(1, age=10, lost=0)],
            knobs=Knobs(lost_retention_secs=0),
        ),
        [delete(1, KEEP)],
    ),
]


@pytest.mark.parametrize(
    ("snapshot", "expected"), [pytest.param(s, e, id=n) for n, s, e in RETENTION_CASES]
)
def test_retention_counts_from_the_jobs_end(snapshot: Snapshot, expected: list[Action]) -> None:
    assert plan(snapshot) == expected


def _breaker_text(failures: int, limit: int) -> str:
    from provisioner.plan import breaker_message

    return breaker_message(failures, limit, "job ended: FAILED")


BREAKER_CASES: list[tuple[str, Snapshot, list[Action]]] = [
    (
        "a late failure (lived 20 min, ended 1 min ago) still counts: breaker holds",
        snap(
            specs=[spec(target=1, max_job_failures=1)],
            replicas=[lost_row(1, age=1200, lost=60)],
        ),
        [guard(breaker=_breaker_text(1, 1), tripped=True)],
    ),
    (
        "two late failures within the window: 2 of 2",
        snap(
            specs=[spec(target=1, max_job_failures=2)],
            replicas=[lost_row(1, age=3000, lost=300), lost_row(2, age=2000, lost=100)],
        ),
        [guard(breaker=_breaker_text(2, 2), tripped=True)],
    ),
    (
        "a failure that ended before the window: forgotten, one counted, launches again",
        snap(
            specs=[spec(target=1, max_job_failures=2)],
            replicas=[lost_row(1, age=100, lost=950), lost_row(2, age=2000, lost=100)],
        ),
        None,  # computed below: delete row 1, then a submit (1 of 2 does not trip)
    ),
]


@pytest.mark.parametrize(
    ("snapshot", "expected"),
    [pytest.param(s, e, id=n) for n, s, e in BREAKER_CASES if e is not None],
)
def test_breaker_window_counts_from_the_jobs_end(
    snapshot: Snapshot, expected: list[Action]
) -> None:
    assert plan(snapshot) == expected


def test_a_failure_older_than_the_window_by_its_end_is_forgotten() -> None:
    _, snapshot, _ = BREAKER_CASES[2]
    actions = plan(snapshot)
    kinds = [type(a).__name__ for a in actions]
    assert actions[0] == delete(1, KEEP)
    assert "SetGuard" not in kinds and kinds[-1] == "Submit", actions


def test_the_view_carries_lost_at() -> None:
    fields = {f.name for f in dataclasses.fields(ReplicaView)}
    assert "lost_at" in fields


# ------------------------------------------------------------------- through passes (database)


@pytest.fixture
def fake(db: Any, settings: Any) -> Iterator[FakeSlurmrestd]:
    settings.OBLETH_PROVISIONER_JOB_PREFIX = f"olr{uuid.uuid4().hex[:6]}-"
    settings.OBLETH_PROVISIONER_DISPATCH = "inline"
    settings.OBLETH_PROVISIONER_WARMUP_TIMEOUT_SECS = 0
    settings.OBLETH_MODEL_HEALTH_ENABLED = False
    settings.OBLETH_PROVISIONER_LOST_RETENTION_SECS = 900
    with FakeSlurmrestd(token=TOKEN, start_delay=3600, nodes=[FakeNode("localhost")]) as server:
        slurm = SlurmSettings.load()
        slurm.enabled, slurm.slurmrestd_url, slurm.user = True, server.url, "obleth"
        slurm.jwt, slurm.api_version = TOKEN, "v0.0.38"
        slurm.save()
        yield server


def test_a_replica_that_lived_20_minutes_is_kept_after_its_job_ends(
    fake: FakeSlurmrestd,
) -> None:
    model = make_slurm_model(name="late", spec={"max_job_failures": 1, "target_replicas": 1})
    assert run_pass(dispatch="inline").status == "ok"
    [row] = Replica.objects.filter(model_id=model.pk)
    # The job has been queued/running for 20 minutes when it fails.
    Replica.objects.filter(pk=row.pk).update(created_at=timezone.now() - dt.timedelta(minutes=20))
    fake.set_job_state(row.job_id, "FAILED", exit_code=1)

    before = timezone.now()
    run_pass(dispatch="inline")
    lost = Replica.objects.get(pk=row.pk)
    assert lost.state == "lost"
    assert lost.lost_at is not None and lost.lost_at >= before
    assert ManagedSpec.objects.get(pk=model.pk).breaker_message

    # The next pass: the failure ended seconds ago, so the row is kept and the breaker holds.
    run_pass(dispatch="inline")
    assert Replica.objects.filter(pk=row.pk).exists()
    assert ManagedSpec.objects.get(pk=model.pk).breaker_message
    assert not Replica.objects.filter(model_id=model.pk).exclude(state="lost").exists()

    # Once its END is older than the retention, it goes and the model launches again.
    Replica.objects.filter(pk=row.pk).update(lost_at=timezone.now() - dt.timedelta(seconds=901))
    run_pass(dispatch="inline")
    assert not Replica.objects.filter(pk=row.pk).exists()
    assert ManagedSpec.objects.get(pk=model.pk).breaker_message == ""


@pytest.mark.django_db(transaction=True)
def test_the_migration_backfills_lost_at_from_the_last_update() -> None:
    """Rows lost before the field: their last update (when they were marked lost) stands in."""
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    before = [("core", "0011_cockpit")]
    after = [("core", "0012_health_history")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    old = executor.loader.project_state(before).apps.get_model("core", "Replica")
    marked = timezone.now() - dt.timedelta(minutes=3)
    lost = old.objects.create(model_id=uuid.uuid4(), model_name="m", job_name="a", state="lost")
    live = old.objects.create(model_id=uuid.uuid4(), model_name="m", job_name="b", state="healthy")
    old.objects.filter(pk=lost.pk).update(updated_at=marked)
    executor = MigrationExecutor(connection)
    executor.migrate(after)
    executor.loader.build_graph()
    MigrationExecutor(connection).migrate(executor.loader.graph.leaf_nodes())
    assert Replica.objects.get(pk=lost.pk).lost_at == marked
    assert Replica.objects.get(pk=live.pk).lost_at is None
