"""Request ids, and the gateway's own log line for every answer it refuses or cannot serve.

``RequestIdMiddleware`` (first in MIDDLEWARE) takes the client's ``X-Request-ID`` when it is a
plain token (``obleth.logging.clean_request_id``), or makes one, binds it for every log line of
the request (``request_id`` in the JSON format) and returns it in the answer's ``X-Request-ID``.

/v1 is the gateway service's (:mod:`obleth.gateway.service`, its own process, which logs its own
answers). The web process answers /v1 with a 404 saying so (:mod:`obleth.gateway.elsewhere`): a
client's or a proxy's mistake, not a server error, so it is logged once at INFO with the reason
and Django's own ``django.request`` WARNING line is skipped for it. Real errors (an exception
in a view) are untouched.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.http import HttpRequest
from django.http.response import HttpResponseBase

from obleth.logging import bound, clean_request_id, request_id

log = logging.getLogger("obleth.gateway")

HEADER = "X-Request-ID"
GATEWAY_PREFIX = "/v1/"


def gateway_answer_line(request: HttpRequest, response: HttpResponseBase) -> str:
    model = getattr(response, "obleth_model", "") or "-"
    reason = getattr(response, "obleth_reason", "") or f"HTTP {response.status_code}"
    return (
        f"gateway: {response.status_code} {request.method} {request.path} model={model}: {reason}"
    )


class RequestIdMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        rid = clean_request_id(request.headers.get(HEADER))
        with bound(request_id, rid):
            response = self.get_response(request)
            if (
                response.status_code >= 400
                and (request.path == "/v1" or request.path.startswith(GATEWAY_PREFIX))
                # an exception's 500 was already logged at ERROR by Django: a real error
                and not getattr(response, "_has_been_logged", False)
            ):
                log.info("%s", gateway_answer_line(request, response))
                response._has_been_logged = True  # type: ignore[attr-defined]
        response[HEADER] = rid
        return response
