"""What turning Slurm off (the Slurm settings' ``enabled`` switch) leaves behind.

With Slurm off the provisioner idles (``provisioner.reconcile.idle_reason``): it submits,
cancels, drains and replaces nothing and stops watching the jobs it started. The jobs of live
replicas keep running (until their walltime, or ``scancel``) and their endpoints stay
registered. :func:`live_replicas` counts them, so the settings page can say so before the
switch flips.
"""

from __future__ import annotations

import dataclasses

from django.db.models import Count

from obleth.core.choices import ReplicaState
from obleth.core.models import Replica

__all__ = ["LiveReplicas", "live_replicas"]

LIVE_STATES = (
    ReplicaState.PENDING,
    ReplicaState.STARTING,
    ReplicaState.HEALTHY,
    ReplicaState.DRAINING,
)


@dataclasses.dataclass(frozen=True)
class LiveReplicas:
    count: int
    models: int
    #: (model name, state, count), by model name then state
    rows: tuple[tuple[str, str, int], ...]

    @property
    def by_state(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for _, state, count in self.rows:
            out[state] = out.get(state, 0) + count
        return out


def live_replicas() -> LiveReplicas:
    """The replicas whose Slurm jobs are queued, starting, serving or draining now."""
    rows = tuple(
        (str(r["model_name"]), str(r["state"]), int(r["n"]))
        for r in Replica.objects.filter(state__in=LIVE_STATES)
        .values("model_name", "state")
        .annotate(n=Count("id"))
        .order_by("model_name", "state")
    )
    return LiveReplicas(
        count=sum(n for _, _, n in rows),
        models=len({name for name, _, _ in rows}),
        rows=rows,
    )
