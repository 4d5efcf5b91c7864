"""What a deploy plan answers: the :class:`Review` (``plan_deployment``) and the :class:`Result`
(``deploy``), with the helpers that fill them from a rendered spec: the cluster check's
question (:func:`_ask`) and each value with its source (:func:`_values`).

Part of the deploy service (:mod:`recipes.deploy.service`, its interface)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from obleth.core.models import ManagedSpec, Model, Recipe
from recipes.deploy import checks, reads
from recipes.deploy.request import OVERRIDES

_SOURCE_WORDS = {
    "recipe": "recipe",
    "script": "recipe",
    "cluster": "cluster default",
    "override": "you",
}


@dataclasses.dataclass
class Review:
    name: str
    source: dict[str, Any]
    script: str  # the job script as the job runs it (port block included)
    script_body: str  # the managed spec's script
    slurm: dict[str, Any]
    values: dict[str, dict[str, Any]]
    inputs: dict[str, dict[str, Any]]
    checks: list[dict[str, Any]]
    suggestions: list[dict[str, Any]]
    warnings: list[str]
    refusals: dict[str, list[str]]
    discovery: dict[str, Any]
    notes: list[str]
    spec: ManagedSpec = dataclasses.field(repr=False)
    model: Model = dataclasses.field(repr=False)
    options: dict[str, Any] = dataclasses.field(default_factory=dict)
    recipe_text: str = dataclasses.field(repr=False, default="")
    recipe_row: Recipe | None = dataclasses.field(repr=False, default=None)
    saved_recipe: dict[str, str] | None = None  # name and body "Also save as recipe" writes

    @property
    def ok(self) -> bool:
        return not self.refusals

    def as_dict(self) -> dict[str, Any]:
        return {
            "dry_run": True,
            "ok": self.ok,
            "name": self.name,
            "source": self.source,
            "script": self.script,
            "script_body": self.script_body,
            "slurm": self.slurm,
            "values": self.values,
            "inputs": self.inputs,
            "checks": self.checks,
            "suggestions": self.suggestions,
            "warnings": self.warnings,
            "refusals": self.refusals,
            "discovery": self.discovery,
            "notes": self.notes,
            "options": self.options,
            "save_as_recipe": self.saved_recipe,
        }


@dataclasses.dataclass
class Result:
    model: Model
    spec: ManagedSpec
    recipe: Recipe | None
    review: Review
    stage: str = "staged"


def _ask(spec: ManagedSpec) -> checks.Ask:
    from provisioner.slurm.convert import expand_nodelist

    try:
        excluded = expand_nodelist("".join(spec.exclude.split())) if spec.exclude else ()
    except ValueError:
        excluded = ()
    return checks.Ask(
        partition=spec.partition.strip(),
        account=spec.account.strip(),
        qos=spec.qos.strip(),
        time_limit_minutes=reads.minutes(spec.time_limit),
        nodes=max(1, spec.nodes),
        gpus=checks.node_gpus(spec.gres),
        cpus=spec.cpus_per_task or 1,
        mem_mb=reads.mb(spec.mem),
        constraints=spec.constraints.strip(),
        exclude=tuple(excluded),
    )


def _values(
    spec: ManagedSpec, sources: Mapping[str, str], env: Mapping[str, str]
) -> dict[str, Any]:
    shown: dict[str, Any] = {}
    for req, field in OVERRIDES.items():
        if req in ("gpus", "env", "api_model_name"):
            continue
        assert field is not None
        value = getattr(spec, field)
        source = sources.get(field)
        word = _SOURCE_WORDS.get(source or "", source or "")
        word = word or "not set"
        shown[req] = {"value": value, "source": word}
    shown["gpus"] = {"value": checks.node_gpus(spec.gres), "source": shown["gres"]["source"]}
    launcher = spec.launcher_spec or {}
    shown["api_model_name"] = {
        "value": launcher.get("api_model_name", ""),
        "source": _SOURCE_WORDS.get(launcher.get("api_model_name_source", "recipe"), "recipe"),
    }
    recipe_env = dict(launcher.get("env") or {})
    shown["env"] = {
        "value": recipe_env,
        "source": "you" if env else ("recipe" if recipe_env else "not set"),
    }
    return shown
