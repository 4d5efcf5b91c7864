"""What the admin deploy page starts from: the recipes to choose from (saved and library, one
list), a model name to suggest, and the values a recipe gives before anything is typed.

Part of the deploy service (:mod:`recipes.deploy.service`). The page's values come from
:func:`deploy_service.plan_deployment` (the truth) whenever the recipe can be planned as it is.
:func:`start` is for a recipe that cannot yet (an input it needs has no value, a cluster default
it names is not set): the values of its header and ``#SBATCH`` lines and its input defaults,
with their sources, in the shape of ``Review.values``/``Review.inputs``, so the form can still
show every field. It applies what ``prepare_deploy`` applies before rendering, lowest first:
the recipe's header, its ``#SBATCH`` lines, the cluster's log folder, the cluster's default
partition (learned values need a plan: the review shows them).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ValidationError

from obleth.core.models import ManagedSpec, Model, Recipe, SlurmSettings
from recipes.cluster import cluster_defaults
from recipes.deploy import checks, reads, service
from recipes.deploy import options as deploy_options
from recipes.deploy.request import DeployRequest
from recipes.document import parse_recipe
from recipes.inputs import _effective_values as input_values  # prepare_deploy's own
from recipes.library import library_recipes
from recipes.sbatch import lift_sbatch
from recipes.types import ParsedRecipe, RecipeError

__all__ = [
    "RecipeChoice",
    "Start",
    "ask_of",
    "options_for",
    "recipe_choices",
    "request_source",
    "start",
    "suggested_name",
]

SAVED, LIBRARY = "saved", "library"


@dataclasses.dataclass(frozen=True)
class RecipeChoice:
    """One entry of the recipe list: ``key`` is ``saved:<id>`` or ``library:<slug>``."""

    key: str
    kind: str  # SAVED or LIBRARY
    name: str
    engine: str = ""
    description: str = ""
    error: str = ""  # a library file that is not a valid recipe (listed, not deployable)

    @property
    def label(self) -> str:
        return f"{self.name} ({self.kind}{', ' + self.engine if self.engine else ''})"


def recipe_choices() -> list[RecipeChoice]:
    """Saved recipes (by name), then library recipes (by file name), each marked with its kind."""
    out = []
    for row in Recipe.objects.order_by("name"):
        try:
            parsed: ParsedRecipe | None = parse_recipe(row.body)
        except RecipeError as exc:
            parsed, error = None, str(exc)
        else:
            error = ""
        out.append(
            RecipeChoice(
                key=f"{SAVED}:{row.pk}",
                kind=SAVED,
                name=row.name,
                engine=parsed.engine if parsed else "",
                description=parsed.description if parsed else "",
                error=error,
            )
        )
    for item in library_recipes():
        out.append(
            RecipeChoice(
                key=f"{LIBRARY}:{item.slug}",
                kind=LIBRARY,
                name=item.name or item.slug,
                engine=item.parsed.engine if item.parsed else "",
                description=item.parsed.description if item.parsed else "",
                error=item.error or "",
            )
        )
    return out


def request_source(key: str) -> dict[str, Any]:
    """``saved:<id>`` -> ``{"recipe": id}``, ``library:<slug>`` -> ``{"library": slug}``;
    anything else is a ValidationError on ``recipe``."""
    kind, _, value = (key or "").partition(":")
    if kind == SAVED and value:
        return {"recipe": value}
    if kind == LIBRARY and value:
        return {"library": value}
    raise ValidationError(
        {"recipe": ["Choose a recipe from the list (saved or library), or paste a repo id."]}
    )


_NAME_CLEAN = re.compile(r"[^a-z0-9._-]+")


def suggested_name(base: str) -> str:
    """A free model name from ``base`` (an engine model name or a repo id): lower case, ``-``
    for anything but letters, digits, ``.`` and ``_``, made unique with ``-2``, ``-3``..."""
    stem = _NAME_CLEAN.sub("-", base.rsplit("/", 1)[-1].lower()).strip("-.") or "model"
    stem = stem[:60]
    taken = set(Model.objects.filter(name__startswith=stem).values_list("name", flat=True))
    if stem not in taken:
        return stem
    n = 2
    while f"{stem}-{n}" in taken:
        n += 1
    return f"{stem}-{n}"


@dataclasses.dataclass
class Start:
    """A recipe's values before a plan: shaped like ``Review.values``/``Review.inputs``."""

    parsed: ParsedRecipe
    source: dict[str, Any]
    values: dict[str, dict[str, Any]]
    inputs: dict[str, dict[str, Any]]
    options: dict[str, Any]
    discovery: dict[str, Any]


def start(request: DeployRequest, *, slurm: SlurmSettings | None = None) -> Start:
    """The values the recipe of ``request`` gives (see the module docstring). Raises
    ValidationError on ``recipe``/``library``/``hf_repo`` when the recipe cannot be read."""
    slurm = slurm or SlurmSettings.load()
    hub_inputs: dict[str, Any] = {}
    if request.hf_repo:
        given = set(request.inputs)
        request, _ = reads.from_hugging_face(request, slurm.hf_token)
        hub_inputs = {k: v for k, v in request.inputs.items() if k not in given}
    text, _, source = reads.recipe_of(request)
    parsed = parse_recipe(text)  # recipe_of returns only valid documents
    template = request.script if request.script is not None else parsed.script
    lifted, _ = lift_sbatch(template)

    fields: dict[str, Any] = {
        "serving_port": parsed.port,
        "health_path": parsed.health_path,
        "target_replicas": parsed.target_replicas,
        "max_job_failures": parsed.max_job_failures,
        **parsed.placement,
        **{k: v for k, v in lifted.items() if k != "chdir"},
    }
    sources = dict.fromkeys(fields, "recipe")
    defaults = cluster_defaults(slurm)
    logs = defaults.logs
    if not fields.get("log_output_dir") and logs:
        fields["log_output_dir"], sources["log_output_dir"] = logs, "cluster"
    resources, age = reads.cached_resources(slurm)
    if not fields.get("partition"):
        default = next(
            (
                str(p.get("name"))
                for p in resources.get("partitions") or []
                if isinstance(p, dict) and p.get("is_default")
            ),
            "",
        )
        if default:
            fields["partition"], sources["partition"] = default, "cluster"
    spec = ManagedSpec(
        launcher_spec={"api_model_name": parsed.api_model_name, "env": dict(parsed.env)}
    )
    for key, value in fields.items():
        setattr(spec, key, value)
    cluster = checks.cluster_from_resources(resources)
    node_count = int(fields.get("nodes") or 1)
    inputs = {
        name: {"value": value, "source": "cluster default" if source == "cluster" else "recipe"}
        for name, (value, source) in input_values(parsed, {}, defaults, node_count).items()
    }
    for name, value in hub_inputs.items():
        if name in inputs:
            inputs[name] = {"value": str(value), "source": "hugging face"}
    return Start(
        parsed=parsed,
        source=source,
        values=service._values(spec, sources, {}),
        inputs=inputs,
        options=deploy_options.form_options(service._ask(spec), cluster),
        discovery={
            **age,
            "api_version": str(resources.get("api_version") or ""),
            "reason": str(resources.get("reason") or ""),
            "errors": dict(resources.get("errors") or {}),
        },
    )


def ask_of(values: Mapping[str, Any]) -> checks.Ask:
    """What one replica asks, from a form's values (request override names, as text); a value
    that does not read (the review refuses it) counts as not given."""
    from provisioner.slurm.convert import expand_nodelist

    def text(key: str) -> str:
        return str(values.get(key) or "").strip()

    def number(key: str, default: int) -> int:
        return int(text(key)) if text(key).isascii() and text(key).isdigit() else default

    try:
        excluded = (
            tuple(expand_nodelist("".join(text("exclude").split()))) if text("exclude") else ()
        )
    except ValueError:
        excluded = ()
    return checks.Ask(
        partition=text("partition"),
        account=text("account"),
        qos=text("qos"),
        time_limit_minutes=reads.minutes(text("time_limit")),
        nodes=max(1, number("nodes", 1)),
        gpus=number("gpus", 0),
        cpus=max(1, number("cpus", 1)),
        mem_mb=reads.mb(text("mem")),
        constraints=text("constraints"),
        exclude=excluded,
    )


def options_for(values: Mapping[str, Any], *, slurm: SlurmSettings | None = None) -> dict[str, Any]:
    """:func:`recipes.deploy.options.form_options` for a form's current values, from the
    cached discovery (a page shown without a new plan: YAML, a value to fix)."""
    slurm = slurm or SlurmSettings.load()
    resources, _ = reads.cached_resources(slurm)
    return deploy_options.form_options(ask_of(values), checks.cluster_from_resources(resources))
