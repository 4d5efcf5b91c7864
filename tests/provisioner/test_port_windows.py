"""The port-window rule (obleth/core/ports.py, provisioner/plan.next_free_window): a replica's
window lies within ``serving_port .. serving_port + target_replicas * span - 1`` and inside
1..65535; when every window of that range is taken the replacement waits, it never goes higher.
Tables of cases, as the plan tests are."""

from __future__ import annotations

import datetime as dt
import uuid
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ValidationError

from obleth.core.models import ManagedSpec
from obleth.core.ports import window_bases, window_range_error
from provisioner.domain import (
    Knobs,
    ModelSpec,
    ReplicaState,
    ReplicaView,
    Snapshot,
    Submit,
    UpdateMessage,
)
from provisioner.plan import next_free_window, plan
from provisioner.slurm.types import JobInfo, JobPhase
from tests.plugins.factories import make_slurm_model

M = uuid.UUID(int=0xA1)
M2 = uuid.UUID(int=0xA2)
NOW = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("serving_port", "span", "taken", "replicas", "expected"),
    [
        (8000, 8, [], 2, 8000),
        (8000, 8, [8000], 2, 8008),
        (8000, 8, [8000, 8008], 2, None),  # every window of the range taken: wait
        (8000, 8, [8000, 8008], 3, 8016),
        (8000, 8, [8008], 2, 8000),  # a freed lower window is reused
        (8000, 8, [8004], 2, None),  # another model overlaps both windows
        (8000, 8, [8004], 3, 8016),
        (8000, 1, [8000, 8001], 2, None),
        (8000, 0, [8000], 2, 8001),  # span floored at 1
        (8000, 8, [], 0, None),  # no replica wanted, no window
        (65528, 8, [], 1, 65528),  # the last window that fits
        (65528, 8, [65528], 2, None),  # 65536.. does not exist
        (65530, 8, [], 2, None),  # the issue's case: nothing fits, nothing is submitted
        (9000, 8, [8000, 8008], 1, 9000),
        (8000, 8, [9000, 9008, 9016], 1, 8000),  # windows far above never matter
    ],
)
def test_next_free_window_stays_inside_the_range(
    serving_port: int, span: int, taken: list[int], replicas: int, expected: int | None
) -> None:
    assert next_free_window(serving_port, span, taken, replicas) == expected


@pytest.mark.parametrize(
    ("serving_port", "replicas", "span", "bases"),
    [
        (8000, 3, 8, [8000, 8008, 8016]),
        (8000, 0, 8, []),
        (65528, 2, 8, [65528]),
        (65535, 1, 1, [65535]),
        (65535, 1, 2, []),
    ],
)
def test_window_bases(serving_port: int, replicas: int, span: int, bases: list[int]) -> None:
    assert window_bases(serving_port, replicas, span) == bases


@pytest.mark.parametrize(
    ("serving_port", "replicas", "span", "error"),
    [
        (8000, 2, 8, None),
        (65528, 1, 8, None),
        (65520, 2, 8, None),  # 65520..65535: the last port is exactly 65535
        (65521, 2, 8, "needs ports up to 65536"),
        (65521, 2, 8, "use a serving_port of at most 65520, or at most 1 replica(s)"),
        (65530, 2, 8, "use a serving_port of at most 65520."),  # no replica fits from there
        (60000, 1000, 8, "use a serving_port of at most 57536, or at most 692 replica(s)"),
        (1, 9000, 8, "use fewer replicas"),
        (65535, 1, 1, None),
        (65535, 0, 8, "needs ports up to 65542"),  # 0 replicas still needs one window saved
    ],
)
def test_window_range_error(serving_port: int, replicas: int, span: int, error: str | None) -> None:
    message = window_range_error(serving_port, replicas, span)
    if error is None:
        assert message is None
    else:
        assert message is not None and error in message, message
        assert "serving_port" in message and "target_replicas" in message


# ------------------------------------------------------------------ the plan waits, never higher


def _row(n: int, port_base: int, state: ReplicaState = ReplicaState.HEALTHY, **kw: Any) -> Any:
    return ReplicaView(
        id=uuid.UUID(int=n),
        model_id=kw.pop("model", M),
        state=state,
        job_name=f"obleth-m-{n}",
        created_at=NOW - dt.timedelta(seconds=600),
        job_id=kw.pop("job_id", ""),
        submitted_at=kw.pop("submitted_at", None),
        port_base=port_base,
        **kw,
    )


def _snap(specs: list[ModelSpec], replicas: list[Any], span: int = 8) -> Snapshot:
    # Rows with a job id run: their jobs are in the listing.
    jobs = {
        r.job_id: JobInfo(r.job_id, r.job_name, "RUNNING", JobPhase.RUNNING, nodes=("gpu1",))
        for r in replicas
        if r.job_id
    }
    return Snapshot(
        now=NOW,
        knobs=Knobs(port_span=span),
        specs=tuple(specs),
        replicas=tuple(replicas),
        jobs=jobs,
        jobs_listed_at=NOW,
        probes={},
        addresses={},
    )


def test_scale_up_stops_at_the_range_when_another_model_holds_it() -> None:
    """Model 2 (serving_port 8000, 2 replicas) holds model 1's windows: model 1 submits nothing
    rather than going above 8015 (two servers starting at once in one window of a shared node
    would race for its first port). Deploys give models from one recipe distinct ranges."""
    other = [
        _row(1, 8000, ReplicaState.PENDING, model=M2, submitted_at=NOW),
        _row(2, 8008, ReplicaState.PENDING, model=M2, submitted_at=NOW),
    ]
    actions = plan(_snap([ModelSpec(M, "m", True, 2, serving_port=8000)], other))
    assert [a for a in actions if isinstance(a, Submit) and a.model_id == M] == []


@pytest.mark.parametrize(
    ("start", "replicas", "taken", "expected"),
    [
        (8000, 2, [], 8000),
        (8000, 2, [(8000, 8023)], 8024),  # another model from the same recipe
        (8000, 1, [(8000, 8015), (8016, 8031)], 8032),
        (8000, 2, [(9000, 9100)], 8000),  # no overlap
        (8000, 2, [(8020, 8030)], 8031),  # a partial overlap moves past it
        (65500, 2, [(65500, 65535)], None),  # nothing fits below 65536
    ],
)
def test_first_free_range(
    start: int, replicas: int, taken: list[tuple[int, int]], expected: int | None
) -> None:
    from obleth.core.ports import first_free_range

    assert first_free_range(start, replicas, 8, taken) == expected


def test_two_models_deployed_from_one_recipe_get_distinct_ranges(db: Any, settings: Any) -> None:
    from obleth.core.models import SlurmSettings
    from recipes.deploy.spec import deploy

    settings.OBLETH_PORT_SPAN = 8
    recipe = (Path(settings.BASE_DIR) / "recipes" / "library" / "test-engine.recipe").read_text()
    first = deploy(recipe_text=recipe, model_name="one", overrides={}, cluster=SlurmSettings.load())
    second = deploy(
        recipe_text=recipe, model_name="two", overrides={}, cluster=SlurmSettings.load()
    )
    a, b = first.managed_spec, second.managed_spec
    assert b.serving_port >= a.serving_port + (a.target_replicas + 1) * 8
    assert b.launcher_spec["sources"]["serving_port"] == "free range"
    assert any("in use by another model" in w for w in b.launcher_spec["warnings"])


def test_scale_up_stops_at_the_range_when_the_models_own_replicas_hold_it() -> None:
    """A model's own replicas never share a window: with both of its windows held by rows still
    shutting down (a one-port span keeps a draining row's window), nothing goes above 8001."""
    own = [
        _row(1, 8000, ReplicaState.DRAINING, job_id="101", cancel_requested=True),
        _row(2, 8001, ReplicaState.DRAINING, job_id="102", cancel_requested=True),
    ]
    actions = plan(_snap([ModelSpec(M, "m", True, 2, serving_port=8000)], own, span=1))
    assert [a for a in actions if isinstance(a, Submit)] == []


def test_an_unsubmitted_row_without_a_window_waits_with_a_message() -> None:
    waiting = ReplicaView(
        id=uuid.UUID(int=9),
        model_id=M,
        state=ReplicaState.PENDING,
        job_name="obleth-m-9",
        created_at=NOW - dt.timedelta(seconds=600),
        port_base=None,
    )
    blocker = _row(1, 8000, ReplicaState.DRAINING, job_id="101", cancel_requested=True)
    actions = plan(
        _snap([ModelSpec(M, "m", True, 1, serving_port=8000)], [waiting, blocker], span=1)
    )
    assert not [a for a in actions if isinstance(a, Submit) and a.model_id == M]
    (update,) = [a for a in actions if isinstance(a, UpdateMessage) and a.replica_id == waiting.id]
    assert update.message is not None and "waiting for a free port window in 8000-8000" in (
        update.message
    )


def test_every_submit_of_a_large_scale_up_lies_inside_the_range() -> None:
    actions = plan(_snap([ModelSpec(M, "m", True, 50, serving_port=20000)], []))
    bases = sorted(a.port_base for a in actions if isinstance(a, Submit))
    assert bases == [20000 + 8 * i for i in range(50)]


# ---------------------------------------------------------------------- refused when saved


@pytest.mark.parametrize(
    ("serving_port", "replicas", "ok"),
    [(8000, 2, True), (65530, 2, False), (65528, 1, True), (65528, 2, False), (1, 1000, True)],
)
def test_a_spec_whose_windows_pass_65535_is_refused_when_saved(
    db: Any, settings: Any, serving_port: int, replicas: int, ok: bool
) -> None:
    settings.OBLETH_PORT_SPAN = 8
    model = make_slurm_model()
    spec = ManagedSpec.objects.get(model=model)
    spec.serving_port = serving_port
    spec.target_replicas = replicas
    if ok:
        spec.full_clean()
        return
    with pytest.raises(ValidationError) as info:
        spec.full_clean()
    errors = info.value.message_dict
    assert "serving_port" in errors
    assert "target_replicas" in errors["serving_port"][0]


def test_the_api_refuses_the_issue_case_with_a_400_naming_the_field(
    db: Any, settings: Any, api_client: Any
) -> None:
    settings.OBLETH_PORT_SPAN = 8
    model = make_slurm_model()
    answer = api_client.patch(
        f"/api/v1/models/{model.pk}/managed",
        {"serving_port": 65530, "target_replicas": 2},
        format="json",
    )
    assert answer.status_code == 400, answer.content
    assert "serving_port" in answer.content.decode()
    assert "65535" in answer.content.decode()
    spec = ManagedSpec.objects.get(model=model)
    assert spec.serving_port != 65530  # nothing saved


@pytest.mark.django_db(transaction=True)
def test_the_migration_puts_a_banner_on_specs_saved_before_the_rule(settings: Any) -> None:
    """A spec stored with serving_port 65530 and 2 replicas (allowed before) gets nothing
    submitted any more; the migration says why on its banner instead of failing silently."""
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    settings.OBLETH_PORT_SPAN = 8
    before = [("core", "0008_strict_inputs")]
    after = [("core", "0009_replica_identity")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    old = executor.loader.project_state(before).apps
    OldModel = old.get_model("core", "Model")
    OldSpec = old.get_model("core", "ManagedSpec")
    bad = OldModel.objects.create(name="too-high", hosting_mode="slurm")
    good = OldModel.objects.create(name="fits", hosting_mode="slurm")
    for model, port in ((bad, 65530), (good, 8000)):
        OldSpec.objects.create(
            model=model,
            partition="debug",
            serving_port=port,
            target_replicas=2,
            launch_command="x",
        )
    executor = MigrationExecutor(connection)
    executor.migrate(after)
    executor.loader.build_graph()
    MigrationExecutor(connection).migrate(executor.loader.graph.leaf_nodes())
    banner = ManagedSpec.objects.get(model_id=bad.pk).last_provision_error
    assert "No replica can be placed: serving_port 65530 with target_replicas 2" in banner
    assert ManagedSpec.objects.get(model_id=good.pk).last_provision_error == ""
