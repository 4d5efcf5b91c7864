"""The deploy checks' vocabulary: what a replica asks (:class:`Ask`), the cluster as discovery
saw it (:class:`Cluster`, its :class:`NodeView` and :class:`PartitionView`), one rule's verdict
(:class:`Check`, with the statuses ``ok``, ``refused``, ``not checked``, ``warning``) and
:func:`cluster_from_resources`, which reads a ``/api/v1/slurm/resources`` answer.

Part of :mod:`recipes.deploy.checks` (its docstring describes the rules); pure, no I/O."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

OK = "ok"
REFUSED = "refused"
NOT_CHECKED = "not checked"
WARNING = "warning"

_UNUSABLE_STATES = frozenset(
    {"DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "NOT_RESPONDING", "FUTURE"}
)


@dataclasses.dataclass(frozen=True)
class Ask:
    """What one replica asks of Slurm (per node, as the job is submitted)."""

    partition: str
    account: str = ""
    qos: str = ""
    time_limit_minutes: int | None = None  # None: the partition's default
    nodes: int = 1
    gpus: int = 0
    cpus: int = 1
    mem_mb: int | None = None  # None: Slurm's default; 0: the whole node
    constraints: str = ""
    exclude: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class NodeView:
    name: str
    state: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()
    cpus: int | None = None
    alloc_cpus: int | None = None
    memory_mb: int | None = None  # real memory minus MemSpecLimit
    alloc_memory_mb: int | None = None
    gpus: int = 0
    features: tuple[str, ...] = ()

    @property
    def usable(self) -> bool:
        return not (set(self.state) & _UNUSABLE_STATES)

    @property
    def idle(self) -> bool:
        return self.usable and "IDLE" in self.state


@dataclasses.dataclass(frozen=True)
class PartitionView:
    name: str
    nodes: tuple[str, ...] = ()
    state: str = ""
    max_time_minutes: int | None = None  # None: unlimited
    allowed_accounts: tuple[str, ...] = ()  # empty: every account
    denied_accounts: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Cluster:
    """The cluster as discovery saw it. ``None`` for a part discovery could not read, with the
    reason in ``reasons[part]``."""

    partitions: Mapping[str, PartitionView] | None = None
    nodes: Mapping[str, NodeView] | None = None
    accounts: tuple[str, ...] | None = None
    qos: tuple[str, ...] | None = None
    # (account, partition or None for every partition) -> QoS names
    associations: tuple[tuple[str, str | None, tuple[str, ...]], ...] | None = None
    qos_max_minutes: Mapping[str, int | None] | None = None  # QoS -> MaxWall (None: none)
    reasons: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def reason(self, part: str) -> str:
        return (self.reasons.get(part) or "discovery did not report it").rstrip(". ")


@dataclasses.dataclass(frozen=True)
class Check:
    """One rule's verdict, with the sentence the operator reads."""

    field: str
    status: str
    message: str
    valid: tuple[str, ...] = ()
    facts: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def refused(self) -> bool:
        return self.status == REFUSED

    def as_dict(self) -> dict[str, Any]:
        return {
            "field": self.field,
            "status": self.status,
            "message": self.message,
            "valid": list(self.valid),
            **({"facts": dict(self.facts)} if self.facts else {}),
        }


_GPU_RE = re.compile(r"^gpu(?::[^:(]+)?:(\d+)")


def node_gpus(gres: str) -> int:
    """GPUs in a node's gres text (``gpu:2``, ``gpu:a100:4(S:0-1)``, ``gpu:1,shard:8``)."""
    total = 0
    for part in (gres or "").split(","):
        part = part.strip().removeprefix("gres/").removeprefix("gres:")
        match = _GPU_RE.match(part)
        if match:
            total += int(match.group(1))
    return total


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _names(value: Any) -> tuple[str, ...]:
    if isinstance(value, list | tuple):
        return tuple(str(v) for v in value if str(v).strip())
    return ()


def cluster_from_resources(resources: Mapping[str, Any]) -> Cluster:
    """A :class:`Cluster` from a ``discover_resources`` answer (plain JSON)."""
    errors = resources.get("errors") if isinstance(resources.get("errors"), Mapping) else {}
    assert isinstance(errors, Mapping)
    general = str(resources.get("reason") or "")
    reasons: dict[str, str] = {str(k): str(v) for k, v in errors.items()}

    def known(part: str) -> bool:
        if part in reasons:
            return False
        if not resources.get("api_version") and general:
            reasons[part] = general
            return False
        return True

    partitions: dict[str, PartitionView] | None = None
    if known("partitions"):
        partitions = {}
        for raw in resources.get("partitions") or []:
            if not isinstance(raw, Mapping) or not raw.get("name"):
                continue
            partitions[str(raw["name"])] = PartitionView(
                name=str(raw["name"]),
                nodes=_names(raw.get("nodes")),
                state=str(raw.get("state") or ""),
                max_time_minutes=_int(raw.get("max_time_minutes")),
                allowed_accounts=_names(raw.get("allowed_accounts")),
                denied_accounts=_names(raw.get("denied_accounts")),
            )
    nodes: dict[str, NodeView] | None = None
    if known("nodes"):
        nodes = {}
        for raw in resources.get("nodes") or []:
            if not isinstance(raw, Mapping) or not raw.get("name"):
                continue
            real = _int(raw.get("real_memory_mb"))
            spec = _int(raw.get("specialized_memory_mb")) or 0
            nodes[str(raw["name"])] = NodeView(
                name=str(raw["name"]),
                state=tuple(s.upper() for s in _names(raw.get("state"))),
                partitions=_names(raw.get("partitions")),
                cpus=_int(raw.get("cpus")),
                alloc_cpus=_int(raw.get("alloc_cpus")),
                memory_mb=(real - spec) if real is not None else None,
                alloc_memory_mb=_int(raw.get("alloc_memory_mb")),
                gpus=node_gpus(str(raw.get("gres") or "")),
                features=_names(raw.get("features")),
            )
    accounts = _names(resources.get("accounts")) if known("accounts") else None
    qos = _names(resources.get("qos")) if known("qos") else None
    associations: tuple[tuple[str, str | None, tuple[str, ...]], ...] | None = None
    if known("associations"):
        rows = []
        for raw in resources.get("associations") or []:
            if isinstance(raw, Mapping) and raw.get("account"):
                rows.append(
                    (str(raw["account"]), raw.get("partition") or None, _names(raw.get("qos")))
                )
        associations = tuple(rows)
    limits_raw = resources.get("qos_limits")
    qos_max: dict[str, int | None] | None = None
    if isinstance(limits_raw, Mapping) and "qos_limits" not in reasons:
        qos_max = {
            str(name): _int(limit.get("max_wall_minutes")) if isinstance(limit, Mapping) else None
            for name, limit in limits_raw.items()
        }
    else:
        reasons.setdefault(
            "qos_limits",
            reasons.get("qos") or "discovery does not report QoS walltime limits (MaxWall)",
        )
    return Cluster(
        partitions=partitions,
        nodes=nodes,
        accounts=accounts,
        qos=qos,
        associations=associations,
        qos_max_minutes=qos_max,
        reasons=reasons,
    )
