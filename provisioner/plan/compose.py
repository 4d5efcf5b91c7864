"""The planner's entry points: ``plan`` (every model's group, then the endpoint and orphan
sweeps, in output order) and ``promotions_while_held`` (a pass without a job listing).
"""

from __future__ import annotations

import uuid

from provisioner.domain import Action, Promote, ReplicaState, Snapshot
from provisioner.plan.replicas import _plan_replicas
from provisioner.plan.serving import _promote
from provisioner.plan.state import _Group, _Pass
from provisioner.plan.sweep import _orphans, _plan_endpoints


def plan(snapshot: Snapshot) -> list[Action]:
    """Every action of one pass, in execution order (see the package docstring)."""
    ps = _Pass(snapshot)
    groups = _groups(snapshot)
    for group in groups.values():
        _plan_replicas(ps, group)
    if snapshot.endpoints_trusted:
        _plan_endpoints(ps, groups)
    actions: list[Action] = []
    for group in groups.values():
        actions.extend(group.actions())
    actions.extend(_orphans(ps))
    return actions


def promotions_while_held(snapshot: Snapshot) -> list[Promote]:
    """The only actions of a pass whose job listing failed (slurmrestd down or erroring): promote
    replicas already seen running on a known node (state ``starting``, nodes recorded) whose
    server now answers the probe. Nothing else: no loss, submit, cancel or endpoint removal is
    decided without the listing. ``snapshot.jobs`` is not read (it is empty).

    A replica whose job started just before an outage would otherwise wait for slurmrestd to come
    back (up to the outage's length) although it serves. If its job ended meanwhile, the first pass
    with a listing marks it lost and removes the endpoint, as for any loss.
    """
    ps = _Pass(snapshot)
    enabled = {spec.model_id: spec for spec in snapshot.specs if spec.enabled}
    out: list[Promote] = []
    for r in sorted(snapshot.replicas, key=lambda r: (r.created_at, r.id.hex)):
        spec = enabled.get(r.model_id)
        port = snapshot.probes.get(r.id)
        if (
            spec is None
            or r.state is not ReplicaState.STARTING
            or not r.job_id
            or not r.nodes
            or r.cancel_requested
            or not isinstance(port, int)
        ):
            continue
        group = _Group(r.model_id, spec)
        _promote(ps, group, spec, r, r.nodes[0], port)
        out.extend(group.promotes.values())
    return out


def _groups(snapshot: Snapshot) -> dict[uuid.UUID, _Group]:
    groups: dict[uuid.UUID, _Group] = {}
    for spec in snapshot.specs:
        if spec.enabled and spec.model_id not in groups:
            groups[spec.model_id] = _Group(spec.model_id, spec)
    for r in snapshot.replicas:
        if r.model_id not in groups:
            groups[r.model_id] = _Group(r.model_id, None)
        groups[r.model_id].replicas.append(r)
    for e in snapshot.endpoints:
        if e.replica_id is not None and e.model_id not in groups:
            groups[e.model_id] = _Group(e.model_id, None)
    for group in groups.values():
        group.replicas.sort(key=lambda r: (r.created_at, r.id.hex))
    return groups
