"""Walltime handover and make-before-break rollouts: applies ``provisioner.transitions.decide``
to a model's live replicas (retire, drop, annotate, record the spec's sentences).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from provisioner.domain import (
    CancelReason,
    DeleteReplica,
    MarkLost,
    ModelSpec,
    ReplicaState,
    ReplicaView,
    SetTransition,
)
from provisioner.plan.losses import is_failed_launch
from provisioner.plan.record import _cancel, _release_window, _retire
from provisioner.plan.state import _RANK_SERVING, _Alive, _Group, _Kind, _Pass, _Update
from provisioner.transitions import Entry, decide


def _plan_transitions(
    ps: _Pass,
    g: _Group,
    spec: ModelSpec,
    alive: list[_Alive],
    block: str,
    failed_now: Sequence[MarkLost],
) -> tuple[list[_Alive], list[_Alive], bool, list[ReplicaView], int]:
    """Apply ``transitions.decide``: retire, drop, annotate, record the spec's sentences.

    Returns (counted alive, uncounted successors, rollout active, successors to submit for,
    rollout submits)."""
    s = ps.s
    entries = [
        Entry(
            replica=a.replica,
            job=ps.effective_job.get(a.replica.id),
            serving=a.rank == _RANK_SERVING
            and a.endpoint_id is not None
            and a.replica.id not in g.promotes,
        )
        for a in alive
    ]
    lost_now = {m.replica_id: m for m in failed_now}
    failed = [
        r
        for r in g.replicas
        if r.state is ReplicaState.LOST
        and r.id not in ps.ended
        and is_failed_launch(r.end_state, r.served, r.exit_code)
    ]
    failed += [
        dataclasses.replace(r, state=ReplicaState.LOST, last_message=lost_now[r.id].message)
        for r in g.replicas
        if r.id in lost_now
    ]
    d = decide(
        spec,
        entries,
        now=s.now,
        drain_secs=ps.k.drain_secs,
        drain_signals=s.drain_signals,
        failed_launches=failed,
        submit_block=block,
    )
    by_id = {a.replica.id: a for a in alive}
    for r, message in d.retire:
        _retire(ps, g, r, by_id[r.id].endpoint_id, message)
    for r in d.drop:
        a = by_id[r.id]
        if a.kind is _Kind.RESUBMIT:
            why = "rolled out before its job was submitted"
            g.delete_replicas.append(DeleteReplica(r.model_id, r.id, why=why))
            ps.ended.add(r.id)
            _release_window(ps, r)
        elif a.kind is _Kind.JOB:
            _cancel(ps, g, r, a.job_id, CancelReason.ROLLOUT, a.endpoint_id)
        # _Kind.UNLISTED: its job id is not known yet; the next pass cancels it.
    for replica_id, message in d.messages.items():
        if replica_id in ps.ended:
            continue
        update = g.updates.setdefault(replica_id, _Update())
        update.message = None if by_id[replica_id].replica.last_message == message else message
    if (d.handover, d.rollout) != (spec.handover_message, spec.rollout_message):
        g.transition = SetTransition(spec.model_id, handover=d.handover, rollout=d.rollout)
    gone = {r.id for r, _ in d.retire} | {r.id for r in d.drop}
    counted = [a for a in alive if a.replica.id not in gone and a.replica.id not in d.uncounted]
    extra = [a for a in alive if a.replica.id in d.uncounted and a.replica.id not in gone]
    return counted, extra, d.rollout_active, d.successors_for, d.rollout_submits
