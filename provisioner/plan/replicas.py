"""One model's replicas in one pass: reads each row against its job (adoption, resubmission,
draining, losses, operator restart, self-heal, promotion, annotation), then counts the model's
failures and applies the guards, transitions, scale-down and submits in that order.
"""

from __future__ import annotations

from provisioner.domain import (
    Adopt,
    CancelReason,
    DeleteReplica,
    JobPhase,
    ReplicaState,
    ReplicaView,
)
from provisioner.plan.guard import _plan_guard, _submit_block
from provisioner.plan.handover import _plan_transitions
from provisioner.plan.losses import _ending, _mark_lost, _settle, is_failed_launch, lost_since
from provisioner.plan.record import (
    HEALTHY_MESSAGE,
    SCALED_DOWN_CANCELLED,
    SCALED_DOWN_PREFIX,
    _annotate,
    _cancel,
    _release_window,
    status_message,
)
from provisioner.plan.scaling import _plan_autoscale, _scale_down
from provisioner.plan.serving import _maybe_migrate, _promote, _self_heal
from provisioner.plan.state import (
    _RANK_LOADING,
    _RANK_QUEUED,
    _RANK_SERVING,
    _RANK_UNSUBMITTED,
    _age_secs,
    _Alive,
    _Group,
    _Kind,
    _Pass,
    _submitted_after_listing,
    _Update,
)
from provisioner.plan.submits import _plan_submits


def _plan_replicas(ps: _Pass, g: _Group) -> None:
    s, k = ps.s, ps.k
    spec = g.spec
    if spec is not None:
        spec = g.spec = _plan_autoscale(ps, g, spec)
    alive: list[_Alive] = []
    kept_lost = 0
    last_failure = ""
    failed_nodes: list[str] = []
    restart_budget = 1

    for r in g.replicas:
        if r.state is ReplicaState.LOST:
            r = _settle(g, r, s.jobs.get(r.job_id) if r.job_id else None)  # noqa: PLW2901
            if _age_secs(s.now, lost_since(r)) >= k.lost_retention_secs:
                g.delete_replicas.append(
                    DeleteReplica(r.model_id, r.id, why="lost replica past its retention")
                )
                ps.ended.add(r.id)
            elif is_failed_launch(r.end_state, r.served, r.exit_code):
                kept_lost += 1
                last_failure = r.last_message
            ps.effective_job_id[r.id] = r.job_id
            ps.effective_job[r.id] = s.jobs.get(r.job_id) if r.job_id else None
            continue

        job_id = r.job_id
        job = s.jobs.get(job_id) if job_id else None

        if r.state is ReplicaState.DRAINING:
            # A draining row without a job id: any live job carrying its name is left to the
            # orphan sweep (CancelOrphan), so the row can go now.
            ps.effective_job_id[r.id] = job_id
            ps.effective_job[r.id] = job
            if job is None or job.phase is JobPhase.GONE:
                g.delete_replicas.append(DeleteReplica(r.model_id, r.id, why="drained: job ended"))
                ps.ended.add(r.id)
                _release_window(ps, r)
            elif r.drain_deadline is not None and s.now >= r.drain_deadline and job_id:
                # Handed over (or scaled down): out of routing since Retire; in-flight requests
                # had their bound.
                if r.last_message.startswith(SCALED_DOWN_PREFIX):
                    _cancel(ps, g, r, job_id, CancelReason.SCALE_DOWN, None, SCALED_DOWN_CANCELLED)
                else:
                    _cancel(ps, g, r, job_id, CancelReason.HANDED_OVER, None)
            continue

        if not job_id:
            named = ps.jobs_by_name.get(r.job_name) if r.job_name else None
            if named is not None:
                g.adopts.append(Adopt(r.model_id, r.id, named.job_id))
                job_id, job = named.job_id, named
            elif _submitted_after_listing(r, s.jobs_listed_at):
                ps.effective_job_id[r.id] = ""
                ps.effective_job[r.id] = None
                alive.append(_Alive(r, _RANK_QUEUED, _Kind.UNLISTED))
                continue
            else:
                ps.effective_job_id[r.id] = ""
                ps.effective_job[r.id] = None
                if r.cancel_requested and spec is not None:
                    g.delete_replicas.append(
                        DeleteReplica(
                            r.model_id, r.id, why="restart requested before its job was submitted"
                        )
                    )
                    ps.ended.add(r.id)
                    _release_window(ps, r)  # no job ever ran in it
                else:
                    alive.append(_Alive(r, _RANK_UNSUBMITTED, _Kind.RESUBMIT))
                continue

        ps.effective_job_id[r.id] = job_id
        ps.effective_job[r.id] = job
        endpoint_id = ps.endpoint_known(r.endpoint_id)

        if job is None:
            if _submitted_after_listing(r, s.jobs_listed_at):
                alive.append(_Alive(r, _RANK_QUEUED, _Kind.JOB, job_id, endpoint_id))
                continue
            _mark_lost(ps, g, r, None, endpoint_id)
            failed_nodes.extend(r.nodes)
            continue
        if job.phase is JobPhase.GONE or (r.state is ReplicaState.HEALTHY and _ending(job)):
            _mark_lost(ps, g, r, job, endpoint_id)
            failed_nodes.extend(job.nodes or r.nodes)
            continue

        # The job is queued or running.
        if spec is None:  # drain group: every live job is cancelled below (target 0)
            rank = _RANK_QUEUED if job.phase is JobPhase.PENDING else _RANK_LOADING
            alive.append(_Alive(r, rank, _Kind.JOB, job_id, endpoint_id))
            continue

        if r.cancel_requested:
            _cancel(ps, g, r, job_id, CancelReason.OPERATOR_RESTART, endpoint_id)
            continue

        if job.phase is JobPhase.PENDING:
            _annotate(g, r, status_message(job), job.nodes)
            alive.append(_Alive(r, _RANK_QUEUED, _Kind.JOB, job_id, endpoint_id))
            continue

        # Running.
        probed = r.id in s.probes
        port = s.probes.get(r.id)
        if r.state is ReplicaState.HEALTHY:
            counter, reason, message = _self_heal(ps, r, probed, port)
            if reason is not None and restart_budget > 0:
                restart_budget -= 1
                _cancel(ps, g, r, job_id, reason, endpoint_id, message)
                continue
            if counter != r.probe_failures:
                g.updates.setdefault(r.id, _Update()).probe_failures = counter

        node = job.nodes[0] if job.nodes else ""
        needs_promote = r.state in (ReplicaState.PENDING, ReplicaState.STARTING) or (
            r.state is ReplicaState.HEALTHY and (r.endpoint_id is None or ps.is_dangling(r))
        )
        if needs_promote:
            if isinstance(port, int) and node:
                _promote(ps, g, spec, r, node, port)
            elif probed and port is None and r.state is ReplicaState.PENDING:
                g.updates.setdefault(r.id, _Update()).state = ReplicaState.STARTING
            rank = _RANK_LOADING
        else:
            rank = _RANK_SERVING
            moved = bool(node) and bool(r.nodes) and node != r.nodes[0]
            if moved and isinstance(port, int):
                # Requeued onto another node (preemption with requeue): register it there.
                _promote(ps, g, spec, r, node, port)
            else:
                _maybe_migrate(ps, g, r, node)
        if r.id not in g.promotes:
            message = HEALTHY_MESSAGE if r.state is ReplicaState.HEALTHY else status_message(job)
            _annotate(g, r, message, job.nodes)
        alive.append(_Alive(r, rank, _Kind.JOB, job_id, endpoint_id))

    # ---- counts: breaker, storm, scale up, scale down
    target = max(spec.target_replicas, 0) if spec is not None else 0
    failed_now = [m for m in g.mark_losts if m.failed_launch]
    failures = kept_lost + len(failed_now)
    if failed_now:
        last_failure = failed_now[-1].message
    breaker = spec is not None and spec.max_job_failures > 0 and failures >= spec.max_job_failures
    storm_hold = False
    if spec is not None:
        storm_hold = _plan_guard(ps, g, spec, breaker, failures, last_failure)

    # ---- walltime handover and make-before-break rollout (provisioner/transitions.py)
    uncounted: list[_Alive] = []
    rollout_active = False
    successors_for: list[ReplicaView] = []
    rollout_submits = 0
    if spec is not None:
        block = _submit_block(spec, breaker, failures, storm_hold)
        alive, uncounted, rollout_active, successors_for, rollout_submits = _plan_transitions(
            ps, g, spec, alive, block, failed_now
        )

    surplus = len(alive) - target if not rollout_active else 0
    alive = _scale_down(ps, g, spec, alive, surplus)

    if spec is None:
        return
    _plan_submits(
        ps,
        g,
        spec,
        alive,
        uncounted,
        successors_for,
        target=target,
        breaker=breaker,
        failures=failures,
        storm_hold=storm_hold,
        rollout_active=rollout_active,
        rollout_submits=rollout_submits,
        failed_nodes=failed_nodes,
    )
