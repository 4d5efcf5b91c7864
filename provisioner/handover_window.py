"""How early a replica's successor is started: the model's ``handover_secs``.

The operator's value wins (``ManagedSpec.handover_secs``; 0 turns handover off). Without one it
is twice the model's measured job-start-to-serving time (median of its recent launches that
served: ``Launch.healthy_at - Launch.started_at``), and never less than 5 minutes, so a
successor that starts as slowly as its predecessors did still serves before the end.
"""

from __future__ import annotations

import statistics
import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence

__all__ = ["MIN_HANDOVER_SECS", "RECENT_LAUNCHES", "handover_secs", "measured_start_to_serving"]

MIN_HANDOVER_SECS = 300
RECENT_LAUNCHES = 10  # launches per model the median is taken over


def handover_secs(configured: int | None, start_to_serving: Sequence[float]) -> int:
    """The model's handover window in seconds (see the module docstring)."""
    if configured is not None:
        return max(int(configured), 0)
    measured = [s for s in start_to_serving if s >= 0]
    if not measured:
        return MIN_HANDOVER_SECS
    return max(MIN_HANDOVER_SECS, round(2 * statistics.median(measured)))


def measured_start_to_serving(model_ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, list[float]]:
    """Seconds from job start to serving of each model's recent launches (newest first).

    One query for all the models (the pass reads it with the rest of its snapshot): each
    model's newest ``RECENT_LAUNCHES`` launches that served, numbered per model by a window
    function."""
    from django.db.models import F, Window
    from django.db.models.functions import RowNumber

    from obleth.core.models import Launch

    wanted = list(dict.fromkeys(model_ids))
    out: dict[uuid.UUID, list[float]] = defaultdict(list)
    if not wanted:
        return out
    for model_id in wanted:
        out[model_id] = []
    rows = (
        Launch.objects.filter(
            model_id__in=wanted, started_at__isnull=False, healthy_at__isnull=False
        )
        .annotate(
            recent=Window(
                RowNumber(), partition_by=[F("model_id")], order_by=F("healthy_at").desc()
            )
        )
        .filter(recent__lte=RECENT_LAUNCHES)
        .order_by("model_id", "recent")
        .values_list("model_id", "started_at", "healthy_at")
    )
    for model_id, started, healthy in rows:
        if started is not None and healthy is not None:
            out[model_id].append((healthy - started).total_seconds())
    return out
