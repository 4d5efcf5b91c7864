"""Observe, autoscaling's inputs: each spec's settings and recorded decision, and the gateways'
in-flight counts and wake signals (ONE Redis read per pass, obleth/gateway/inflight.py)."""

from __future__ import annotations

import datetime as dt
import uuid

from obleth.core.models import ManagedSpec
from provisioner.domain import Autoscale, AutoscaleState, ModelLoad

__all__ = ["autoscale_of", "autoscale_state_of", "gateway_load"]


def autoscale_of(spec: ManagedSpec) -> Autoscale | None:
    """The spec's autoscaling settings, or None when it is off (max_replicas empty)."""
    if spec.max_replicas is None:
        return None
    return Autoscale(
        min_replicas=spec.min_replicas,
        max_replicas=spec.max_replicas,
        target_in_flight=spec.target_in_flight,
        up_delay_secs=spec.scale_up_delay_secs,
        down_delay_secs=spec.scale_down_delay_secs,
        zero_after_secs=spec.scale_to_zero_after_secs,
    )


def autoscale_state_of(spec: ManagedSpec) -> AutoscaleState:
    return AutoscaleState(
        replicas=spec.autoscale_replicas,
        since=spec.autoscale_since,
        changed_at=spec.autoscale_changed_at,
        pending_since=spec.autoscale_pending_since,
        pending_replicas=spec.autoscale_pending_replicas,
        idle_since=spec.autoscale_idle_since,
        message=spec.autoscale_message,
        message_at=spec.autoscale_message_at,
    )


def _epoch_time(value: float | None) -> dt.datetime | None:
    if value is None:
        return None
    try:
        return dt.datetime.fromtimestamp(value, tz=dt.UTC)
    except (OverflowError, OSError, ValueError):
        return None


def gateway_load() -> tuple[dict[uuid.UUID, ModelLoad] | None, str]:
    """The gateways' in-flight counts and wake signals per model: ONE Redis read
    (obleth/gateway/inflight.py). (None, why) when they cannot be trusted: Redis unreadable, or
    no gateway process reporting (its requests would look like none)."""
    from obleth.gateway.inflight import read_load

    try:
        reading = read_load()
    except Exception as exc:  # noqa: BLE001 - any Redis failure means "load unknown"
        return None, f"Redis unreadable: {type(exc).__name__}: {exc}"[:200]
    if reading.processes == 0:
        return None, "no gateway process reports its in-flight counts (is the gateway running?)"
    loads: dict[uuid.UUID, ModelLoad] = {}
    for key in set(reading.models) | set(reading.wakes):
        try:
            model_id = uuid.UUID(key)
        except ValueError:
            continue
        count = reading.models.get(key)
        loads[model_id] = ModelLoad(
            in_flight=count.in_flight if count is not None else 0,
            last_request_at=_epoch_time(count.last_request_at) if count is not None else None,
            woken_at=_epoch_time(reading.wakes.get(key)),
        )
    return loads, ""
