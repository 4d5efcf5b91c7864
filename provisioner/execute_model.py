"""The executor's model records: the breaker and storm guard (with its alerts), the handover and
rollout sentences, and what autoscaling decided.
"""

from __future__ import annotations

from typing import Any

from obleth.core.models import ManagedSpec
from provisioner.domain import SetAutoscale, SetGuard, SetTransition
from provisioner.execute_common import ExecutorParts, log


class ModelActions(ExecutorParts):
    """SetGuard, SetTransition and SetAutoscale."""

    def set_guard(self, action: SetGuard) -> str:
        """Record the model's breaker/storm sentences; alert and warn when one starts."""
        from provisioner import alerts

        spec = self.specs.get(action.model_id)
        name = spec.model.name if spec is not None else str(action.model_id)
        now = self.now()
        fields: dict[str, Any] = {
            "breaker_message": action.breaker,
            "storm_message": action.storm,
        }
        current = ManagedSpec.objects.filter(pk=action.model_id).values(
            "breaker_message", "storm_message"
        )
        before: dict[str, Any] = dict(current.first() or {})
        if not action.breaker:
            fields["breaker_tripped_at"] = None
        elif not before.get("breaker_message"):
            fields["breaker_tripped_at"] = now
        if not action.storm:
            fields["storm_since"] = None
        elif not before.get("storm_message"):
            fields["storm_since"] = now
        ManagedSpec.objects.filter(pk=action.model_id).update(**fields)
        if action.tripped:
            log.warning("model %s: failed-launch breaker tripped: %s", name, action.breaker)
            alerts.fire(
                f"failed_launch_breaker:{action.model_id}",
                f"Model {name} stopped launching replicas (failed-launch breaker)",
                action.breaker,
                severity="critical",
            )
        elif before.get("breaker_message") and not action.breaker:
            log.info("model %s: failed-launch breaker reset; launching again", name)
        if action.storm_started:
            log.warning("model %s: replacement storm: %s", name, action.storm)
            alerts.fire(
                f"replacement_storm:{action.model_id}",
                f"Model {name}: replacement storm, replacements slowed",
                action.storm,
                severity="warning",
            )
        elif before.get("storm_message") and not action.storm:
            log.info("model %s: replacement storm over; replacing at full speed", name)
        return action.breaker or action.storm or "guard cleared"

    def set_transition(self, action: SetTransition) -> str:
        """Record the model's handover and rollout sentences (the API and model page show them)."""
        spec = self.specs.get(action.model_id)
        name = spec.model.name if spec is not None else str(action.model_id)
        ManagedSpec.objects.filter(pk=action.model_id).update(
            handover_message=action.handover, rollout_message=action.rollout
        )
        if action.rollout.startswith("rollout stopped"):
            log.warning("model %s: %s", name, action.rollout)
        elif action.handover:
            log.info("model %s: %s", name, action.handover)
        return action.handover or action.rollout or "transition cleared"

    def set_autoscale(self, action: SetAutoscale) -> str:
        """Record what autoscaling decided (the API and the model page show the sentence);
        a change of count is logged with its reason."""
        ManagedSpec.objects.filter(pk=action.model_id).update(
            autoscale_replicas=action.replicas,
            autoscale_since=action.since,
            autoscale_changed_at=action.changed_at,
            autoscale_pending_since=action.pending_since,
            autoscale_pending_replicas=action.pending_replicas,
            autoscale_idle_since=action.idle_since,
            autoscale_message=action.message,
            autoscale_message_at=self.now() if action.message else None,
        )
        if action.change in ("up", "down", "zero", "wake"):
            spec = self.specs.get(action.model_id)
            name = spec.model.name if spec is not None else str(action.model_id)
            log.info("model %s: autoscaled %s: %s", name, action.change, action.message)
        return action.message or "autoscale cleared"
