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

The code: :mod:`recipes.deploy.cluster_view` (the types and reading discovery),
:mod:`recipes.deploy.placement` (partition, fit), :mod:`recipes.deploy.policy` (account, QoS,
walltime) and :mod:`recipes.deploy.formatting`; every name is importable from here.
"""

from __future__ import annotations

from recipes.deploy.cluster_view import (
    NOT_CHECKED,
    OK,
    REFUSED,
    WARNING,
    Ask,
    Check,
    Cluster,
    NodeView,
    PartitionView,
    cluster_from_resources,
    node_gpus,
)
from recipes.deploy.formatting import format_mb, format_minutes
from recipes.deploy.placement import check_fit, check_partition
from recipes.deploy.policy import check_account, check_qos, check_walltime

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
