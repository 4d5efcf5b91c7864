"""GET /healthz: an unauthenticated liveness check for load balancers and orchestrators.

It answers 200 when the web process can reach its database, else 503. It says nothing about
models, replicas or Slurm (that is the Management API's job, behind authentication).
"""

from __future__ import annotations

from django.db import DatabaseError, connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError:
        return JsonResponse({"status": "error", "database": "unreachable"}, status=503)
    return JsonResponse({"status": "ok"})
