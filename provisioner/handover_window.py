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
    """Seconds from job start to serving of each model's recent launches (newest first)."""
    from obleth.core.models import Launch

    out: dict[uuid.UUID, list[float]] = defaultdict(list)
    for model_id in dict.fromkeys(model_ids):
        rows = (
            Launch.objects.filter(
                model_id=model_id, started_at__isnull=False, healthy_at__isnull=False
            )
            .order_by("-healthy_at")
            .values_list("started_at", "healthy_at")[:RECENT_LAUNCHES]
        )
        out[model_id] = [
            (healthy - started).total_seconds()
            for started, healthy in rows
            if started is not None and healthy is not None
        ]
    return out
