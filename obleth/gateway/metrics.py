"""Prometheus metrics of the gateway service (``GET /metrics`` on the gateway's own port).

With several gateway worker processes, prometheus_client's multiprocess mode is used: the
launcher (``obleth.gateway.serve``) points ``PROMETHEUS_MULTIPROC_DIR`` at a fresh directory
before any worker starts, and ``/metrics`` of any worker answers for all of them.
"""

from __future__ import annotations

import os

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)

REQUESTS = Counter(
    "obleth_gateway_requests_total",
    "Requests answered by the gateway, by model, endpoint and HTTP status.",
    ["model", "endpoint", "status"],
)
LATENCY = Histogram(
    "obleth_gateway_request_seconds",
    "Time from the request's arrival to the end of its answer (whole stream for streams).",
    ["model"],
    buckets=LATENCY_BUCKETS,
)
TTFB = Histogram(
    "obleth_gateway_time_to_first_byte_seconds",
    "Time from the request's arrival to the upstream's first answer byte.",
    ["model"],
    buckets=LATENCY_BUCKETS,
)
IN_FLIGHT = Gauge(
    "obleth_gateway_in_flight_requests",
    "Requests being relayed to each endpoint now.",
    ["model", "endpoint"],
    multiprocess_mode="livesum",
)
MODEL_IN_FLIGHT = Gauge(
    "obleth_gateway_model_in_flight_requests",
    "Requests of each model relayed or held now (what autoscaling reads, through Redis).",
    ["model"],
    multiprocess_mode="livesum",
)
WAKES = Counter(
    "obleth_gateway_wake_signals_total",
    "Wake signals sent for models at zero replicas (a request found no replica).",
)
HELD = Counter(
    "obleth_gateway_held_requests_total",
    "Requests held while a model woke, by outcome (served, timeout, gone).",
    ["model", "outcome"],
)
UPSTREAM_ERRORS = Counter(
    "obleth_gateway_upstream_errors_total",
    "Failed tries of an endpoint, by kind (connect, ttfb_timeout, 5xx, broken, idle_timeout).",
    ["model", "endpoint", "kind"],
)
COOLDOWNS = Counter(
    "obleth_gateway_cooldowns_total",
    "Endpoints put in passive cooldown after consecutive failures.",
    ["model", "endpoint"],
)
TOKENS = Counter(
    "obleth_gateway_tokens_total",
    "Tokens relayed, when the upstream reports usage (kind: prompt, completion).",
    ["model", "kind"],
)
TABLE_RELOADS = Counter(
    "obleth_gateway_table_reloads_total", "Reloads of the in-memory routing table."
)


def render() -> tuple[bytes, str]:
    """The metrics page (all worker processes' metrics in multiprocess mode)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(), CONTENT_TYPE_LATEST
