"""Submits: resubmitting rows whose job never reached Slurm, new replicas up to the target,
successors for handovers and a rollout's new replicas, each in a free port window and placed
away from nodes where the model recently failed.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from provisioner.domain import DeleteReplica, ModelSpec, ReplicaView, Submit
from provisioner.plan.naming import (
    job_name_for,
    new_replica_id,
    next_free_window,
    window_wait_message,
)
from provisioner.plan.record import _annotate
from provisioner.plan.state import _age_secs, _Alive, _Group, _Kind, _Pass
from provisioner.transitions import ROLLOUT_SURGE


def _plan_submits(
    ps: _Pass,
    g: _Group,
    spec: ModelSpec,
    alive: list[_Alive],
    uncounted: list[_Alive],
    successors_for: list[ReplicaView],
    *,
    target: int,
    breaker: bool,
    failures: int,
    storm_hold: bool,
    rollout_active: bool,
    rollout_submits: int,
    failed_nodes: list[str],
) -> None:
    """The model's ``Submit`` actions after scale-down: rows without a job submitted again
    (``existing=True``), then new replicas for the ``target`` (or the rollout's count) and one
    successor per replica in ``successors_for``; none while a guard holds submits."""
    s, k = ps.s, ps.k
    # A replica cancelled by the scale-down (_scale_down) needs no successor.
    successors_for = [r for r in successors_for if r.id not in ps.ended]

    for a in alive + uncounted:
        if a.kind is not _Kind.RESUBMIT:
            continue
        r = a.replica
        if spec.hold_submits:
            continue  # Slurm just refused a submit for this model: try again after the backoff
        if breaker:
            why = f"not submitted: stopped after {failures} failed launches"
            g.delete_replicas.append(DeleteReplica(r.model_id, r.id, why=why))
            ps.ended.add(r.id)
            continue
        port_base = r.port_base
        if port_base is None:
            taken = ps.taken_windows
            port_base = next_free_window(
                spec.serving_port, k.port_span, taken, spec.target_replicas
            )
            if port_base is None:
                wait = window_wait_message(spec.serving_port, k.port_span, spec.target_replicas)
                _annotate(g, r, wait, ())
                continue
            taken.append(port_base)
        g.submits.append(
            Submit(
                model_id=r.model_id,
                replica_id=r.id,
                job_name=r.job_name,
                port_base=port_base,
                excluded_nodes=r.excluded_nodes,
                existing=True,
            )
        )

    missing = rollout_submits if rollout_active else target - len(alive)
    if breaker or spec.hold_submits or storm_hold:
        return
    excluded = _excluded_nodes(ps, spec, failed_nodes)
    # Successors and a rollout's new replicas run beside the replicas they replace: the model's
    # port range grows by as many windows as there are replicas beyond the target.
    windows = spec.target_replicas + len(uncounted) + len(successors_for) + ROLLOUT_SURGE
    wanted: list[uuid.UUID | None] = [None] * max(missing, 0)
    wanted += [r.id for r in successors_for]
    taken = ps.taken_windows
    for index, successor_of in enumerate(wanted):
        replica_id = new_replica_id(spec.model_id, s.now, index)
        port_base = next_free_window(
            spec.serving_port,
            k.port_span,
            taken,
            spec.target_replicas if successor_of is None and not rollout_active else windows,
        )
        if port_base is None:
            continue  # every window of the model's range is in use: wait for one to free
        taken.append(port_base)
        g.submits.append(
            Submit(
                model_id=spec.model_id,
                replica_id=replica_id,
                job_name=job_name_for(k.job_prefix, spec.model_name, replica_id),
                port_base=port_base,
                excluded_nodes=excluded,
                successor_of=successor_of,
            )
        )


def _excluded_nodes(ps: _Pass, spec: ModelSpec, failed_now: Sequence[str]) -> tuple[str, ...]:
    """The spec's exclude list, plus nodes where this model recently failed when enough
    candidate nodes remain outside that list; otherwise only the spec's own list."""
    s = ps.s
    base = tuple(dict.fromkeys(spec.excluded_nodes))
    candidates = s.candidate_nodes.get(spec.model_id, ())
    if not candidates or ps.k.failed_node_memory_secs <= 0:
        return base
    recent = {
        fp.node
        for fp in s.failed_placements
        if fp.model_id == spec.model_id
        and fp.node
        and _age_secs(s.now, fp.ended_at) <= ps.k.failed_node_memory_secs
    }
    recent.update(n for n in failed_now if n)
    extra = sorted(n for n in recent if n not in base)
    if not extra:
        return base
    combined = base + tuple(extra)
    remaining = set(candidates) - set(combined)
    if len(remaining) >= max(spec.node_count, 1):
        return combined
    return base
