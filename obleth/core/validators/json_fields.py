"""JSON values and documents: where a NUL sits (``nul_path``; PostgreSQL cannot store one), the
``images`` and ``launcher_spec`` mappings, node address overrides, and a recipe body."""

from __future__ import annotations

import ipaddress
from typing import Any

from django.core.exceptions import ValidationError

from obleth.core.validators.paths import validate_cluster_images
from obleth.core.validators.slurm import HOSTNAME_RE
from obleth.core.validators.text import _named
from recipes.document import parse_recipe
from recipes.types import RecipeError

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
