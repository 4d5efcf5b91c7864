"""The cross-model sweeps after every model is planned: provisioner-made endpoints whose
replica is not serving (``DeleteEndpoint``) and live jobs with our prefix that no replica owns
(``CancelOrphan``).
"""

from __future__ import annotations

import uuid

from provisioner.domain import CancelOrphan, DeleteEndpoint, JobPhase, ReplicaState
from provisioner.plan.state import _Group, _job_sort_key, _Pass


def _plan_endpoints(ps: _Pass, groups: dict[uuid.UUID, _Group]) -> None:
    rows = {r.id: r for r in ps.s.replicas}
    for e in ps.s.endpoints:
        if e.replica_id is None:  # added by hand: never touched
            continue
        if e.id in ps.reused_endpoints or e.id in ps.carried_endpoints:
            continue
        r = rows.get(e.replica_id)
        why = ""
        if r is None:
            why = "its replica no longer exists"
        elif r.state in (ReplicaState.LOST, ReplicaState.DRAINING) or r.id in ps.ended:
            why = "its replica is not serving any more"
        else:
            job = ps.effective_job.get(r.id)
            if job is None or job.phase is not JobPhase.RUNNING:
                why = "its replica's job is not running"
        if why:
            groups[e.model_id].delete_endpoints.append(DeleteEndpoint(e.model_id, e.id, why=why))


def _orphans(ps: _Pass) -> list[CancelOrphan]:
    """Live jobs with our prefix that no replica owns.

    A job is owned by the row whose job id (after this pass's adoptions) is its id, or, for a
    row still without a job id (not lost or draining), by that row's job name. A second job carrying
    the name of a row already bound to another job is a duplicate and is cancelled.
    """
    bound_ids = {r.job_id for r in ps.s.replicas if r.job_id}
    bound_ids.update(j for j in ps.effective_job_id.values() if j)
    unbound_names = {
        r.job_name
        for r in ps.s.replicas
        if not ps.effective_job_id.get(r.id, r.job_id)
        and r.state not in (ReplicaState.LOST, ReplicaState.DRAINING)
        and r.job_name
    }
    out: list[CancelOrphan] = []
    for job in sorted(ps.s.jobs.values(), key=lambda j: _job_sort_key(j.job_id)):
        if job.phase is JobPhase.GONE or not job.name.startswith(ps.k.job_prefix):
            continue
        if job.job_id in bound_ids or job.name in unbound_names:
            continue
        out.append(CancelOrphan(job_id=job.job_id, job_name=job.name))
    return out
