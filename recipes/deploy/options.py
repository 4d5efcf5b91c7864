"""What a deploy form may offer, from the cluster as discovery saw it: each partition with
whether one replica fits there and how many fitting nodes are idle, the accounts each partition
takes and the QoS an account may use.

Pure functions (no I/O, no Django) over :class:`recipes.deploy.checks.Cluster`, the same
view of the cluster the checks use, so a form never offers what the review would refuse.
``None`` means "discovery did not say": the form then takes free text.

Part of the deploy service (:mod:`recipes.deploy.service`, ``Review.options``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from recipes.deploy import checks

__all__ = ["accounts_for", "form_options", "partition_options", "qos_for"]


def accounts_for(partition: str, cluster: checks.Cluster) -> list[str] | None:
    """The accounts ``partition`` takes (AllowAccounts, else every known account, minus
    DenyAccounts); None when discovery knows neither (any account may be typed)."""
    part = (cluster.partitions or {}).get(partition)
    if part is None:
        return None
    pool = part.allowed_accounts or cluster.accounts
    if not pool:
        return None
    denied = set(part.denied_accounts)
    return sorted(a for a in pool if a not in denied)


def qos_for(account: str, partition: str, cluster: checks.Cluster) -> list[str] | None:
    """The QoS ``account`` (any account when empty) may use in ``partition``; None when the
    associations are not known."""
    if cluster.associations is None:
        return None
    return sorted(
        {
            q
            for acct, part, qos in cluster.associations
            if (not account or acct == account) and part in (None, "", partition)
            for q in qos
        }
    )


def _times(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def partition_options(ask: checks.Ask, cluster: checks.Cluster) -> list[dict[str, Any]] | None:
    """One entry per partition (sorted by name): does one replica of ``ask`` fit there (its
    GPUs, CPUs, memory, features, minus Avoid nodes), on how many nodes, how many of them are
    idle now, its MaxTime, and the label a form shows. None when partitions or nodes are not
    known."""
    if cluster.partitions is None or cluster.nodes is None:
        return None
    out = []
    for name in sorted(cluster.partitions):
        part = cluster.partitions[name]
        verdict = checks.check_fit(dataclasses.replace(ask, partition=name), cluster)
        fits = not verdict.refused
        fitting = int(verdict.facts.get("fitting_nodes", 0))
        idle = int(verdict.facts.get("idle_fitting_nodes", 0))
        if fits:
            label = f"{name} — fits on {_times(fitting, 'node')}, {idle} idle"
        else:
            label = f"{name} — does not fit"
        if part.state and part.state != "UP":
            label += f" ({part.state})"
        out.append(
            {
                "name": name,
                "state": part.state,
                "fits": fits,
                "fitting_nodes": fitting,
                "idle_fitting_nodes": idle,
                "free_now": int(verdict.facts.get("free_now", 0)),
                "max_time": (
                    checks.format_minutes(part.max_time_minutes)
                    if part.max_time_minutes is not None
                    else ""
                ),
                "accounts": accounts_for(name, cluster),
                "label": label,
                "message": verdict.message,
            }
        )
    return out


def form_options(ask: checks.Ask, cluster: checks.Cluster) -> dict[str, Any]:
    """Everything a deploy form offers for ``ask``: ``partitions`` (see
    :func:`partition_options`), ``accounts`` (for ask's partition), ``qos`` (for ask's account
    and partition) and why a list is missing (``reasons``: part -> sentence)."""
    reasons = {}
    for part, key in (("partitions", "partitions"), ("nodes", "partitions")):
        if getattr(cluster, part) is None:
            reasons[key] = cluster.reason(part)
    if cluster.accounts is None:
        reasons["accounts"] = cluster.reason("accounts")
    if cluster.associations is None:
        reasons["qos"] = cluster.reason("associations")
    return {
        "partitions": partition_options(ask, cluster),
        "accounts": accounts_for(ask.partition, cluster),
        "qos": qos_for(ask.account, ask.partition, cluster),
        "reasons": reasons,
    }
