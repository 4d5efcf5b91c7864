"""A recipe's parsed forms and its error: the field names and token kinds, :class:`RecipeError`,
:class:`RecipeInput` and :class:`ParsedRecipe`."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

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
