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
    (:mod:`obleth.core.deploy_checks`, from discovery cached ``DISCOVERY_MAX_AGE`` seconds; the
    age is in ``Review.discovery``), the suggestions learned from past launches
    (:mod:`obleth.core.deploy_learned`) and every warning. A request that cannot be rendered
    (an unknown recipe, a bad input, a taken name...) raises ``ValidationError`` naming the
    field; a refusal by a cluster check is in ``Review.refusals`` (``Review.ok`` is False).

``deploy(request) -> Result``
    ``plan_deployment``, then, when nothing is refused, the model (staged: its ``stage`` is
    ``staged`` until a replica first serves), its managed spec and, with ``save_as_recipe``,
    the saved recipe, in one transaction. Refusals raise ``ValidationError``
    ``{field: [message listing the valid values]}``; nothing is written then. An API call is
    audited (the rows are saved inside the request; a ``deploy`` action line is added).

Request fields: ``name`` (the model name clients send), one of ``recipe`` (a saved recipe's
id), ``library`` (a library file's slug) or ``hf_repo`` (not available yet), ``inputs``
(input name -> value), ``overrides`` (:data:`OVERRIDES`), ``script`` (an edited batch script;
the caller checks ``core.change_launch_script``), ``dry_run`` and ``save_as_recipe`` (a name).

Sources: ``recipe`` (the recipe's header or its ``#SBATCH`` lines), ``cluster default`` (the
Slurm connection's Cluster defaults), ``learned`` (every recent launch of the recipe used it),
``you`` (the request), ``not set`` (Slurm's own default applies).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import yaml
from django.conf import settings
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Q

from obleth.core import deploy_checks as checks
from obleth.core import deploy_learned as learned
from obleth.core.models import Launch, ManagedSpec, Model, Recipe, Replica, SlurmSettings
from obleth.core.recipe_shell import value_problem
from obleth.core.recipes import (
    MAX_RECIPE_CHARS,
    RecipeError,
    find_library_recipe,
    lift_sbatch,
    parse_recipe,
    prepare_deploy,
    save_deploy,
)

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

DISCOVERY_MAX_AGE = 60  # seconds a discovery answer is reused for reviews
_CACHE_KEY = "obleth:deploy:resources"
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
    "health_check": "health_path",
    "serving_port": "serving_port",
    "api_model_name": "api_model_name",
    "env": None,  # exported in the script, after the recipe's env
}
_SPEC_TO_REQUEST = {spec: req for req, spec in OVERRIDES.items() if spec}
_SOURCE_WORDS = {
    "recipe": "recipe",
    "script": "recipe",
    "cluster": "cluster default",
    "override": "you",
}
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_RESERVED_ENV = ("OBLETH_", "SLURM_")
_RECIPE_NAME = re.compile(r"^[^\x00-\x1f\x7f]{1,200}$")
_MASK = "[masked]"


# ----------------------------------------------------------------------------- the request


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


# ----------------------------------------------------------------------------- discovery


def cached_resources(
    slurm: SlurmSettings,
    *,
    max_age: int = DISCOVERY_MAX_AGE,
    discover: Callable[[SlurmSettings], dict[str, Any]] | None = None,
    now: dt.datetime | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(discovery answer, {fetched_at, age_seconds, cached}) reusing an answer up to max_age."""
    from obleth.core.services import discover_resources

    now = now or dt.datetime.now(dt.UTC)
    key = f"{_CACHE_KEY}:{slurm.slurmrestd_url}:{slurm.effective_api_version}:{slurm.enabled}"
    stored = cache.get(key)
    if isinstance(stored, dict) and "fetched_at" in stored:
        fetched = dt.datetime.fromisoformat(stored["fetched_at"])
        age = (now - fetched).total_seconds()
        if 0 <= age <= max_age:
            return stored["data"], {
                "fetched_at": stored["fetched_at"],
                "age_seconds": round(age, 1),
                "cached": True,
            }
    data = (discover or discover_resources)(slurm)
    if slurm.enabled:  # a disabled connection answers at once; nothing worth keeping
        cache.set(key, {"fetched_at": now.isoformat(), "data": data}, max_age)
    return data, {"fetched_at": now.isoformat(), "age_seconds": 0.0, "cached": False}


class _DiscoveryClient:
    """What :func:`provisioner.submission.build_submission` asks a client, answered from the
    discovery the review used (the provisioner asks slurmrestd the same at submit time)."""

    def __init__(self, adapter: Any, cluster: checks.Cluster) -> None:
        self.adapter = adapter
        self.api_version = adapter.version
        self._cluster = cluster

    def whole_node_memory_mb(self, partition: str) -> int | None:
        nodes = self._cluster.nodes or {}
        sizes = [
            n.memory_mb
            for n in nodes.values()
            if partition in n.partitions and n.memory_mb and n.memory_mb > 0
        ]
        return min(sizes) if sizes else None


# ----------------------------------------------------------------------------- overrides


def _spec_overrides(
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


def _request_key(key: str) -> str:
    base, dot, rest = key.partition(".")
    if base == "script_body":
        return "script"
    if base in _SPEC_TO_REQUEST:
        return f"overrides.{_SPEC_TO_REQUEST[base]}"
    if base == "target_replicas":
        return "overrides.replicas"
    return key


def _renamed(exc: ValidationError) -> ValidationError:
    if not hasattr(exc, "error_dict"):
        return exc
    out: dict[str, list[str]] = {}
    for key, messages in exc.message_dict.items():
        out.setdefault(_request_key(key), []).extend(messages)
    return ValidationError(out)


# ----------------------------------------------------------------------------- past launches


def _minutes(text: str) -> int | None:
    from provisioner.slurm.convert import parse_time_limit

    try:
        return parse_time_limit(text) if text.strip() else None
    except ValueError:
        return None


def _mb(text: str) -> int | None:
    from provisioner.slurm.convert import parse_memory_mb

    try:
        return parse_memory_mb(text) if text.strip() else None
    except ValueError:
        return None


def _past_launches(
    recipe: Recipe | None, library: str | None, name: str
) -> list[learned.PastLaunch]:
    """The recipe's launches, newest first (a saved recipe by id; a library one by the models
    deployed from it)."""
    if recipe is not None:
        models = ManagedSpec.objects.filter(recipe=recipe).values_list("model_id", flat=True)
        query = Q(recipe_id=recipe.pk) | Q(model_id__in=list(models))
    else:
        same = Q(launcher_spec__recipe__id=None, launcher_spec__recipe__name=name)
        if library:
            same |= Q(launcher_spec__recipe__library=library)
        models = ManagedSpec.objects.filter(same).values_list("model_id", flat=True)
        query = Q(model_id__in=list(models))
    rows = list(Launch.objects.filter(query).order_by("-submitted_at")[: learned.RECENT])
    messages = dict(
        Replica.objects.filter(id__in=[r.id for r in rows]).values_list("id", "last_message")
    )
    out = []
    for row in rows:
        live = messages.get(row.id, "")
        pending = (
            live.split("—", 1)[1].strip() if live.startswith("PENDING") and "—" in live else ""
        )
        if not pending and row.started_at is None:
            pending = row.end_reason
        out.append(
            learned.PastLaunch(
                submitted_at=row.submitted_at,
                partition=row.partition,
                account=row.account,
                qos=row.qos,
                time_limit_minutes=_minutes(row.time_limit),
                mem_mb=_mb(row.mem),
                nodes_requested=row.nodes_requested,
                exclude=row.exclude,
                nodes=tuple(n for n in row.nodes.split(",") if n),
                started_at=row.started_at,
                healthy_at=row.healthy_at,
                ended_at=row.ended_at,
                end_state=row.end_state,
                pending_reason=pending,
            )
        )
    return out


# ----------------------------------------------------------------------------- plan


def _source_of(request: DeployRequest) -> tuple[str, Recipe | None, dict[str, Any]]:
    if request.hf_repo:
        raise ValidationError(
            {
                "hf_repo": [
                    "Deploying from Hugging Face is not available yet: pick a library recipe "
                    "(library: test-engine, llamacpp-smollm2, vllm...) or a saved one."
                ]
            }
        )
    if request.recipe_text is not None:
        try:
            parsed = parse_recipe(request.recipe_text)
        except RecipeError as exc:
            raise ValidationError({"recipe": [str(exc)]}) from None
        return (
            request.recipe_text,
            None,
            {
                "kind": "file",
                "file": request.recipe_file,
                "name": parsed.name,
            },
        )
    if request.recipe:
        try:
            row = Recipe.objects.filter(pk=uuid.UUID(str(request.recipe))).first()
        except ValueError:
            row = None
        if row is None:
            raise ValidationError(
                {
                    "recipe": [
                        f"No saved recipe {request.recipe!r} (GET /api/v1/recipes lists them)."
                    ]
                }
            )
        return row.body, row, {"kind": "saved", "id": str(row.pk), "name": row.name}
    item = find_library_recipe(request.library or "")
    if item is None:
        raise ValidationError(
            {"library": [f"No library recipe {request.library!r} (GET /api/v1/recipes/library)."]}
        )
    if item.error:
        raise ValidationError({"library": [item.error]})
    return item.text, None, {"kind": "library", "library": item.slug, "name": item.name}


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
        time_limit_minutes=_minutes(spec.time_limit),
        nodes=max(1, spec.nodes),
        gpus=checks.node_gpus(spec.gres),
        cpus=spec.cpus_per_task or 1,
        mem_mb=_mb(spec.mem),
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
    from provisioner.plan import job_name_for
    from provisioner.slurm.adapters import get_adapter
    from provisioner.slurm.errors import SlurmConfigError
    from provisioner.submission import SECRET_ENV_NAMES, build_submission

    slurm = slurm or SlurmSettings.load()
    text, row, source = _source_of(request)
    parsed = parse_recipe(text)  # _source_of returns only valid documents
    errors: dict[str, list[str]] = {}
    overrides, env = _spec_overrides(request, errors)
    if request.save_as_recipe is not None:
        if not _RECIPE_NAME.match(request.save_as_recipe.strip() or ""):
            errors["save_as_recipe"] = ["Give the recipe a name of 1 to 200 printable characters."]
        elif Recipe.objects.filter(name=request.save_as_recipe.strip()).exists():
            errors["save_as_recipe"] = [
                f"A recipe named {request.save_as_recipe.strip()!r} already exists; choose "
                "another name."
            ]
    if errors:
        raise ValidationError(errors)

    resources, age = cached_resources(slurm, discover=discover)
    cluster = checks.cluster_from_resources(resources)

    # Learned: account and QoS every recent launch used, where the request gives none.
    history = _past_launches(row, source.get("library"), parsed.name)
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
        renamed = _renamed(exc)
        names = sorted(str(p.get("name")) for p in partitions if p.get("name"))
        if names and "overrides.partition" in renamed.message_dict:
            messages = renamed.message_dict
            messages["overrides.partition"] = [
                *messages["overrides.partition"],
                f"Partitions on the cluster: {', '.join(names)}.",
            ]
            raise ValidationError(messages) from None
        raise renamed from None
    launcher = dict(spec.launcher_spec or {})
    launcher["recipe"] = {**launcher.get("recipe", {}), **source}
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
        {**s.as_dict(), "applied": s.field in learned_fields}
        for s in found
        if not (s.prefill and s.field in request.overrides)
    ]

    verdicts = checks.check_request(ask, cluster)
    refusals: dict[str, list[str]] = {}
    for verdict in verdicts:
        if verdict.refused:
            refusals.setdefault(_request_key(verdict.field), []).append(verdict.message)
    warnings = [str(w) for w in launcher.get("warnings", [])]
    warnings += [v.message for v in verdicts if v.status == checks.WARNING]

    # The exact submit body, for the API version the connection uses.
    version = slurm.effective_api_version or str(resources.get("api_version") or "")
    job_name = job_name_for(settings.OBLETH_PROVISIONER_JOB_PREFIX, model.name, uuid.UUID(int=0))
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
            client=_DiscoveryClient(adapter, cluster),  # type: ignore[arg-type]
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

    inputs = {
        name: {
            "value": value,
            "source": _SOURCE_WORDS.get(launcher.get("input_sources", {}).get(name, ""), "recipe"),
        }
        for name, value in (launcher.get("inputs") or {}).items()
    }
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
    from obleth.core.recipes import _split_document, normalize_newlines  # same package

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
        raise ValidationError(
            {"save_as_recipe": ["A recipe with that name already exists; choose another name."]}
        ) from None
    except ValidationError as exc:
        raise _renamed(exc) from None
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
