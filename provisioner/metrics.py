"""Prometheus metrics of the provisioner, served by the web process at ``GET /metrics``.

Read from the database at scrape time (a custom collector), so they are the same whichever
process ran the passes (Celery workers, the loop, several of them) and survive restarts:

- ``obleth_provisioner_replicas{model,state}``: replicas by model and state now;
- ``obleth_provisioner_launches_total{end_state}``: jobs submitted, by how they ended
  (``running`` while not ended); Slurm's states (PREEMPTED, TIMEOUT, NODE_FAIL, ...) as recorded;
- ``obleth_provisioner_job_start_to_serving_seconds``: histogram of job start -> replica healthy,
  over the launches kept;
- ``obleth_provisioner_last_pass_seconds{kind}`` and ``obleth_provisioner_last_pass_ok{kind}``:
  the duration and outcome of the last pass of each kind, ``full`` (probes serving replicas too,
  every ``OBLETH_PROVISIONER_INTERVAL_SECS``) and ``fast`` (every second in between);
- ``obleth_provisioner_passes_total{kind,outcome}``: passes by kind and outcome (ok, idle,
  error);
- ``obleth_provisioner_heartbeat_age_seconds``: how fresh the provisioner is.

The gateway's request metrics are on the gateway's own ``/metrics`` (obleth.gateway.metrics).
Like the gateway's, this page answers clients on this machine, or a scraper sending
``Authorization: Bearer <OBLETH_METRICS_TOKEN>``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.db.models import Count, F
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from obleth.core.models import Launch, ProvisionerStatus, Replica
from obleth.core.scrape import scrape_refusal
from provisioner.status import PASS_KINDS, PASS_OUTCOMES

START_TO_SERVING_BUCKETS = (1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600)


class ProvisionerCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        replicas = GaugeMetricFamily(
            "obleth_provisioner_replicas", "Replicas by model and state.", labels=["model", "state"]
        )
        for row in Replica.objects.values("model_name", "state").annotate(n=Count("id")):
            replicas.add_metric([row["model_name"], row["state"]], row["n"])
        yield replicas

        launches = CounterMetricFamily(
            "obleth_provisioner_launches",
            "Jobs submitted, by how they ended (running: not ended yet).",
            labels=["end_state"],
        )
        for row in Launch.objects.values("end_state").annotate(n=Count("id")):
            launches.add_metric([row["end_state"] or "running"], row["n"])
        yield launches

        durations = [
            (healthy - started).total_seconds()
            for started, healthy in Launch.objects.filter(
                started_at__isnull=False, healthy_at__isnull=False, healthy_at__gte=F("started_at")
            ).values_list("started_at", "healthy_at")
            if started is not None and healthy is not None
        ]
        buckets = [
            (str(b), sum(1 for d in durations if d <= b)) for b in START_TO_SERVING_BUCKETS
        ] + [("+Inf", len(durations))]
        histogram = HistogramMetricFamily(
            "obleth_provisioner_job_start_to_serving_seconds",
            "Time from a job's start to its replica serving, over the launches kept.",
        )
        histogram.add_metric([], buckets, sum_value=sum(durations))
        yield histogram

        status = ProvisionerStatus.objects.filter(pk=1).first()
        yield from pass_metrics(status.passes_by_kind if status is not None else {})
        age = GaugeMetricFamily(
            "obleth_provisioner_heartbeat_age_seconds", "Seconds since the provisioner last ran."
        )
        if status is not None and status.heartbeat_at is not None:
            age.add_metric([], (timezone.now() - status.heartbeat_at).total_seconds())
        yield age


def pass_metrics(passes_by_kind: Any) -> Iterator[Metric]:
    """The last pass of each kind (duration, ok) and the passes by kind and outcome, from
    ``ProvisionerStatus.passes_by_kind`` (see provisioner.status.record_pass)."""
    last = GaugeMetricFamily(
        "obleth_provisioner_last_pass_seconds",
        "Duration of the last provisioner pass of this kind (full or fast).",
        labels=["kind"],
    )
    ok = GaugeMetricFamily(
        "obleth_provisioner_last_pass_ok",
        "1 when the last pass of this kind (full or fast) was ok or idle, else 0.",
        labels=["kind"],
    )
    passes = CounterMetricFamily(
        "obleth_provisioner_passes",
        "Provisioner passes by kind (full or fast) and outcome (ok, idle, error).",
        labels=["kind", "outcome"],
    )
    kinds = _mapping(passes_by_kind)
    for kind in PASS_KINDS:
        if not isinstance(kinds.get(kind), dict):
            continue
        entry = _mapping(kinds[kind])
        if isinstance(entry.get("ms"), int):
            last.add_metric([kind], entry["ms"] / 1000)
        if entry.get("status") in PASS_OUTCOMES:
            ok.add_metric([kind], 1.0 if entry["status"] in ("ok", "idle") else 0.0)
        outcomes = _mapping(entry.get("outcomes"))
        for outcome in PASS_OUTCOMES:
            passes.add_metric([kind, outcome], int(outcomes.get(outcome) or 0))
    yield last
    yield ok
    yield passes


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    refused = scrape_refusal(
        str(request.META.get("HTTP_AUTHORIZATION", "")), str(request.META.get("REMOTE_ADDR", ""))
    )
    if refused is not None:
        return HttpResponse(refused[1] + "\n", status=refused[0], content_type="text/plain")
    registry = CollectorRegistry()
    registry.register(ProvisionerCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
