"""The library recipe files (``*.recipe`` in settings.OBLETH_RECIPES_DIR, default
``recipes/library``): :func:`library_recipes`, :func:`find_library_recipe`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from django.conf import settings

from recipes.document import parse_recipe
from recipes.header import (
    MAX_HEADER_CHARS,
    _jsonable,
    _load_header,
    _split_document,
    normalize_newlines,
)
from recipes.types import _SLUG_RE, ParsedRecipe, RecipeError

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
