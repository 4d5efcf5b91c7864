"""The executor's stop and handover path: retire a replica (out of routing, job kept until its drain
deadline), cancel a replica's job (endpoint removed first) and cancel an orphan job.
"""

from __future__ import annotations

from obleth.core import health_history as history
from obleth.core.choices import ReplicaState
from obleth.core.models import Endpoint, HealthEvent, Launch, Replica
from provisioner.domain import Cancel, CancelOrphan, Retire
from provisioner.execute_common import ExecutorParts, fault_point, log


class StopActions(ExecutorParts):
    """Retire, Cancel and CancelOrphan."""

    def retire(self, action: Retire) -> str:
        """Out of routing first (the gateway stops sending it new requests), job kept running
        until ``drain_deadline`` so in-flight streams finish; a later pass cancels it."""
        if action.endpoint_id is not None:
            Endpoint.objects.filter(pk=action.endpoint_id).delete()
        updated = Replica.objects.filter(pk=action.replica_id, state=ReplicaState.HEALTHY).update(
            state=ReplicaState.DRAINING,
            drain_deadline=action.drain_deadline,
            endpoint_id=None,
            last_message=action.message[:500],
            updated_at=self.now(),
        )
        if not updated:
            return "not serving any more; nothing to retire"
        log.info("replica %s handed over: %s", action.replica_id, action.message)
        return action.message

    def cancel(self, action: Cancel) -> str:
        # Leave the routing pool first, so no request goes to a dying server.
        if action.endpoint_id is not None:
            Endpoint.objects.filter(pk=action.endpoint_id).delete()
        fault_point("after_deregister_before_cancel")
        if action.job_id:
            self.client.cancel(action.job_id)
        now = self.now()
        cancelled = (
            Replica.objects.filter(pk=action.replica_id)
            .exclude(state=ReplicaState.DRAINING)
            .update(
                state=ReplicaState.DRAINING,
                last_message=action.message[:500],
                endpoint_id=None,
                cancel_requested=False,
                updated_at=now,
            )
        )
        # A handed-over row was already draining (out of routing): its drain is over now.
        Replica.objects.filter(
            pk=action.replica_id, state=ReplicaState.DRAINING, drain_deadline__isnull=False
        ).update(drain_deadline=None, last_message=action.message[:500], updated_at=now)
        Launch.objects.filter(pk=action.replica_id, ended_at__isnull=True).update(
            ended_at=now, end_state=f"cancelled:{action.reason.value}"
        )
        if cancelled:
            history.record_replica_event(
                model_id=action.model_id,
                kind=HealthEvent.Kind.RESTARTED,
                replica_id=action.replica_id,
                job_id=action.job_id,
                endpoint_id=action.endpoint_id,
                outcome=f"cancelled: {action.reason.value}"[:32],
                message=action.message,
                at=now,
            )
        log.debug(
            "cancelled job %s (replica %s): %s", action.job_id, action.replica_id, action.message
        )
        return action.message

    def cancel_orphan(self, action: CancelOrphan) -> str:
        self.client.cancel(action.job_id)
        log.warning(
            "cancelled orphan job %s (%s): no replica row knows it", action.job_id, action.job_name
        )
        return f"orphan {action.job_id} cancelled"
