"""``#SBATCH`` directives: lifted into placement fields (slurmrestd ignores them), listed line by
line for the review screen, stripped, and refused when a ``{{token}}`` sits in one."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any

from recipes.header import normalize_newlines
from recipes.types import _TOKEN_RE, RecipeError


def _refuse_tokens_in_directives(script: str, *, first_line: int = 1) -> None:
    """``#SBATCH`` lines are lifted as written, so a ``{{token}}`` in one is refused."""
    for number, line in enumerate(normalize_newlines(script).split("\n"), start=first_line):
        if re.match(r"^\s*#SBATCH(\s|$)", line) and _TOKEN_RE.search(line):
            raise RecipeError(
                f"Line {number}: `{line.strip()}` has a {{{{token}}}}, but #SBATCH lines are "
                "read as written (no value can change a directive). Write the value itself, or "
                "leave the field to the deploy form (partition, qos, account, gres, nodes...).",
                field="script",
                line=number,
            )


# ----------------------------------------------------------------------------- #SBATCH lifting

_SHORT_OPTIONS = {
    "p": "partition",
    "c": "cpus-per-task",
    "N": "nodes",
    "A": "account",
    "q": "qos",
    "C": "constraint",
    "x": "exclude",
    "t": "time",
    "o": "output",
    "e": "error",
    "D": "chdir",
}
# sbatch option -> spec field
_LIFTED = {
    "partition": "partition",
    "gres": "gres",
    "cpus-per-task": "cpus_per_task",
    "mem": "mem",
    "time": "time_limit",
    "nodes": "nodes",
    "account": "account",
    "qos": "qos",
    "constraint": "constraints",
    "exclude": "exclude",
    "output": "log_output_dir",
    "error": "log_output_dir",
    "chdir": "chdir",
}
_NUMERIC = frozenset({"cpus_per_task", "nodes"})


@dataclass(frozen=True)
class LiftedLine:
    """One ``#SBATCH`` line and the placement fields it sets (empty: none)."""

    line: int
    text: str
    fields: tuple[str, ...]


def _directive_options(rest: str) -> list[tuple[str, str | None]]:
    """Split what follows ``#SBATCH`` into (long option name, value) pairs."""
    try:
        words = shlex.split(rest, comments=True)
    except ValueError:
        words = rest.split("#", 1)[0].split()
    pairs: list[tuple[str, str | None]] = []
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if word.startswith("--"):
            key, eq, value = word[2:].partition("=")
            if not eq:
                if i < len(words) and not words[i].startswith("-"):
                    value = words[i]
                    i += 1
                else:
                    pairs.append((key, None))
                    continue
            pairs.append((key, value))
        elif word.startswith("-") and len(word) > 1:
            letter, attached = word[1], word[2:].removeprefix("=")
            key = _SHORT_OPTIONS.get(letter, "")
            if not key:
                if not attached and i < len(words) and not words[i].startswith("-"):
                    attached = words[i]  # its value, most likely (e.g. -J name)
                    i += 1
                pairs.append((f"-{letter}", attached or None))
                continue
            if attached:
                pairs.append((key, attached))
            elif i < len(words) and not words[i].startswith("-"):
                pairs.append((key, words[i]))
                i += 1
            else:
                pairs.append((key, None))
        else:
            pairs.append((f"?{word}", None))
    return pairs


def _log_dir(path: str) -> str:
    directory = path.rsplit("/", 1)[0] if "/" in path else ""
    if path.startswith("/") and not directory:
        directory = "/"
    return "" if directory in ("", ".") else directory


def _lift(script: str) -> tuple[dict[str, Any], list[str], list[LiftedLine]]:
    fields: dict[str, Any] = {}
    warnings: list[str] = []
    lines: list[LiftedLine] = []
    output_dir: str | None = None
    error_dir: str | None = None
    for number, raw in enumerate(normalize_newlines(script).split("\n"), start=1):
        text = raw.strip()
        if not text.startswith("#SBATCH"):
            continue
        rest = text[len("#SBATCH") :]
        if rest and not rest[0].isspace():
            continue  # e.g. "#SBATCHX": not a directive
        touched: list[str] = []
        for key, value in _directive_options(rest):
            if key.startswith("?"):
                warnings.append(f"`{key[1:]}` (not applied: not an option)")
                continue
            target = _LIFTED.get(key)
            shown = key if key.startswith("-") else f"--{key}"
            if target is None:
                warnings.append(f"`{shown}` (not applied)")
                continue
            if value is None or not value.strip():
                warnings.append(f"`{shown}` (not applied: it needs a value)")
                continue
            value = value.strip()
            if target in _NUMERIC:
                if not value.isdigit() or int(value) < 1:
                    warnings.append(f"`{shown}={value}` (not applied: use a whole number)")
                    continue
                fields[target] = int(value)
            elif key == "output":
                output_dir = _log_dir(value)
            elif key == "error":
                error_dir = _log_dir(value)
            else:
                fields[target] = value
            touched.append(target)
        lines.append(LiftedLine(line=number, text=text, fields=tuple(dict.fromkeys(touched))))
    log_dir = output_dir or error_dir
    if log_dir:
        fields["log_output_dir"] = log_dir
    return fields, warnings, lines


def lift_sbatch(script: str) -> tuple[dict[str, Any], list[str]]:
    """Lift ``#SBATCH`` directives into spec fields, since slurmrestd ignores them.

    Returns the fields (partition, gres, cpus_per_task, mem, time_limit, nodes, account, qos,
    constraints, exclude, log_output_dir, chdir; a later directive wins) and a warning
    "`--x` (not applied)" for each directive that sets none of them.
    """
    fields, warnings, _ = _lift(script)
    return fields, warnings


def lift_sbatch_lines(script: str) -> list[LiftedLine]:
    """Each ``#SBATCH`` line with the placement fields it sets (for the review screen)."""
    return _lift(script)[2]


def strip_sbatch(script: str) -> str:
    """The script without its ``#SBATCH`` lines."""
    kept = [
        line
        for line in normalize_newlines(script).split("\n")
        if not re.match(r"^\s*#SBATCH(\s|$)", line)
    ]
    return "\n".join(kept)
