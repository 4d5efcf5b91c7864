"""What the deploy service reads: the recipe named by a request, cluster discovery (cached, with
its age) and the recipe's past launches.

Part of the deploy service (:mod:`recipes.deploy.service`, its interface)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from collections.abc import Callable
from typing import Any

from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.db.models import Q

from obleth.core.models import Launch, ManagedSpec, Recipe, Replica, SlurmSettings
from recipes.deploy import checks, learned
from recipes.deploy.request import DeployRequest
from recipes.document import parse_recipe
from recipes.library import find_library_recipe
from recipes.types import RecipeError

__all__ = [
    "DISCOVERY_MAX_AGE",
    "DiscoveryClient",
    "cached_resources",
    "from_hugging_face",
    "mb",
    "minutes",
    "past_launches",
    "recipe_of",
]

DISCOVERY_MAX_AGE = 60  # seconds a discovery answer is reused for reviews
REVIEW_READ_TIMEOUT = 5.0  # seconds per slurmrestd read while a review waits
_CACHE_KEY = "obleth:deploy:resources"


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
    data = discover(slurm) if discover else discover_resources(slurm, timeout=REVIEW_READ_TIMEOUT)
    if slurm.enabled:  # a disabled connection answers at once; nothing worth keeping
        cache.set(key, {"fetched_at": now.isoformat(), "data": data}, max_age)
    return data, {"fetched_at": now.isoformat(), "age_seconds": 0.0, "cached": False}


class DiscoveryClient:
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


# ----------------------------------------------------------------------------- past launches


def minutes(text: str) -> int | None:
    from provisioner.slurm.convert import parse_time_limit

    try:
        return parse_time_limit(text) if text.strip() else None
    except ValueError:
        return None


def mb(text: str) -> int | None:
    from provisioner.slurm.convert import parse_memory_mb

    try:
        return parse_memory_mb(text) if text.strip() else None
    except ValueError:
        return None


def past_launches(
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
                time_limit_minutes=minutes(row.time_limit),
                mem_mb=mb(row.mem),
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


def from_hugging_face(request: DeployRequest, token: str) -> tuple[DeployRequest, dict[str, Any]]:
    """A request naming ``hf_repo`` turned into one naming the library recipe preselected for the
    repo's files (its ``model`` input set to the repo unless the request gives it), and what the
    hub said. A repo the hub cannot read, or no recipe for its engines, is a ValidationError on
    ``hf_repo`` saying why: then the operator picks the recipe by hand."""
    from recipes.deploy.hf import read_repo

    assert request.hf_repo is not None
    repo = read_repo(request.hf_repo, token=token)
    choice = repo.preselected
    if repo.error or choice is None:
        engines = ", ".join(e.engine for e in repo.engines) or "none found"
        why = repo.error or f"no library recipe takes this repo (engines: {engines})"
        raise ValidationError(
            {
                "hf_repo": [
                    f"{request.hf_repo}: {why}. Enter the engine by hand: pick a library recipe "
                    "(library: vllm, sglang, ollama, llamacpp-smollm2...) and give its inputs."
                ]
            }
        )
    changed = dataclasses.replace(
        request,
        hf_repo=None,
        library=choice.library,
        inputs={**choice.inputs, **dict(request.inputs)},
    )
    return changed, repo.as_dict()


def recipe_of(request: DeployRequest) -> tuple[str, Recipe | None, dict[str, Any]]:
    if request.hf_repo:
        raise ValidationError({"hf_repo": ["Resolve hf_repo first (from_hugging_face)."]})
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
