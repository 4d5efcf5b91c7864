"""Field validators: one per field, used by every write path (API, admin, management commands,
recipe deploy), because the model fields carry them and every path ends in ``full_clean``.

Each message names the field and says how to fix the value. Secrets are never echoed back.
The older generic names (``validate_slurm_name``, ``validate_http_url``, ...) stay because past
migrations import them.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator
from typing import Any

from django.core.exceptions import ValidationError

# The HTTP validators live next door and are re-exported: every field's validator is here.
from obleth.core.http_validators import (  # noqa: F401
    LINK_LOCAL_NETS,
    MAX_API_KEY_CHARS,
    MAX_HF_TOKEN_CHARS,
    MAX_JWT_CHARS,
    MAX_URL_CHARS,
    MAX_USER_CHARS,
    METADATA_HOSTS,
    validate_api_base,
    validate_api_key,
    validate_hf_token,
    validate_http_url,
    validate_jwt,
    validate_slurm_user,
    validate_slurmrestd_url,
)
from obleth.core.http_validators import describe_char as _describe
from obleth.core.http_validators import first_control as _first_control
from recipes.document import parse_recipe
from recipes.types import RecipeError

API_VERSION_RE = re.compile(r"[A-Za-z0-9.]+")
HOSTNAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,253})$")

# ------------------------------------------------------------------------------------- bounds

MAX_NODES = 10_000
MAX_CPUS_PER_TASK = 10_000
MAX_REPLICAS = 1_000
MAX_JOB_FAILURES = 1_000_000
MAX_HANDOVER_SECS = 7 * 24 * 3600  # a week: longer than any walltime worth handing over
MAX_TARGET_IN_FLIGHT = 100_000  # in-flight requests per replica an autoscaled model aims at
MAX_SCALE_DELAY_SECS = 24 * 3600  # scale-up / scale-down delays and the idle time before zero
MAX_TIME_LIMIT_DAYS = 365
MAX_MEMORY_MB = 64 * 1024 * 1024  # 64 TiB: more than any node has
MAX_GRES_COUNT = 1_024
MAX_PATH_CHARS = 500


def validate_one_line(value: str, field: str = "value", max_chars: int | None = None) -> None:
    """No NUL, CR, LF or other control character; at most ``max_chars``."""
    if not isinstance(value, str):
        raise ValidationError(f"{field}: give text, not {type(value).__name__}.")
    if max_chars is not None and len(value) > max_chars:
        raise ValidationError(f"{field} is {len(value)} characters long; use at most {max_chars}.")
    bad = _first_control(value)
    if bad is not None:
        raise ValidationError(
            f"{field} holds {_describe(bad)}: write it on one line without control characters."
        )


def validate_name_text(value: str) -> None:
    """Names of models, endpoints and recipes: one line of text."""
    validate_one_line(value, "name", 300)


def validate_author(value: str) -> None:
    validate_one_line(value, "author", 200)


def validate_upstream_model(value: str) -> None:
    validate_one_line(value, "upstream_model", 200)


# --------------------------------------------------------------------------------------- ports


def validate_port(value: int) -> None:
    if value is None or isinstance(value, bool) or not 1 <= int(value) <= 65535:
        raise ValidationError(
            f"serving_port {value} is not a TCP port: use a number from 1 to 65535."
        )


# --------------------------------------------------------------------------------- autoscaling


def _whole_number(value: Any, field: str, low: int, high: int, meaning: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValidationError(f"{field}: use a whole number from {low} to {high} ({meaning}).")


def validate_max_replicas(value: int | None) -> None:
    """Empty: no autoscaling (target_replicas is fixed). Set: autoscale between min_replicas
    and this many replicas."""
    if value is None:
        return
    _whole_number(
        value,
        "max_replicas",
        1,
        MAX_REPLICAS,
        "the most replicas autoscaling starts; leave it empty to keep target_replicas fixed",
    )


def validate_target_in_flight(value: int) -> None:
    _whole_number(
        value,
        "target_in_flight",
        1,
        MAX_TARGET_IN_FLIGHT,
        "requests in flight per replica autoscaling aims at",
    )


def validate_scale_up_delay_secs(value: int) -> None:
    _whole_number(
        value,
        "scale_up_delay_secs",
        0,
        MAX_SCALE_DELAY_SECS,
        "seconds the load must stay above the replicas' target before one is added",
    )


def validate_scale_down_delay_secs(value: int) -> None:
    _whole_number(
        value,
        "scale_down_delay_secs",
        0,
        MAX_SCALE_DELAY_SECS,
        "seconds the load must stay below before a replica is removed",
    )


def validate_scale_to_zero_after_secs(value: int) -> None:
    _whole_number(
        value,
        "scale_to_zero_after_secs",
        0,
        MAX_SCALE_DELAY_SECS,
        "seconds without a request before a model with min_replicas 0 goes to zero replicas",
    )


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


# -------------------------------------------------------------------------------------- paths

#: Characters a folder or image path may hold; nothing a shell would act on.
PATH_CHARS_RE = re.compile(r"[A-Za-z0-9/._+@%,=:~-]*")


def _path(value: str, field: str, *, absolute: bool, example: str) -> None:
    if not value:
        return
    validate_one_line(value, field, MAX_PATH_CHARS)
    text = value.strip()
    if not PATH_CHARS_RE.fullmatch(text):
        bad = next(ch for ch in text if not PATH_CHARS_RE.fullmatch(ch))
        raise ValidationError(
            f"{field} {value!r} holds {_describe(bad)}: a path may use letters, digits and "
            f"/ . _ + @ % , = : ~ - only (no spaces or shell characters), e.g. {example}."
        )
    if absolute and not text.startswith("/"):
        raise ValidationError(
            f"{field} {value!r} is relative: give an absolute folder on shared storage, "
            f"e.g. {example}."
        )


def validate_absolute_dir(value: str) -> None:
    """An absolute folder (kept for migrations; new fields name themselves)."""
    _path(value, "path", absolute=True, example="/scratch/logs")


def validate_log_output_dir(value: str) -> None:
    _path(value, "log_output_dir", absolute=True, example="/scratch/obleth/logs")


def validate_cache_dir(value: str) -> None:
    _named("cache_dir", validate_cluster_dir, value)


def validate_images_dir(value: str) -> None:
    _named("images_dir", validate_cluster_dir, value)


def validate_log_dir(value: str) -> None:
    _named("log_dir", validate_cluster_dir, value)


def validate_image(value: str) -> None:
    """An Apptainer image: a path or URI such as docker://vllm/vllm-openai:v0.6.0."""
    _path(value, "image", absolute=False, example="/shared/images/vllm.sif")


def validate_health_path(value: str) -> None:
    if not value.startswith("/"):
        raise ValidationError("health_path must start with '/', e.g. /health or /api/tags.")
    if len(value) > 200 or any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise ValidationError(
            "health_path cannot hold spaces or control characters (at most 200 characters)."
        )


# ------------------------------------------------------------------------------------- JSON


def nul_path(value: Any, path: str = "") -> str | None:
    """Where a NUL character sits in a JSON value (``a.b[2]``), or None. PostgreSQL's jsonb and
    text columns cannot hold one."""
    if isinstance(value, str):
        return path or "(value)" if "\x00" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            key_text = str(key)
            here = f"{path}.{key_text}" if path else key_text
            if "\x00" in key_text:
                return here.replace("\x00", "\\u0000")
            found = nul_path(item, here)
            if found:
                return found
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = nul_path(item, f"{path}[{index}]")
            if found:
                return found
    return None


def _json_without_nul(value: Any, field: str) -> None:
    where = nul_path(value, field)
    if where is not None:
        raise ValidationError(
            f"{field} holds a NUL character (\\u0000) at {where}: remove it, it cannot be stored."
        )


def validate_images(value: Any) -> None:
    """Engine name -> image path (the cluster default ``images``)."""
    _json_without_nul(value, "images")
    _named("images", validate_cluster_images, value)


def validate_launcher_spec(value: Any) -> None:
    _json_without_nul(value, "launcher_spec")


def validate_ip_literal(value: str) -> None:
    try:
        ipaddress.ip_address(value.strip().strip("[]"))
    except ValueError:
        raise ValidationError(
            f"{value!r} is not an IP address. Node address overrides take an IP literal such as "
            "10.0.0.24 or fd00::24; a hostname would bring the DNS lookup back."
        ) from None


def validate_node_addresses(value: object) -> None:
    if value in (None, ""):
        return
    _json_without_nul(value, "node_addresses")
    if not isinstance(value, dict):
        raise ValidationError("Give node address overrides as a mapping of hostname to IP address.")
    problems: list[str] = []  # every bad entry is named, not only the first
    for host, address in value.items():
        if not isinstance(host, str) or not HOSTNAME_RE.fullmatch(host.strip()):
            problems.append(f"{host!r} is not a node hostname.")
        elif not isinstance(address, str):
            problems.append(f"The address of {host} must be an IP address string.")
        else:
            try:
                validate_ip_literal(address)
            except ValidationError as exc:
                problems.append(f"{host}: {exc.messages[0]}")
    if problems:
        raise ValidationError(problems)


def validate_recipe_body(value: str) -> None:
    """A recipe document parses (header fields, fences, script), or the error names the field."""
    if "\x00" in value:
        raise ValidationError("body holds a NUL character: remove it.")
    try:
        parse_recipe(value)
    except RecipeError as exc:
        raise ValidationError(str(exc)) from None


# ----------------------------------------------------------------------------- cluster defaults
# The Slurm connection's cluster defaults land in every batch script a recipe renders
# (recipes.render): folders and images are data (placed as quoted values there), `setup`
# is the operator's own shell lines by design.

_CLUSTER_SPECIAL = frozenset(" \t$`\"'\\;&|<>(){}[]*?!~#^,:")
_ENGINE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_IMAGE_SCHEME_RE = re.compile(r"^[a-z][a-z0-9+.-]*://")
MAX_SETUP_CHARS = 64 * 1024


def _one_line_problem(value: str) -> str | None:
    if "\x00" in value:
        return "contains a NUL character: remove it."
    if "\n" in value or "\r" in value:
        return "contains a line break: give it on one line."
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        return "contains a control character: use printable text only."
    return None


def validate_cluster_dir(value: str) -> None:
    """``cache_dir``, ``images_dir``, ``log_dir``: an absolute folder, one line, without shell
    metacharacters, spaces, or the ``,`` and ``:`` that ``apptainer --bind`` splits on."""
    if not value:
        return
    problem = _one_line_problem(value)
    if problem:
        raise ValidationError(f"This folder {problem}")
    text = value.strip()
    if not text.startswith("/"):
        raise ValidationError(
            f"{text!r} is relative: give an absolute folder on shared storage, e.g. "
            "/scratch/obleth."
        )
    bad = sorted({ch for ch in text if ch in _CLUSTER_SPECIAL})
    if bad:
        shown = " ".join("space" if ch == " " else "tab" if ch == "\t" else ch for ch in bad)
        raise ValidationError(
            f"{text!r} contains {shown}: recipes pass this folder to the shell and to "
            "apptainer --bind, so use letters, digits and / . _ - + @ = % only "
            "(e.g. /scratch/obleth)."
        )


def validate_cluster_setup(value: str) -> None:
    """``setup``: shell lines every recipe runs at ``{{cluster.setup}}``, as the job user.

    This is operator shell by design (it is an admin-only setting: ``module load cuda``,
    ``source /opt/env.sh``); what is refused is what no setup needs: NUL and other control
    characters (tab and line breaks are fine), ``#SBATCH`` lines (directives come from the
    recipe and the deploy form) and more than 64 KB."""
    if not value:
        return
    if "\x00" in value:
        raise ValidationError("The setup lines contain a NUL character: remove it.")
    if any(ord(ch) < 32 and ch not in "\t\n\r" or ord(ch) == 127 for ch in value):
        raise ValidationError(
            "The setup lines contain a control character: use printable text, tabs and "
            "line breaks only."
        )
    for number, line in enumerate(value.replace("\r\n", "\n").split("\n"), start=1):
        if re.match(r"\s*#\s*SBATCH", line, re.IGNORECASE):
            raise ValidationError(
                f"Setup line {number} is a #SBATCH directive: setup runs as shell after the "
                "directives, so set partition, account, QoS or GRES on the recipe or the deploy "
                "form instead, and remove the line."
            )
    if len(value) > MAX_SETUP_CHARS:
        raise ValidationError(
            f"The setup lines are {len(value)} characters long: keep them under "
            f"{MAX_SETUP_CHARS} (source a script from shared storage instead)."
        )


def validate_cluster_images(value: object) -> None:
    """``images``: engine name -> image. An image is an absolute path (``/images/vllm.sif``), a
    file name under ``images_dir`` (``vllm.sif``) or a URI (``docker://vllm/vllm-openai:v0.6``),
    one line without spaces or shell metacharacters. Every bad entry is named."""
    if value in (None, ""):
        return
    if not isinstance(value, dict):
        raise ValidationError("Give images as a mapping of engine name to image path.")
    problems: list[str] = []
    for engine, image in value.items():
        if not isinstance(engine, str) or not _ENGINE_NAME_RE.match(engine):
            shown = engine.replace("\x00", "\\x00") if isinstance(engine, str) else engine
            problems.append(
                f"{shown!r} is not an engine name: use letters, digits and . _ - (e.g. vllm)."
            )
            continue
        if not isinstance(image, str) or not image.strip():
            problems.append(
                f"{engine}: give the image as a path or file name, e.g. /images/{engine}.sif."
            )
            continue
        problem = _one_line_problem(image)
        if problem:
            problems.append(f"{engine}: the image {problem}")
            continue
        text = image.strip()
        rest = _IMAGE_SCHEME_RE.sub("", text, count=1)
        bad = sorted({ch for ch in rest if ch in _CLUSTER_SPECIAL and ch not in ":"})
        if bad:
            shown = " ".join("space" if ch == " " else "tab" if ch == "\t" else ch for ch in bad)
            problems.append(
                f"{engine}: {text!r} contains {shown}: an image is a path, a file name or a URI "
                "such as docker://vllm/vllm-openai:latest, without spaces or shell characters."
            )
        elif text.startswith("-"):
            problems.append(f"{engine}: an image cannot start with '-'; give a path or a URI.")
    if problems:
        raise ValidationError(problems)


def _named(field: str, check: Any, value: Any) -> None:
    """Run ``check`` and name ``field`` in each message (one validator per field, sharing rules)."""
    try:
        check(value)
    except ValidationError as exc:
        raise ValidationError([f"{field}: {m}" for m in exc.messages]) from None
