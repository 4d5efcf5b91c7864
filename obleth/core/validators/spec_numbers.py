"""Whole-number fields: the serving port and the autoscaling numbers (max replicas, the
in-flight target, the scale-up, scale-down and scale-to-zero delays)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError

from obleth.core.validators.bounds import (
    MAX_REPLICAS,
    MAX_SCALE_DELAY_SECS,
    MAX_TARGET_IN_FLIGHT,
)

# --------------------------------------------------------------------------------------- ports


def validate_port(value: int) -> None:
    if value is None or isinstance(value, bool) or not 1 <= int(value) <= 65535:
        raise ValidationError(
            f"serving_port {value} is not a TCP port: use a number from 1 to 65535."
        )


# --------------------------------------------------------------------------------- autoscaling


def _whole_number(value: Any, field: str, low: int, high: int, meaning: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValidationError(f"{field}: use a whole number from {low} to {high} ({meaning}).")


def validate_max_replicas(value: int | None) -> None:
    """Empty: no autoscaling (target_replicas is fixed). Set: autoscale between min_replicas
    and this many replicas."""
    if value is None:
        return
    _whole_number(
        value,
        "max_replicas",
        1,
        MAX_REPLICAS,
        "the most replicas autoscaling starts; leave it empty to keep target_replicas fixed",
    )


def validate_target_in_flight(value: int) -> None:
    _whole_number(
        value,
        "target_in_flight",
        1,
        MAX_TARGET_IN_FLIGHT,
        "requests in flight per replica autoscaling aims at",
    )


def validate_scale_up_delay_secs(value: int) -> None:
    _whole_number(
        value,
        "scale_up_delay_secs",
        0,
        MAX_SCALE_DELAY_SECS,
        "seconds the load must stay above the replicas' target before one is added",
    )


def validate_scale_down_delay_secs(value: int) -> None:
    _whole_number(
        value,
        "scale_down_delay_secs",
        0,
        MAX_SCALE_DELAY_SECS,
        "seconds the load must stay below before a replica is removed",
    )


def validate_scale_to_zero_after_secs(value: int) -> None:
    _whole_number(
        value,
        "scale_to_zero_after_secs",
        0,
        MAX_SCALE_DELAY_SECS,
        "seconds without a request before a model with min_replicas 0 goes to zero replicas",
    )
