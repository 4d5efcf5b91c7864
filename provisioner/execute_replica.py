"""The executor's replica records: promote a replica (endpoint first, then healthy), mark it lost,
settle a loss's final state, and update its message, nodes, probe failures or state.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from obleth.core import health_history as history
from obleth.core.choices import ReplicaState
from obleth.core.models import Endpoint, HealthEvent, Launch, Replica
from provisioner.domain import MarkLost, Promote, SettleLoss, UpdateMessage
from provisioner.execute_common import LIVE_STATES, ExecutorParts, fault_point, log


class ReplicaActions(ExecutorParts):
    """Promote, MarkLost, SettleLoss and UpdateMessage."""

    def promote(self, action: Promote) -> str:
        # The endpoint carries the replica's key: the gateway, its checks and the warm-up send it.
        replica_key = (
            Replica.objects.filter(pk=action.replica_id).values_list("api_key", flat=True).first()
            or ""
        )
        keyed: dict[str, Any] = {"api_key": replica_key} if replica_key else {}
        endpoint = None
        if action.endpoint_id is not None:
            endpoint = Endpoint.objects.filter(pk=action.endpoint_id).first()
        if endpoint is None:
            endpoint = Endpoint.objects.filter(
                model_id=action.model_id, name=action.endpoint_name
            ).first()
        if endpoint is None:
            endpoint = Endpoint.objects.create(
                model_id=action.model_id,
                name=action.endpoint_name,
                api_base=action.api_base,
                replica_id=action.replica_id,
                enabled=True,
                **keyed,
            )
        elif (
            endpoint.api_base != action.api_base
            or endpoint.replica_id != action.replica_id
            or (replica_key and endpoint.api_key != replica_key)
        ):
            # In place: keeps name, priority, weight and enabled flag; the key is the replica's.
            Endpoint.objects.filter(pk=endpoint.pk).update(
                api_base=action.api_base,
                replica_id=action.replica_id,
                updated_at=self.now(),
                **keyed,
            )
        fault_point("after_endpoint_before_healthy")
        now = self.now()
        updated = Replica.objects.filter(pk=action.replica_id, state__in=LIVE_STATES).update(
            state=ReplicaState.HEALTHY,
            nodes=action.node,
            endpoint_id=endpoint.pk,
            port=action.port,
            probe_failures=0,
            healthy_at=now,
            last_message=f"serving on {action.node}:{action.port}",
            updated_at=now,
        )
        if not updated:
            Endpoint.objects.filter(pk=endpoint.pk, replica_id=action.replica_id).delete()
            return "replica left the live states meanwhile; endpoint withdrawn"
        Launch.objects.filter(pk=action.replica_id, healthy_at__isnull=True).update(healthy_at=now)
        history.record_replica_event(
            model_id=action.model_id,
            kind=HealthEvent.Kind.PROMOTED,
            replica_id=action.replica_id,
            job_id=Replica.objects.filter(pk=action.replica_id)
            .values_list("job_id", flat=True)
            .first()
            or "",
            endpoint_id=endpoint.pk,
            endpoint_name=endpoint.name,
            outcome="promoted",
            message=f"serving on {action.node}:{action.port} ({action.api_base})",
            at=now,
        )
        if action.job_started_at is not None:  # promoted before a pass saw it starting
            started = dt.datetime.fromtimestamp(action.job_started_at, tz=dt.UTC)
            Launch.objects.filter(pk=action.replica_id, started_at__isnull=True).update(
                started_at=min(started, now), nodes=action.node
            )
        if self.warmup is not None:
            try:
                self.warmup(
                    action.replica_id,
                    action.api_base,
                    self.model_types.get(action.model_id, "chat"),
                )
            except Exception as exc:  # noqa: BLE001 - warm-up is best effort
                log.warning("could not dispatch warm-up for %s: %s", action.replica_id, exc)
        log.debug("promoted replica %s at %s", action.replica_id, action.api_base)
        return action.api_base

    def mark_lost(self, action: MarkLost) -> str:
        if action.endpoint_id is not None:
            Endpoint.objects.filter(pk=action.endpoint_id).delete()
        now = self.now()
        job_id = (
            Replica.objects.filter(pk=action.replica_id).values_list("job_id", flat=True).first()
        )
        marked = (
            Replica.objects.filter(pk=action.replica_id)
            .exclude(state=ReplicaState.LOST)
            .update(
                state=ReplicaState.LOST,
                last_message=action.message[:500],
                endpoint_id=None,
                lost_at=now,
                updated_at=now,
            )
        )
        Launch.objects.filter(pk=action.replica_id, ended_at__isnull=True).update(
            ended_at=now,
            end_state=action.end_state[:60],
            end_reason=action.end_reason[:500],
            exit_code=action.exit_code,
            failed_launch=action.failed_launch,
            **({"nodes": ",".join(action.nodes)} if action.nodes else {}),
        )
        if marked:
            history.record_replica_event(
                model_id=action.model_id,
                kind=HealthEvent.Kind.LOST,
                replica_id=action.replica_id,
                job_id=job_id or "",
                endpoint_id=action.endpoint_id,
                outcome="failed launch" if action.failed_launch else "lost",
                message=action.message,
                at=now,
            )
        if action.failed_launch:
            log.warning("replica %s: failed launch: %s", action.replica_id, action.message)
        else:
            log.debug("replica %s lost: %s", action.replica_id, action.message)
        return action.message

    def settle_loss(self, action: SettleLoss) -> str:
        settled = Launch.objects.filter(
            pk=action.replica_id, end_state__iexact="COMPLETING"
        ).update(
            end_state=action.end_state[:60],
            end_reason=action.end_reason[:500],
            exit_code=action.exit_code,
            failed_launch=action.failed_launch,
        )
        Replica.objects.filter(pk=action.replica_id, state=ReplicaState.LOST).update(
            last_message=action.message[:500], updated_at=self.now()
        )
        if settled and action.failed_launch:
            log.warning("replica %s: failed launch: %s", action.replica_id, action.message)
        return action.message

    def update(self, action: UpdateMessage) -> str:
        fields: dict[str, Any] = {}
        if action.message is not None:
            fields["last_message"] = action.message[:500]
        if action.nodes is not None:
            fields["nodes"] = ",".join(action.nodes)
        if action.probe_failures is not None:
            fields["probe_failures"] = max(0, action.probe_failures)
        if not fields and action.state is None:
            return "nothing to update"
        query = Replica.objects.filter(pk=action.replica_id)
        now = self.now()
        if action.state is not None:
            fields["state"] = action.state.value
            if action.state.value == ReplicaState.STARTING:
                fields["started_at"] = now
                query = query.filter(state=ReplicaState.PENDING)
        fields["updated_at"] = now
        query.update(**fields)
        if action.nodes:
            Launch.objects.filter(pk=action.replica_id, started_at__isnull=True).update(
                started_at=now, nodes=",".join(action.nodes)
            )
        return "updated"
