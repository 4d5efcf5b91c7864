"""Observe: build the pass's snapshot from the database, ONE slurmrestd listing and the probes.

Any answer that cannot be trusted raises ``HoldPass`` before anything is planned, so a pass either
sees the whole picture or does nothing destructive.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import logging
import uuid
from collections import defaultdict
from collections.abc import Iterable

from django.db import DatabaseError

from obleth.core.choices import HostingMode
from obleth.core.models import Endpoint, Launch, ManagedSpec, Replica, SlurmSettings
from provisioner.domain import (
    EndpointView,
    FailedPlacement,
    GuardState,
    JobInfo,
    JobPhase,
    Knobs,
    ModelLoad,
    ModelSpec,
    ReplicaState,
    ReplicaView,
    ServingLoss,
    Snapshot,
)
from provisioner.handover_window import handover_secs, measured_start_to_serving
from provisioner.identity import IdentityProof, probe_identity
from provisioner.observe_load import autoscale_of, autoscale_state_of, gateway_load
from provisioner.observed import unresolved_launches
from provisioner.plan import mass_vanish
from provisioner.probe import ProbeOutcome, ProbeTarget, probe_all
from provisioner.resolve import NodeResolver
from provisioner.slurm.client import SlurmClient
from provisioner.slurm.errors import SlurmError
from provisioner.spec_fingerprint import spec_fingerprint

log = logging.getLogger(__name__)

PROBED_STATES = {ReplicaState.PENDING, ReplicaState.STARTING, ReplicaState.HEALTHY}
UNAVAILABLE_NODE_STATES = {
    "DOWN",
    "DRAIN",
    "DRAINED",
    "DRAINING",
    "FAIL",
    "FAILING",
    "NOT_RESPONDING",
}


class HoldPass(Exception):
    """The pass cannot trust what it saw; it holds with nothing destructive done."""


class ListingFailed(HoldPass):
    """The job listing failed (slurmrestd down, erroring, refusing the token): the pass holds,
    and may only promote replicas already seen running (``observe_held``)."""


@dataclasses.dataclass
class Observation:
    snapshot: Snapshot
    specs: dict[uuid.UUID, ManagedSpec]  # enabled or not, keyed by model id
    fingerprints: dict[uuid.UUID, str]  # per model: the rows the plan was made from
    probe_details: dict[uuid.UUID, str]
    model_types: dict[uuid.UUID, str]
    # For record_observation, read once here: the rows as read, launches with paths to resolve.
    replica_rows: dict[uuid.UUID, Replica] = dataclasses.field(default_factory=dict)
    launches: dict[uuid.UUID, Launch] = dataclasses.field(default_factory=dict)


def split_nodes(text: str) -> tuple[str, ...]:
    return tuple(n for n in (part.strip() for part in text.split(",")) if n)


def replica_view(row: Replica, ended: tuple[str, int | None] | None = None) -> ReplicaView:
    """The plan's view of a row; ``ended`` is its launch's (end_state, exit_code) when lost."""
    end_state, exit_code = ended if ended is not None else ("", None)
    return ReplicaView(
        id=row.id,
        model_id=row.model_id,
        state=ReplicaState(row.state),
        job_name=row.job_name,
        created_at=row.created_at,
        job_id=row.job_id,
        submitted_at=row.submitted_at,
        port_base=row.port_base,
        endpoint_id=row.endpoint_id,
        cancel_requested=row.cancel_requested,
        nodes=split_nodes(row.nodes),
        last_message=row.last_message,
        probe_failures=row.probe_failures,
        excluded_nodes=split_nodes(row.excluded_nodes),
        served=row.healthy_at is not None,
        end_state=end_state,
        exit_code=exit_code,
        lost_at=row.lost_at,
        successor_of=row.successor_of,
        spec_fingerprint=row.spec_fingerprint,
        drain_deadline=row.drain_deadline,
    )


def fingerprint(rows: Iterable[Replica]) -> str:
    """A digest of a model's replica rows: execute refuses to act if they changed meanwhile."""
    digest = hashlib.sha256()
    for row in sorted(rows, key=lambda r: str(r.id)):
        digest.update(
            f"{row.id}|{row.state}|{row.job_id}|{row.endpoint_id}|{row.cancel_requested}|"
            f"{row.updated_at.isoformat()}\n".encode()
        )
    return digest.hexdigest()


def knobs_from_settings() -> Knobs:
    from django.conf import settings

    return Knobs(
        port_span=settings.OBLETH_PORT_SPAN,
        lost_retention_secs=settings.OBLETH_PROVISIONER_LOST_RETENTION_SECS,
        restart_after_failures=settings.OBLETH_PROVISIONER_RESTART_AFTER_FAILURES,
        failed_node_memory_secs=settings.OBLETH_PROVISIONER_FAILED_NODE_MEMORY_SECS,
        job_prefix=settings.OBLETH_PROVISIONER_JOB_PREFIX,
        storm_losses=settings.OBLETH_PROVISIONER_STORM_LOSSES,
        storm_window_secs=settings.OBLETH_PROVISIONER_STORM_WINDOW_SECS,
        drain_secs=settings.OBLETH_PROVISIONER_DRAIN_SECS,
    )


def list_our_jobs(client: SlurmClient, prefix: str, user: str = "") -> dict[str, JobInfo]:
    """One listing of the jobs carrying our prefix, owned by our Slurm user.

    The listing shows every user's jobs: another team's (or another obleth's) job that happens to
    carry the prefix is not ours to adopt or cancel.
    """
    try:
        jobs = client.list_jobs(name_prefix=prefix)
    except SlurmError as exc:
        raise ListingFailed(f"slurm job listing failed; holding: {exc}") from exc
    return {job.job_id: job for job in jobs if not user or not job.user or job.user == user}


def _probe_target(
    replica: ReplicaView,
    host: str,
    spec: ManagedSpec,
    knobs: Knobs,
    registered: int | None,
    identity: IdentityProof | None,
) -> ProbeTarget[uuid.UUID]:
    # A serving replica is checked on the port it was registered with (one connection, not
    # the whole window): if its server is not there any more, its endpoint is wrong anyway.
    # The port must also prove it is this replica's server (its key, or Ollama's model name):
    # another user's server on the node is never promoted, in a held pass neither.
    return ProbeTarget(
        key=replica.id,
        host=host,
        port_base=registered or replica.port_base or spec.serving_port,
        port_span=1 if registered else knobs.port_span,
        health_path=spec.health_path,
        identity=identity,
    )


def observe_held(
    *,
    slurm: SlurmSettings,
    knobs: Knobs,
    now: dt.datetime,
    resolver: NodeResolver,
    health_timeout: float,
    probe_concurrency: int,
) -> Observation:
    """What a pass whose job listing failed may still use: the replicas already seen running on
    a known node (``starting``, nodes recorded) of enabled models, probed; no listing (``jobs``
    is empty, so the snapshot is only fit for ``plan.promotions_while_held``)."""
    try:
        spec_rows = list(
            ManagedSpec.objects.select_related("model").filter(
                model__hosting_mode=HostingMode.SLURM, enabled=True, model__enabled=True
            )
        )
        specs = {spec.model_id: spec for spec in spec_rows}
        replica_rows = list(
            Replica.objects.filter(
                state=ReplicaState.STARTING, model_id__in=list(specs), cancel_requested=False
            )
            .exclude(job_id="")
            .exclude(nodes="")
        )
        endpoint_rows = list(
            Endpoint.objects.filter(model_id__in=list(specs)).values(
                "id", "model_id", "name", "api_base", "replica_id"
            )
        )
    except DatabaseError as exc:
        raise HoldPass(f"database read failed; holding: {exc}") from exc
    replicas = [replica_view(row) for row in replica_rows]
    rows_by_id = {row.id: row for row in replica_rows}
    resolver.set_overrides(slurm.node_addresses or {})
    addresses = resolver.resolve_many([r.nodes[0] for r in replicas])
    targets = [
        _probe_target(
            r,
            addresses[r.nodes[0]],
            specs[r.model_id],
            knobs,
            None,
            probe_identity(rows_by_id[r.id], specs[r.model_id]),
        )
        for r in replicas
    ]
    outcomes = (
        probe_all(targets, timeout=health_timeout, concurrency=probe_concurrency) if targets else {}
    )
    snapshot = Snapshot(
        now=now,
        knobs=knobs,
        specs=tuple(
            ModelSpec(
                model_id=spec.model_id,
                model_name=spec.model.name,
                enabled=True,
                target_replicas=spec.target_replicas,
                serving_port=spec.serving_port,
            )
            for spec in spec_rows
        ),
        replicas=tuple(replicas),
        jobs={},
        jobs_listed_at=now,
        probes={key: outcome.ready_port for key, outcome in outcomes.items()},
        addresses=addresses,
        endpoints=tuple(EndpointView(**e) for e in endpoint_rows),
        endpoints_trusted=True,
    )
    rows_by_model: dict[uuid.UUID, list[Replica]] = defaultdict(list)
    for row in Replica.objects.filter(model_id__in={r.model_id for r in replicas}):
        rows_by_model[row.model_id].append(row)
    return Observation(
        snapshot=snapshot,
        specs=specs,
        fingerprints={model_id: fingerprint(rows) for model_id, rows in rows_by_model.items()},
        probe_details={key: outcome.detail for key, outcome in outcomes.items()},
        model_types={spec.model_id: spec.model.model_type for spec in spec_rows},
    )


def observe(
    *,
    client: SlurmClient,
    slurm: SlurmSettings,
    knobs: Knobs,
    now: dt.datetime,
    resolver: NodeResolver,
    health_timeout: float,
    probe_concurrency: int,
    probe_healthy: bool = True,
    submit_backoff_secs: float = 15.0,
) -> Observation:
    """Build the snapshot. A fast pass (``probe_healthy=False``) probes only replicas that are not
    serving yet: healthy replicas keep their zombie counters until the next full pass."""
    # 1. One listing of our jobs. Rows are read AFTER it: a row is written before its submit, so
    #    every listed job that has a row is seen with it (orphan detection relies on this).
    jobs = list_our_jobs(client, knobs.job_prefix, slurm.user.strip())
    listed_at = now

    try:
        spec_rows = list(
            ManagedSpec.objects.select_related("model").filter(
                model__hosting_mode=HostingMode.SLURM
            )
        )
        replica_rows = list(Replica.objects.all())
        endpoint_rows = list(
            Endpoint.objects.filter(model__hosting_mode=HostingMode.SLURM).values(
                "id",
                "model_id",
                "name",
                "api_base",
                "replica_id",
                "health_status",
                "consecutive_failures",
                "last_checked_at",
                "last_http_status",
            )
        )
        recent = now - dt.timedelta(seconds=knobs.failed_node_memory_secs)
        failed_rows = list(
            Launch.objects.filter(ended_at__gte=recent)
            .exclude(nodes="")
            .exclude(end_state__startswith="cancelled")
            .exclude(end_state="rejected")
            .values_list("model_id", "nodes", "ended_at")
        )
        lost_ids = [row.id for row in replica_rows if row.state == ReplicaState.LOST]
        ends = {
            launch_id: (end_state, exit_code)
            for launch_id, end_state, exit_code in Launch.objects.filter(
                pk__in=lost_ids
            ).values_list("id", "end_state", "exit_code")
        }
        storm_since = now - dt.timedelta(seconds=max(knobs.storm_window_secs, 0))
        serving_losses = (
            tuple(
                ServingLoss(model_id=model_id, ended_at=ended_at)
                for model_id, ended_at in Launch.objects.filter(
                    ended_at__gte=storm_since, healthy_at__isnull=False
                )
                .exclude(end_state__startswith="cancelled")
                .exclude(end_state__in=("deleted", "rejected"))
                .values_list("model_id", "ended_at")
                if ended_at is not None
            )
            if knobs.storm_losses > 0
            else ()
        )
        start_to_serving = measured_start_to_serving(
            spec.model_id for spec in spec_rows if spec.handover_secs is None
        )
        launches = unresolved_launches(row.id for row in replica_rows if row.job_id in jobs)
    except DatabaseError as exc:
        raise HoldPass(f"database read failed; holding: {exc}") from exc

    specs = {spec.model_id: spec for spec in spec_rows}
    model_types = {spec.model_id: spec.model.model_type for spec in spec_rows}
    replicas = [replica_view(row, ends.get(row.id)) for row in replica_rows]
    rows_by_id = {row.id: row for row in replica_rows}
    serving_ports = {row.id: row.port for row in replica_rows if row.port}

    hold = mass_vanish(replicas, jobs, listed_at)
    if hold:
        raise HoldPass(hold)

    # 2. Desired state: enabled specs, and a drain entry for every other model that has rows.
    model_specs: list[ModelSpec] = []
    backoff = dt.timedelta(seconds=submit_backoff_secs)
    for spec in spec_rows:
        refused_at = spec.last_provision_error_at
        model_specs.append(
            ModelSpec(
                model_id=spec.model_id,
                model_name=spec.model.name,
                enabled=bool(spec.enabled and spec.model.enabled),
                target_replicas=spec.target_replicas,
                max_job_failures=spec.max_job_failures,
                serving_port=spec.serving_port,
                excluded_nodes=split_nodes(spec.exclude),
                node_count=max(1, spec.nodes),
                # Back off after a refusal, unless the operator changed the spec since (a fix
                # is tried at once) or dismissed the error.
                hold_submits=bool(
                    spec.last_provision_error
                    and refused_at
                    and now - refused_at < backoff
                    and spec.updated_at <= refused_at
                ),
                guard=GuardState(breaker=spec.breaker_message, storm=spec.storm_message),
                spec_fingerprint=spec_fingerprint(spec),
                handover_secs=handover_secs(
                    spec.handover_secs, start_to_serving.get(spec.model_id, [])
                ),
                handover_message=spec.handover_message,
                rollout_message=spec.rollout_message,
                autoscale=autoscale_of(spec),
                autoscale_state=autoscale_state_of(spec),
            )
        )
    known = {s.model_id for s in model_specs}
    # 2b. The gateways' load, only when some model autoscales (one Redis read).
    load: dict[uuid.UUID, ModelLoad] | None = None
    load_problem = ""
    if any(s.enabled and s.autoscale is not None for s in model_specs):
        load, load_problem = gateway_load()
    rows_by_model: dict[uuid.UUID, list[Replica]] = defaultdict(list)
    for row in replica_rows:
        rows_by_model[row.model_id].append(row)
    for model_id, rows in rows_by_model.items():
        if model_id not in known:
            model_specs.append(
                ModelSpec(
                    model_id=model_id,
                    model_name=rows[0].model_name,
                    enabled=False,
                    target_replicas=0,
                )
            )
    enabled_ids = {s.model_id for s in model_specs if s.enabled}

    # 3. Addresses and probes for replicas whose job runs.
    resolver.set_overrides(slurm.node_addresses or {})
    targets: list[ProbeTarget] = []
    running_nodes = [
        job.nodes[0]
        for replica in replicas
        if (job := jobs.get(replica.job_id) if replica.job_id else None) is not None
        and job.phase is JobPhase.RUNNING
        and job.nodes
    ]
    addresses: dict[str, str] = resolver.resolve_many(running_nodes)
    for replica in replicas:
        job = jobs.get(replica.job_id) if replica.job_id else None
        if job is None or job.phase is not JobPhase.RUNNING:
            continue
        if replica.model_id not in enabled_ids or replica.state not in PROBED_STATES:
            continue
        if not probe_healthy and replica.state is ReplicaState.HEALTHY:
            continue
        if not job.nodes:
            log.warning("job %s is RUNNING but slurmrestd returned no nodes", job.job_id)
            continue
        registered = (
            serving_ports.get(replica.id) if replica.state is ReplicaState.HEALTHY else None
        )
        targets.append(
            _probe_target(
                replica,
                addresses[job.nodes[0]],
                specs[replica.model_id],
                knobs,
                registered,
                probe_identity(rows_by_id[replica.id], specs[replica.model_id]),
            )
        )
    outcomes: dict[uuid.UUID, ProbeOutcome] = (
        probe_all(targets, timeout=health_timeout, concurrency=probe_concurrency) if targets else {}
    )
    probes = {key: outcome.ready_port for key, outcome in outcomes.items()}
    details = {key: outcome.detail for key, outcome in outcomes.items()}

    # 4. Where replicas recently failed, and which nodes could take a replica instead.
    failed = tuple(
        FailedPlacement(model_id=model_id, node=node, ended_at=ended_at)
        for model_id, nodes, ended_at in failed_rows
        if ended_at is not None
        for node in split_nodes(nodes)
    )
    candidates: dict[uuid.UUID, tuple[str, ...]] = {}
    if failed:
        try:
            cluster_nodes = client.nodes()
        except SlurmError as exc:
            log.info("node list unavailable, placing without failure history: %s", exc)
            cluster_nodes = []
        for spec in spec_rows:
            candidates[spec.model_id] = tuple(
                n.name
                for n in cluster_nodes
                if spec.partition in n.partitions
                and not (set(s.upper() for s in n.state) & UNAVAILABLE_NODE_STATES)
            )

    endpoints = tuple(
        EndpointView(
            id=e["id"],
            model_id=e["model_id"],
            name=e["name"],
            api_base=e["api_base"],
            replica_id=e["replica_id"],
            health_status=e["health_status"],
            consecutive_failures=e["consecutive_failures"],
            last_checked_at=e["last_checked_at"],
            last_http_status=e.get("last_http_status"),
        )
        for e in endpoint_rows
    )
    snapshot = Snapshot(
        now=now,
        knobs=knobs,
        specs=tuple(model_specs),
        replicas=tuple(replicas),
        jobs=jobs,
        jobs_listed_at=listed_at,
        probes=probes,
        addresses=addresses,
        endpoints=endpoints,
        endpoints_trusted=True,
        failed_placements=failed,
        candidate_nodes=candidates,
        serving_losses=serving_losses,
        drain_signals=frozenset(row.id for row in replica_rows if row.drain_signal_at is not None),
        load=load,
        load_problem=load_problem or "the gateways' in-flight counts were not read",
    )
    return Observation(
        snapshot=snapshot,
        specs=specs,
        fingerprints={model_id: fingerprint(rows) for model_id, rows in rows_by_model.items()},
        probe_details=details,
        model_types=model_types,
        replica_rows=rows_by_id,
        launches=launches,
    )
