"""What a pass records about one replica on its model's ``_Group``: the row messages (healthy,
queued/running status, cancel and scale-down sentences), annotations, and the common ends of a
live replica (``Cancel``, ``Retire``) with the bookkeeping every end shares (``_ended``, freeing
its port window).
"""

from __future__ import annotations

import datetime as dt
import uuid

from provisioner.domain import (
    Cancel,
    CancelReason,
    JobInfo,
    ReplicaView,
    Retire,
)
from provisioner.plan.state import _Group, _Pass, _Update

# Message kept on a healthy replica whose job is running. The executor writes "promoted" when it
# promotes; both are accepted as current so a serving row is not rewritten every pass.
HEALTHY_MESSAGE = "serving"
_HEALTHY_MESSAGES = frozenset({HEALTHY_MESSAGE, "promoted"})

CANCEL_MESSAGES: dict[CancelReason, str] = {
    CancelReason.SCALE_DOWN: "scaled down",  # a drained scale-down: SCALED_DOWN_CANCELLED
    CancelReason.OPERATOR_RESTART: "restart requested",
    CancelReason.PROBE_FAILED: "restarting: failed health probes while job running",
    CancelReason.DRAIN: "draining: the model is no longer provisioned",
    CancelReason.HANDED_OVER: "handed over: drain bound passed, job cancelled",
    CancelReason.ROLLOUT: "rolled out: replaced by the edited spec before it served",
}

# A serving replica removed by autoscaling leaves routing with this message (then drains); the
# pass that cancels its job after the drain bound tells it from a handover by the prefix.
SCALED_DOWN_PREFIX = "scaled down by autoscaling"
SCALED_DOWN_DRAINING = (
    SCALED_DOWN_PREFIX + ": draining in-flight requests for up to {secs} s, then its job is "
    "cancelled"
)
SCALED_DOWN_CANCELLED = SCALED_DOWN_PREFIX + ": drain bound passed, job cancelled"


def _clean_reason(reason: str | None) -> str:
    text = (reason or "").strip()
    return "" if text.lower() == "none" else text


def status_message(job: JobInfo) -> str:
    """``STATE — reason`` for a queued or running job; the reason is left out when blank/None."""
    state_text = job.state.strip() or job.phase.value.upper()
    why = _clean_reason(job.reason)
    return f"{state_text} \u2014 {why}" if why else state_text


def _annotate(g: _Group, r: ReplicaView, message: str, nodes: tuple[str, ...]) -> None:
    update = g.updates.setdefault(r.id, _Update())
    if message == HEALTHY_MESSAGE:
        # the executor writes "serving on <node>:<port>" at promotion; keep that detail
        current = r.last_message in _HEALTHY_MESSAGES or r.last_message.startswith("serving on ")
    else:
        current = r.last_message == message
    if not current:
        update.message = message
    if nodes and nodes != r.nodes:
        update.nodes = nodes


def _cancel(
    ps: _Pass,
    g: _Group,
    r: ReplicaView,
    job_id: str,
    reason: CancelReason,
    endpoint_id: uuid.UUID | None,
    message: str | None = None,
) -> None:
    g.cancels.append(
        Cancel(
            model_id=r.model_id,
            replica_id=r.id,
            job_id=job_id,
            reason=reason,
            message=message or CANCEL_MESSAGES[reason],
            endpoint_id=endpoint_id,
        )
    )
    if ps.k.port_span > 1:  # see _Pass: a draining row's window can be shared
        _release_window(ps, r)
    _ended(ps, g, r.id, endpoint_id)


def _retire(
    ps: _Pass, g: _Group, r: ReplicaView, endpoint_id: uuid.UUID | None, message: str
) -> None:
    """Out of routing now, its job cancelled once ``drain_secs`` have passed (a later pass)."""
    g.retires.append(
        Retire(
            model_id=r.model_id,
            replica_id=r.id,
            drain_deadline=ps.s.now + dt.timedelta(seconds=max(ps.k.drain_secs, 0)),
            message=message,
            endpoint_id=endpoint_id,
        )
    )
    if ps.k.port_span > 1:  # like a cancelled row's: its window can be shared (see _Pass)
        _release_window(ps, r)
    _ended(ps, g, r.id, endpoint_id)


def _ended(ps: _Pass, g: _Group, replica_id: uuid.UUID, endpoint_id: uuid.UUID | None) -> None:
    ps.ended.add(replica_id)
    if endpoint_id is not None:
        ps.carried_endpoints.add(endpoint_id)
    # A row that ends this pass is neither promoted nor annotated.
    promote = g.promotes.pop(replica_id, None)
    if promote is not None and promote.endpoint_id is not None:
        ps.reused_endpoints.discard(promote.endpoint_id)
    g.updates.pop(replica_id, None)


def _release_window(ps: _Pass, r: ReplicaView) -> None:
    """Its job has ended: nothing of it listens any more, so its window is free for a
    replacement in this same pass (windows are bounded: see ``next_free_window``)."""
    taken = ps.taken_windows
    if r.port_base is not None and r.port_base in taken:
        taken.remove(r.port_base)
