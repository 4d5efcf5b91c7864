"""Recipes: a tested batch script with a small YAML header, and the deploy that launches one.

A recipe document is ``---`` / YAML header / ``---`` / batch script. The header carries the
routing metadata (engine, model type, API model name, port, health path, replica targets), the
default placement and the inputs an operator fills in when launching. This module:

- parses and checks a document (:func:`parse_recipe`, errors are :class:`RecipeError`);
- lifts ``#SBATCH`` directives into placement fields (:func:`lift_sbatch`), because slurmrestd
  ignores them;
- fills the script's ``{{tokens}}`` from inputs, built-ins and the Slurm connection's cluster
  defaults (:func:`render`, :func:`validate_inputs`, :func:`input_defaults`);
- lists the library recipe files (:func:`library_recipes`);
- creates a model and its managed spec from a recipe in one step (:func:`deploy`).

Tokens (``{{name}}``): a declared input, the built-ins ``api_model_name``, ``obleth_root`` and
``test_engine`` (the path of an installed, world-readable copy of the test engine),
and the cluster defaults ``cluster.cache``, ``cluster.images``, ``cluster.logs``,
``cluster.setup``, ``image.<engine>`` (also spelled ``cluster.image.<engine>``). Anything else,
including shell ``${...}`` and ``$(...)``, is left as written, and substituted text is never
scanned again.

Values are data, never shell code (the design, in full in :mod:`obleth.core.recipe_shell`):

- A value of inert characters only (letters, digits, ``_ @ % + = : , . / -``; every usual
  model id, folder, number) is written where its token is, so a script reads as it always did.
- Any other value is assigned once, single-quoted, to a variable at the top of the script
  (``OBLETH_INPUT_<name>=...``, ``OBLETH_VALUE_API_MODEL_NAME=...``, ``OBLETH_CLUSTER_CACHE=...``)
  and the token becomes a reference to it, written for where the token sits: ``"${X}"`` for a
  bare word, ``${X}`` inside ``"..."``, ``'"${X}"'`` inside ``'...'``; a bare ``text`` input
  becomes ``"${X[@]}"``, the words the operator typed, split like a command line, never expanded.
  Bash never re-reads an expanded variable as code, so quoting cannot go wrong wherever the
  token is; only arithmetic (``$((...))``) would, and there a non-inert value is refused.
- Every value that reaches the script (inputs, the API model name, cluster defaults) is refused
  when it holds NUL or control characters, a line break, ``#SBATCH`` or more than 4096
  characters; numbers, choices, flags and paths are checked against their type. The error names
  the input (``inputs.<name>``) and the fix. ``{{...}}`` typed in a value is text, never filled
  in (a cluster token there is refused with a hint); only the recipe's own defaults take
  cluster defaults.
- ``{{cluster.setup}}`` is the operator's own shell lines, inserted as written by design: it is
  an admin-only setting (validated when saved: no NUL, no ``#SBATCH`` lines).
- ``#SBATCH`` lines are read from the script as written (a ``{{token}}`` in one is refused), and
  :func:`deploy` lifts placement from that text, never the rendered one; :func:`render` also
  refuses a result whose ``#SBATCH`` lines differ from the recipe's.
- The YAML header is read with anchors and aliases refused, at most 16 levels deep and 64 KB; a
  whole recipe is at most 256 KB.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from obleth.core.choices import HostingMode, ModelType
from obleth.core.recipe_shell import OTHER, ShellValues, token_contexts, value_problem

if TYPE_CHECKING:
    from obleth.core.models import ManagedSpec, Model, Recipe, SlurmSettings

__all__ = [
    "BUILTIN_TOKENS",
    "INPUT_TYPES",
    "OVERRIDE_FIELDS",
    "PLACEMENT_FIELDS",
    "ClusterDefaults",
    "LibraryRecipe",
    "LiftedLine",
    "ParsedRecipe",
    "RecipeError",
    "RecipeInput",
    "cluster_defaults",
    "deploy",
    "find_library_recipe",
    "input_defaults",
    "library_recipes",
    "lift_sbatch",
    "lift_sbatch_lines",
    "parse_recipe",
    "prepare_deploy",
    "render",
    "save_deploy",
    "strip_sbatch",
    "validate_inputs",
]

INPUT_TYPES = ("text", "choice", "number", "path", "flag")
PLACEMENT_FIELDS = (
    "partition",
    "gres",
    "cpus_per_task",
    "mem",
    "time_limit",
    "nodes",
    "account",
    "qos",
    "constraints",
    "exclude",
)
BUILTIN_TOKENS = ("api_model_name", "obleth_root", "test_engine")
CLUSTER_TOKENS = ("cluster.cache", "cluster.images", "cluster.logs", "cluster.setup")
# Where the operator sets each cluster default on the Slurm connection.
_CLUSTER_FIELD = {
    "cluster.cache": "cache_dir",
    "cluster.images": "images_dir",
    "cluster.logs": "log_dir",
    "cluster.setup": "setup",
}
_REQUIRED_FIELDS = ("name", "engine", "model_type", "api_model_name", "port")
_KNOWN_FIELDS = frozenset(
    {
        *_REQUIRED_FIELDS,
        "description",
        "kind",
        "requires",
        "health_path",
        "target_replicas",
        "max_job_failures",
        "env",
        "inputs",
        "tested",
        *PLACEMENT_FIELDS,
    }
)
_INPUT_KEYS = frozenset(
    {
        "name",
        "label",
        "type",
        "default",
        "required",
        "help",
        "options",
        "min",
        "max",
        "unit",
        "adds",
        "by_nodes",
    }
)
_TRUE_WORDS = frozenset({"true", "on", "1", "yes"})
_FALSE_WORDS = frozenset({"false", "off", "0", "no", ""})
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ENGINE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_TOKEN_RE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_.\-]*)\s*\}\}")
_SLUG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


# ----------------------------------------------------------------------------- errors


class RecipeError(ValueError):
    """A recipe that cannot be used. The message names the header field or line and the fix.

    ``field`` is the header field at fault (``inputs[1].type``, ``port``...), ``line`` the line of
    the document when known, and ``errors`` maps each field to its message when there are several
    (strict rendering lists every missing value).
    """

    def __init__(
        self,
        message: str,
        *,
        field: str | None = None,
        line: int | None = None,
        errors: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.line = line
        self.errors: dict[str, str] = (
            dict(errors) if errors else ({field: message} if field else {})
        )


def _field_error(name: str, problem: str) -> RecipeError:
    return RecipeError(f"Header field `{name}`: {problem}", field=name)


# ----------------------------------------------------------------------------- parsed forms


@dataclass(frozen=True)
class RecipeInput:
    """One value the operator fills in when launching (``{{name}}`` in the script)."""

    name: str
    label: str
    type: str = "text"
    default: str = ""
    required: bool = False
    help: str = ""
    options: tuple[str, ...] = ()
    min: float | None = None
    max: float | None = None
    unit: str = ""
    adds: str = ""
    by_nodes: Mapping[int, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "label": self.label,
            "type": self.type,
            "default": self.default,
            "required": self.required,
            "help": self.help,
            "options": list(self.options),
            "min": self.min,
            "max": self.max,
            "unit": self.unit,
            "adds": self.adds,
            "by_nodes": {str(k): v for k, v in self.by_nodes.items()},
        }


@dataclass(frozen=True)
class ParsedRecipe:
    """A recipe document that passed every check. ``script`` is the batch script, unrendered."""

    name: str
    engine: str
    model_type: str
    api_model_name: str
    port: int
    health_path: str
    target_replicas: int
    max_job_failures: int
    script: str
    description: str = ""
    kind: str = ""
    requires: str = ""
    placement: Mapping[str, Any] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    inputs: tuple[RecipeInput, ...] = ()
    tested: tuple[Any, ...] = ()
    header: Mapping[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()

    def input(self, name: str) -> RecipeInput | None:
        return next((i for i in self.inputs if i.name == name), None)


# ----------------------------------------------------------------------------- YAML loading


MAX_RECIPE_CHARS = 256 * 1024
MAX_HEADER_CHARS = 64 * 1024
MAX_HEADER_DEPTH = 16


class _HeaderRefused(yaml.MarkedYAMLError):
    """A header construct recipes do not accept (aliases, anchors, deep nesting)."""


class _HeaderLoader(yaml.SafeLoader):
    """SafeLoader without YAML 1.1's surprises for recipe headers: ``4:00:00`` stays a string
    (not the base-60 number 14400) and ``2026-10-03`` stays a string (not a date).

    Anchors (``&a``) and aliases (``*a``, also in ``<<: *a``) are refused as soon as the
    composer meets them, so a "billion laughs" header costs nothing; nesting deeper than
    :data:`MAX_HEADER_DEPTH` is refused too (the composer is recursive)."""

    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise _HeaderRefused(
                problem=(
                    "anchors and aliases (&name, *name) are not allowed in a recipe header: "
                    "write each value out"
                ),
                problem_mark=event.start_mark,
            )
        if self._depth >= MAX_HEADER_DEPTH:
            raise _HeaderRefused(
                problem=f"the header nests deeper than {MAX_HEADER_DEPTH} levels: flatten it",
                problem_mark=event.start_mark,
            )
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


_HeaderLoader.yaml_implicit_resolvers = {
    key: [
        (tag, rx)
        for tag, rx in resolvers
        if tag
        not in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float", "tag:yaml.org,2002:timestamp")
    ]
    for key, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_HeaderLoader.add_implicit_resolver(
    "tag:yaml.org,2002:int",
    re.compile(r"^(?:[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+)$"),
    list("-+0123456789"),
)
_HeaderLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)?\.[0-9_]+(?:[eE][-+]?[0-9]+)?$"),
    list("-+0123456789."),
)


def _load_header(header_text: str) -> Any:
    """The header's YAML (a SafeLoader subclass: no Python objects, no aliases)."""
    return yaml.load(header_text, Loader=_HeaderLoader)  # noqa: S506 (a SafeLoader)


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def normalize_newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


# ----------------------------------------------------------------------------- parse


def _split_document(text: str) -> tuple[str, str, int, int]:
    """Return header text, script, the header's first line and the script's first line."""
    lines = text.split("\n")
    start = 0
    while start < len(lines) and not lines[start].strip():
        start += 1
    if start >= len(lines) or lines[start].rstrip() != "---":
        raise RecipeError(
            f"Line {start + 1}: a recipe starts with a line `---`, then the YAML header, then a "
            "line `---`, then the batch script. Add the opening `---` line.",
            field="header",
            line=start + 1,
        )
    end = next((k for k in range(start + 1, len(lines)) if lines[k].rstrip() == "---"), None)
    if end is None:
        raise RecipeError(
            "The YAML header is not closed: add a line `---` between the header and the batch "
            "script.",
            field="header",
            line=len(lines),
        )
    return "\n".join(lines[start + 1 : end]), "\n".join(lines[end + 1 :]), start + 2, end + 2


def _req_str(header: Mapping[str, Any], name: str, hint: str) -> str:
    value = header.get(name)
    if value is None or (isinstance(value, str) and not value.strip()):
        raise _field_error(name, f"is required. {hint}")
    if not isinstance(value, str):
        raise _field_error(name, f"must be text, not {value!r}. {hint}")
    return value.strip()


def _opt_str(header: Mapping[str, Any], name: str) -> str:
    value = header.get(name)
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise _field_error(name, f"must be text, not {value!r}.")
    return str(value).strip()


def _as_int(value: Any, name: str, minimum: int, maximum: int | None = None) -> int:
    rng = f"from {minimum} to {maximum}" if maximum is not None else f"of at least {minimum}"
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and re.fullmatch(r"\s*[0-9]+\s*", value):
        number = int(value)
    if number is None:
        raise _field_error(name, f"must be a whole number {rng}, not {value!r}.")
    if number < minimum or (maximum is not None and number > maximum):
        raise _field_error(name, f"{number} is out of range: use a whole number {rng}.")
    return number


def _scalar_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    return str(value)


def _opt_number(value: Any, name: str) -> float | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise _field_error(name, f"must be a number, not {value!r}.")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise _field_error(name, f"must be a number, not {value!r}.") from None
    if not math.isfinite(number):
        raise _field_error(name, "must be a finite number.")
    return number


def _parse_input(raw: Any, index: int, seen: set[str]) -> RecipeInput:
    where = f"inputs[{index}]"
    if not isinstance(raw, Mapping):
        raise _field_error(
            where, "each input is a mapping with at least `name`, e.g. `- name: model`."
        )
    name = raw.get("name")
    if not isinstance(name, str) or not _NAME_RE.match(name.strip()):
        raise _field_error(
            f"{where}.name",
            f"{name!r} is not an input name: use letters, digits and _ (it is the `{{{{name}}}}` "
            "token in the script).",
        )
    name = name.strip()
    where = f"inputs[{index}] ({name})"
    if name in seen:
        raise _field_error(f"{where}.name", f"input `{name}` is declared twice; rename one.")
    seen.add(name)
    unknown = sorted(str(k) for k in raw if k not in _INPUT_KEYS)
    if unknown:
        raise _field_error(
            f"{where}.{unknown[0]}",
            f"`{unknown[0]}` is not an input setting. Use: {', '.join(sorted(_INPUT_KEYS))}.",
        )
    kind = raw.get("type", "text")
    if kind not in INPUT_TYPES:
        raise _field_error(
            f"{where}.type", f"{kind!r} is not an input type: use one of {', '.join(INPUT_TYPES)}."
        )
    for key in ("label", "help", "unit", "adds"):
        value = raw.get(key)
        if value is not None and not isinstance(value, str):
            raise _field_error(f"{where}.{key}", f"must be text, not {value!r}.")
    required = raw.get("required", False)
    if not isinstance(required, bool):
        raise _field_error(f"{where}.required", f"must be true or false, not {required!r}.")
    default_raw = raw.get("default")
    if isinstance(default_raw, Mapping | list):
        raise _field_error(
            f"{where}.default", "must be a single value (text, number or true/false)."
        )
    default = _scalar_text(default_raw)
    options_raw = raw.get("options")
    options: tuple[str, ...] = ()
    if options_raw is not None:
        if not isinstance(options_raw, list) or any(
            isinstance(o, Mapping | list) for o in options_raw
        ):
            raise _field_error(f"{where}.options", "must be a list of values, e.g. [bf16, fp8].")
        options = tuple(_scalar_text(o) for o in options_raw)
    if kind == "choice" and not options:
        raise _field_error(f"{where}.options", "a choice input needs a list of options.")
    if kind == "choice" and default and "{{" not in default and default not in options:
        raise _field_error(
            f"{where}.default", f"{default!r} is not one of the options ({', '.join(options)})."
        )
    if kind == "flag" and default.lower() not in _TRUE_WORDS | _FALSE_WORDS:
        raise _field_error(
            f"{where}.default", f"a flag's default is true or false, not {default!r}."
        )
    low = _opt_number(raw.get("min"), f"{where}.min")
    high = _opt_number(raw.get("max"), f"{where}.max")
    if low is not None and high is not None and low > high:
        raise _field_error(f"{where}.max", f"max ({high:g}) is below min ({low:g}).")
    by_nodes_raw = raw.get("by_nodes")
    by_nodes: dict[int, str] = {}
    if by_nodes_raw is not None:
        if not isinstance(by_nodes_raw, Mapping):
            raise _field_error(
                f"{where}.by_nodes", "must map a node count to a default, e.g. `{1: '1', 2: '2'}`."
            )
        for key, value in by_nodes_raw.items():
            count = _as_int(key, f"{where}.by_nodes", 1)
            if isinstance(value, Mapping | list):
                raise _field_error(f"{where}.by_nodes", f"the default for {count} must be a value.")
            by_nodes[count] = _scalar_text(value)
    return RecipeInput(
        name=name,
        label=(raw.get("label") or name).strip(),
        type=kind,
        default=default,
        required=required,
        help=(raw.get("help") or "").strip(),
        options=options,
        min=low,
        max=high,
        unit=(raw.get("unit") or "").strip(),
        adds=raw.get("adds") or "",
        by_nodes=by_nodes,
    )


def _check_placement(header: Mapping[str, Any]) -> dict[str, Any]:
    from provisioner.slurm.convert import parse_memory_mb, parse_time_limit

    placement: dict[str, Any] = {}
    for name in ("partition", "gres", "account", "qos", "constraints", "exclude"):
        if name in header and header[name] is not None:
            value = header[name]
            if isinstance(value, list) and name in ("constraints", "exclude"):
                value = ",".join(str(v) for v in value)
            placement[name] = _opt_str({name: value}, name)
    for name in ("cpus_per_task", "nodes"):
        if header.get(name) is not None:
            placement[name] = _as_int(header[name], name, 1)
    if header.get("mem") is not None:
        mem = _opt_str(header, "mem")
        try:
            parse_memory_mb(mem)
        except ValueError as exc:
            raise _field_error("mem", str(exc)) from None
        placement["mem"] = mem
    if header.get("time_limit") is not None:
        limit = _opt_str(header, "time_limit")
        try:
            parse_time_limit(limit)
        except ValueError as exc:
            raise _field_error("time_limit", str(exc)) from None
        placement["time_limit"] = limit
    return placement


def parse_recipe(text: str) -> ParsedRecipe:
    """Parse and check a recipe document; raise :class:`RecipeError` naming what is wrong."""
    if not isinstance(text, str):
        raise RecipeError("A recipe is text: `---`, the YAML header, `---`, the batch script.")
    if len(text) > MAX_RECIPE_CHARS:
        raise RecipeError(
            f"The recipe is {len(text)} characters long: a recipe is at most "
            f"{MAX_RECIPE_CHARS} characters. Move data out of it (a venv, an image).",
            field="recipe",
        )
    text = normalize_newlines(text).removeprefix("\ufeff")
    if "\x00" in text:
        line = text.count("\n", 0, text.index("\x00")) + 1
        raise RecipeError(
            f"Line {line}: the recipe contains a NUL character; remove it.",
            field="recipe",
            line=line,
        )
    header_text, script, header_line, script_line = _split_document(text)
    if len(header_text) > MAX_HEADER_CHARS:
        raise RecipeError(
            f"The YAML header is {len(header_text)} characters long: keep it under "
            f"{MAX_HEADER_CHARS}.",
            field="header",
            line=header_line,
        )
    try:
        header = _load_header(header_text)
    except _HeaderRefused as exc:
        mark = exc.problem_mark
        line = header_line + mark.line if mark is not None else header_line
        raise RecipeError(f"Line {line}: {exc.problem}.", field="header", line=line) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = header_line + mark.line if mark is not None else header_line
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise RecipeError(
            f"Line {line}: the YAML header does not parse ({problem}). Check the indentation and "
            "quote values that contain ': ' or ' #'.",
            field="header",
            line=line,
        ) from None
    if header is None:
        raise RecipeError(
            "The YAML header is empty: give at least name, engine, model_type, api_model_name "
            "and port.",
            field="header",
            line=header_line,
        )
    if not isinstance(header, Mapping):
        raise RecipeError(
            "The YAML header must be a mapping of `field: value` lines (name, engine, "
            f"model_type, api_model_name, port...), not a {type(header).__name__}.",
            field="header",
            line=header_line,
        )
    for key in header:
        if not isinstance(key, str):
            raise RecipeError(
                f"Header field {key!r} must be a name such as `port`.", field=str(key)
            )
    warnings: list[str] = [
        f"Header field `{key}` is not known and is ignored."
        for key in header
        if key not in _KNOWN_FIELDS
    ]

    name = _req_str(header, "name", "Give the recipe a short name, e.g. `name: vLLM`.")
    engine = _req_str(header, "engine", "Name the engine, e.g. `engine: vllm`.")
    if not _ENGINE_RE.match(engine):
        raise _field_error("engine", f"{engine!r}: use letters, digits, '.', '_' or '-'.")
    model_type = _req_str(
        header, "model_type", "Use chat, completion or embedding, e.g. `model_type: chat`."
    )
    if model_type not in ModelType.values:
        raise _field_error(
            "model_type", f"{model_type!r} is not a model type: use chat, completion or embedding."
        )
    api_model_name = _req_str(
        header,
        "api_model_name",
        "Give the model name the server answers to, e.g. `api_model_name: my-model`.",
    )
    if "port" not in header or header["port"] is None:
        raise _field_error(
            "port", "is required: the port the server listens on, e.g. `port: 8000`."
        )
    port = _as_int(header["port"], "port", 1, 65535)
    default_health = "/api/tags" if engine.lower() == "ollama" else "/health"
    health_path = _opt_str(header, "health_path") or default_health
    if not health_path.startswith("/"):
        raise _field_error("health_path", f"{health_path!r} must start with '/', e.g. /health.")
    target = header.get("target_replicas")
    target_replicas = 2 if target is None else _as_int(target, "target_replicas", 0, 1000)
    failures = header.get("max_job_failures")
    max_job_failures = 3 if failures is None else _as_int(failures, "max_job_failures", 0)

    env_raw = header.get("env") or {}
    if not isinstance(env_raw, Mapping):
        raise _field_error("env", "must map variable names to values, e.g. `HF_HUB_OFFLINE: '1'`.")
    env: dict[str, str] = {}
    for key, value in env_raw.items():
        if not isinstance(key, str) or not _NAME_RE.match(key):
            raise _field_error("env", f"{key!r} is not an environment variable name.")
        if isinstance(value, Mapping | list):
            raise _field_error(f"env.{key}", "must be a single value.")
        env[key] = _scalar_text(value)

    inputs_raw = header.get("inputs") or []
    if not isinstance(inputs_raw, list):
        raise _field_error("inputs", "must be a list of inputs, each starting with `- name: ...`.")
    seen: set[str] = set()
    inputs = tuple(_parse_input(raw, i, seen) for i, raw in enumerate(inputs_raw))

    tested_raw = header.get("tested") or []
    if not isinstance(tested_raw, list):
        raise _field_error(
            "tested", "must be a list, e.g. `- {hardware: 1x A100, date: 2026-01-01, result: ok}`."
        )

    placement = _check_placement(header)
    if not script.strip():
        raise RecipeError(
            f"Line {script_line}: the batch script after the closing `---` is empty. Add the "
            'script that starts the server on "$OBLETH_SERVING_PORT".',
            field="script",
            line=script_line,
        )
    _refuse_tokens_in_directives(script, first_line=script_line)
    script = script.lstrip("\n")
    if not script.endswith("\n"):
        script += "\n"

    problem = value_problem(api_model_name)
    if problem:
        raise _field_error("api_model_name", problem)

    declared = {i.name for i in inputs}
    for token in sorted({m.group(1) for m in _TOKEN_RE.finditer(script)}):
        if token in declared or token in BUILTIN_TOKENS or _is_cluster_token(token):
            continue
        warnings.append(
            f"`{{{{{token}}}}}` in the script is not an input, a built-in or a cluster default; "
            "it is left as written."
        )

    return ParsedRecipe(
        name=name,
        engine=engine,
        model_type=model_type,
        api_model_name=api_model_name,
        port=port,
        health_path=health_path,
        target_replicas=target_replicas,
        max_job_failures=max_job_failures,
        script=script,
        description=_opt_str(header, "description"),
        kind=_opt_str(header, "kind"),
        requires=_opt_str(header, "requires"),
        placement=placement,
        env=env,
        inputs=inputs,
        tested=tuple(_jsonable(t) for t in tested_raw),
        header=_jsonable(header),
        warnings=tuple(warnings),
    )


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


# ----------------------------------------------------------------------------- cluster defaults


@dataclass(frozen=True)
class ClusterDefaults:
    """The values recipes refer to, from the Slurm connection's Cluster defaults."""

    cache: str = ""
    images_dir: str = ""
    logs: str = ""
    setup: str = ""
    images: Mapping[str, str] = field(default_factory=dict)

    def image(self, engine: str) -> str | None:
        path = str(self.images.get(engine) or "").strip()
        if not path:
            return None
        if path.startswith("/") or "://" in path or not self.images_dir:
            return path
        return f"{self.images_dir.rstrip('/')}/{path}"

    def value(self, token: str) -> str | None:
        """The value of a cluster token, or None when it is not set (or not a cluster default).
        ``cluster.setup`` is never missing: unset, it is empty."""
        if token == "cluster.cache":
            return self.cache or None
        if token == "cluster.images":
            return self.images_dir or None
        if token == "cluster.logs":
            return self.logs or None
        if token == "cluster.setup":
            return self.setup
        engine = _image_engine(token)
        return self.image(engine) if engine else None


def _image_engine(token: str) -> str | None:
    for prefix in ("image.", "cluster.image."):
        if token.startswith(prefix) and len(token) > len(prefix):
            return token[len(prefix) :]
    return None


def _is_cluster_token(token: str) -> bool:
    return token.startswith("cluster.") or _image_engine(token) is not None


def _cluster_hint(token: str) -> str:
    engine = _image_engine(token)
    if engine is not None:
        return (
            f"`{{{{{token}}}}}` isn't set; set it on the Slurm connection (Cluster defaults, "
            f"images: an image for engine {engine!r})."
        )
    if token in _CLUSTER_FIELD:
        return (
            f"`{{{{{token}}}}}` isn't set; set it on the Slurm connection (Cluster defaults, "
            f"{_CLUSTER_FIELD[token]})."
        )
    return (
        f"`{{{{{token}}}}}` is not a cluster default: use cluster.cache, cluster.images, "
        "cluster.logs, cluster.setup or image.<engine>; or set it on the Slurm connection."
    )


def cluster_defaults(
    cluster: SlurmSettings | Mapping[str, Any] | ClusterDefaults | None,
) -> ClusterDefaults:
    """Cluster defaults from the Slurm connection (a SlurmSettings row), a mapping with the same
    field names (cache_dir, images_dir, log_dir, setup, images), or nothing."""
    if cluster is None:
        return ClusterDefaults()
    if isinstance(cluster, ClusterDefaults):
        return cluster
    if isinstance(cluster, Mapping):

        def get(*names: str) -> Any:
            return next((cluster[n] for n in names if cluster.get(n) not in (None, "")), "")

        images = cluster.get("images") or {}
    else:

        def get(*names: str) -> Any:
            return next((getattr(cluster, n) for n in names if getattr(cluster, n, "")), "")

        images = getattr(cluster, "images", None) or {}
    if not isinstance(images, Mapping):
        images = {}
    return ClusterDefaults(
        cache=_folder(get("cache_dir", "cache")),
        images_dir=_folder(get("images_dir")),
        logs=_folder(get("log_dir", "logs")),
        setup=normalize_newlines(str(get("setup"))).strip("\n"),
        images={str(k): str(v) for k, v in images.items() if v},
    )


def _folder(value: Any) -> str:
    text = str(value or "").strip()
    return text.rstrip("/") or text[:1]


def _resolve_cluster(text: str, defaults: ClusterDefaults) -> tuple[str, list[str]]:
    """Fill cluster tokens in text; return it and the tokens left unresolved."""
    missing: list[str] = []

    def sub(match: re.Match[str]) -> str:
        token = match.group(1)
        if not _is_cluster_token(token):
            return match.group(0)
        value = defaults.value(token)
        if value is None:
            missing.append(token)
            return match.group(0)
        return value

    return _TOKEN_RE.sub(sub, text), missing


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
    is a value :func:`obleth.core.recipe_shell.value_problem` refuses (NUL, line breaks,
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
    :mod:`obleth.core.recipe_shell` for where each value lands. A value that is refused (a line
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


# ----------------------------------------------------------------------------- library


@dataclass(frozen=True)
class LibraryRecipe:
    """A ``*.recipe`` file of the library folder. ``parsed`` is None and ``error`` says why
    when the file is not a valid recipe."""

    slug: str
    path: Path
    name: str
    header: Mapping[str, Any]
    text: str
    parsed: ParsedRecipe | None
    error: str | None

    @property
    def valid(self) -> bool:
        return self.parsed is not None


def _raw_header(text: str) -> dict[str, Any]:
    try:
        header_text = _split_document(normalize_newlines(text))[0]
        if len(header_text) > MAX_HEADER_CHARS:
            return {}
        header = _load_header(header_text)
    except (RecipeError, yaml.YAMLError):
        return {}
    return _jsonable(header) if isinstance(header, Mapping) else {}


def _read_library_file(path: Path) -> LibraryRecipe:
    slug = path.stem
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return LibraryRecipe(
            slug, path, slug, {}, "", None, f"{path.name}: cannot be read ({exc})."
        )
    try:
        parsed = parse_recipe(text)
    except RecipeError as exc:
        header = _raw_header(text)
        name = header.get("name") if isinstance(header.get("name"), str) else slug
        return LibraryRecipe(slug, path, str(name), header, text, None, str(exc))
    return LibraryRecipe(slug, path, parsed.name, parsed.header, text, parsed, None)


def library_recipes(directory: str | Path | None = None) -> list[LibraryRecipe]:
    """Every ``*.recipe`` file in ``directory`` (default: settings.OBLETH_RECIPES_DIR), sorted by
    file name. Invalid files are listed with their error; the listing never fails."""
    folder = Path(directory if directory is not None else settings.OBLETH_RECIPES_DIR)
    try:
        paths = sorted(p for p in folder.glob("*.recipe") if p.is_file())
    except OSError:
        return []
    return [_read_library_file(p) for p in paths]


def find_library_recipe(slug: str, directory: str | Path | None = None) -> LibraryRecipe | None:
    """The library recipe whose file is ``<slug>.recipe``, or None (also for unsafe names)."""
    if not _SLUG_RE.match(slug or ""):
        return None
    folder = Path(directory if directory is not None else settings.OBLETH_RECIPES_DIR)
    path = folder / f"{slug}.recipe"
    if not path.is_file():
        return None
    return _read_library_file(path)


# ----------------------------------------------------------------------------- deploy

_STR_OVERRIDES = (
    "partition",
    "qos",
    "account",
    "time_limit",
    "mem",
    "gres",
    "exclude",
    "constraints",
    "health_path",
    "log_output_dir",
)
_INT_OVERRIDES = {
    "target_replicas": 0,
    "min_replicas": 0,
    "max_job_failures": 0,
    "nodes": 1,
    "cpus_per_task": 1,
    "serving_port": 1,
}
OVERRIDE_FIELDS = (
    *_STR_OVERRIDES,
    *_INT_OVERRIDES,
    "enabled",
    "api_model_name",
    "script_body",
    "inputs",
)


def _coerce_overrides(overrides: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    clean: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for key, value in overrides.items():
        if key not in OVERRIDE_FIELDS:
            errors[str(key)] = (
                f"`{key}` is not a deploy setting. Use: {', '.join(sorted(OVERRIDE_FIELDS))}."
            )
            continue
        if value is None or key == "inputs":
            continue
        if key in _STR_OVERRIDES or key in ("api_model_name", "script_body"):
            if isinstance(value, bool) or not isinstance(value, str | int | float):
                errors[key] = f"Give {key} as text, not {value!r}."
                continue
            text = str(value) if key == "script_body" else str(value).strip()
            if key == "script_body":
                problem = "contains a NUL character: remove it." if "\x00" in text else None
            else:
                problem = value_problem(text)
            if problem:
                errors[key] = f"{key} {problem}"
                continue
            clean[key] = text
        elif key == "enabled":
            if not isinstance(value, bool):
                errors[key] = f"Give enabled as true or false, not {value!r}."
                continue
            clean[key] = value
        else:
            if key == "cpus_per_task" and value == "":
                clean[key] = None
                continue
            try:
                clean[key] = _as_int(
                    value, key, _INT_OVERRIDES[key], 65535 if key == "serving_port" else None
                )
            except RecipeError as exc:
                errors[key] = exc.message.replace(f"Header field `{key}`: ", f"{key} ")
    return clean, errors


def _message_dict(exc: ValidationError) -> dict[str, list[str]]:
    if hasattr(exc, "error_dict"):
        return {k: list(v) for k, v in exc.message_dict.items()}
    return {"__all__": list(exc.messages)}


def deploy(
    *,
    recipe_text: str,
    model_name: str,
    overrides: Mapping[str, Any],
    cluster: SlurmSettings | Mapping[str, Any] | ClusterDefaults | None,
    recipe: Recipe | None = None,
) -> Model:
    """Create a Slurm-hosted model and its managed spec from a recipe, in one transaction
    (:func:`prepare_deploy`, then both rows saved)."""
    model, spec = prepare_deploy(
        recipe_text=recipe_text,
        model_name=model_name,
        overrides=overrides,
        cluster=cluster,
        recipe=recipe,
    )
    save_deploy(model, spec)
    return model


def _free_serving_port(start: int, replicas: int, model_name: str) -> int | None:
    """The first serving_port from the recipe's whose range no other model's overlaps."""
    from django.conf import settings

    from obleth.core.models import ManagedSpec
    from obleth.core.ports import first_free_range, model_range

    span = int(settings.OBLETH_PORT_SPAN)
    taken = [
        model_range(port, count, span)
        for port, count in ManagedSpec.objects.exclude(model__name=model_name).values_list(
            "serving_port", "target_replicas"
        )
    ]
    return first_free_range(start, replicas, span, taken)


def save_deploy(model: Model, spec: ManagedSpec) -> None:
    """Save what :func:`prepare_deploy` built, atomically; a taken name is a ValidationError."""
    from obleth.core.models import Model as ModelRow

    try:
        with transaction.atomic():
            model.save()
            spec.model = model
            spec.save(force_insert=True)
    except IntegrityError:
        if ModelRow.objects.filter(name=model.name).exists():
            raise ValidationError(
                {"name": [f"A model named {model.name!r} already exists; choose another name."]}
            ) from None
        raise


def prepare_deploy(
    *,
    recipe_text: str,
    model_name: str,
    overrides: Mapping[str, Any],
    cluster: SlurmSettings | Mapping[str, Any] | ClusterDefaults | None,
    recipe: Recipe | None = None,
    extra_env: Mapping[str, str] | None = None,
) -> tuple[Model, ManagedSpec]:
    """The model and managed spec a deploy would create, checked (full_clean) but not saved.

    The spec's script_body is the script rendered in strict mode. Placement comes from, lowest
    first: the recipe header, the script's ``#SBATCH`` directives, then ``overrides`` (partition,
    qos, account, time_limit, mem, gres, nodes, cpus_per_task, exclude, constraints,
    health_path, serving_port, target_replicas, min_replicas, max_job_failures, log_output_dir,
    enabled, api_model_name, script_body (an edited script, rendered like the recipe's) and
    ``inputs``: input name -> value). With no log folder given, the cluster's log_dir is used.
    ``launcher_spec`` records the recipe, the inputs and where each value came from.

    Raises ValidationError naming each field at fault (``name`` for a taken model name,
    ``inputs.<name>`` for an input, ``cluster.cache``/``image.<engine>`` for an unset cluster
    default, ``recipe`` for an invalid document); nothing is written then.
    """
    from obleth.core.models import ManagedSpec, Model

    try:
        parsed = parse_recipe(recipe_text)
    except RecipeError as exc:
        raise ValidationError({"recipe": [str(exc)]}) from None
    if extra_env:  # checked by the caller (names and values); exported like the header's env
        parsed = replace(parsed, env={**parsed.env, **extra_env})
    if not isinstance(overrides, Mapping):
        raise ValidationError({"overrides": ["Give the deploy settings as a mapping."]})

    errors: dict[str, list[str]] = {}
    name = (model_name or "").strip()
    name_problem = value_problem(name)
    if not name:
        errors["name"] = ["Give the model a name: the name clients send in the 'model' field."]
    elif name_problem:
        errors["name"] = [f"The model name {name_problem}"]
    elif Model.objects.filter(name=name).exists():
        errors["name"] = [f"A model named {name!r} already exists; choose another name."]
    clean, override_errors = _coerce_overrides(overrides)
    for key, message in override_errors.items():
        errors.setdefault(key, []).append(message)
    input_values_raw = overrides.get("inputs") or {}
    if not isinstance(input_values_raw, Mapping):
        errors["inputs"] = ["Give the inputs as a mapping of input name to value."]
        input_values_raw = {}
    for key, value in input_values_raw.items():
        if isinstance(value, Mapping | list | tuple):
            errors.setdefault(f"inputs.{key}", []).append(
                f"Give input `{key}` one value (text, a number or true/false), not a list or "
                "a mapping."
            )
    input_values = {
        str(k): _scalar_text(v)
        for k, v in input_values_raw.items()
        if v is not None and not isinstance(v, Mapping | list | tuple)
    }

    template = clean.get("script_body", parsed.script)
    try:
        _refuse_tokens_in_directives(template)
    except RecipeError as exc:
        errors.setdefault("script_body", []).append(exc.message)
    # Node count for by_nodes defaults: the override, else the script's own --nodes, else the
    # header's, else 1 (the rendered script is lifted again below).
    pre_lifted, _ = lift_sbatch(template)
    node_count = int(
        clean.get("nodes") or pre_lifted.get("nodes") or parsed.placement.get("nodes") or 1
    )
    for key, message in validate_inputs(
        parsed, input_values, cluster=cluster, node_count=node_count
    ).items():
        errors.setdefault(f"inputs.{key}", []).append(message)
    if errors:
        raise ValidationError(errors)

    api_model_name = clean.get("api_model_name") or parsed.api_model_name
    try:
        script = render(
            parsed,
            cluster=cluster,
            values=input_values,
            api_model_name=api_model_name,
            node_count=node_count,
            strict=True,
            script=template,
        )
    except RecipeError as exc:
        raise ValidationError({k: [v] for k, v in exc.errors.items()}) from None
    # Placement comes from the script as written (the recipe's, or the edited copy), never from
    # the rendered text: no value can add or change a directive.
    lifted, lift_warnings = lift_sbatch(template)

    values: dict[str, Any] = {
        "serving_port": parsed.port,
        "health_path": parsed.health_path,
        "target_replicas": parsed.target_replicas,
        "max_job_failures": parsed.max_job_failures,
    }
    sources: dict[str, str] = dict.fromkeys(values, "recipe")
    for key, value in parsed.placement.items():
        values[key], sources[key] = value, "recipe"
    for key, value in lifted.items():
        if key == "chdir":
            continue
        values[key], sources[key] = value, "script"
    defaults = cluster_defaults(cluster)
    if not values.get("log_output_dir") and defaults.logs:
        values["log_output_dir"], sources["log_output_dir"] = defaults.logs, "cluster"
    for key, value in clean.items():
        if key in ("api_model_name", "script_body"):
            continue
        values[key], sources[key] = value, "override"
    warnings = list(parsed.warnings) + lift_warnings
    if sources.get("serving_port") == "recipe":
        moved = _free_serving_port(values["serving_port"], values["target_replicas"], model_name)
        if moved is not None and moved != values["serving_port"]:
            warnings.append(
                f"serving_port {values['serving_port']} (the recipe's) is in use by another "
                f"model's port range; this model gets {moved}."
            )
            values["serving_port"], sources["serving_port"] = moved, "free range"
    if "chdir" in lifted:
        warnings.append(
            f"`--chdir={lifted['chdir']}` (not applied: add `cd {lifted['chdir']}` to the script)"
        )

    effective = _effective_values(parsed, input_values, defaults, node_count)
    launcher_spec = {
        "recipe": {
            "id": str(recipe.pk) if recipe is not None else None,
            "name": parsed.name,
            "engine": parsed.engine,
        },
        "api_model_name": api_model_name,
        "api_model_name_source": "override" if clean.get("api_model_name") else "recipe",
        "node_count": node_count,
        "inputs": {k: v for k, (v, _) in effective.items()},
        "input_sources": {k: s for k, (_, s) in effective.items()},
        "sources": {**sources, "script_body": "override" if "script_body" in clean else "recipe"},
        "env": dict(parsed.env),
        "warnings": warnings,
    }

    model = Model(
        name=name,
        hosting_mode=HostingMode.SLURM,
        model_type=parsed.model_type,
        upstream_model=api_model_name,
    )
    spec = ManagedSpec(model=model, script_body=script, launcher_spec=launcher_spec, recipe=recipe)
    for key, value in values.items():
        setattr(spec, key, value)
    errors = {}
    for obj, exclude in ((model, None), (spec, ["model"])):
        try:
            obj.full_clean(exclude=exclude)
        except ValidationError as exc:
            for key, messages in _message_dict(exc).items():
                errors.setdefault(key, []).extend(messages)
    if errors:
        raise ValidationError(errors)
    return model, spec
