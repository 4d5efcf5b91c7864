"""Field validators. Each message names the field's rule and how to fix the value."""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlparse

from django.core.exceptions import ValidationError

API_VERSION_RE = re.compile(r"^[A-Za-z0-9.]+$")
HOSTNAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,253})$")


def validate_port(value: int) -> None:
    if value is None or not 1 <= int(value) <= 65535:
        raise ValidationError(f"{value} is not a TCP port: use a number from 1 to 65535.")


def validate_api_version(value: str) -> None:
    if not value:
        return
    if not API_VERSION_RE.match(value):
        raise ValidationError(
            "Use letters, digits and dots only, like v0.0.40 (or leave blank to detect it)."
        )
    from provisioner.slurm.adapters import supported_versions

    supported = supported_versions()
    if value not in supported:
        raise ValidationError(
            f"obleth has no adapter for slurmrestd API {value}. Use one of "
            f"{', '.join(supported)}, or leave it blank to detect the newest the server serves."
        )


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
    if not isinstance(value, dict):
        raise ValidationError("Give node address overrides as a mapping of hostname to IP address.")
    problems: list[str] = []  # every bad entry is named, not only the first
    for host, address in value.items():
        if not isinstance(host, str) or not HOSTNAME_RE.match(host.strip()):
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


def validate_http_url(value: str) -> None:
    if not value:
        return
    parsed = urlparse(value)
    if parsed.scheme not in {"http", "https"} or not parsed.netloc:
        raise ValidationError(f"{value!r} is not an http(s) URL, e.g. http://slurm-head:6820.")
    if parsed.username or parsed.password:
        # Not echoed back: the value holds a credential.
        raise ValidationError(
            "Leave credentials out of the URL: they would be stored and shown in clear. "
            "Put an endpoint's key in api_key."
        )


SLURM_NAME_RE = re.compile(r"^[A-Za-z0-9_.+-]+$")
GRES_RE = re.compile(r"^[A-Za-z0-9_.-]+(:[A-Za-z0-9_.-]+)*(,[A-Za-z0-9_.-]+(:[A-Za-z0-9_.-]+)*)*$")


def validate_slurm_name(value: str) -> None:
    """A partition, account or QoS name: one word as Slurm spells it."""
    if value and not SLURM_NAME_RE.match(value.strip()):
        raise ValidationError(
            f"{value!r} is not a Slurm name: use letters, digits and _ . + - only "
            "(sinfo, sacctmgr show account / qos list them)."
        )


def validate_gres(value: str) -> None:
    if value and not GRES_RE.match(value.strip()):
        raise ValidationError(
            f"{value!r} is not a GRES request: write name[:type]:count, e.g. gpu:1 or gpu:a100:2."
        )


def validate_hostlist(value: str) -> None:
    """Node names or Slurm hostlist expressions, e.g. gpu01,gpu[03-05]."""
    if not value.strip():
        return
    import hostlist

    try:
        hosts = hostlist.expand_hostlist(value.strip())
    except hostlist.BadHostlist as exc:
        raise ValidationError(
            f"{value!r} is not a node list ({exc}): write names or ranges, e.g. gpu01,gpu[03-05]."
        ) from None
    if not hosts or any(not HOSTNAME_RE.match(h) for h in hosts):
        raise ValidationError(
            f"{value!r} is not a node list: write names or ranges, e.g. gpu01,gpu[03-05]."
        )


def validate_absolute_dir(value: str) -> None:
    if value and not value.strip().startswith("/"):
        raise ValidationError(
            f"{value!r} is relative: give an absolute folder on shared storage, e.g. /scratch/logs."
        )


def validate_time_limit(value: str) -> None:
    if not value:
        return
    from provisioner.slurm.convert import parse_time_limit

    try:
        parse_time_limit(value)
    except ValueError as exc:
        raise ValidationError(str(exc)) from None


def validate_memory(value: str) -> None:
    if not value:
        return
    from provisioner.slurm.convert import parse_memory_mb

    try:
        parse_memory_mb(value)
    except ValueError as exc:
        raise ValidationError(str(exc)) from None


def validate_health_path(value: str) -> None:
    if not value.startswith("/"):
        raise ValidationError("The health path must start with '/', e.g. /health or /api/tags.")
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise ValidationError("The health path cannot hold spaces or control characters.")


def validate_recipe_body(value: str) -> None:
    """A recipe document parses (header fields, fences, script), or the error names the field."""
    from obleth.core.recipes import RecipeError, parse_recipe

    try:
        parse_recipe(value)
    except RecipeError as exc:
        raise ValidationError(str(exc)) from None


# ----------------------------------------------------------------------------- cluster defaults
# The Slurm connection's cluster defaults land in every batch script a recipe renders
# (obleth.core.recipes): folders and images are data (placed as quoted values there), `setup`
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
