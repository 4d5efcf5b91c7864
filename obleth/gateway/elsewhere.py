"""The web process's answer to /v1: a short 404 saying where /v1 is served.

The OpenAI-compatible data plane is the gateway service (``python -m obleth.gateway.serve``, its
own process; :mod:`obleth.gateway.service`). A client or a reverse proxy that sends /v1 to the
web process gets this answer, in the OpenAI error shape its SDK reads, instead of the admin's
HTML 404: it names the service and the setting of its address (``OBLETH_GATEWAY_BIND``).
"""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from obleth.gateway.proxy import openai_error


@csrf_exempt  # any method: a POST from an SDK must get this answer too, not a CSRF 403
def served_by_gateway(request: HttpRequest, rest: str = "") -> HttpResponse:
    bind = str(getattr(settings, "OBLETH_GATEWAY_BIND", "") or "")
    return openai_error(
        404,
        "/v1 is served by the obleth gateway service (python -m obleth.gateway.serve), not by "
        f"the web process. It listens on OBLETH_GATEWAY_BIND ({bind}); send /v1 requests there "
        "(the reverse proxy routes /v1 to it).",
        code="served_by_gateway",
    )
