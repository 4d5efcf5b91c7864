"""The gateway's routing table: models, their enabled endpoints and what state each model is in.

:func:`build_route_table` reads it in five queries for all models (endpoints, models, managed
specs, live replicas, the Slurm switch); the gateway service holds it in memory and reloads it
on change notices and on a timer (:mod:`obleth.gateway.table`), so a request costs no query.
Besides the endpoints, each model carries a small :class:`~obleth.gateway.availability.ModelState`
(spec switches, breaker, refused submit, its most advanced pending and starting replica): what
the 503 of a model without a routable endpoint says (:mod:`obleth.gateway.availability`), and
whether it wakes on request (autoscaled with min_replicas 0: :mod:`obleth.gateway.wake`).
"""

from __future__ import annotations

import datetime as dt
import functools
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ValidationError

from obleth.core.choices import ReplicaState
from obleth.core.models import Endpoint, ManagedSpec, Model, Replica, SlurmSettings
from obleth.core.validators import validate_api_base, validate_api_key
from obleth.gateway.availability import ModelState, ReplicaFacts


@dataclass(frozen=True)
class RouteEndpoint:
    """One upstream of a model, as the data plane needs it (no ORM object, no lazy query)."""

    id: str
    api_base: str
    api_key: str = field(repr=False)
    priority: int
    weight: int
    health_status: str
    # Why no request can be sent to it ("" = it can): a row written before validation existed.
    problem: str = ""

    @property
    def base(self) -> str:
        return self.api_base.rstrip("/")


@dataclass(frozen=True)
class RouteModel:
    """A model clients call by name (a disabled one has no endpoints and says so in its state)."""

    id: str
    name: str
    forwarded_name: str
    model_type: str
    created: int
    endpoints: tuple[RouteEndpoint, ...]
    state: ModelState = field(default_factory=ModelState)
    # Autoscaled down to zero when idle (min_replicas 0): a request with no endpoint to go to is
    # held while a replica wakes (obleth/gateway/wake.py) instead of answered 503 at once.
    wakeable: bool = False


@dataclass(frozen=True)
class RouteTable:
    models: dict[str, RouteModel]  # enabled models: listed, routable
    built_at: float
    disabled: dict[str, RouteModel] = field(default_factory=dict)

    def get(self, name: str) -> RouteModel | None:
        return self.models.get(name)

    def lookup(self, name: str) -> RouteModel | None:
        """An enabled model, else a disabled one (whose requests get a 503 saying so)."""
        return self.models.get(name) or self.disabled.get(name)

    def listed(self) -> list[RouteModel]:
        return sorted(self.models.values(), key=lambda m: m.name)


@functools.lru_cache(maxsize=4096)
def endpoint_problem(api_base: str, api_key: str) -> str:
    """Why this endpoint cannot be sent a request ("" = it can). The reason never holds the key.

    Remembered per (address, key): every reload of the table asks again for rows that rarely
    change, and the address check costs about half a millisecond."""
    try:
        validate_api_base(api_base)
    except ValidationError as exc:
        return f"bad api_base: {exc.messages[0]}"
    try:
        validate_api_key(api_key)
    except ValidationError:
        return "bad api_key: it holds characters an HTTP header cannot carry; set the key again"
    return ""


_LIVE = (ReplicaState.PENDING, ReplicaState.STARTING, ReplicaState.HEALTHY)
_FAR_FUTURE = dt.datetime.max.replace(tzinfo=dt.UTC)


Row = Mapping[str, Any]


def _most_advanced(rows: list[Row]) -> tuple[ReplicaFacts | None, ReplicaFacts | None]:
    """(the starting replica that started first, the pending one Slurm starts soonest)."""
    starting = [r for r in rows if r["state"] == ReplicaState.STARTING]
    pending = [r for r in rows if r["state"] == ReplicaState.PENDING]
    first_started = None
    if starting:
        row = min(starting, key=lambda r: r["started_at"] or r["created_at"] or _FAR_FUTURE)
        first_started = ReplicaFacts(
            job_id=row["job_id"],
            since=row["started_at"],
            last_probe=row["last_probe"],
        )
    soonest = None
    if pending:
        row = min(
            pending,
            key=lambda r: (
                r["expected_start_at"] or _FAR_FUTURE,
                not r["job_id"],
                r["submitted_at"] or r["created_at"] or _FAR_FUTURE,
            ),
        )
        soonest = ReplicaFacts(
            job_id=row["job_id"],
            since=row["submitted_at"] or row["created_at"],
            slurm_reason=row["slurm_reason"],
            expected_start=row["expected_start_at"],
        )
    return first_started, soonest


def model_states(
    specs: Iterable[Mapping[str, Any]],
    replicas: Iterable[Mapping[str, Any]],
    *,
    slurm_enabled: bool,
) -> dict[uuid.UUID, ModelState]:
    """The state of every managed model (pure: rows in, states out). Models without a spec get
    the default state (static)."""
    by_model: dict[uuid.UUID, list[Mapping[str, Any]]] = {}
    for row in replicas:
        by_model.setdefault(row["model_id"], []).append(row)
    states: dict[uuid.UUID, ModelState] = {}
    for spec in specs:
        rows = by_model.get(spec["model_id"], [])
        starting, pending = _most_advanced(rows)
        states[spec["model_id"]] = ModelState(
            managed=True,
            spec_enabled=spec["enabled"],
            slurm_enabled=slurm_enabled,
            target=spec["target_replicas"],
            breaker=spec["breaker_message"],
            refusal=spec["last_provision_error"],
            serving=sum(1 for r in rows if r["state"] == ReplicaState.HEALTHY),
            starting=starting,
            pending=pending,
        )
    return states


def build_route_table() -> RouteTable:
    """Read the routing table from the database (five queries, whatever the number of models)."""
    endpoints: dict[str, list[RouteEndpoint]] = {}
    rows = Endpoint.objects.filter(enabled=True, model__enabled=True).only(
        "id", "model_id", "api_base", "api_key", "priority", "weight", "health_status"
    )
    for ep in rows:
        api_key = ep.api_key or ""
        endpoints.setdefault(str(ep.model_id), []).append(
            RouteEndpoint(
                id=str(ep.id),
                api_base=ep.api_base,
                api_key=api_key,
                priority=int(ep.priority),
                weight=max(1, int(ep.weight)),
                health_status=ep.health_status,
                problem=endpoint_problem(ep.api_base, api_key),
            )
        )
    specs = list(
        ManagedSpec.objects.values(
            "model_id",
            "enabled",
            "target_replicas",
            "breaker_message",
            "last_provision_error",
            "max_replicas",
            "min_replicas",
        )
    )
    wakeable = {
        spec["model_id"]
        for spec in specs
        if spec["enabled"] and spec["max_replicas"] is not None and spec["min_replicas"] == 0
    }
    replicas = Replica.objects.filter(state__in=_LIVE, cancel_requested=False).values(
        "model_id",
        "state",
        "job_id",
        "slurm_reason",
        "expected_start_at",
        "submitted_at",
        "started_at",
        "created_at",
        "last_probe",
    )
    slurm_enabled = bool(
        SlurmSettings.objects.filter(pk=1).values_list("enabled", flat=True).first()
    )
    states = model_states(specs, replicas, slurm_enabled=slurm_enabled)
    models: dict[str, RouteModel] = {}
    disabled: dict[str, RouteModel] = {}
    for m in Model.objects.only(
        "id", "name", "upstream_model", "model_type", "created_at", "enabled"
    ):
        state = states.get(m.id, ModelState())
        route = RouteModel(
            id=str(m.id),
            name=m.name,
            forwarded_name=m.forwarded_name,
            model_type=m.model_type,
            created=int(m.created_at.timestamp()) if m.created_at else 0,
            endpoints=tuple(endpoints.get(str(m.id), ())) if m.enabled else (),
            state=state if m.enabled else ModelState(enabled=False, managed=state.managed),
            wakeable=m.id in wakeable,
        )
        (models if m.enabled else disabled)[m.name] = route
    return RouteTable(models=models, built_at=time.monotonic(), disabled=disabled)
