"""Celery tasks of the gateway (thin: each calls a service in obleth.gateway.health)."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from obleth.core.models import Endpoint
from obleth.gateway import health


@shared_task(name="obleth.gateway.tasks.check_due_endpoints", ignore_result=True)
def check_due_endpoints() -> dict[str, Any]:
    """Beat, every 30 s: check endpoints whose next check is due or that were never checked."""
    run = health.run_due_checks()
    return {
        "checked": run.checked,
        "models_refreshed": run.models_refreshed,
        "skipped": run.skipped,
    }


@shared_task(name="obleth.gateway.tasks.check_endpoint_now", ignore_result=True)
def check_endpoint_now(endpoint_id: str) -> dict[str, Any] | None:
    """Check one endpoint right away (after an operator's request or a registration)."""
    endpoint = Endpoint.objects.select_related("model").filter(pk=endpoint_id).first()
    if endpoint is None:
        return None
    verdict = health.check_endpoint(endpoint)
    return {"status": verdict.status, "message": verdict.message}


@shared_task(name="obleth.gateway.tasks.check_model_now", ignore_result=True)
def check_model_now(model_id: str) -> dict[str, Any]:
    """Check every endpoint of one model right away and refresh its badge."""
    result = health.check_model_endpoints(model_id)
    return {"status": result.health.status, "message": result.health.message}
