"""Losses and endings of replicas: which Slurm end states are a failed launch and which are
churn (preemption, requeue, cancel by someone else, time limit), the lost row's message, when a
lost replica's job ended, the COMPLETING rule, ``MarkLost``, and the mass-vanish guard that holds
a pass whose listing misses every tracked job.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from collections.abc import Mapping, Sequence

from provisioner.domain import (
    JobInfo,
    JobPhase,
    MarkLost,
    ReplicaState,
    ReplicaView,
    SettleLoss,
)
from provisioner.plan.record import _clean_reason, _ended, _release_window
from provisioner.plan.state import _Group, _Pass, _submitted_after_listing

# Slurm end states that are a failed launch even after the replica served.
FAILURE_STATES = frozenset({"FAILED", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL"})
# End states that are churn for a replica that served, whatever the exit code (signals).
# COMPLETING: Slurm 22.05's listing of a job being torn down hides its end state; a serving
# replica lost then counts as churn until a later pass reads the real end (``SettleLoss``).
CHURN_STATES = frozenset(
    {
        "COMPLETING",
        "PREEMPTED",
        "REQUEUED",
        "REQUEUE_FED",
        "REQUEUE_HOLD",
        "RESIZING",
        "SUSPENDED",
        "CANCELLED",
        "TIMEOUT",
        "DEADLINE",
        "GONE",
        "",
    }
)
# Ends that someone or something else chose (preemption, a requeue, a cancel by another user or
# an admin, suspension): never the spec's fault, so never a failed launch, served or not.
EXTERNAL_END_STATES = frozenset(
    {"PREEMPTED", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESIZING", "SUSPENDED", "CANCELLED"}
)


def lost_message(state: str | None, reason: str | None = "") -> str:
    """``job gone`` (no state), ``job ended: STATE`` or ``job ended: STATE (reason)``."""
    state_text = (state or "").strip()
    if not state_text:
        return "job gone"
    why = _clean_reason(reason)
    return f"job ended: {state_text} ({why})" if why else f"job ended: {state_text}"


def is_failed_launch(end_state: str, served: bool, exit_code: int | None = None) -> bool:
    """Whether a replica's end counts toward "Stop after failed launches".

    A job preempted, requeued, suspended or cancelled by someone else is churn whether or not
    its replica had served yet (on a preemptible cluster a pending or starting job is preempted
    as often as a serving one). Any other end before the replica served is a failed launch (the
    engine never came up: it exited, crashed, ran out of memory or time, or its job vanished).
    After serving, only FAILED, OUT_OF_MEMORY, NODE_FAIL, BOOT_FAIL, or a non-zero exit in a
    state that is not preemption, cancellation or a time limit, is one. The rest is churn.
    """
    words = (end_state or "").strip().upper().split()
    state = words[0] if words else ""
    if state in EXTERNAL_END_STATES:
        return False
    if not served:
        return True
    if state in FAILURE_STATES:
        return True
    if state in CHURN_STATES:
        return False
    return bool(exit_code)  # COMPLETED (exit 0) is churn; an unknown state with an error is not


def lost_since(r: ReplicaView) -> dt.datetime:
    """When a lost replica's job ended (``lost_at``); the row's creation for rows from before
    that field. Lost retention and the failed-launch breaker's window count from here."""
    return r.lost_at if r.lost_at is not None else r.created_at


def mass_vanish(
    replicas: Sequence[ReplicaView], jobs: Mapping[str, JobInfo], jobs_listed_at: dt.datetime
) -> str | None:
    """The reason to hold the whole pass, or None.

    Tracked jobs are the distinct job ids of replicas that are not lost or draining and whose
    submit went out before the listing was taken. When there are at least two and none of them
    is in the listing, the listing is not trusted (wrong cluster, URL or API version).
    """
    tracked = {
        r.job_id
        for r in replicas
        if r.job_id
        and r.state not in (ReplicaState.LOST, ReplicaState.DRAINING)
        and not _submitted_after_listing(r, jobs_listed_at)
    }
    if len(tracked) >= 2 and not any(job_id in jobs for job_id in tracked):
        return (
            f"all {len(tracked)} tracked slurm jobs are missing from the job listing; "
            "holding the pass (check the slurmrestd URL, API version and cluster)"
        )
    return None


def _loss_message(state: str, reason: str, failed: bool) -> str:
    """The lost row's message: :func:`lost_message`, plus the churn sentence when not failed."""
    message = lost_message(state, reason)
    if failed:
        return message
    return message + " \u2014 churn after serving: replaced, not counted as a failed launch"


def _ending(job: JobInfo) -> bool:
    """A job that has ended and is being torn down, as Slurm 22.05 (v0.0.38) prints it.

    That API gives only the COMPLETING flag, not the end state under it (later versions print
    ``["CANCELLED", "COMPLETING"]``, read as gone). Its server may still be draining the
    requests it has (``obleth_serve``), but it takes no new ones: a serving replica in that
    state leaves routing and is replaced at once. A replica that has not served yet is waited
    for until the end state is known, so that it is counted right."""
    return job.state.strip().upper() == "COMPLETING"


def _settle(g: _Group, r: ReplicaView, job: JobInfo | None) -> ReplicaView:
    """A lost row recorded as COMPLETING whose job now lists its real end state: the row as if
    marked with that end, and ``SettleLoss`` to record it (the breaker counts from it)."""
    if r.end_state.strip().upper() != "COMPLETING" or job is None or _ending(job):
        return r
    state = job.state.strip()
    if not state or job.phase is not JobPhase.GONE:
        return r
    reason = _clean_reason(job.reason)
    failed = is_failed_launch(state, r.served, job.exit_code)
    message = _loss_message(state, reason, failed)
    g.settles.append(
        SettleLoss(
            model_id=r.model_id,
            replica_id=r.id,
            message=message,
            end_state=state,
            end_reason=reason,
            exit_code=job.exit_code,
            failed_launch=failed,
        )
    )
    return dataclasses.replace(r, end_state=state, exit_code=job.exit_code, last_message=message)


def _mark_lost(
    ps: _Pass, g: _Group, r: ReplicaView, job: JobInfo | None, endpoint_id: uuid.UUID | None
) -> None:
    state = job.state.strip() if job is not None else ""
    reason = _clean_reason(job.reason) if job is not None else ""
    exit_code = job.exit_code if job is not None else None
    served = r.served or r.state is ReplicaState.HEALTHY
    failed = is_failed_launch(state or "gone", served, exit_code)
    message = _loss_message(state, reason, failed)
    g.mark_losts.append(
        MarkLost(
            model_id=r.model_id,
            replica_id=r.id,
            message=message,
            endpoint_id=endpoint_id,
            end_state=state or "gone",
            end_reason=reason if state else "",
            nodes=(job.nodes if job is not None and job.nodes else r.nodes),
            exit_code=exit_code,
            failed_launch=failed,
            served=served,
        )
    )
    _release_window(ps, r)
    _ended(ps, g, r.id, endpoint_id)
