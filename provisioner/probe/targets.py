"""What the probe is asked and what it answers: a replica's port window (``ProbeTarget``), how
a ready port proves it is the replica's (``IdentityProof``), the outcome per window
(``ProbeOutcome``) and the result per port (``_PortResult``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


@dataclasses.dataclass(frozen=True, slots=True)
class IdentityProof:
    """How a ready port proves it is this replica's server (see the package docstring)."""

    check: str  # "key" or "model-name"
    api_key: str = dataclasses.field(default="", repr=False)
    path: str = "/v1/models"
    model_name: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class ProbeTarget(Generic[K]):
    """One replica's port window: ports ``port_base .. port_base + port_span - 1`` on ``host``.

    ``identity`` None: health only (replicas made before identity checks)."""

    key: K
    host: str
    port_base: int
    port_span: int
    health_path: str
    identity: IdentityProof | None = None

    def ports(self) -> list[int]:
        """The window's valid TCP ports (ports <= 0 or > 65535 are skipped)."""
        end = self.port_base + max(self.port_span, 0)
        return [p for p in range(self.port_base, end) if 0 < p < 65536]


@dataclasses.dataclass(frozen=True, slots=True)
class ProbeOutcome:
    """``ready_port``: the lowest ready port, or None. ``detail``: why (for logs and messages)."""

    ready_port: int | None
    detail: str

    @property
    def ready(self) -> bool:
        return self.ready_port is not None


@dataclasses.dataclass(frozen=True, slots=True)
class _PortResult:
    ready: bool
    reason: str  # "" when ready
    proof: str = ""  # "key" / "model-name" when an identity was checked
