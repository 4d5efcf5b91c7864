"""Result objects of the Slurm client's discovery reads (no I/O, importable by the planner)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Generic, TypeVar

from provisioner.slurm.adapters.base import AssociationInfo
from provisioner.slurm.types import NodeInfo, PartitionInfo

__all__ = ["AssociationInfo", "ClusterResources", "SlurmdbResult"]

T = TypeVar("T")


@dataclasses.dataclass(frozen=True, slots=True)
class SlurmdbResult(Generic[T]):
    """A slurmdbd read. ``unavailable_reason`` is set (and ``items`` empty) when this slurmrestd
    does not serve the slurmdb endpoints (no slurmdbd, or the dbv0.0.x plugin not loaded)."""

    items: tuple[T, ...] = ()
    unavailable_reason: str = ""

    @property
    def available(self) -> bool:
        return not self.unavailable_reason


@dataclasses.dataclass(frozen=True, slots=True)
class ClusterResources:
    """Best-effort picture of the cluster for the launcher UI; each part fails on its own and
    its reason lands in ``errors`` (``{"nodes": "..."}``)."""

    api_version: str = ""
    partitions: tuple[PartitionInfo, ...] = ()
    nodes: tuple[NodeInfo, ...] = ()
    accounts: tuple[str, ...] = ()
    qos: tuple[str, ...] = ()
    associations: tuple[AssociationInfo, ...] = ()
    errors: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # (QoS, MaxWall per job in minutes or None) when slurmdbd data was read; None otherwise.
    qos_limits: tuple[tuple[str, int | None], ...] | None = None
