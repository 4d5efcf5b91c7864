"""Slurm values: the slurmrestd API version, partition/account/QoS names, GRES requests, node
lists (``exclude``), ``--constraint`` expressions, time limits, memory and the node count."""

from __future__ import annotations

import re
from collections.abc import Iterator

from django.core.exceptions import ValidationError

from obleth.core.http_validators import describe_char as _describe
from obleth.core.validators.bounds import (
    MAX_GRES_COUNT,
    MAX_MEMORY_MB,
    MAX_NODES,
    MAX_TIME_LIMIT_DAYS,
)
from obleth.core.validators.text import validate_one_line

API_VERSION_RE = re.compile(r"[A-Za-z0-9.]+")
HOSTNAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,253})$")


# --------------------------------------------------------------------------------- Slurm values


def validate_api_version(value: str) -> None:
    if not value:
        return
    if not API_VERSION_RE.fullmatch(value):
        raise ValidationError(
            "api_version: use letters, digits and dots only, like v0.0.40 (or leave blank to "
            "detect it)."
        )
    from provisioner.slurm.adapters import supported_versions

    supported = supported_versions()
    if value not in supported:
        raise ValidationError(
            f"obleth has no adapter for slurmrestd API {value}. Use one of "
            f"{', '.join(supported)}, or leave it blank to detect the newest the server serves."
        )


SLURM_NAME_RE = re.compile(r"[A-Za-z0-9_.+-]+")


def _slurm_name(value: str, field: str, listing: str) -> None:
    if not value:
        return
    validate_one_line(value, field, 200)
    if not SLURM_NAME_RE.fullmatch(value.strip()):
        bad = next((ch for ch in value.strip() if not SLURM_NAME_RE.fullmatch(ch)), "")
        raise ValidationError(
            f"{field} {value!r} is not a Slurm name ({_describe(bad)} is not allowed): use "
            f"letters, digits and _ . + - only ({listing} lists them)."
        )


def validate_slurm_name(value: str) -> None:
    """A partition, account or QoS name: one word as Slurm spells it (kept for migrations)."""
    _slurm_name(value, "name", "sinfo, sacctmgr show account / qos")


def validate_partition(value: str) -> None:
    _slurm_name(value, "partition", "sinfo")


def validate_account(value: str) -> None:
    _slurm_name(value, "account", "sacctmgr show account")


def validate_qos(value: str) -> None:
    _slurm_name(value, "qos", "sacctmgr show qos")


GRES_NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9_.-]*")
GRES_TYPE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
GRES_FORMS = "name[:type]:count with a count of 1 or more, e.g. gpu:1 or gpu:a100:2"


def validate_gres(value: str) -> None:
    """``name[:type][:count]`` items, comma-separated; the count is 1..MAX_GRES_COUNT."""
    if not value or not value.strip():
        return
    validate_one_line(value, "gres", 200)
    for item in value.strip().split(","):
        item = item.strip()
        if item.startswith("gres/"):
            item = item[len("gres/") :]
        parts = item.split(":")
        problem = ""
        if not item or len(parts) > 3:
            problem = "write one to three ':'-separated parts per item"
        elif not GRES_NAME_RE.fullmatch(parts[0]):
            problem = f"{parts[0]!r} is not a GRES name"
        else:
            count_text = parts[-1] if len(parts) > 1 else "1"
            type_text = parts[1] if len(parts) == 3 else ""
            looks_numeric = bool(re.fullmatch(r"[+-]?[0-9]+", count_text))
            if len(parts) == 2 and not looks_numeric:
                type_text, count_text = count_text, "1"  # name:type, count 1
            if type_text and not GRES_TYPE_RE.fullmatch(type_text):
                problem = f"{type_text!r} is not a GRES type"
            elif not count_text.isdigit():
                problem = f"the count {count_text!r} is not a whole number of 1 or more"
            elif not 1 <= int(count_text) <= MAX_GRES_COUNT:
                problem = f"the count {int(count_text)} is not between 1 and {MAX_GRES_COUNT}"
        if problem:
            raise ValidationError(
                f"gres {value!r} is not a GRES request ({problem}): write {GRES_FORMS}."
            )


def validate_hostlist(value: str, field: str = "exclude") -> None:
    """Node names or Slurm hostlist expressions, e.g. gpu01,gpu[03-05]."""
    if not value or not value.strip():
        return
    validate_one_line(value, field, 500)
    import hostlist

    compact = "".join(value.split())
    try:
        hosts = hostlist.expand_hostlist(compact)
    except hostlist.BadHostlist as exc:
        raise ValidationError(
            f"{field} {value!r} is not a node list ({exc}): write names or ranges, e.g. "
            "gpu01,gpu[03-05]."
        ) from None
    if not hosts or any(not HOSTNAME_RE.match(h) for h in hosts):
        raise ValidationError(
            f"{field} {value!r} is not a node list: write names or ranges, e.g. gpu01,gpu[03-05]."
        )


def validate_exclude(value: str) -> None:
    validate_hostlist(value, "exclude")


CONSTRAINT_TOKEN_RE = re.compile(r"[A-Za-z0-9_.:-]+|\*[0-9]+|[&|,()\[\]]")
CONSTRAINT_FORMS = (
    "node features joined by & (and), | (or) or ',', with optional [..] or (..) groups and "
    "*count, e.g. a100&ib or [rack1|rack2]"
)


def _constraint_tokens(value: str) -> Iterator[str]:
    pos = 0
    while pos < len(value):
        match = CONSTRAINT_TOKEN_RE.match(value, pos)
        if match is None:
            raise ValueError(f"{_describe(value[pos])} at position {pos + 1} is not allowed")
        yield match.group()
        pos = match.end()


def _parse_constraint(tokens: list[str]) -> None:
    """expr := term (op term)* ; term := feature [*N] | '(' expr ')' [*N] | '[' expr ']'"""
    pos = 0

    def term() -> None:
        nonlocal pos
        if pos >= len(tokens):
            raise ValueError("it ends where a feature should be")
        tok = tokens[pos]
        if tok in "([":
            closing = ")" if tok == "(" else "]"
            pos += 1
            expr(closing)
            if pos >= len(tokens) or tokens[pos] != closing:
                raise ValueError(f"a {tok!r} is not closed")
            pos += 1
        elif tok[0].isalnum() or tok[0] in "_.:-":
            pos += 1
        else:
            raise ValueError(f"{tok!r} where a feature should be")
        if pos < len(tokens) and tokens[pos].startswith("*"):
            pos += 1

    def expr(closing: str | None) -> None:
        nonlocal pos
        term()
        while pos < len(tokens) and tokens[pos] != closing:
            if tokens[pos] not in ("&", "|", ","):
                raise ValueError(f"{tokens[pos]!r} where &, | or ',' should be")
            pos += 1
            term()

    expr(None)
    if pos != len(tokens):
        raise ValueError(f"{tokens[pos]!r} is not opened")


def validate_constraints(value: str) -> None:
    """Slurm's --constraint grammar, nothing else (no spaces, no shell characters)."""
    if not value or not value.strip():
        return
    validate_one_line(value, "constraints", 500)
    try:
        _parse_constraint(list(_constraint_tokens(value.strip())))
    except ValueError as exc:
        raise ValidationError(
            f"constraints {value!r} is not a Slurm constraint ({exc}): write {CONSTRAINT_FORMS}."
        ) from None


def _time_bounds(value: str) -> str | None:
    """Why a time limit (already in one of Slurm's forms) is out of bounds, or None."""
    text = value.strip()
    if text.upper() in {"UNLIMITED", "INFINITE", "INFINITY"}:
        return None
    days = 0
    if "-" in text:
        day_text, _, rest = text.partition("-")
        days = int(day_text)
        parts = [int(p) for p in rest.split(":")]
        hours, minutes, seconds = (parts + [0, 0])[:3]
        if hours > 23:
            return f"{hours} hours after a day count: use 0-23"
        if len(parts) > 1 and minutes > 59:
            return f"{minutes} minutes: use 0-59"
    else:
        parts = [int(p) for p in text.split(":")]
        if len(parts) == 1:
            hours, minutes, seconds = 0, parts[0], 0
        elif len(parts) == 2:
            hours, minutes, seconds = 0, parts[0], parts[1]
        else:
            hours, minutes, seconds = parts
            if minutes > 59:
                return f"{minutes} minutes: use 0-59"
    if len(parts) > 1 and seconds > 59:
        return f"{seconds} seconds: use 0-59"
    total_minutes = (days * 24 + hours) * 60 + minutes + (1 if seconds else 0)
    if total_minutes > MAX_TIME_LIMIT_DAYS * 24 * 60:
        return f"more than {MAX_TIME_LIMIT_DAYS} days; use UNLIMITED for no limit"
    return None


def validate_time_limit(value: str) -> None:
    if not value:
        return
    validate_one_line(value, "time_limit", 40)
    from provisioner.slurm.convert import TIME_LIMIT_FORMS, parse_time_limit

    try:
        parse_time_limit(value)
    except ValueError as exc:
        raise ValidationError(str(exc)) from None
    why = _time_bounds(value)
    if why:
        raise ValidationError(
            f"time_limit {value!r} is out of bounds ({why}). Use one of: {TIME_LIMIT_FORMS}."
        )


def validate_memory(value: str) -> None:
    if not value:
        return
    validate_one_line(value, "mem", 40)
    from provisioner.slurm.convert import MEMORY_FORMS, parse_memory_mb

    try:
        megabytes = parse_memory_mb(value)
    except ValueError as exc:
        raise ValidationError(str(exc)) from None
    if megabytes > MAX_MEMORY_MB:
        raise ValidationError(
            f"mem {value!r} is more than 64T, more than any node has: use {MEMORY_FORMS}."
        )


def validate_nodes(value: int) -> None:
    if value is None or isinstance(value, bool) or not 1 <= int(value) <= MAX_NODES:
        raise ValidationError(f"nodes {value}: a replica uses from 1 to {MAX_NODES} nodes.")
