"""The deploy service: recipe -> one request -> review -> launch. The single entry point for the
API (``POST /api/v1/deployments``), ``manage.py deploy_recipe`` and the admin deploy page.

Interface
---------
``request_from_data(data) -> DeployRequest``
    Read a request body (a mapping, as JSON gives it). Unknown fields, in the body or in
    ``overrides``, raise ``ValidationError`` naming them and listing the known ones.

``plan_deployment(request) -> Review``
    Everything a launch would do, nothing written: the spec's script and the full job script,
    the exact JSON body for slurmrestd (``Review.slurm``: API version, path, body; secrets
    masked), each value with its source, the checks against the cluster
    (:mod:`recipes.deploy.checks`, from discovery cached ``DISCOVERY_MAX_AGE`` seconds; the
    age is in ``Review.discovery``), the suggestions learned from past launches
    (:mod:`recipes.deploy.learned`) and every warning. A request that cannot be rendered
    (an unknown recipe, a bad input, a taken name...) raises ``ValidationError`` naming the
    field; a refusal by a cluster check is in ``Review.refusals`` (``Review.ok`` is False).

``deploy(request) -> Result``
    ``plan_deployment``, then, when nothing is refused, the model (staged: its ``stage`` is
    ``staged`` until a replica first serves), its managed spec and, with ``save_as_recipe``,
    the saved recipe, in one transaction. Refusals raise ``ValidationError``
    ``{field: [message listing the valid values]}``; nothing is written then. An API call is
    audited (the rows are saved inside the request; a ``deploy`` action line is added).

Request fields: ``name`` (the model name clients send), one of ``recipe`` (a saved recipe's
id), ``library`` (a library file's slug) or ``hf_repo`` (a Hugging Face repo id: the library
recipe for its files is preselected, :mod:`recipes.deploy.hf`), ``inputs``
(input name -> value), ``overrides`` (:data:`OVERRIDES`), ``script`` (an edited batch script;
the caller checks ``core.change_launch_script``), ``dry_run`` and ``save_as_recipe`` (a name).

Sources: ``recipe`` (the recipe's header or its ``#SBATCH`` lines), ``hugging face`` (an input
filled from ``hf_repo``), ``cluster default`` (the
Slurm connection's Cluster defaults, or the cluster's default partition when nothing names
one), ``learned`` (every recent launch of the recipe used it), ``you`` (the request),
``not set`` (Slurm's own default applies).

For a form (the admin deploy page): build a :class:`DeployRequest` from the form's fields (or
``request_from_data`` from its YAML/JSON), call ``plan_deployment`` for the Review step and
show ``Review.as_dict()``: ``values``/``inputs`` (value + source per field), ``checks`` (the
partition's fit and idle fitting nodes are in the ``facts`` of the fit check; ``valid`` lists
what a refused field accepts), ``options`` (every partition with its fit and idle fitting
nodes, the accounts the partition takes, the QoS the account may use:
:mod:`recipes.deploy.options`), ``suggestions`` (each with ``evidence`` and the ``apply``
overrides to merge when picked), ``script`` and ``slurm.body`` side by side, ``warnings``,
``save_as_recipe`` (the document "Also save as recipe" writes). Launch calls ``deploy`` with
the same request; ``deployment_stage(model)`` says ``staged`` or ``serving`` afterwards. The
caller checks permissions (``core.deploy``; ``core.change_launch_script`` for ``script``;
``core.add_recipe`` for ``save_as_recipe``), as :class:`recipes.api.DeployPermission` does.
Library recipes are listed by :func:`recipes.library.library_recipes`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from obleth.core.models import Launch, Model, Recipe, SlurmSettings
from recipes.deploy import checks, learned, reads
from recipes.deploy import options as deploy_options
from recipes.deploy.reads import DISCOVERY_MAX_AGE, cached_resources
from recipes.deploy.request import (
    OVERRIDES,
    REQUEST_FIELDS,
    DeployRequest,
    renamed,
    request_from_data,
    request_key,
    spec_overrides,
)
from recipes.deploy.review import _SOURCE_WORDS, Result, Review, _ask, _values
from recipes.deploy.saved_recipe import _saved_body
from recipes.deploy.spec import prepare_deploy, save_deploy
from recipes.deploy.submit_preview import _submit_body
from recipes.document import parse_recipe
from recipes.sbatch import lift_sbatch

__all__ = [
    "DISCOVERY_MAX_AGE",
    "OVERRIDES",
    "REQUEST_FIELDS",
    "DeployRequest",
    "Result",
    "Review",
    "cached_resources",
    "deploy",
    "deployment_stage",
    "plan_deployment",
    "request_from_data",
]


def deployment_stage(model: Model) -> str:
    """``staged`` until one of the model's replicas first served, then ``serving``."""
    served = Launch.objects.filter(model_id=model.pk, healthy_at__isnull=False).exists()
    return "serving" if served else "staged"


def plan_deployment(
    request: DeployRequest,
    *,
    slurm: SlurmSettings | None = None,
    discover: Callable[[SlurmSettings], dict[str, Any]] | None = None,
) -> Review:
    """The review of a deploy: see the module docstring. Writes nothing."""
    slurm = slurm or SlurmSettings.load()
    hub: dict[str, Any] | None = None
    hub_inputs: set[str] = set()
    if request.hf_repo:
        given_inputs = set(request.inputs)
        request, hub = reads.from_hugging_face(request, slurm.hf_token)
        hub_inputs = set(request.inputs) - given_inputs
    text, row, source = reads.recipe_of(request)
    if hub is not None:
        source = {**source, "kind": "hugging face", "hf_repo": hub["repo_id"], "hub": hub}
    parsed = parse_recipe(text)  # recipe_of returns only valid documents
    errors: dict[str, list[str]] = {}
    overrides, env = spec_overrides(request, errors)
    if (
        request.save_as_recipe is not None
        and Recipe.objects.filter(name=request.save_as_recipe.strip()).exists()
    ):
        errors["save_as_recipe"] = [
            f"A recipe named {request.save_as_recipe.strip()!r} already exists; choose "
            "another name."
        ]
    if errors:
        raise ValidationError(errors)

    resources, age = reads.cached_resources(slurm, discover=discover)
    cluster = checks.cluster_from_resources(resources)

    # Learned: account and QoS every recent launch used, where the request gives none.
    history = reads.past_launches(row, source.get("library"), parsed.name)
    found = learned.suggestions(history)
    learned_fields: set[str] = set()
    written, _ = lift_sbatch(request.script if request.script is not None else parsed.script)
    for item in found:
        if item.prefill and item.field not in request.overrides:
            stated = written.get(item.field) or parsed.placement.get(item.field)
            if not stated:
                overrides[item.field] = item.value
                learned_fields.add(item.field)

    # No partition anywhere: the cluster's default partition (as sbatch would use).
    cluster_fields: set[str] = set()
    partitions = [p for p in resources.get("partitions") or [] if isinstance(p, Mapping)]
    if not (
        str(request.overrides.get("partition") or "").strip()
        or written.get("partition")
        or parsed.placement.get("partition")
    ):
        default = next((str(p.get("name")) for p in partitions if p.get("is_default")), "")
        if default:
            overrides["partition"] = default
            cluster_fields.add("partition")

    try:
        model, spec = prepare_deploy(
            recipe_text=text,
            model_name=request.name,
            overrides=overrides,
            cluster=slurm,
            recipe=row,
            extra_env=env,
        )
    except ValidationError as exc:
        renamed_error = renamed(exc)
        names = sorted(str(p.get("name")) for p in partitions if p.get("name"))
        if names and "overrides.partition" in renamed_error.message_dict:
            messages = renamed_error.message_dict
            messages["overrides.partition"] = [
                *messages["overrides.partition"],
                f"Partitions on the cluster: {', '.join(names)}.",
            ]
            raise ValidationError(messages) from None
        raise renamed_error from None
    launcher = dict(spec.launcher_spec or {})
    launcher["recipe"] = {
        **launcher.get("recipe", {}),
        **{k: v for k, v in source.items() if k != "hub"},
    }
    launcher["sources"] = {
        **launcher.get("sources", {}),
        **dict.fromkeys(learned_fields, "learned"),
        **dict.fromkeys(cluster_fields, "cluster"),
    }
    spec.launcher_spec = launcher

    # The suggestions that need the cluster (a longer walltime, a partition with idle nodes).
    ask = _ask(spec)
    part = (cluster.partitions or {}).get(ask.partition)
    largest = max(
        (n.memory_mb for n in (cluster.nodes or {}).values() if n.memory_mb), default=None
    )

    def idle_elsewhere() -> dict[str, int]:
        if cluster.partitions is None or cluster.nodes is None:
            return {}
        out = {}
        for name in cluster.partitions:
            verdict = checks.check_fit(dataclasses.replace(ask, partition=name), cluster)
            out[name] = int(verdict.facts.get("idle_fitting_nodes", 0))
        return out

    found = learned.suggestions(
        history,
        partition=ask.partition,
        exclude=spec.exclude,
        max_time_minutes=part.max_time_minutes if part else None,
        largest_node_mb=largest,
        idle_elsewhere=idle_elsewhere,
    )
    suggestions = [
        {
            **s.as_dict(),
            # prefilled, or picked: sent back as the overrides it applies
            "applied": s.field in learned_fields
            or all(request.overrides.get(k) == v for k, v in s.apply.items()),
        }
        for s in found
        if not (
            s.prefill and s.field in request.overrides and request.overrides[s.field] != s.value
        )
    ]

    verdicts = checks.check_request(ask, cluster)
    refusals: dict[str, list[str]] = {}
    for verdict in verdicts:
        if verdict.refused:
            refusals.setdefault(request_key(verdict.field), []).append(verdict.message)
    warnings = [str(w) for w in launcher.get("warnings", [])]
    warnings += [v.message for v in verdicts if v.status == checks.WARNING]

    slurm_answer, script, notes = _submit_body(
        spec, slurm, model.name, str(resources.get("api_version") or ""), cluster, refusals
    )

    inputs = {
        name: {
            "value": value,
            "source": _SOURCE_WORDS.get(launcher.get("input_sources", {}).get(name, ""), "recipe"),
        }
        for name, value in (launcher.get("inputs") or {}).items()
    }
    for name in hub_inputs:  # filled from the repo (the operator did not give them)
        if name in inputs:
            inputs[name]["source"] = "hugging face"
    discovery = {
        **age,
        "api_version": str(resources.get("api_version") or ""),
        "reason": str(resources.get("reason") or ""),
        "errors": dict(resources.get("errors") or {}),
    }
    review = Review(
        name=model.name,
        source=source,
        script=script,
        script_body=spec.script_body,
        slurm=slurm_answer,
        values=_values(spec, launcher["sources"], env),
        inputs=inputs,
        checks=[v.as_dict() for v in verdicts],
        suggestions=suggestions,
        warnings=warnings,
        refusals=refusals,
        discovery=discovery,
        notes=notes,
        spec=spec,
        model=model,
        options=deploy_options.form_options(ask, cluster),
        recipe_text=text,
        recipe_row=row,
    )
    if request.save_as_recipe is not None:
        from obleth.core.validators import validate_recipe_body

        saved_body = _saved_body(review, request)
        try:
            validate_recipe_body(saved_body)
        except ValidationError as exc:
            raise ValidationError({"save_as_recipe": exc.messages}) from None
        review.saved_recipe = {"name": request.save_as_recipe.strip(), "body": saved_body}
    return review


def deploy(
    request: DeployRequest,
    *,
    slurm: SlurmSettings | None = None,
    discover: Callable[[SlurmSettings], dict[str, Any]] | None = None,
) -> Result:
    """Plan, refuse what the cluster would refuse, then save model + spec (+ recipe) at once."""
    from obleth.accounts.audit import record_action

    review = plan_deployment(request, slurm=slurm, discover=discover)
    if review.refusals:
        raise ValidationError(review.refusals)
    saved: Recipe | None = None
    try:
        with transaction.atomic():
            if request.save_as_recipe is not None:
                assert review.saved_recipe is not None
                saved = Recipe(name=review.saved_recipe["name"], body=review.saved_recipe["body"])
                try:
                    saved.full_clean()
                except ValidationError as exc:
                    raise ValidationError({"save_as_recipe": exc.messages}) from None
                saved.save()
                review.spec.recipe = saved
                launcher = dict(review.spec.launcher_spec or {})
                launcher["saved_as"] = {"id": str(saved.pk), "name": saved.name}
                review.spec.launcher_spec = launcher
            save_deploy(review.model, review.spec)
    except IntegrityError:
        taken = request.save_as_recipe is not None and (
            Recipe.objects.filter(name=request.save_as_recipe.strip()).exists()
        )
        if not taken:
            raise
        raise ValidationError(
            {"save_as_recipe": ["A recipe with that name already exists; choose another name."]}
        ) from None
    except ValidationError as exc:
        raise renamed(exc) from None
    record_action(
        "deploy",
        app_label="core",
        model="model",
        object_id=review.model.pk,
        object_repr=review.model.name,
        detail=f"from {review.source.get('kind')} recipe {review.source.get('name')!r}"
        + (f", saved as recipe {saved.name!r}" if saved else ""),
    )
    return Result(model=review.model, spec=review.spec, recipe=saved, review=review)
