"""The OpenAI-compatible data plane at /v1. Views only parse, authenticate and delegate."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt

from obleth.gateway.auth import Caller, authenticate
from obleth.gateway.proxy import forward, openai_error
from obleth.gateway.routing import RouteModel, get_route_table

MAX_BODY_BYTES = 64 * 1024 * 1024

View = Callable[..., HttpResponseBase]


def _not_allowed(name: str) -> HttpResponse:
    return openai_error(
        403,
        f"This gateway key may not use the model '{name}'. GET /v1/models lists the models it may "
        "use; ask an operator to add the model to the key.",
        kind="permission_error",
        param="model",
        code="model_not_allowed",
    )


def _not_found(name: str) -> HttpResponse:
    return openai_error(
        404,
        f"The model '{name}' does not exist or is disabled. GET /v1/models lists the models.",
        param="model",
        code="model_not_found",
    )


def _method_not_allowed(allowed: str) -> HttpResponse:
    return openai_error(
        405, f"Use {allowed} on this path.", code="method_not_allowed", headers={"Allow": allowed}
    )


def _model_entry(route: RouteModel) -> dict[str, Any]:
    return {"id": route.name, "object": "model", "created": route.created, "owned_by": "obleth"}


@csrf_exempt
def list_models(request: HttpRequest) -> HttpResponse:
    if request.method not in ("GET", "HEAD"):
        return _method_not_allowed("GET")
    caller = authenticate(request)
    if not isinstance(caller, Caller):
        return caller
    data = [_model_entry(r) for r in get_route_table().listed() if caller.allows(r.name)]
    return JsonResponse({"object": "list", "data": data})


@csrf_exempt
def retrieve_model(request: HttpRequest, name: str) -> HttpResponse:
    if request.method not in ("GET", "HEAD"):
        return _method_not_allowed("GET")
    caller = authenticate(request)
    if not isinstance(caller, Caller):
        return caller
    if not caller.allows(name):
        return _not_allowed(name)
    route = get_route_table().get(name)
    if route is None:
        return _not_found(name)
    return JsonResponse(_model_entry(route))


def _read_json(request: HttpRequest) -> dict[str, Any] | HttpResponse:
    raw = request.read(MAX_BODY_BYTES + 1)
    if len(raw) > MAX_BODY_BYTES:
        return openai_error(413, f"The request body is larger than {MAX_BODY_BYTES} bytes.")
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return openai_error(400, "The request body is not valid JSON; send a JSON object.")
    if not isinstance(body, dict):
        return openai_error(400, "The request body must be a JSON object.")
    return body


def _inference_view(path: str) -> View:
    @csrf_exempt
    def view(request: HttpRequest) -> HttpResponseBase:
        if request.method != "POST":
            return _method_not_allowed("POST")
        caller = authenticate(request)
        if not isinstance(caller, Caller):
            return caller
        body = _read_json(request)
        if isinstance(body, HttpResponse):
            return body
        name = body.get("model")
        if not isinstance(name, str) or not name:
            return openai_error(
                400,
                "'model' is required: give the name of a model from GET /v1/models.",
                param="model",
            )
        if not caller.allows(name):
            return _not_allowed(name)
        route = get_route_table().get(name)
        if route is None:
            return _not_found(name)
        return forward(route, path, body)

    view.__name__ = "proxy_" + path.strip("/").replace("/", "_")
    return view


chat_completions = _inference_view("/chat/completions")
completions = _inference_view("/completions")
embeddings = _inference_view("/embeddings")
