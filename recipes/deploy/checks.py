"""Checked before submit: does one replica's request suit the cluster as discovery saw it?

Pure functions (no I/O, no Django): :func:`check_request` takes what a replica asks for
(:class:`Ask`) and the cluster (:class:`Cluster`, built from the ``/api/v1/slurm/resources``
answer by :func:`cluster_from_resources`) and returns one :class:`Check` per rule:

- ``partition``: the partition exists (valid values: the partitions);
- ``fit``: some node of the partition has the GPUs, CPUs and memory of one replica (and the
  features of ``constraints``, minus ``exclude``), how many fitting nodes are idle now;
- ``account``: the partition takes the account (AllowAccounts / DenyAccounts) and the account
  exists (when slurmdbd data is served);
- ``qos``: the account may use the QoS (its associations);
- ``time_limit``: the walltime is within the partition's MaxTime and the QoS's MaxWall.

A check is ``ok``, ``refused`` (the launch is refused; the message names the field and
``valid`` lists what would be accepted), ``not checked`` (discovery did not say: the message
says why, e.g. slurmdbd data not served by slurmrestd v0.0.38) or ``warning`` (it may wait or
fail, but Slurm would take it). Each message is the sentence the operator reads.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "NOT_CHECKED",
    "OK",
    "REFUSED",
    "WARNING",
    "Ask",
    "Check",
    "Cluster",
    "NodeView",
    "PartitionView",
    "check_account",
    "check_fit",
    "check_partition",
    "check_qos",
    "check_request",
    "check_walltime",
    "cluster_from_resources",
    "format_minutes",
    "format_mb",
    "node_gpus",
]

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


# ----------------------------------------------------------------------------- formatting


def format_minutes(minutes: int) -> str:
    """Slurm's walltime spelling: ``30:00``... ``2:00:00``, ``1-00:00:00``."""
    days, rest = divmod(int(minutes), 24 * 60)
    hours, mins = divmod(rest, 60)
    if days:
        return f"{days}-{hours:02d}:{mins:02d}:00"
    return f"{hours}:{mins:02d}:00"


def format_mb(mb: int) -> str:
    if mb >= 1024 and mb % 1024 == 0:
        return f"{mb // 1024}G"
    if mb >= 10 * 1024:
        return f"{mb / 1024:.1f}G"
    return f"{mb}M"


def _listed(names: Sequence[str]) -> str:
    return ", ".join(names) if names else "none"


# ----------------------------------------------------------------------------- reading discovery

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


# ----------------------------------------------------------------------------- rules


def check_partition(ask: Ask, cluster: Cluster) -> Check:
    if cluster.partitions is None:
        return Check(
            "partition", NOT_CHECKED, f"Partition not checked: {cluster.reason('partitions')}."
        )
    names = tuple(sorted(cluster.partitions))
    if not ask.partition:
        return Check("partition", REFUSED, f"Choose a partition: {_listed(names)}.", valid=names)
    part = cluster.partitions.get(ask.partition)
    if part is None:
        return Check(
            "partition",
            REFUSED,
            f"Partition {ask.partition!r} does not exist on the cluster; choose one of: "
            f"{_listed(names)}.",
            valid=names,
        )
    if part.state and part.state not in ("UP", ""):
        return Check(
            "partition",
            WARNING,
            f"Partition {ask.partition!r} is {part.state}: jobs wait until it is UP.",
        )
    return Check("partition", OK, f"Partition {ask.partition!r} exists.")


def _features_match(constraints: str, features: Sequence[str]) -> bool:
    text = constraints.strip()
    if not text:
        return True
    have = set(features)
    if "|" in text:
        return any(f.strip() in have for f in text.split("|"))
    return all(f.strip() in have for f in re.split(r"[&,]", text) if f.strip())


def _misfit(ask: Ask, node: NodeView) -> str | None:
    """Why a node cannot take one replica (None: it fits)."""
    if ask.gpus and node.gpus < ask.gpus:
        return f"{node.gpus} GPUs"
    if node.cpus is not None and ask.cpus > node.cpus:
        return f"{node.cpus} CPUs"
    if ask.mem_mb and node.memory_mb is not None and ask.mem_mb > node.memory_mb:
        return f"{format_mb(node.memory_mb)} memory"
    if not _features_match(ask.constraints, node.features):
        return f"features {_listed(list(node.features))}"
    return None


def _free_now(ask: Ask, node: NodeView) -> bool:
    if not node.usable:
        return False
    if node.cpus is not None and ask.cpus > node.cpus - (node.alloc_cpus or 0):
        return False
    if node.memory_mb is not None:
        need = node.memory_mb if ask.mem_mb == 0 else (ask.mem_mb or 0)
        if need > node.memory_mb - (node.alloc_memory_mb or 0):
            return False
    return True


def _asks(ask: Ask) -> str:
    parts = [f"{ask.cpus} CPU{'s' if ask.cpus != 1 else ''}"]
    if ask.mem_mb:
        parts.append(f"{format_mb(ask.mem_mb)} memory")
    elif ask.mem_mb == 0:
        parts.append("the whole node's memory")
    if ask.gpus:
        parts.append(f"{ask.gpus} GPU{'s' if ask.gpus != 1 else ''}")
    if ask.constraints:
        parts.append(f"features {ask.constraints}")
    return ", ".join(parts)


def _fitting(ask: Ask, cluster: Cluster, partition: str) -> list[NodeView]:
    assert cluster.nodes is not None and cluster.partitions is not None
    part = cluster.partitions.get(partition)
    names = part.nodes if part is not None else ()
    members = [cluster.nodes[n] for n in names if n in cluster.nodes] or [
        n for n in cluster.nodes.values() if partition in n.partitions
    ]
    return [n for n in members if n.name not in ask.exclude and _misfit(ask, n) is None]


def check_fit(ask: Ask, cluster: Cluster) -> Check:
    """Some node of the partition fits one replica; how many fitting nodes are idle now."""
    if cluster.partitions is None or cluster.nodes is None:
        why = cluster.reason("nodes" if cluster.nodes is None else "partitions")
        return Check("fit", NOT_CHECKED, f"Fit not checked: {why}.")
    part = cluster.partitions.get(ask.partition)
    if part is None:
        return Check("fit", NOT_CHECKED, "Fit not checked: the partition does not exist.")
    fitting = _fitting(ask, cluster, ask.partition)
    where = sorted(p for p in cluster.partitions if len(_fitting(ask, cluster, p)) >= ask.nodes)
    if len(fitting) < ask.nodes:
        members = [cluster.nodes[n] for n in part.nodes if n in cluster.nodes]
        reasons = sorted({r for n in members if (r := _misfit(ask, n))})
        if reasons:
            why = "its nodes have " + _listed(reasons)
        elif members and ask.exclude:
            why = "Avoid nodes (exclude) leaves too few"
        elif members:
            why = f"the partition has {len(members)} node{'s' if len(members) != 1 else ''}"
        else:
            why = "it has no nodes"
        need = f"{ask.nodes} such nodes" if ask.nodes > 1 else "one node"
        field = "gpus" if ask.gpus and any("GPU" in r for r in reasons) else "partition"
        return Check(
            field,
            REFUSED,
            f"A replica does not fit in partition {ask.partition!r}: it asks {_asks(ask)} on "
            f"{need} and {len(fitting)} node{'s' if len(fitting) != 1 else ''} fit ({why}). "
            f"Partitions where it fits: {_listed(where)}.",
            valid=tuple(where),
            facts={"fitting_nodes": len(fitting)},
        )
    idle = sum(1 for n in fitting if n.idle)
    free = sum(1 for n in fitting if _free_now(ask, n))
    usable = sum(1 for n in fitting if n.usable)
    facts = {"fitting_nodes": len(fitting), "idle_fitting_nodes": idle, "free_now": free}
    text = (
        f"A replica fits on {len(fitting)} node{'s' if len(fitting) != 1 else ''} of "
        f"{ask.partition!r}; {idle} {'is' if idle == 1 else 'are'} idle now and {free} "
        f"{'has' if free == 1 else 'have'} room for it now."
    )
    if usable < ask.nodes:
        return Check(
            "partition",
            WARNING,
            text + " The fitting nodes are down or drained: the job waits until one is back.",
            valid=tuple(where),
            facts=facts,
        )
    if free < ask.nodes:
        return Check(
            "partition",
            WARNING,
            text + " It will wait in the queue (Resources) until a node frees up.",
            valid=tuple(where),
            facts=facts,
        )
    return Check("partition", OK, text, valid=tuple(where), facts=facts)


def check_account(ask: Ask, cluster: Cluster) -> Check:
    """The partition takes the account (AllowAccounts/DenyAccounts) and it exists."""
    if cluster.partitions is None or ask.partition not in cluster.partitions:
        return Check("account", NOT_CHECKED, "Account not checked: the partition is not known.")
    part = cluster.partitions[ask.partition]
    denied = set(part.denied_accounts)
    pool = part.allowed_accounts or cluster.accounts or ()
    valid = tuple(sorted(a for a in pool if a not in denied))
    if not ask.account:
        if part.allowed_accounts:
            return Check(
                "account",
                WARNING,
                f"No account given: Slurm uses your default account, and partition "
                f"{ask.partition!r} takes only {_listed(valid)}.",
                valid=valid,
            )
        return Check("account", OK, "No account given: Slurm uses your default account.")
    if ask.account in denied:
        return Check(
            "account",
            REFUSED,
            f"Partition {ask.partition!r} denies account {ask.account!r} (DenyAccounts); use "
            f"one of: {_listed(valid)}.",
            valid=valid,
        )
    if part.allowed_accounts and ask.account not in part.allowed_accounts:
        return Check(
            "account",
            REFUSED,
            f"Partition {ask.partition!r} takes only accounts {_listed(valid)} (AllowAccounts), "
            f"not {ask.account!r}.",
            valid=valid,
        )
    if cluster.accounts is None:
        if part.allowed_accounts:
            return Check(
                "account", OK, f"Partition {ask.partition!r} takes account {ask.account!r}."
            )
        return Check(
            "account",
            NOT_CHECKED,
            f"Account not checked: {cluster.reason('accounts')}.",
        )
    if ask.account not in cluster.accounts:
        return Check(
            "account",
            REFUSED,
            f"Account {ask.account!r} is not one of your accounts; use one of: {_listed(valid)}.",
            valid=valid,
        )
    return Check("account", OK, f"Partition {ask.partition!r} takes account {ask.account!r}.")


def check_qos(ask: Ask, cluster: Cluster) -> Check:
    """The account may use the QoS (its associations for this partition or every partition)."""
    if not ask.qos:
        return Check("qos", OK, "No QoS given: Slurm uses the account's default QoS.")
    if cluster.associations is None:
        return Check("qos", NOT_CHECKED, f"QoS not checked: {cluster.reason('associations')}.")
    rows = [
        qos
        for account, partition, qos in cluster.associations
        if (not ask.account or account == ask.account) and partition in (None, "", ask.partition)
    ]
    valid = tuple(sorted({q for qos in rows for q in qos}))
    if not rows:
        who = f"account {ask.account!r}" if ask.account else "you"
        return Check(
            "qos",
            REFUSED,
            f"No association lets {who} run in partition {ask.partition!r}, so QoS "
            f"{ask.qos!r} cannot be used; pick another account or partition.",
        )
    if ask.qos not in valid:
        who = f"Account {ask.account!r}" if ask.account else "Your account"
        return Check(
            "qos",
            REFUSED,
            f"{who} may not use QoS {ask.qos!r} in partition {ask.partition!r}; use one of: "
            f"{_listed(valid)}.",
            valid=valid,
        )
    return Check("qos", OK, f"QoS {ask.qos!r} is allowed.")


def check_walltime(ask: Ask, cluster: Cluster) -> list[Check]:
    """The walltime is within the partition's MaxTime and the QoS's MaxWall."""
    checks: list[Check] = []
    asked = ask.time_limit_minutes
    part = (cluster.partitions or {}).get(ask.partition)
    if cluster.partitions is None:
        checks.append(
            Check(
                "time_limit",
                NOT_CHECKED,
                f"Walltime not checked against the partition: {cluster.reason('partitions')}.",
            )
        )
    elif part is not None and part.max_time_minutes is not None:
        most = format_minutes(part.max_time_minutes)
        if asked is None:
            checks.append(
                Check(
                    "time_limit",
                    OK,
                    f"No walltime given: partition {ask.partition!r} allows at most {most}.",
                )
            )
        elif asked > part.max_time_minutes:
            checks.append(
                Check(
                    "time_limit",
                    REFUSED,
                    f"Walltime {format_minutes(asked)} is over partition {ask.partition!r}'s "
                    f"limit of {most} (MaxTime); give at most {most}.",
                    valid=(f"at most {most}",),
                )
            )
        else:
            checks.append(
                Check("time_limit", OK, f"Walltime is within {ask.partition!r}'s {most}.")
            )
    elif part is not None:
        checks.append(
            Check("time_limit", OK, f"Partition {ask.partition!r} has no walltime limit.")
        )
    if ask.qos:
        if cluster.qos_max_minutes is None:
            checks.append(
                Check(
                    "time_limit",
                    NOT_CHECKED,
                    f"Walltime not checked against QoS {ask.qos!r}: "
                    f"{cluster.reason('qos_limits')}.",
                )
            )
        else:
            limit = cluster.qos_max_minutes.get(ask.qos)
            if limit is not None and asked is not None and asked > limit:
                most = format_minutes(limit)
                checks.append(
                    Check(
                        "time_limit",
                        REFUSED,
                        f"Walltime {format_minutes(asked)} is over QoS {ask.qos!r}'s limit of "
                        f"{most} (MaxWall); give at most {most} or another QoS.",
                        valid=(f"at most {most}",),
                    )
                )
            elif limit is not None:
                checks.append(
                    Check(
                        "time_limit",
                        OK,
                        f"Walltime is within QoS {ask.qos!r}'s {format_minutes(limit)}.",
                    )
                )
    return checks


def check_request(ask: Ask, cluster: Cluster) -> list[Check]:
    """Every rule, in the order the form shows them."""
    first = check_partition(ask, cluster)
    checks = [first]
    if first.status != REFUSED or cluster.partitions is None:
        checks.append(check_fit(ask, cluster))
    checks.append(check_account(ask, cluster))
    checks.append(check_qos(ask, cluster))
    checks.extend(check_walltime(ask, cluster))
    return checks
