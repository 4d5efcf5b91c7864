"""A replica's job reports Slurm's warning signal: its end or a preemption is near.

The job script's ``obleth_serve`` (provisioner/script.py) traps the signal Slurm sends before the
job's end (``--signal=B:USR1@secs``; at preemption too where ``PreemptParameters=
send_user_signal``) and posts to ``/api/v1/replicas/<id>/drain-signal`` with the replica's own
key (``OBLETH_REPLICA_API_KEY``). Only that key is accepted: the job proves it is that replica's.
:func:`record` stamps ``Replica.drain_signal_at``; the next pass reads it in observe and the plan
starts a successor (``transitions.handover_due``), routes to it once it serves, then drains and
cancels the signalled replica. Failures are throttled per client address like every other door.
"""

from __future__ import annotations

import hmac
import logging
import uuid

from django.utils import timezone

from obleth.core import limits
from obleth.core.choices import ReplicaState
from obleth.core.models import Replica

log = logging.getLogger(__name__)

SCOPE = "replica-key"
_ACCEPTS = (ReplicaState.PENDING, ReplicaState.STARTING, ReplicaState.HEALTHY)


class Refused(Exception):
    """Not this replica's key (``retry_after`` set: too many wrong keys, wait)."""

    def __init__(self, detail: str, retry_after: int | None = None) -> None:
        super().__init__(detail)
        self.detail, self.retry_after = detail, retry_after


def authenticate(replica_id: str, presented_key: str, address: str) -> Replica:
    """The replica whose own key ``presented_key`` is; :class:`Refused` otherwise."""
    wait = limits.retry_after(SCOPE, f"ip:{address}")
    if wait:
        raise Refused(f"Too many wrong replica keys from {address}; retry later.", wait)
    try:
        rid: uuid.UUID | None = uuid.UUID(replica_id)
    except (TypeError, ValueError):
        rid = None
    row = (
        Replica.objects.filter(pk=rid).only("id", "api_key", "state", "drain_signal_at").first()
        if rid is not None
        else None
    )
    stored = row.api_key if row is not None else ""
    # Compare even when there is no row, so the answer's time does not tell whether it exists.
    matches = hmac.compare_digest((stored or "\0").encode(), (presented_key or "").encode())
    if row is None or not stored or not matches:
        if presented_key:  # a wrong key counts; a request with none is only refused
            limits.record_failure(SCOPE, f"ip:{address}")
        raise Refused(
            "Give the replica's own key as 'Authorization: Bearer <OBLETH_REPLICA_API_KEY>' "
            "(the job has it in its environment)."
        )
    limits.record_success(SCOPE, f"ip:{address}")
    return row


def record(row: Replica) -> tuple[bool, str]:
    """Stamp the drain signal of an authenticated replica: (recorded, what the job reads)."""
    if row.state not in _ACCEPTS:
        return False, f"Replica {row.id} is {row.state}: nothing to hand over."
    if row.drain_signal_at is None:
        Replica.objects.filter(pk=row.pk, drain_signal_at__isnull=True).update(
            drain_signal_at=timezone.now()
        )
        log.info("replica %s: Slurm's warning signal reported; a successor starts", row.id)
    return True, "Recorded: a successor starts on the next pass, then this one drains."
