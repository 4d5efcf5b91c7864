"""How many replicas a model runs: autoscaling's count (``provisioner/autoscale.py``) as the
target, recorded with ``SetAutoscale``, and the scale-down of the surplus by rank (queued,
loading, serving) then age; autoscaling retires serving replicas instead of cancelling them.
"""

from __future__ import annotations

import dataclasses

from provisioner import autoscale
from provisioner.domain import (
    AutoscaleState,
    CancelReason,
    DeleteReplica,
    ModelLoad,
    ModelSpec,
    SetAutoscale,
)
from provisioner.plan.record import SCALED_DOWN_DRAINING, _cancel, _release_window, _retire
from provisioner.plan.state import _RANK_SERVING, _Alive, _Group, _Kind, _Pass

_NO_LOAD = ModelLoad()  # a model no gateway has seen a request for


def _plan_autoscale(ps: _Pass, g: _Group, spec: ModelSpec) -> ModelSpec:
    """The spec with autoscaling's count as its target (``provisioner/autoscale.py``), and
    ``SetAutoscale`` when what it decided must be recorded. A spec whose autoscaling was turned
    off gets its recorded decision cleared once."""
    s = ps.s
    before = spec.autoscale_state
    cfg = spec.autoscale
    if cfg is None:
        if before.replicas is not None or before.message:
            g.autoscale = _set_autoscale(spec, AutoscaleState(), "off")
        return spec
    load = None if s.load is None else s.load.get(spec.model_id, _NO_LOAD)
    d = autoscale.decide(
        cfg,
        before,
        load,
        now=s.now,
        start=spec.target_replicas,
        load_problem=s.load_problem,
    )
    if d.change or autoscale.record_due(before, d.state, s.now):
        g.autoscale = _set_autoscale(spec, d.state, d.change)
    return dataclasses.replace(spec, target_replicas=d.replicas)


def _set_autoscale(spec: ModelSpec, state: AutoscaleState, change: str) -> SetAutoscale:
    return SetAutoscale(
        model_id=spec.model_id,
        replicas=state.replicas,
        since=state.since,
        changed_at=state.changed_at,
        pending_since=state.pending_since,
        pending_replicas=state.pending_replicas,
        idle_since=state.idle_since,
        message=state.message,
        change=change,
    )


def _scale_down(
    ps: _Pass, g: _Group, spec: ModelSpec | None, alive: list[_Alive], surplus: int
) -> list[_Alive]:
    """End the ``surplus`` lowest-ranked of ``alive`` (queued, loading, serving, then oldest
    first): delete rows never submitted, retire serving ones when autoscaling drains, cancel the
    rest. Returns the replicas still alive. ``spec`` None: a drain group (everything goes)."""
    k = ps.k
    drains = spec is not None and spec.autoscale is not None and k.drain_secs > 0
    if surplus > 0:
        reason = CancelReason.SCALE_DOWN if spec is not None else CancelReason.DRAIN
        ordered = sorted(alive, key=lambda a: (a.rank, a.replica.created_at, a.replica.id.hex))
        for a in ordered[:surplus]:
            r = a.replica
            if a.kind is _Kind.RESUBMIT:
                why = "scaled down before its job was submitted"
                g.delete_replicas.append(DeleteReplica(r.model_id, r.id, why=why))
                ps.ended.add(r.id)
                _release_window(ps, r)
            elif a.kind is _Kind.JOB and drains and a.rank == _RANK_SERVING and a.endpoint_id:
                # Autoscaling: out of routing first, in-flight requests finish, then cancelled.
                message = SCALED_DOWN_DRAINING.format(secs=max(k.drain_secs, 0))
                _retire(ps, g, r, a.endpoint_id, message)
            elif a.kind is _Kind.JOB:
                _cancel(ps, g, r, a.job_id, reason, a.endpoint_id)
            # _Kind.UNLISTED: its job id is not known yet; the next pass cancels it.
        chosen = {a.replica.id for a in ordered[:surplus]}
        alive = [a for a in alive if a.replica.id not in chosen]
    return alive
