"""A recipe's inputs: their starting values (:func:`input_defaults`), the values a deploy uses and
where each came from, and the checks a given value passes (:func:`validate_inputs`)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from recipes.cluster import ClusterDefaults, _is_cluster_token, _resolve_cluster, cluster_defaults
from recipes.header import _scalar_text
from recipes.shell import value_problem
from recipes.types import _FALSE_WORDS, _TOKEN_RE, _TRUE_WORDS, ParsedRecipe, RecipeInput

if TYPE_CHECKING:
    from obleth.core.models import SlurmSettings


# ----------------------------------------------------------------------------- inputs


def _flag_on(value: str) -> bool:
    return value.strip().lower() in _TRUE_WORDS


def _input_default(
    inp: RecipeInput, node_count: int, defaults: ClusterDefaults
) -> tuple[str, bool]:
    """An input's starting value for a node count, and whether it came from a cluster default."""
    raw = inp.by_nodes.get(node_count)
    if raw is None:
        raw = inp.default
    if not raw:
        return ("false" if inp.type == "flag" else ""), False
    value, missing = _resolve_cluster(raw, defaults)
    from_cluster = value != raw or bool(missing)
    if missing and not inp.required:
        return "", from_cluster
    return value, from_cluster


def input_defaults(
    parsed: ParsedRecipe,
    *,
    cluster: SlurmSettings | Mapping[str, Any] | ClusterDefaults | None = None,
    node_count: int = 1,
) -> dict[str, str]:
    """Each input's starting value for the form: ``by_nodes[node_count]``, else ``default``,
    else "false" for flags and "" otherwise, with cluster tokens filled. An optional input whose
    cluster default is not set starts empty; a required one keeps the token."""
    defaults = cluster_defaults(cluster)
    return {i.name: _input_default(i, node_count, defaults)[0] for i in parsed.inputs}


def _effective_values(
    parsed: ParsedRecipe, values: Mapping[str, Any], defaults: ClusterDefaults, node_count: int
) -> dict[str, tuple[str, str]]:
    """name -> (value, where it came from: "override", "cluster" or "recipe").

    A given value is used as typed: ``{{...}}`` in it is text, never filled in (only the
    recipe's own defaults take cluster defaults)."""
    result: dict[str, tuple[str, str]] = {}
    for inp in parsed.inputs:
        given = values.get(inp.name)
        if given is not None:
            result[inp.name] = (_scalar_text(given).strip(), "override")
        else:
            value, from_cluster = _input_default(inp, node_count, defaults)
            result[inp.name] = (value, "cluster" if from_cluster else "recipe")
    return result


_NUMBER_RE = re.compile(r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")


def _input_problem(inp: RecipeInput, value: str, source: str) -> str | None:
    """Why a (non-empty) input value cannot be used, naming the input and the fix; or None."""
    label = inp.label or inp.name
    named = f"Input `{inp.name}` ({label})" if inp.label else f"Input `{inp.name}`"
    problem = value_problem(value)
    if problem:
        return f"{named} {problem}"
    if source == "override":
        tokens = [m.group(1) for m in _TOKEN_RE.finditer(value) if _is_cluster_token(m.group(1))]
        if tokens:
            return (
                f"{named} is used as typed, so `{{{{{tokens[0]}}}}}` in it would not be filled "
                "in: type the folder or image itself (leave the input out to use the recipe's "
                "default)."
            )
    if inp.type == "number":
        if value.strip("+-").lower() in ("nan", "inf", "infinity"):
            return f"{label} must be a finite number."
        if not _NUMBER_RE.fullmatch(value):
            return f"{label} must be a number, not {value!r}."
        number = float(value)
        unit = f" {inp.unit}" if inp.unit else ""
        if not math.isfinite(number):
            return f"{label} must be a finite number."
        if inp.min is not None and number < inp.min:
            return f"{label} must be at least {inp.min:g}{unit}."
        if inp.max is not None and number > inp.max:
            return f"{label} must be at most {inp.max:g}{unit}."
    elif inp.type == "choice" and value not in inp.options:
        return f"{label} must be one of: {', '.join(inp.options)} (not {value!r})."
    elif inp.type == "path" and value.startswith("-"):
        return (
            f"{named}: a path cannot start with '-' (the program would read it as an option); "
            "give a folder or image path such as /scratch/models."
        )
    elif inp.type == "path" and "," in value:
        return (
            f"{named}: a path cannot hold ',' (apptainer --bind and --env read it as a list "
            "separator); rename the folder or give another one."
        )
    elif inp.type == "path" and value.startswith("~"):
        return (
            f"{named}: '~' is not expanded in a value (and the job's home may differ); give the "
            "absolute folder, e.g. /home/me/models."
        )
    return None


def validate_inputs(
    parsed: ParsedRecipe,
    values: Mapping[str, Any],
    *,
    cluster: SlurmSettings | Mapping[str, Any] | ClusterDefaults | None = None,
    node_count: int = 1,
) -> dict[str, str]:
    """Check input values (missing ones take their default). Returns input name -> message;
    empty when every value is usable. A value naming no declared input is an error too, and so
    is a value :func:`recipes.shell.value_problem` refuses (NUL, line breaks,
    ``#SBATCH``...)."""
    defaults = cluster_defaults(cluster)
    errors: dict[str, str] = {}
    declared = {i.name for i in parsed.inputs}
    for key in values:
        if key not in declared:
            known = ", ".join(sorted(declared)) or "none"
            shown = str(key).replace("\x00", "\\x00")
            errors[shown] = f"`{shown}` is not an input of this recipe (its inputs: {known})."
    effective = _effective_values(parsed, values, defaults, node_count)
    for inp in parsed.inputs:
        value, source = effective[inp.name]
        label = inp.label or inp.name
        if inp.type == "flag":
            if value.lower() not in _TRUE_WORDS | _FALSE_WORDS:
                shown = value if value_problem(value) is None else "that value"
                errors[inp.name] = f"{label} is a flag: use true or false, not {shown!r}."
            continue
        unresolved = [
            m.group(1) for m in _TOKEN_RE.finditer(value) if _is_cluster_token(m.group(1))
        ]
        if inp.required and not value:
            errors[inp.name] = f"{label} is needed: enter a value."
        elif unresolved and defaults.value(unresolved[0]) is None:
            errors[inp.name] = (
                f"{label} uses a cluster default that isn't set ({{{{{unresolved[0]}}}}}); set "
                "it on the Slurm connection or enter a value."
            )
        elif value:
            problem = _input_problem(inp, value, source)
            if problem:
                errors[inp.name] = problem
    return errors
