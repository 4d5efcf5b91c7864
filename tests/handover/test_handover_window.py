"""The model's handover window (provisioner/handover_window.py)."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import pytest

from obleth.core.models import Launch
from provisioner.handover_window import (
    MIN_HANDOVER_SECS,
    RECENT_LAUNCHES,
    handover_secs,
    measured_start_to_serving,
)


@pytest.mark.parametrize(
    ("configured", "measured", "expected"),
    [
        (120, [600.0], 120),  # the operator's value wins, even below the floor
        (0, [600.0], 0),  # 0: handover off
        (None, [], MIN_HANDOVER_SECS),  # nothing measured yet: 5 minutes
        (None, [30.0, 40.0, 50.0], MIN_HANDOVER_SECS),  # 2 x 40 s is below the floor
        (None, [200.0, 400.0, 900.0], 800),  # twice the median (400 s)
        (None, [-5.0, 500.0], 1000),  # clock skew rows are ignored
    ],
)
def test_handover_secs(configured: int | None, measured: list[float], expected: int) -> None:
    assert handover_secs(configured, measured) == expected


def test_measured_from_recent_launches_that_served(db: Any) -> None:
    model = uuid.uuid4()
    other = uuid.uuid4()
    t0 = dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.UTC)
    for i in range(RECENT_LAUNCHES + 3):
        started = t0 + dt.timedelta(minutes=i)
        Launch.objects.create(
            id=uuid.uuid4(),
            model_id=model,
            model_name="m",
            job_name=f"j{i}",
            started_at=started,
            healthy_at=started + dt.timedelta(seconds=100 + i),
        )
    Launch.objects.create(  # never served: not a start-to-serving time
        id=uuid.uuid4(), model_id=model, model_name="m", job_name="x", started_at=t0
    )
    Launch.objects.create(
        id=uuid.uuid4(),
        model_id=other,
        model_name="o",
        job_name="o",
        started_at=t0,
        healthy_at=t0 + dt.timedelta(seconds=5),
    )
    found = measured_start_to_serving([model, other, uuid.uuid4()])
    newest_first = [100.0 + i for i in range(RECENT_LAUNCHES + 2, 2, -1)]
    assert found[model] == newest_first
    assert found[other] == [5.0]
