"""What the replica may use: the ``account`` rule (the partition's AllowAccounts/DenyAccounts,
the account exists), the ``qos`` rule (the account's associations) and the ``time_limit`` rule
(the partition's MaxTime and the QoS's MaxWall).

Part of :mod:`recipes.deploy.checks`; pure, no I/O."""

from __future__ import annotations

from recipes.deploy.cluster_view import NOT_CHECKED, OK, REFUSED, WARNING, Ask, Check, Cluster
from recipes.deploy.formatting import _listed, format_minutes


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
