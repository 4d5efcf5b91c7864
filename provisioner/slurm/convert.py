"""Slurm value conversions: time limits, memory sizes and node lists.

Pure functions, no I/O. Bad input raises ``ValueError`` whose message names the field and
lists the forms Slurm accepts, so an operator can fix the value from the message alone.
"""

from __future__ import annotations

import math
import re

import hostlist

__all__ = ["expand_nodelist", "parse_memory_mb", "parse_time_limit"]

TIME_LIMIT_FORMS = (
    "minutes (120), minutes:seconds (30:00), hours:minutes:seconds (4:00:00), "
    "days-hours (1-00), days-hours:minutes (2-12:30), days-hours:minutes:seconds (0-04:00:00) "
    "or UNLIMITED"
)
MEMORY_FORMS = (
    "a whole number of megabytes (4096), or a number with a unit K, M, G or T and an optional B "
    "(512M, 64G, 2TB); 0 means the whole memory of the node"
)

_UNLIMITED = frozenset({"UNLIMITED", "INFINITE", "INFINITY"})
_NUMBER = re.compile(r"[0-9]+")
_MEMORY = re.compile(r"([0-9]+)([KMGT]?)")
_MEMORY_FACTOR_MB = {"K": 1.0 / 1024.0, "M": 1.0, "": 1.0, "G": 1024.0, "T": 1024.0 * 1024.0}


def _time_error(text: str, why: str) -> ValueError:
    return ValueError(
        f"time_limit {text!r} is not a Slurm time limit ({why}). Use one of: {TIME_LIMIT_FORMS}."
    )


def _parts(text: str, raw: str) -> list[int]:
    pieces = text.split(":")
    if len(pieces) > 3:
        raise _time_error(raw, "more than three ':'-separated parts")
    values = []
    for piece in pieces:
        if not _NUMBER.fullmatch(piece):
            raise _time_error(raw, f"{piece!r} is not a whole non-negative number")
        values.append(int(piece))
    return values


def parse_time_limit(text: str | int) -> int | None:
    """Turn a Slurm time limit into whole minutes, seconds rounded up.

    Accepts ``M``, ``M:S``, ``H:M:S``, ``D-H``, ``D-H:M`` and ``D-H:M:S`` (a ``D-`` prefix makes a
    bare number hours), like ``sbatch --time``. ``UNLIMITED``/``INFINITE`` give ``None`` (no
    limit). A total of zero, negative parts, units such as ``4h`` or an empty value raise
    ``ValueError`` naming ``time_limit``.
    """
    if isinstance(text, bool):
        raise _time_error(str(text), "a boolean is not a duration")
    raw = str(text)
    value = raw.strip()
    if not value:
        raise _time_error(raw, "it is empty")
    if value.upper() in _UNLIMITED:
        return None
    if value.startswith("-"):
        raise _time_error(raw, "it is negative")
    days = 0
    if "-" in value:
        day_text, _, rest = value.partition("-")
        if not _NUMBER.fullmatch(day_text) or not rest:
            raise _time_error(raw, "a 'D-' prefix needs whole days and hours after it")
        days = int(day_text)
        parts = _parts(rest, raw)
        hours, minutes, seconds = (parts + [0, 0])[:3]
    else:
        parts = _parts(value, raw)
        if len(parts) == 1:
            hours, minutes, seconds = 0, parts[0], 0
        elif len(parts) == 2:
            hours, minutes, seconds = 0, parts[0], parts[1]
        else:
            hours, minutes, seconds = parts
    total_seconds = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    if total_seconds <= 0:
        raise _time_error(raw, "the total is zero; leave the limit empty for the partition default")
    return math.ceil(total_seconds / 60)


def parse_memory_mb(text: str | int) -> int:
    """Turn a Slurm memory size into megabytes (``--mem`` style).

    ``K``/``M``/``G``/``T`` with an optional ``B``; a bare number is megabytes; ``0`` (or ``0G``)
    is allowed and means the whole node. Kilobytes are rounded to the nearest megabyte but a
    non-zero size never becomes 0. Anything else raises ``ValueError`` naming ``mem``.
    """
    if isinstance(text, bool):
        raise ValueError(f"mem {text!r} is not a memory size. Use {MEMORY_FORMS}.")
    raw = str(text)
    value = raw.strip().upper()
    if value.endswith("B") and len(value) > 1 and value[-2] in "KMGT":
        value = value[:-1]
    match = _MEMORY.fullmatch(value)
    if not match:
        raise ValueError(f"mem {raw!r} is not a memory size. Use {MEMORY_FORMS}.")
    number = int(match.group(1))
    megabytes = number * _MEMORY_FACTOR_MB[match.group(2)]
    if number == 0:
        return 0
    return max(1, math.floor(megabytes + 0.5))


def expand_nodelist(text: str | None) -> tuple[str, ...]:
    """Expand a Slurm hostlist (``gpu[01-04,07]``, ``a,b``) to hostnames, order kept.

    ``""``/``None``/``"(null)"`` give ``()``. A malformed list raises ``ValueError``.
    """
    if text is None:
        return ()
    value = text.strip()
    if not value or value in {"(null)", "None"}:
        return ()
    try:
        hosts = hostlist.expand_hostlist(value)
    except hostlist.BadHostlist as exc:
        raise ValueError(f"nodes {text!r} is not a Slurm node list: {exc}") from None
    seen: dict[str, None] = {}
    for host in hosts:
        if host:
            seen.setdefault(host, None)
    return tuple(seen)
