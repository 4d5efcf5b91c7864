"""Keep the whole answer of a refused submit on its launch, with a cause-specific hint.

Called by the executor when Slurm refuses a submit. For a refused partition the cluster's
partitions are read (best effort: a failure leaves the hint without them)."""

from __future__ import annotations

import logging
import uuid
from typing import Any

from obleth.core.models import Launch
from obleth.logging import redact
from provisioner.reasons import explain_refusal

log = logging.getLogger("provisioner.refusals")


def _partitions(client: Any) -> list[str]:
    try:
        return [str(p.name) for p in client.partitions()]
    except Exception as exc:  # best effort: the hint is still useful without the list
        log.info("partitions unavailable for the refusal hint: %s", exc)
        return []


def record_refusal(client: Any, replica_id: uuid.UUID, exc: Any, partition: str = "") -> str:
    """Store slurmrestd's whole answer and the hint on the launch; return the hint."""
    try:
        reason = str(getattr(exc, "reason", "") or getattr(exc, "message", "") or exc)
        detail = str(getattr(exc, "detail", "") or "")
        status = getattr(exc, "status", None)
        partitions = _partitions(client) if "partition" in reason.lower() else []
        hint = explain_refusal(reason, partitions=partitions, requested_partition=partition).fix
        answer = detail or reason
        if status is not None:
            answer = f"HTTP {status}\n{answer}"
        Launch.objects.filter(pk=replica_id).update(
            slurm_answer=redact(answer)[:20000], refusal_hint=hint[:500]
        )
        return hint
    except Exception:  # bookkeeping only: the refusal itself is already recorded
        log.exception("could not record the refusal of replica %s", replica_id)
        return ""
