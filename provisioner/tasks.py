"""Celery tasks: thin. They take a lease, call a service function and return its outcome."""

from __future__ import annotations

from typing import Any

from celery import shared_task


@shared_task(name="provisioner.tasks.reconcile_pass", ignore_result=True, soft_time_limit=300)
def reconcile_pass() -> dict[str, Any]:
    from provisioner.reconcile import run_pass

    report = run_pass()
    return {"status": report.status, "detail": report.detail, "ms": report.duration_ms}


@shared_task(name="provisioner.tasks.reconcile_fast_pass", ignore_result=True, soft_time_limit=60)
def reconcile_fast_pass() -> dict[str, Any]:
    from provisioner.reconcile import run_pass

    report = run_pass(fast=True)
    return {"status": report.status, "detail": report.detail, "ms": report.duration_ms}


@shared_task(name="provisioner.tasks.reconcile_model", ignore_result=True, soft_time_limit=300)
def reconcile_model(
    model_id: str,
    actions: list[dict[str, Any]],
    fingerprint: str,
    planned_at: str,
    pass_id: str = "",
) -> dict[str, Any]:
    from provisioner.reconcile import run_model_task

    return run_model_task(model_id, actions, fingerprint, planned_at, pass_id)


@shared_task(name="provisioner.tasks.warmup_replica", ignore_result=True)
def warmup_replica(replica_id: str, api_base: str, model_type: str = "chat") -> dict[str, Any]:
    from provisioner.services import warm_up_replica

    return warm_up_replica(replica_id, api_base, model_type)


@shared_task(name="provisioner.tasks.deliver_alert", ignore_result=True, soft_time_limit=120)
def deliver_alert(alert_id: int) -> dict[str, Any]:
    from obleth.core.models import Alert
    from provisioner.alerts import deliver

    alert = Alert.objects.filter(pk=alert_id).first()
    if alert is None:
        return {"alert_id": alert_id, "delivered": "gone"}
    return {"alert_id": alert_id, "channels": deliver(alert).channels}
