"""Filling a recipe script's ``{{tokens}}`` in one pass (:func:`render`); the design of where each
value lands is in :mod:`recipes` and :mod:`recipes.shell`."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from django.conf import settings

from recipes.cluster import (
    ClusterDefaults,
    _cluster_hint,
    _image_engine,
    _is_cluster_token,
    cluster_defaults,
)
from recipes.header import normalize_newlines
from recipes.inputs import _effective_values, _flag_on, _input_problem
from recipes.sbatch import lift_sbatch_lines
from recipes.shell import OTHER, ShellValues, token_contexts, value_problem
from recipes.types import _CLUSTER_FIELD, _TOKEN_RE, ParsedRecipe, RecipeError

if TYPE_CHECKING:
    from obleth.core.models import SlurmSettings


# ----------------------------------------------------------------------------- render


def _builtin(token: str, api_model_name: str) -> str | None:
    if token == "api_model_name":
        return api_model_name
    if token == "obleth_root":
        return str(settings.BASE_DIR)
    if token == "test_engine":
        # A world-readable copy: the job user may not be able to read the checkout.
        from provisioner.testengine import install_copy

        return str(install_copy(settings.OBLETH_ENGINES_DIR))
    return None


_KEEP = object()  # leave the token as written (a missing value, in review mode)


def _api_model_name_problem(name: str) -> str | None:
    problem = value_problem(name)
    if problem is None and any(_is_cluster_token(m.group(1)) for m in _TOKEN_RE.finditer(name)):
        problem = (
            "is used as typed, so a cluster token in it would not be filled in: give the name "
            "the server answers to."
        )
    return f"`api_model_name` {problem}".rstrip(".") if problem else None


def _cluster_problem(token: str, value: str) -> str | None:
    problem = value_problem(value)
    if problem is None:
        return None
    where = _CLUSTER_FIELD.get(token, "images")
    return f"`{{{{{token}}}}}` (Cluster defaults, {where}) {problem}"


def _setup_problem(setup: str) -> str | None:
    if "\x00" in setup:
        return "`{{cluster.setup}}` (Cluster defaults, setup) contains a NUL character: remove it."
    if any(re.match(r"\s*#\s*SBATCH", line, re.IGNORECASE) for line in setup.split("\n")):
        return (
            "`{{cluster.setup}}` (Cluster defaults, setup) has a `#SBATCH` line: directives come "
            "from the recipe and the deploy form only; remove it."
        )
    return None


def render(
    parsed: ParsedRecipe,
    *,
    cluster: SlurmSettings | Mapping[str, Any] | ClusterDefaults | None,
    values: Mapping[str, Any],
    api_model_name: str,
    node_count: int = 1,
    strict: bool = False,
    script: str | None = None,
) -> str:
    """Fill the script's tokens in one pass (substituted text is not scanned again).

    Inputs take their trimmed value, else their default for ``node_count``; a flag that is on
    becomes its ``adds`` text, off becomes ""; an empty optional input becomes "". Built-ins
    (``api_model_name``, ``obleth_root``) fill tokens no input declares. Cluster tokens come
    from ``cluster``. The header's ``env`` is exported after the ``#SBATCH`` block.

    Values never become shell code: see the module docstring and
    :mod:`recipes.shell` for where each value lands. A value that is refused (a line
    break, NUL, ``#SBATCH``, a bad number...) is a problem named ``inputs.<name>``,
    ``api_model_name`` or the cluster token.

    Review mode (strict False) keeps the token of a required empty input, an unset cluster
    default or a refused value, so the operator sees what is missing. Strict (launch) mode
    raises :class:`RecipeError` naming every problem instead. ``script`` replaces the recipe's
    script (an edited copy) when given.
    """
    defaults = cluster_defaults(cluster)
    inputs = {i.name: i for i in parsed.inputs}
    effective = _effective_values(parsed, values, defaults, node_count)
    problems: dict[str, str] = {}
    body = normalize_newlines(parsed.script if script is None else script)
    shebang = body.split("\n", 1)[0]
    # No shebang: the provisioner adds #!/bin/bash (provisioner/script.py).
    shell = ShellValues(arrays=not shebang.startswith("#!") or "bash" in shebang)
    name_problem = _api_model_name_problem(api_model_name)
    if name_problem:  # checked even when the script does not use it: it is stored with the model
        problems["api_model_name"] = name_problem

    def resolve(token: str) -> tuple[str, str, bool] | str | object:
        """(variable, value, words) for a value; str for shell text; _KEEP to keep it."""
        inp = inputs.get(token)
        if inp is not None:
            value, source = effective[token]
            if inp.type == "flag":
                if not _flag_on(value):
                    return ""
                return substitute(inp.adds, cluster_only=True)
            if not value:
                if inp.required:
                    problems[f"inputs.{token}"] = (
                        f"input `{token}` ({inp.label}) is needed: enter a value"
                    )
                    return _KEEP
                return ""
            missing = [
                m.group(1)
                for m in _TOKEN_RE.finditer(value)
                if _is_cluster_token(m.group(1)) and defaults.value(m.group(1)) is None
            ]
            if missing and source != "override":
                for name in missing:
                    problems[name] = _cluster_hint(name)
                # Review mode shows the recipe's own default text, tokens and all.
                return inp.by_nodes.get(node_count, inp.default)
            problem = _input_problem(inp, value, source)
            if problem:
                problems[f"inputs.{token}"] = problem.rstrip(".")
                return _KEEP
            return (f"OBLETH_INPUT_{token}", value, inp.type == "text")
        if token == "api_model_name" and name_problem:
            return _KEEP
        builtin = _builtin(token, api_model_name)
        if builtin is not None:
            problem = value_problem(builtin)
            if problem:
                problems[token] = f"`{token}` {problem}".rstrip(".")
                return _KEEP
            return (f"OBLETH_VALUE_{token.upper()}", builtin, False)
        if _is_cluster_token(token):
            return cluster_value(token)
        return _KEEP

    def cluster_value(token: str) -> tuple[str, str, bool] | str | object:
        resolved = defaults.value(token)
        if resolved is None:
            problems[token] = _cluster_hint(token)
            return _KEEP
        if token == "cluster.setup":
            problem = _setup_problem(resolved)
            if problem:
                problems[token] = problem.rstrip(".")
                return _KEEP
            return resolved  # the operator's own shell lines, by design (admin-only setting)
        problem = _cluster_problem(token, resolved)
        if problem:
            problems[token] = problem.rstrip(".")
            return _KEEP
        engine = _image_engine(token)
        base = f"OBLETH_IMAGE_{engine}" if engine else "OBLETH_" + token.replace(".", "_").upper()
        return (base, resolved, False)

    def substitute(text: str, *, cluster_only: bool = False) -> str:
        contexts = token_contexts(text, _TOKEN_RE)

        def fill(match: re.Match[str]) -> str:
            token = match.group(1)
            if cluster_only and not _is_cluster_token(token):
                return match.group(0)
            outcome = cluster_value(token) if cluster_only else resolve(token)
            if outcome is _KEEP:
                return match.group(0)
            if isinstance(outcome, str):
                return outcome
            assert isinstance(outcome, tuple)
            variable, value, words = outcome
            try:
                return shell.place(variable, value, contexts.get(match.start(), OTHER), words=words)
            except ValueError as exc:
                key = f"inputs.{token}" if token in inputs else token
                problems[key] = f"`{{{{{token}}}}}`: the value {exc}"
                return match.group(0)

        return _TOKEN_RE.sub(fill, text)

    def raw_value(match: re.Match[str]) -> str:
        """For ``env``: the value itself (the whole export is single-quoted)."""
        outcome = resolve(match.group(1))
        if outcome is _KEEP:
            return match.group(0)
        if isinstance(outcome, tuple):
            return str(outcome[1])
        return str(outcome)

    rendered = substitute(body)
    exports = [
        f"export {key}={shlex.quote(_TOKEN_RE.sub(raw_value, value))}"
        for key, value in parsed.env.items()
    ]
    header_lines = [*shell.lines(), *exports]
    if header_lines:
        rendered = _insert_after_directives(rendered, header_lines)
    if [ln.text for ln in lift_sbatch_lines(rendered)] != [
        ln.text for ln in lift_sbatch_lines(body)
    ]:
        problems.setdefault(
            "script",
            "the rendered script's #SBATCH lines differ from the recipe's; a value may not add "
            "or change directives",
        )
    if strict and problems:
        listed = "; ".join(problems.values())
        raise RecipeError(
            f"The script cannot be launched: {listed}.", field=next(iter(problems)), errors=problems
        )
    return rendered


def _insert_after_directives(script: str, lines: Sequence[str]) -> str:
    """Insert lines after the shebang and the leading ``#SBATCH``/comment/blank block (sbatch
    reads directives only before the first command)."""
    rows = script.split("\n")
    start = 1 if rows and rows[0].startswith("#!") else 0
    insert_at = start
    index = start
    while index < len(rows) and (not rows[index].strip() or rows[index].lstrip().startswith("#")):
        if rows[index].lstrip().startswith("#SBATCH"):
            insert_at = index + 1
        index += 1
    return "\n".join([*rows[:insert_at], *lines, *rows[insert_at:]])
