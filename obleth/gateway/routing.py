"""The gateway's routing table: enabled models and their enabled endpoints, cached briefly.

One refresh costs four queries (endpoints, models, tripped failed-launch breakers, models that
wake on request) and serves
every request for the next half second, so a request costs no query at all. Endpoints added or
removed (by an operator or the provisioner) are routable within OBLETH_GATEWAY_ROUTE_CACHE_MS
(default 500 ms) in every web process; the process that made the change drops its table at once.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from django.conf import settings

from obleth.core.choices import HealthStatus
from obleth.core.models import Endpoint, ManagedSpec, Model

DEFAULT_CACHE_SECS = 0.5


@dataclass(frozen=True)
class RouteEndpoint:
    """One upstream of a model, as the data plane needs it (no ORM object, no lazy query)."""

    id: str
    api_base: str
    api_key: str = field(repr=False)
    priority: int
    weight: int
    health_status: str

    @property
    def base(self) -> str:
        return self.api_base.rstrip("/")


@dataclass(frozen=True)
class RouteModel:
    """An enabled model clients can call by name."""

    id: str
    name: str
    forwarded_name: str
    model_type: str
    created: int
    endpoints: tuple[RouteEndpoint, ...]
    # Why the provisioner stopped launching this model's replicas ("" = it did not)
    stopped: str = ""
    # Autoscaled down to zero when idle (min_replicas 0): a request with no endpoint to go to is
    # held while a replica wakes (obleth/gateway/wake.py) instead of answered 503 at once.
    wakeable: bool = False


@dataclass(frozen=True)
class RouteTable:
    models: dict[str, RouteModel]
    built_at: float

    def get(self, name: str) -> RouteModel | None:
        return self.models.get(name)

    def listed(self) -> list[RouteModel]:
        return sorted(self.models.values(), key=lambda m: m.name)


_lock = threading.Lock()
_table: RouteTable | None = None


def _cache_secs() -> float:
    millis = getattr(settings, "OBLETH_GATEWAY_ROUTE_CACHE_MS", None)
    return DEFAULT_CACHE_SECS if millis is None else float(millis) / 1000.0


def build_route_table() -> RouteTable:
    """Read the routing table from the database (four queries)."""
    endpoints: dict[str, list[RouteEndpoint]] = {}
    rows = Endpoint.objects.filter(enabled=True, model__enabled=True).only(
        "id", "model_id", "api_base", "api_key", "priority", "weight", "health_status"
    )
    for ep in rows:
        endpoints.setdefault(str(ep.model_id), []).append(
            RouteEndpoint(
                id=str(ep.id),
                api_base=ep.api_base,
                api_key=ep.api_key or "",
                priority=int(ep.priority),
                weight=max(1, int(ep.weight)),
                health_status=ep.health_status,
            )
        )
    stopped = dict(
        ManagedSpec.objects.exclude(breaker_message="").values_list("model_id", "breaker_message")
    )
    wakeable = set(
        ManagedSpec.objects.filter(
            enabled=True, max_replicas__isnull=False, min_replicas=0
        ).values_list("model_id", flat=True)
    )
    models: dict[str, RouteModel] = {}
    for m in Model.objects.filter(enabled=True).only(
        "id", "name", "upstream_model", "model_type", "created_at"
    ):
        models[m.name] = RouteModel(
            id=str(m.id),
            name=m.name,
            forwarded_name=m.forwarded_name,
            model_type=m.model_type,
            created=int(m.created_at.timestamp()) if m.created_at else 0,
            endpoints=tuple(endpoints.get(str(m.id), ())),
            stopped=stopped.get(m.id, ""),
            wakeable=m.id in wakeable,
        )
    return RouteTable(models=models, built_at=time.monotonic())


def get_route_table() -> RouteTable:
    """The cached routing table, rebuilt when older than the cache window."""
    global _table
    with _lock:
        table = _table
        if table is None or time.monotonic() - table.built_at >= _cache_secs():
            table = build_route_table()
            _table = table
        return table


def invalidate_routes() -> None:
    """Drop the cached table: the next request reads the database again."""
    global _table
    with _lock:
        _table = None


def _weighted_shuffle(group: Sequence[RouteEndpoint], rng: random.Random) -> list[RouteEndpoint]:
    pool = list(group)
    ordered: list[RouteEndpoint] = []
    while pool:
        total = sum(ep.weight for ep in pool)
        pick = rng.uniform(0, total)
        index = len(pool) - 1
        acc = 0
        for i, ep in enumerate(pool):
            acc += ep.weight
            if pick < acc:
                index = i
                break
        ordered.append(pool.pop(index))
    return ordered


def order_endpoints(
    endpoints: Sequence[RouteEndpoint], rng: random.Random | None = None
) -> list[RouteEndpoint]:
    """The order to try endpoints in: unhealthy ones are skipped unless all are unhealthy;
    lower priority first; weighted random order among equal priority."""
    rng = rng or random.Random()
    usable = [ep for ep in endpoints if ep.health_status != HealthStatus.UNHEALTHY]
    if not usable:
        usable = list(endpoints)
    ordered: list[RouteEndpoint] = []
    for priority in sorted({ep.priority for ep in usable}):
        ordered += _weighted_shuffle([ep for ep in usable if ep.priority == priority], rng)
    return ordered
