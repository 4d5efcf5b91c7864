"""Where a replica can run: the ``partition`` rule (the partition exists and is up) and the
``fit`` rule (some node of the partition has one replica's GPUs, CPUs, memory and features,
minus ``exclude``; how many fitting nodes are idle or free now).

Part of :mod:`recipes.deploy.checks`; pure, no I/O."""

from __future__ import annotations

import re
from collections.abc import Sequence

from recipes.deploy.cluster_view import (
    NOT_CHECKED,
    OK,
    REFUSED,
    WARNING,
    Ask,
    Check,
    Cluster,
    NodeView,
)
from recipes.deploy.formatting import _listed, format_mb


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
