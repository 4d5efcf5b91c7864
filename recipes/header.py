"""Reading a recipe document: the fences, the YAML header (anchors, aliases and deep nesting
refused; ``4:00:00`` stays text) and the header's field readers used by
:func:`recipes.document.parse_recipe`."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import yaml

from recipes.types import (
    _FALSE_WORDS,
    _INPUT_KEYS,
    _NAME_RE,
    _TRUE_WORDS,
    INPUT_TYPES,
    RecipeError,
    RecipeInput,
    _field_error,
)

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
