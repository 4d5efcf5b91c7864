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
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import yaml
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from obleth.core.models import Launch, ManagedSpec, Model, Recipe, SlurmSettings
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
from recipes.deploy.spec import prepare_deploy, save_deploy
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

_SOURCE_WORDS = {
    "recipe": "recipe",
    "script": "recipe",
    "cluster": "cluster default",
    "override": "you",
}
_MASK = "[masked]"


# ----------------------------------------------------------------------------- the answer


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


def deployment_stage(model: Model) -> str:
    """``staged`` until one of the model's replicas first served, then ``serving``."""
    served = Launch.objects.filter(model_id=model.pk, healthy_at__isnull=False).exists()
    return "serving" if served else "staged"


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


def _submit_body(
    spec: ManagedSpec,
    slurm: SlurmSettings,
    model_name: str,
    discovered_version: str,
    cluster: checks.Cluster,
    refusals: dict[str, list[str]],
) -> tuple[dict[str, Any], str, list[str]]:
    """(the slurmrestd submit for the connection's API version, the job script, notes).

    Built by :func:`provisioner.submission.build_submission` and the version's adapter, the
    same calls the provisioner makes; a body the adapter refuses adds a refusal."""
    from provisioner.plan import job_name_for
    from provisioner.slurm.adapters import get_adapter
    from provisioner.slurm.errors import SlurmConfigError
    from provisioner.submission import SECRET_ENV_NAMES, build_submission

    # The exact submit body, for the API version the connection uses.
    version = slurm.effective_api_version or discovered_version
    job_name = job_name_for(settings.OBLETH_PROVISIONER_JOB_PREFIX, model_name, uuid.UUID(int=0))
    notes = [
        "The job name ends with the replica's id (shown as zeros), chosen when it is submitted.",
        f"The port window shown is the first one ({spec.serving_port}-"
        f"{spec.serving_port + settings.OBLETH_PORT_SPAN - 1}); each replica gets the first "
        "free window from serving_port.",
    ]
    slurm_answer: dict[str, Any]
    script = ""
    if not version:
        slurm_answer = {
            "api_version": "",
            "path": "",
            "body": None,
            "reason": "The slurmrestd API version is not known yet: test the Slurm connection "
            "(or set api_version) to see the exact body.",
        }
    else:
        adapter = get_adapter(version)
        submission = build_submission(
            spec=spec,
            slurm=slurm,
            job_name=job_name,
            port_base=spec.serving_port,
            port_span=settings.OBLETH_PORT_SPAN,
            client=reads.DiscoveryClient(adapter, cluster),  # type: ignore[arg-type]
        )
        script = submission.script
        try:
            body = adapter.build_submit_body(submission)
        except SlurmConfigError as exc:
            field = "overrides.exclude" if "exclude" in str(exc) else "overrides"
            refusals.setdefault(field, []).append(f"Slurm will refuse this job: {exc}.")
            body = None
        if body is not None:
            body = _masked(body, SECRET_ENV_NAMES)
        slurm_answer = {
            "api_version": adapter.version,
            "path": adapter.submit_path(),
            "body": body,
            "reason": "",
        }
    if not script:
        from provisioner.script import render_batch_script

        script = render_batch_script(
            script_body=spec.script_body,
            image="",
            preamble="",
            launch_command="",
            port_base=spec.serving_port,
            port_span=settings.OBLETH_PORT_SPAN,
        )
    return slurm_answer, script, notes


def _masked(body: Any, secret_names: frozenset[str]) -> Any:
    if isinstance(body, dict):
        out = {}
        for key, value in body.items():
            if key == "environment":
                out[key] = _masked_env(value, secret_names)
            else:
                out[key] = _masked(value, secret_names)
        return out
    if isinstance(body, list):
        return [_masked(v, secret_names) for v in body]
    return body


def _masked_env(value: Any, secret_names: frozenset[str]) -> Any:
    if isinstance(value, dict):
        return {k: (_MASK if k in secret_names else v) for k, v in value.items()}
    if isinstance(value, list):  # ["NAME=value", ...]
        out = []
        for item in value:
            name = str(item).split("=", 1)[0]
            out.append(f"{name}={_MASK}" if name in secret_names else item)
        return out
    return value


# ----------------------------------------------------------------------------- deploy


def _saved_body(review: Review, request: DeployRequest) -> str:
    """The recipe document the operator's settings make: the source's header with the values
    they gave (inputs become defaults), and the script they edited."""
    from recipes.header import _split_document, normalize_newlines

    header_text, script, _, _ = _split_document(normalize_newlines(review.recipe_text))
    header = yaml.safe_load(header_text) or {}
    sources = (review.spec.launcher_spec or {}).get("sources", {})
    for field in (
        "partition",
        "account",
        "qos",
        "time_limit",
        "mem",
        "gres",
        "nodes",
        "cpus_per_task",
        "constraints",
        "exclude",
        "target_replicas",
        "max_job_failures",
        "health_path",
    ):
        if sources.get(field) in ("override", "learned"):
            header[field] = getattr(review.spec, field)
    if sources.get("serving_port") == "override":
        header["port"] = review.spec.serving_port
    given = request.inputs
    for item in header.get("inputs") or []:
        if isinstance(item, dict) and item.get("name") in given:
            item["default"] = str(given[item["name"]])
    env = {**(header.get("env") or {}), **(request.overrides.get("env") or {})}
    if env:
        header["env"] = {k: str(v) for k, v in env.items()}
    if request.script is not None:
        script = request.script
    dumped = yaml.safe_dump(header, sort_keys=False, allow_unicode=True)
    return f"---\n{dumped}---\n{script.lstrip(chr(10))}"


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
