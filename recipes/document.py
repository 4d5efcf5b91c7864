"""Parse and check a recipe document (:func:`parse_recipe`; errors are
:class:`recipes.types.RecipeError` naming the header field or line and the fix)."""

from __future__ import annotations

from collections.abc import Mapping

import yaml

from obleth.core.choices import ModelType
from recipes.cluster import _is_cluster_token
from recipes.header import (
    MAX_HEADER_CHARS,
    MAX_RECIPE_CHARS,
    _as_int,
    _check_placement,
    _HeaderRefused,
    _jsonable,
    _load_header,
    _opt_str,
    _parse_input,
    _req_str,
    _scalar_text,
    _split_document,
    normalize_newlines,
)
from recipes.sbatch import _refuse_tokens_in_directives
from recipes.shell import value_problem
from recipes.types import (
    _ENGINE_RE,
    _KNOWN_FIELDS,
    _NAME_RE,
    _TOKEN_RE,
    BUILTIN_TOKENS,
    ParsedRecipe,
    RecipeError,
    _field_error,
)


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
