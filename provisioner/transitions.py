"""Replacing serving replicas without a gap: walltime handover and make-before-break rollouts.

Pure rules the planner (``plan/``) applies to one model's live replicas; no clock, database or
network. ``decide`` returns what to do; the planner turns it into actions.

Walltime handover. A serving replica whose job ends within the model's ``handover_secs`` (or
whose server announced Slurm's warning signal) gets a successor: an extra replica, marked
``successor_of`` the old one, that does not count against ``target_replicas`` while the old one
serves. Once the successor serves (promoted, endpoint registered) the old one is retired: its
endpoint leaves routing, in-flight requests get ``drain_secs``, then its job is cancelled. A
successor that has not started is reported ("successor still pending (Resources); the current
replica ends at 14:05 UTC") and the old replica is kept to its end.

Make-before-break. When the spec's fingerprint (``spec_fingerprint``) differs from a live
replica's, the model rolls out: replicas of the new spec are started first (one more than the
target at a time), and an old serving replica is retired only while the serving count stays at or
above the target; so the model never serves with fewer than ``min(target, serving before)``
replicas. Old replicas that do not serve yet are cancelled at once. A replica of the new spec that
fails to start (a failed launch by ``is_failed_launch``) stops the rollout with the reason; the old
replicas keep serving and count toward the target as usual. The rollout resumes when the spec is
edited again or the failed row passes its retention.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from collections.abc import Sequence

from provisioner.domain import JobInfo, JobPhase, ModelSpec, ReplicaView

__all__ = [
    "Decision",
    "Entry",
    "ROLLOUT_SURGE",
    "decide",
    "end_clock",
    "handover_due",
]

# Replicas of the new spec started beyond the target during a rollout (like maxSurge = 1).
ROLLOUT_SURGE = 1
MESSAGE_LIMIT = 480


@dataclasses.dataclass(frozen=True, slots=True)
class Entry:
    """One live (alive) replica of the model as the planner classified it."""

    replica: ReplicaView
    job: JobInfo | None  # None: no job id known yet (unsubmitted / submitted after listing)
    serving: bool  # healthy with a registered endpoint, not (re)promoted in this pass


@dataclasses.dataclass(slots=True)
class Decision:
    # serving replicas to take out of routing now: (replica, message)
    retire: list[tuple[ReplicaView, str]] = dataclasses.field(default_factory=list)
    # live replicas of the previous spec that do not serve: cancel (or delete) them now
    drop: list[ReplicaView] = dataclasses.field(default_factory=list)
    # serving replicas to submit a successor for (walltime handover)
    successors_for: list[ReplicaView] = dataclasses.field(default_factory=list)
    # rollout: replicas of the new spec to submit in this pass
    rollout_submits: int = 0
    # successors that do not count against the target (their predecessor still serves)
    uncounted: set[uuid.UUID] = dataclasses.field(default_factory=set)
    # replica id -> its new message
    messages: dict[uuid.UUID, str] = dataclasses.field(default_factory=dict)
    handover: str = ""  # the spec's handover sentence ("" = nothing to report)
    rollout: str = ""  # the spec's rollout sentence ("" = none in progress or stopped)
    rollout_active: bool = False  # the planner's own scale-up/down waits while True


def end_clock(epoch: int | None) -> str:
    """``HH:MM UTC`` of a job's end (``its time limit`` when unknown)."""
    if epoch is None:
        return "its time limit"
    return dt.datetime.fromtimestamp(epoch, tz=dt.UTC).strftime("%H:%M UTC")


def handover_due(
    job: JobInfo | None, now: dt.datetime, handover_secs: int, signalled: bool
) -> bool:
    """Whether a serving replica's job is close enough to its end to start a successor.

    A job without an end time or with an UNLIMITED time limit never is (unless its server got
    Slurm's warning signal); ``handover_secs <= 0`` turns the time rule off.
    """
    if signalled:
        return True
    if job is None or job.phase is not JobPhase.RUNNING or handover_secs <= 0:
        return False
    if job.time_unlimited or job.end_time is None:
        return False
    return job.end_time - now.timestamp() <= handover_secs


def _current(r: ReplicaView, spec_fingerprint: str) -> bool:
    return r.spec_fingerprint in ("", spec_fingerprint)


def _successor_state(e: Entry) -> str:
    job = e.job
    if job is None:
        return "pending (not yet in Slurm's queue)"
    if job.phase is JobPhase.PENDING:
        reason = (job.reason or "").strip()
        return f"pending ({reason})" if reason and reason.lower() != "none" else "pending"
    return "starting (not answering its health probe yet)"


def decide(
    spec: ModelSpec,
    entries: Sequence[Entry],
    *,
    now: dt.datetime,
    drain_secs: int,
    drain_signals: frozenset[uuid.UUID],
    failed_launches: Sequence[ReplicaView],
    submit_block: str,
) -> Decision:
    """What walltime handover and rollout want for one enabled model in this pass.

    ``entries`` are the model's live replicas (cancelled/lost ones excluded), oldest first;
    ``failed_launches`` its lost rows that are failed launches by the breaker's rule
    (``plan.is_failed_launch``), kept ones and those marked lost in this pass;
    ``submit_block`` is "" when submits are allowed, else why not (breaker, backoff, storm).
    """
    d = Decision()
    alive = {e.replica.id for e in entries}
    successors: dict[uuid.UUID, Entry] = {}
    for e in entries:
        old = e.replica.successor_of
        if old is not None and old in alive and old not in successors:
            successors[old] = e
            d.uncounted.add(e.replica.id)

    notes: list[str] = []
    retired: set[uuid.UUID] = set()
    rolling = bool(spec.spec_fingerprint) and spec.target_replicas > 0
    for e in entries:
        r, job = e.replica, e.job
        if r.id in d.uncounted or not e.serving:
            continue
        successor = successors.get(r.id)
        signalled = r.id in drain_signals
        if successor is not None and successor.serving:
            ends = end_clock(_end(job))
            why = "Slurm's warning signal" if signalled else f"its job ends at {ends}"
            d.retire.append(
                (
                    r,
                    f"handed over to replica {successor.replica.id.hex[:8]} ({why}); draining "
                    f"in-flight requests for up to {drain_secs} s, then its job is cancelled",
                )
            )
            retired.add(r.id)
            d.uncounted.discard(successor.replica.id)
            continue
        if not handover_due(job, now, spec.handover_secs, signalled):
            continue
        if rolling and not _current(r, spec.spec_fingerprint):
            continue  # the rollout replaces it make-before-break (or it ends at its limit)
        ends = end_clock(_end(job))
        if successor is None:
            if submit_block:
                note = (
                    f"no successor submitted ({submit_block}); the current replica ends at {ends}"
                )
                notes.append(note)
                d.messages[r.id] = note
            else:
                d.successors_for.append(r)
                d.messages[r.id] = f"handing over: successor submitted; the job ends at {ends}"
            continue
        note = f"successor still {_successor_state(successor)}; the current replica ends at {ends}"
        d.messages[r.id] = note
        if _late(successor, job, now, spec.handover_secs):
            notes.append(note)  # the spec's banner: this handover may not make it in time
    d.handover = "; ".join(notes)[:MESSAGE_LIMIT]

    _rollout(spec, entries, d, retired, failed_launches, submit_block, drain_secs)
    return d


def _late(successor: Entry, job: JobInfo | None, now: dt.datetime, handover_secs: int) -> bool:
    """A successor worth the spec's banner: still queued by Slurm, or starting with less than
    half of the handover window left (an ordinary handover that is starting says nothing)."""
    if successor.job is None or successor.job.phase is JobPhase.PENDING:
        return True
    end = _end(job)
    return end is None or handover_secs <= 0 or end - now.timestamp() <= handover_secs / 2


def _end(job: JobInfo | None) -> int | None:
    return job.end_time if job is not None else None


def _rollout(
    spec: ModelSpec,
    entries: Sequence[Entry],
    d: Decision,
    retired: set[uuid.UUID],
    failed_launches: Sequence[ReplicaView],
    submit_block: str,
    drain_secs: int,
) -> None:
    target = max(spec.target_replicas, 0)
    if not spec.spec_fingerprint or target == 0:
        return
    counted = [e for e in entries if e.replica.id not in d.uncounted | retired]
    old = [e for e in counted if not _current(e.replica, spec.spec_fingerprint)]
    if not old:
        return
    new = [e for e in counted if _current(e.replica, spec.spec_fingerprint)]
    old_serving = [e for e in old if e.serving]
    failed = [
        r
        for r in failed_launches
        if r.spec_fingerprint == spec.spec_fingerprint and not _current_before(r, old)
    ]
    if failed:
        last = failed[-1].last_message or "its job ended"
        d.rollout = (
            f"rollout stopped: a replica of the edited spec failed to start ({last}); "
            f"{len(old_serving)} replica(s) of the previous spec keep serving. Fix the spec to "
            "roll out again."
        )[:MESSAGE_LIMIT]
        return
    d.rollout_active = True
    d.drop.extend(e.replica for e in old if not e.serving)
    new_serving = sum(1 for e in new if e.serving)
    serving = len(old_serving) + new_serving
    # Retire the oldest old replica while the serving count stays at or above the target.
    for e in old_serving:
        if serving - 1 < target:
            break
        d.retire.append(
            (
                e.replica,
                "rolled out: replaced by a replica of the edited spec; draining in-flight "
                f"requests for up to {drain_secs} s, then its job is cancelled",
            )
        )
        retired.add(e.replica.id)
        serving -= 1
    still_old = len(old_serving) - sum(1 for e in old_serving if e.replica.id in retired)
    wanted = min(target - len(new), target + ROLLOUT_SURGE - still_old - len(new))
    if wanted > 0 and not submit_block:
        d.rollout_submits = wanted
    starting = len(new) + d.rollout_submits - new_serving
    held = f" (new replicas held: {submit_block})" if submit_block and wanted > 0 else ""
    d.rollout = (
        f"rolling out the edited spec: {new_serving} of {target} replica(s) on it serving, "
        f"{starting} starting; {still_old} of the previous spec still serving{held}"
    )[:MESSAGE_LIMIT]


def _current_before(r: ReplicaView, old: Sequence[Entry]) -> bool:
    """A lost row of the current spec created before every live old replica cannot be a launch
    of this rollout (the spec was set back to an earlier fingerprint): it does not stop it."""
    return all(r.created_at < e.replica.created_at for e in old)
