"""The deploy request: its fields, the overrides it takes and how they map onto a managed spec.

Part of the deploy service (:mod:`recipes.deploy.service`, its interface)."""

from __future__ import annotations

import dataclasses
import re
import uuid
from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ValidationError

from recipes.header import MAX_RECIPE_CHARS
from recipes.shell import value_problem

__all__ = [
    "OVERRIDES",
    "REQUEST_FIELDS",
    "DeployRequest",
    "permissions_needed",
    "renamed",
    "request_from_data",
    "request_key",
    "spec_overrides",
]

REQUEST_FIELDS = (
    "name",
    "recipe",
    "library",
    "hf_repo",
    "inputs",
    "overrides",
    "script",
    "dry_run",
    "save_as_recipe",
)
#: Request override -> managed spec field (None: handled apart).
OVERRIDES: dict[str, str | None] = {
    "partition": "partition",
    "account": "account",
    "qos": "qos",
    "time_limit": "time_limit",
    "nodes": "nodes",
    "gpus": None,  # -> gres gpu:N
    "gres": "gres",
    "cpus": "cpus_per_task",
    "mem": "mem",
    "constraints": "constraints",
    "exclude": "exclude",
    "log_output_dir": "log_output_dir",
    "replicas": "target_replicas",
    "min_replicas": "min_replicas",
    "max_job_failures": "max_job_failures",
    "max_replicas": "max_replicas",
    "target_in_flight": "target_in_flight",
    "scale_up_delay_secs": "scale_up_delay_secs",
    "scale_down_delay_secs": "scale_down_delay_secs",
    "scale_to_zero_after_secs": "scale_to_zero_after_secs",
    "health_check": "health_path",
    "serving_port": "serving_port",
    "api_model_name": "api_model_name",
    "env": None,  # exported in the script, after the recipe's env
}
_SPEC_TO_REQUEST = {spec: req for req, spec in OVERRIDES.items() if spec}
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_RESERVED_ENV = ("OBLETH_", "SLURM_")
_RECIPE_NAME = re.compile(r"^[^\x00-\x1f\x7f]{1,200}$")


# ----------------------------------------------------------------------------- the request


def permissions_needed(data: Mapping[str, Any]) -> list[str]:
    """The permissions a deploy request body needs: ``core.deploy`` (+ adding the model and its
    spec); an edited ``script`` is shell (``core.change_launch_script``); saving a recipe
    (``save_as_recipe`` on a launch) needs ``core.add_recipe``. The API and the admin page
    check the same list."""
    needed = ["core.deploy", "core.add_model", "core.add_managedspec"]
    if data.get("script") is not None:
        needed.append("core.change_launch_script")
    if data.get("save_as_recipe") not in (None, "") and not data.get("dry_run"):
        needed.append("core.add_recipe")
    return needed


@dataclasses.dataclass(frozen=True)
class DeployRequest:
    name: str
    recipe: str | None = None
    library: str | None = None
    hf_repo: str | None = None
    inputs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    overrides: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    script: str | None = None
    dry_run: bool = False
    save_as_recipe: str | None = None
    #: A recipe document read by the caller (``manage.py deploy_recipe FILE``); never from the
    #: API, whose body cannot name a file.
    recipe_text: str | None = None
    recipe_file: str = ""


def _text_field(data: Mapping[str, Any], key: str, errors: dict[str, list[str]]) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        errors[key] = [f"Give {key} as text, not {type(value).__name__}."]
        return None
    return value


def request_from_data(data: Any) -> DeployRequest:
    """A :class:`DeployRequest` from a request body; ValidationError names each bad field."""
    if not isinstance(data, Mapping):
        raise ValidationError({"non_field_errors": ["Send a JSON object."]})
    errors: dict[str, list[str]] = {}
    for key in data:
        if key not in REQUEST_FIELDS:
            errors[str(key)] = [f"Unknown field {key!r}. Use: {', '.join(REQUEST_FIELDS)}."]
    overrides = data.get("overrides")
    overrides = {} if overrides is None else overrides
    if not isinstance(overrides, Mapping):
        errors["overrides"] = ['Give overrides as an object, e.g. {"partition": "debug"}.']
        overrides = {}
    for key in overrides:
        if key not in OVERRIDES:
            errors[f"overrides.{key}"] = [f"Unknown override {key!r}. Use: {', '.join(OVERRIDES)}."]
    inputs = data.get("inputs")
    inputs = {} if inputs is None else inputs
    if not isinstance(inputs, Mapping):
        errors["inputs"] = ["Give inputs as an object of input name -> value."]
        inputs = {}
    name = _text_field(data, "name", errors)
    if name is None and "name" not in errors:
        errors["name"] = ["Give the model a name: the name clients send in the 'model' field."]
    recipe = data.get("recipe")
    if recipe is not None and not isinstance(recipe, str | uuid.UUID):
        errors["recipe"] = ["Give recipe as a saved recipe's id."]
        recipe = None
    library = _text_field(data, "library", errors)
    hf_repo = _text_field(data, "hf_repo", errors)
    script = _text_field(data, "script", errors)
    if script is not None and len(script) > MAX_RECIPE_CHARS:
        errors["script"] = [
            f"The script is {len(script)} characters long: at most {MAX_RECIPE_CHARS}."
        ]
    save_as = _text_field(data, "save_as_recipe", errors)
    if save_as not in (None, "") and not _RECIPE_NAME.match(save_as.strip()):
        errors["save_as_recipe"] = ["Give the recipe a name of 1 to 200 printable characters."]
    given = [k for k in ("recipe", "library", "hf_repo") if data.get(k) not in (None, "")]
    if len(given) != 1 and not errors.keys() & {"recipe", "library", "hf_repo"}:
        errors["recipe"] = [
            "Give one of recipe (a saved recipe's id), library (a library recipe's name) or "
            f"hf_repo{' (not ' + ' and '.join(given) + ')' if given else ''}."
        ]
    dry_run = data.get("dry_run", False)
    if not isinstance(dry_run, bool):
        errors["dry_run"] = ["Give dry_run as true or false."]
    if errors:
        raise ValidationError(errors)
    return DeployRequest(
        name=name or "",
        recipe=str(recipe) if recipe else None,
        library=library or None,
        hf_repo=hf_repo or None,
        inputs=dict(inputs),
        overrides=dict(overrides),
        script=script,
        dry_run=bool(dry_run),
        save_as_recipe=save_as if save_as not in (None, "") else None,
    )


# ----------------------------------------------------------------------------- overrides


def spec_overrides(
    request: DeployRequest, errors: dict[str, list[str]]
) -> tuple[dict[str, Any], dict[str, str]]:
    """Request overrides -> recipes.prepare_deploy overrides, and the extra env."""
    out: dict[str, Any] = {}
    env: dict[str, str] = {}
    for key, value in request.overrides.items():
        target = OVERRIDES.get(key)
        if key == "gpus":
            if isinstance(value, bool) or not isinstance(value, int | str):
                errors["overrides.gpus"] = ["Give gpus as a whole number (0: none)."]
                continue
            text = str(value).strip()
            if not text.isdigit() or int(text) > 1024:
                errors["overrides.gpus"] = [f"gpus must be a whole number from 0, not {value!r}."]
                continue
            out["gres"] = f"gpu:{int(text)}" if int(text) else ""
        elif key == "env":
            if not isinstance(value, Mapping):
                errors["overrides.env"] = ["Give env as an object of NAME -> value."]
                continue
            for name, item in value.items():
                field = f"overrides.env.{name}"
                if not isinstance(name, str) or not _ENV_NAME.match(name):
                    errors[field] = [f"{name!r} is not an environment variable name."]
                elif name.startswith(_RESERVED_ENV):
                    errors[field] = [f"{name}: OBLETH_* and SLURM_* are set by obleth and Slurm."]
                elif isinstance(item, Mapping | list | bool) or item is None:
                    errors[field] = [f"Give {name} one value (text or a number)."]
                elif problem := value_problem(str(item)):
                    errors[field] = [f"{name} {problem}"]
                else:
                    env[name] = str(item)
        elif target is not None:
            out[target] = value
    if request.script is not None:
        out["script_body"] = request.script
    if request.inputs:
        out["inputs"] = dict(request.inputs)
    return out, env


def request_key(key: str) -> str:
    base, dot, rest = key.partition(".")
    if base == "script_body":
        return "script"
    if base in _SPEC_TO_REQUEST:
        return f"overrides.{_SPEC_TO_REQUEST[base]}"
    if base == "target_replicas":
        return "overrides.replicas"
    if base in ("gpus", "env"):  # a check's field (gpus: the fit check) is the request's name
        return f"overrides.{key}"
    return key


def renamed(exc: ValidationError) -> ValidationError:
    if not hasattr(exc, "error_dict"):
        return exc
    out: dict[str, list[str]] = {}
    for key, messages in exc.message_dict.items():
        out.setdefault(request_key(key), []).extend(messages)
    return ValidationError(out)
