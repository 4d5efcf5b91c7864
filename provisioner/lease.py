"""Leases: locks that expire if their holder dies, kept in the database (PostgreSQL or SQLite;
no Redis needed).

A lease is a ``Lease`` row (name, owner, expires_at). Taking one is a single conditional UPDATE
(``WHERE name = ? AND (expires_at < now OR owner = ?)``), or an INSERT when the row does not exist
yet; the database decides who wins (the row count, or the primary key on a racing insert).

Call these in autocommit mode (outside ``transaction.atomic``): inside a transaction the lease
is invisible to other holders until the commit.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import socket
import uuid
from collections.abc import Iterator

from django.db import DatabaseError, IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from obleth.core.models import Lease

__all__ = [
    "acquire",
    "held",
    "held_names",
    "holder",
    "make_owner",
    "purge_expired",
    "release",
    "renew",
]

log = logging.getLogger(__name__)

_NAME_MAX = Lease._meta.get_field("name").max_length or 200
_OWNER_MAX = Lease._meta.get_field("owner").max_length or 200


def make_owner() -> str:
    """A unique owner id: ``host:pid:uuid``."""
    return f"{socket.gethostname()[:100]}:{os.getpid()}:{uuid.uuid4().hex}"[:_OWNER_MAX]


def _check(name: str, owner: str, ttl_secs: float | None = None) -> None:
    if not name or len(name) > _NAME_MAX:
        raise ValueError(f"lease name must be 1 to {_NAME_MAX} characters (got {len(name)})")
    if not owner or len(owner) > _OWNER_MAX:
        raise ValueError(f"lease owner must be 1 to {_OWNER_MAX} characters; use make_owner()")
    if ttl_secs is not None and not ttl_secs > 0:
        raise ValueError(f"lease ttl_secs must be a positive number of seconds (got {ttl_secs})")


def _take(name: str, owner: str, now: dt.datetime, expires: dt.datetime) -> bool:
    with transaction.atomic():
        updated = (
            Lease.objects.filter(name=name)
            .filter(Q(expires_at__lt=now) | Q(owner=owner))
            .update(owner=owner, expires_at=expires)
        )
    return updated == 1


def acquire(name: str, owner: str, ttl_secs: float) -> bool:
    """Take (or extend, when ``owner`` already holds it) the lease ``name`` for ``ttl_secs``.

    True when ``owner`` holds it afterwards. Atomic across threads and processes.
    """
    _check(name, owner, ttl_secs)
    now = timezone.now()
    expires = now + dt.timedelta(seconds=ttl_secs)
    if _take(name, owner, now, expires):
        return True
    try:
        with transaction.atomic():
            Lease.objects.create(name=name, owner=owner, expires_at=expires)
        return True
    except IntegrityError:
        # The row exists: held by someone else, or inserted by a racing acquirer just now.
        # One more conditional update settles it (it may have expired in between).
        if _take(name, owner, timezone.now(), expires):
            return True
    return _take_from_dead_holder(name, owner, expires)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def _take_from_dead_holder(name: str, owner: str, expires: dt.datetime) -> bool:
    """A holder on this host whose process is gone (killed with SIGKILL, say) cannot release;
    take its lease now instead of waiting for the TTL. Holders on other hosts expire by TTL."""
    current = Lease.objects.filter(name=name).values_list("owner", flat=True).first()
    if not current:
        return False
    if not _holder_gone(current):
        return False
    pid = current.split(":")[1]
    with transaction.atomic():
        taken = (
            Lease.objects.filter(name=name, owner=current).update(owner=owner, expires_at=expires)
            == 1
        )
    if taken:
        log.warning(
            "lease %s: holder %s is gone (process %s ended); taken over", name, current, pid
        )
    return taken


def renew(name: str, owner: str, ttl_secs: float) -> bool:
    """Push the expiry of a lease ``owner`` holds to now + ``ttl_secs``; False if not held.

    An expired lease nobody took over yet can still be renewed by its owner.
    """
    _check(name, owner, ttl_secs)
    expires = timezone.now() + dt.timedelta(seconds=ttl_secs)
    return Lease.objects.filter(name=name, owner=owner).update(expires_at=expires) == 1


def release(name: str, owner: str) -> bool:
    """Give the lease up (only its owner can); True when a row was removed."""
    _check(name, owner)
    deleted, _ = Lease.objects.filter(name=name, owner=owner).delete()
    return deleted > 0


def holder(name: str) -> str | None:
    """The current owner of ``name`` (None when free or expired)."""
    return (
        Lease.objects.filter(name=name, expires_at__gte=timezone.now())
        .values_list("owner", flat=True)
        .first()
    )


def held_names(prefix: str = "") -> set[str]:
    """Names of the leases currently held (not expired) that start with ``prefix``; one query.

    A lease whose holder was a process on this host that no longer exists is not held.
    """
    rows = Lease.objects.filter(expires_at__gte=timezone.now())
    if prefix:
        rows = rows.filter(name__startswith=prefix)
    return {name for name, owner in rows.values_list("name", "owner") if not _holder_gone(owner)}


def _holder_gone(owner: str) -> bool:
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname()[:100] or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    return pid != os.getpid() and not _pid_alive(pid)


def purge_expired(older_than_secs: float = 3600) -> int:
    """Delete leases expired for more than ``older_than_secs``; returns how many."""
    cutoff = timezone.now() - dt.timedelta(seconds=older_than_secs)
    deleted, _ = Lease.objects.filter(expires_at__lt=cutoff).delete()
    return deleted


@contextlib.contextmanager
def held(name: str, ttl_secs: float, *, owner: str | None = None) -> Iterator[bool]:
    """``with held("pass", 120) as got:`` -- ``got`` says whether this caller holds the lease.

    A unique owner is generated unless given (pass one to ``renew`` during long work). The lease
    is released on exit when it was taken; a failure to release is logged (it then expires).
    """
    who = owner or make_owner()
    got = acquire(name, who, ttl_secs)
    try:
        yield got
    finally:
        if got:
            try:
                release(name, who)
            except DatabaseError as exc:
                log.warning("could not release lease %s (it expires by itself): %s", name, exc)
