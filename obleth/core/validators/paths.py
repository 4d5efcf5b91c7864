"""Paths and shell-bound values: folders and images (no character a shell would act on), the
health path, and the Slurm connection's cluster defaults that land in every batch script a
recipe renders (``cache_dir``, ``images_dir``, ``log_dir``, ``setup``, ``images``)."""

from __future__ import annotations

import re

from django.core.exceptions import ValidationError

from obleth.core.http_validators import describe_char as _describe
from obleth.core.validators.bounds import MAX_PATH_CHARS
from obleth.core.validators.text import _named, validate_one_line

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
