"""A recipe to a Slurm-hosted model and its managed spec: :func:`prepare_deploy` builds and checks
both rows, :func:`save_deploy` saves them, :func:`deploy` does both. The deploy service
(:mod:`recipes.deploy.service`) is the one caller outside tests."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from obleth.core.choices import HostingMode
from obleth.core.models import ManagedSpec, Model, Recipe, SlurmSettings
from obleth.core.ports import first_free_range, model_range
from recipes.cluster import ClusterDefaults, cluster_defaults
from recipes.document import parse_recipe
from recipes.header import _as_int, _scalar_text
from recipes.inputs import _effective_values, validate_inputs
from recipes.render import render
from recipes.sbatch import _refuse_tokens_in_directives, lift_sbatch
from recipes.shell import value_problem
from recipes.types import RecipeError

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
    # autoscaling (the spec's field validators give the upper bounds, naming the field)
    "max_replicas": 1,
    "target_in_flight": 1,
    "scale_up_delay_secs": 0,
    "scale_down_delay_secs": 0,
    "scale_to_zero_after_secs": 0,
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
    span = int(settings.OBLETH_PORT_SPAN)
    taken = [
        model_range(port, max(count, most or 0), span)
        for port, count, most in ManagedSpec.objects.exclude(model__name=model_name).values_list(
            "serving_port", "target_replicas", "max_replicas"
        )
    ]
    return first_free_range(start, replicas, span, taken)


def save_deploy(model: Model, spec: ManagedSpec) -> None:
    """Save what :func:`prepare_deploy` built, atomically; a taken name is a ValidationError."""
    try:
        with transaction.atomic():
            model.save()
            spec.model = model
            spec.save(force_insert=True)
    except IntegrityError:
        if Model.objects.filter(name=model.name).exists():
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
    the autoscaling settings (max_replicas, target_in_flight, scale_up_delay_secs,
    scale_down_delay_secs, scale_to_zero_after_secs),
    enabled, api_model_name, script_body (an edited script, rendered like the recipe's) and
    ``inputs``: input name -> value). With no log folder given, the cluster's log_dir is used.
    ``launcher_spec`` records the recipe, the inputs and where each value came from.

    Raises ValidationError naming each field at fault (``name`` for a taken model name,
    ``inputs.<name>`` for an input, ``cluster.cache``/``image.<engine>`` for an unset cluster
    default, ``recipe`` for an invalid document); nothing is written then.
    """
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
        most = max(int(values["target_replicas"]), int(values.get("max_replicas") or 0))
        moved = _free_serving_port(values["serving_port"], most, model_name)
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
