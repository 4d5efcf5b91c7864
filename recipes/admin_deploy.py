"""The admin's New deployment page and the library recipe list (wired in ``obleth/urls.py``).

* ``/admin/core/model/deploy/`` (``core_model_deploy``): choose a saved or library recipe (one
  list) or paste a Hugging Face repo id (``?recipe=saved:<id>``, ``?recipe=library:<slug>``,
  ``?hf_repo=owner/name``); one form with every input and override, each showing where its
  value comes from; "Edit as YAML"; Review (the service's dry run: the job script and the
  JSON for slurmrestd side by side, the checks, warnings and refusals); Launch, then the
  model's page.
* ``/admin/core/recipe/library/`` (``core_recipe_library``): the library recipes, each with
  its Deploy link.

Everything is decided by :mod:`recipes.deploy.service` (the API's path too); this module
maps the form to a request (:mod:`recipes.admin_deploy_form`) and the answer to the page.
Permissions: staff with ``core.deploy``, ``core.add_model`` and ``core.add_managedspec``
(operators and admins), else 403; an edited script needs ``core.change_launch_script`` and
"Also save as recipe" ``core.add_recipe`` (admins), each refused on its field otherwise.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse

from obleth.core.models import Model, Recipe
from recipes import admin_deploy_form as pageform
from recipes.deploy import form as deploy_form
from recipes.deploy import service as deploy_service
from recipes.deploy.reads import recipe_of
from recipes.deploy.request import DeployRequest, permissions_needed
from recipes.document import parse_recipe
from recipes.library import library_recipes
from recipes.types import ParsedRecipe

__all__ = ["deploy_urls", "deploy_view", "library_view"]

TEMPLATE = "admin/deploy/deploy.html"
BASE_PERMISSIONS = permissions_needed({})
SCRIPT_PERMISSION = "core.change_launch_script"
RECIPE_PERMISSION = "core.add_recipe"
ACTIONS = ("review", "launch", "to_yaml", "to_form", "apply")


def may_deploy(user: Any) -> bool:
    return bool(user.has_perms(BASE_PERMISSIONS))


def _require(request: HttpRequest) -> None:
    if not may_deploy(request.user):
        raise PermissionDenied(
            "Deploying needs the permissions " + ", ".join(BASE_PERMISSIONS) + " (the operator "
            "or admin role)."
        )


# ----------------------------------------------------------------------------- reading recipes


def _key_of(source: dict[str, Any]) -> str:
    if source.get("kind") == "saved" or source.get("id"):
        return f"saved:{source.get('id')}"
    return f"library:{source.get('library')}"


def _parsed(key: str) -> ParsedRecipe:
    """The recipe the page shows (its inputs and script); ValidationError on ``recipe``."""
    text, _, _ = recipe_of(DeployRequest(name="", **deploy_form.request_source(key)))
    return parse_recipe(text)


def _messages(exc: ValidationError) -> dict[str, list[str]]:
    if hasattr(exc, "error_dict"):
        return {str(k): [str(m) for m in v] for k, v in exc.message_dict.items()}
    return {"__all__": [str(m) for m in exc.messages]}


# ----------------------------------------------------------------------------- the page


def _chooser(
    request: HttpRequest,
    *,
    errors: list[str] | None = None,
    status: int = 200,
    key: str = "",
    hf_repo: str = "",
) -> HttpResponse:
    """The recipe list alone (what was asked for is kept in it)."""
    context = {
        **_base_context(request),
        "source_errors": errors,
        "state": pageform.PageState(source=key, hf_repo=hf_repo),
    }
    return TemplateResponse(request, TEMPLATE, context, status=status)


def _base_context(request: HttpRequest) -> dict[str, Any]:
    return {
        **admin.site.each_context(request),
        "title": "New deployment",
        "opts": Model._meta,
        "choices": deploy_form.recipe_choices(),
        "may_edit_script": request.user.has_perm(SCRIPT_PERMISSION),
        "may_save_recipe": request.user.has_perm(RECIPE_PERMISSION),
    }


def _partition_field(options: dict[str, Any], value: str) -> dict[str, Any]:
    listed = options.get("partitions")
    if listed is None:
        return {"choices": None, "note": ""}
    choices = [{"value": p["name"], "label": p["label"]} for p in listed]
    names = {p["name"] for p in listed}
    if value not in names:
        choices.insert(
            0, {"value": value, "label": f"{value} — not on the cluster" if value else "—"}
        )
    chosen = next((p for p in listed if p["name"] == value), None)
    return {"choices": choices, "note": chosen["message"] if chosen else ""}


def _account_choices(options: dict[str, Any], value: str) -> list[dict[str, str]] | None:
    allowed = options.get("accounts")
    if allowed is None:
        return None
    choices = [{"value": "", "label": "your default account"}]
    choices += [{"value": a, "label": a} for a in allowed]
    if value and value not in allowed:
        choices.append({"value": value, "label": f"{value} — not taken by this partition"})
    return choices


def _render(
    request: HttpRequest,
    state: pageform.PageState,
    parsed: ParsedRecipe,
    *,
    options: dict[str, Any],
    review: deploy_service.Review | None = None,
    suggestions: list[dict[str, Any]] | None = None,
    errors: dict[str, list[str]] | None = None,
    notices: list[str] | None = None,
    reviewed: str = "",
    status: int = 200,
) -> HttpResponse:
    errors = errors or {}
    names = {i.name for i in parsed.inputs}
    field_errors: dict[str, list[str]] = {}
    form_errors: list[str] = []
    for key, texts in errors.items():
        field = pageform.field_of(key, names)
        if field is None:
            form_errors += [
                t if key in ("__all__", "non_field_errors") else f"{key}: {t}" for t in texts
            ]
        else:
            field_errors.setdefault(field, []).extend(texts)
    if review is not None:  # refusals name their field; show them on it too
        for key, texts in review.refusals.items():
            field = pageform.field_of(key, names)
            if field is not None:
                field_errors.setdefault(field, []).extend(texts)

    inputs = []
    for item in parsed.inputs:
        value = state.inputs.get(item.name, "")
        inputs.append(
            {
                "field": f"in.{item.name}",
                "id": f"dp-in-{item.name}",
                "def": item,
                "value": value,
                "on": value.strip().lower() in pageform.TRUE_WORDS,
                "source": state.source_of_input(item.name),
                "base": state.base.inputs.get(item.name, ("", ""))[0],
                "base_source": state.base.inputs.get(item.name, ("", ""))[1],
                "errors": field_errors.get(f"in.{item.name}", []),
            }
        )
    groups: dict[str, list[dict[str, Any]]] = {}
    for spec in pageform.FIELDS:
        value = state.overrides.get(spec.key, "")
        row: dict[str, Any] = {
            "field": f"ov.{spec.key}",
            "id": f"dp-ov-{spec.key}",
            "def": spec,
            "value": value,
            "source": state.source_of_override(spec.key),
            "base": state.base.overrides.get(spec.key, ("", ""))[0],
            "base_source": state.base.overrides.get(spec.key, ("", ""))[1],
            "errors": field_errors.get(f"ov.{spec.key}", []),
        }
        if spec.key == "partition":
            row.update(_partition_field(options, value))
        elif spec.key == "account":
            row["choices"] = _account_choices(options, value)
        elif spec.key == "qos":
            row["suggest"] = options.get("qos")
        groups.setdefault(spec.group, []).append(row)

    review_context: dict[str, Any] = {}
    if review is not None:
        body = review.slurm.get("body")
        if isinstance(body, dict) and "script" in body:  # the job's fields first, its script last
            body = {**{k: v for k, v in body.items() if k != "script"}, "script": body["script"]}
        review_context = {
            "review": review,
            "slurm_json": json.dumps(body, indent=2, sort_keys=False) if body is not None else "",
            "refusal_rows": [
                {"field": _label_of(k, parsed), "messages": v} for k, v in review.refusals.items()
            ],
            "value_rows": [
                {"label": spec.label, "value": pageform.text_of(v["value"]), "source": v["source"]}
                for spec in pageform.FIELDS
                if (v := review.values.get(spec.key)) is not None
            ],
        }
    partitions = options.get("partitions") or []
    context = {
        **_base_context(request),
        "state": state,
        "parsed": parsed,
        "inputs": inputs,
        "groups": list(groups.items()),
        "field_errors": field_errors,
        "form_errors": form_errors,
        "notices": notices or [],
        "suggestions": [
            {**s, "apply_json": json.dumps(s.get("apply") or {})} for s in (suggestions or [])
        ],
        "base_json": state.base.dumps(),
        "reviewed": reviewed,
        "options": options,
        "partition_data": {
            p["name"]: {"accounts": p["accounts"], "message": p["message"]} for p in partitions
        },
        "script_given": state.script_given(),
        "yaml_rows": min(60, max(12, state.yaml_text.count("\n") + 2)),
        "recipe_label": _recipe_label(state, parsed),
        **review_context,
    }
    return TemplateResponse(request, TEMPLATE, context, status=status)


def _label_of(key: str, parsed: ParsedRecipe) -> str:
    base, _, rest = key.partition(".")
    if base == "overrides":
        head = rest.split(".", 1)[0]
        spec = next((f for f in pageform.FIELDS if f.key == head), None)
        return f"{spec.label} ({head})" if spec else key
    if base == "inputs":
        item = parsed.input(rest)
        return f"{item.label or item.name} (input {item.name})" if item else key
    return key


def _recipe_label(state: pageform.PageState, parsed: ParsedRecipe) -> str:
    kind = state.source.partition(":")[0]
    where = f"{kind} recipe" if kind else "recipe"
    if state.hf_repo:
        where = f"library recipe for Hugging Face repo {state.hf_repo}"
    return f"{parsed.name} ({where})"


# ----------------------------------------------------------------------------- GET: start


def _start_page(request: HttpRequest, key: str, hf_repo: str) -> HttpResponse:
    try:
        source = {"hf_repo": hf_repo} if hf_repo else deploy_form.request_source(key)
        draft = DeployRequest(name="", dry_run=True, **source)
        start = deploy_form.start(draft)
    except ValidationError as exc:
        texts = [t for v in _messages(exc).values() for t in v]
        return _chooser(request, errors=texts, status=400, key=key, hf_repo=hf_repo)
    name = request.GET.get("name", "").strip() or deploy_form.suggested_name(
        hf_repo or start.parsed.api_model_name
    )
    state = pageform.PageState(source=_key_of(start.source), hf_repo=hf_repo, name=name)
    state.script = start.parsed.script
    errors: dict[str, list[str]] = {}
    review: deploy_service.Review | None = None
    try:
        review = deploy_service.plan_deployment(DeployRequest(name=name, dry_run=True, **source))
    except ValidationError as exc:
        errors = _messages(exc)
    if review is not None:
        state.base = pageform.Base.of(review.values, review.inputs, start.parsed, state.script)
        options, suggestions = review.options, review.suggestions
    else:
        state.base = pageform.Base.of(start.values, start.inputs, start.parsed, state.script)
        options, suggestions = start.options, []
    pageform.fill_from_base(state)
    return _render(
        request,
        state,
        start.parsed,
        options=options,
        suggestions=suggestions,
        errors=errors,
        notices=["Fill in what is marked, then Review."] if errors else [],
    )


# ----------------------------------------------------------------------------- POST: the steps


def _missing_permissions(request: HttpRequest, data: dict[str, Any]) -> dict[str, list[str]]:
    errors: dict[str, list[str]] = {}
    for perm in permissions_needed(data):
        if request.user.has_perm(perm):
            continue
        if perm == SCRIPT_PERMISSION:
            errors["script"] = [
                "Your role cannot change the job script: it needs the permission "
                f"{SCRIPT_PERMISSION} (admins have it). Undo the edit to deploy the recipe's."
            ]
        elif perm == RECIPE_PERMISSION:
            errors["save_as_recipe"] = [
                f"Your role cannot save recipes: it needs the permission {RECIPE_PERMISSION} "
                "(admins have it). Leave 'Also save as recipe' empty."
            ]
        else:
            raise PermissionDenied(f"Deploying needs the permission {perm}.")
    return errors


def _post(request: HttpRequest) -> HttpResponse:
    action = "apply" if "apply" in request.POST else request.POST.get("action", "review")
    if action not in ACTIONS:
        action = "review"
    state = pageform.state_from_post(request.POST)
    try:
        parsed = _parsed(state.source)
    except ValidationError as exc:
        return _chooser(request, errors=[t for v in _messages(exc).values() for t in v], status=400)
    options: dict[str, Any] = {}

    def again(**extra: Any) -> HttpResponse:
        if not options:
            options.update(_options_for(state))
        return _render(request, state, parsed, options=options, **extra)

    if state.mode == "yaml" and action != "to_yaml":
        try:
            pageform.state_from_yaml(state, state.yaml_text)
        except ValidationError as exc:
            return again(errors=_messages(exc), status=400)
        if action == "to_form":
            state.mode = "form"
            return again()
    pageform.fill_from_base(state)
    if action == "to_yaml":
        state.mode = "yaml"
        state.yaml_text = pageform.state_to_yaml(state)
        return again()
    if action == "to_form":
        return again()
    if action == "apply":
        try:
            picked = json.loads(request.POST.get("apply") or "{}")
        except ValueError:
            picked = {}
        if isinstance(picked, dict):
            state.apply(picked)
        return again(notices=["Suggestion applied: Review to check it."])

    try:
        data = pageform.request_data(state, dry_run=action == "review")
    except ValidationError as exc:
        return again(errors=_messages(exc), status=400)
    refused = _missing_permissions(request, data)
    if refused:
        return again(errors=refused, status=403)
    try:
        deploy_request = deploy_service.request_from_data(data)
    except ValidationError as exc:
        return again(errors=_messages(exc), status=400)

    notices: list[str] = []
    if action == "launch" and pageform.digest(data) != request.POST.get("reviewed", ""):
        notices.append("The form changed since the last review: check this review, then Launch.")
        action = "review"
        data = {**data, "dry_run": True}
        deploy_request = deploy_service.request_from_data(data)
    if action == "review":
        try:
            review = deploy_service.plan_deployment(deploy_request)
        except ValidationError as exc:
            return again(errors=_messages(exc), status=400)
        state.rebase(pageform.Base.of(review.values, review.inputs, parsed, parsed.script))
        options.update(review.options)
        return again(
            review=review,
            suggestions=review.suggestions,
            notices=notices,
            reviewed=pageform.digest(data) if review.ok else "",
        )
    try:
        result = deploy_service.deploy(deploy_request)
    except ValidationError as exc:
        return again(errors=_messages(exc), status=400)
    model = result.model
    text = (
        f"Deployed {model.name} from {result.review.source.get('name')!r}: "
        f"{result.spec.target_replicas} replica(s) start with the provisioner's next pass."
    )
    if result.recipe is not None:
        text += f" Saved as recipe {result.recipe.name!r}."
    messages.success(request, text)
    return HttpResponseRedirect(reverse("admin:core_model_change", args=[model.pk]))


def _options_for(state: pageform.PageState) -> dict[str, Any]:
    """The cluster's options for the form's current values (a page shown without a plan)."""
    return deploy_form.options_for(state.overrides)


def deploy_view(request: HttpRequest) -> HttpResponse:
    _require(request)
    if request.method == "POST":
        return _post(request)
    key = request.GET.get("recipe", "").strip()
    hf_repo = request.GET.get("hf_repo", "").strip()
    if not key and not hf_repo:
        return _chooser(request)
    return _start_page(request, key, hf_repo)


# ----------------------------------------------------------------------------- the library


def library_view(request: HttpRequest) -> HttpResponse:
    if not request.user.has_perm("core.view_recipe"):
        raise PermissionDenied("needs the permission core.view_recipe")
    rows = [
        {
            "item": item,
            "engine": item.parsed.engine if item.parsed else "",
            "description": item.parsed.description if item.parsed else "",
            "requires": item.parsed.requires if item.parsed else "",
            "deploy_url": reverse("core_model_deploy") + f"?recipe=library:{item.slug}",
        }
        for item in library_recipes()
    ]
    context = {
        **admin.site.each_context(request),
        "title": "Library recipes",
        "opts": Recipe._meta,
        "rows": rows,
        "may_deploy": may_deploy(request.user),
    }
    return TemplateResponse(request, "admin/deploy/library.html", context)


def deploy_urls() -> list[URLPattern]:
    """Before ``admin.site.urls`` (whose catch-all would take them)."""
    return [
        path(
            "admin/core/model/deploy/",
            admin.site.admin_view(deploy_view),
            name="core_model_deploy",
        ),
        path(
            "admin/core/recipe/library/",
            admin.site.admin_view(library_view),
            name="core_recipe_library",
        ),
    ]
