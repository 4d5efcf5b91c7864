"""Keep what a pass saw on the rows operators read: the probe's outcome in words, Slurm's state,
pending reason and expected start on each replica, and its launch's log paths resolved with
the real job id. Written after the observation, before the plan's actions; only rows whose
values changed are written, in a few statements whatever the number of replicas. The rows and
launches are the ones ``observe`` read with the rest of the snapshot."""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from django.db.models import Q

from obleth.core.joblogs import launch_paths
from obleth.core.models import Launch, Replica
from provisioner.slurm.types import JobInfo

log = logging.getLogger("provisioner.observed")

#: An unchanged probe outcome is re-stamped at most this often (one write per replica per pass
#: otherwise); the page shows when it was last seen.
PROBE_AT_REFRESH_SECS = 30


def _epoch(value: int | None) -> dt.datetime | None:
    if not value:
        return None
    try:
        return dt.datetime.fromtimestamp(int(value), tz=dt.UTC)
    except (OverflowError, OSError, ValueError):
        return None


def replica_fields(
    job: JobInfo | None, probe_detail: str | None, now: dt.datetime
) -> dict[str, object]:
    """The observed fields for one replica (pure): probe outcome, Slurm state and reason."""
    fields: dict[str, object] = {}
    if probe_detail is not None:
        fields["last_probe"] = probe_detail[:500]
        fields["last_probe_at"] = now
    if job is not None:
        fields["slurm_state"] = job.state[:40]
        fields["slurm_reason"] = job.reason[:200]
        pending = job.phase.value == "pending"
        fields["expected_start_at"] = _epoch(job.start_time) if pending else None
    return fields


#: The replica fields a pass records (provisioner-owned; no one else writes them).
OBSERVED_FIELDS = (
    "last_probe",
    "last_probe_at",
    "slurm_state",
    "slurm_reason",
    "expected_start_at",
)
#: What resolving a launch's log paths reads.
LAUNCH_PATH_FIELDS = (
    "id",
    "job_id",
    "job_name",
    "nodes",
    "submission",
    "stdout_path",
    "stderr_path",
)
#: Rows per UPDATE when the changed values differ row to row (bounds the statement's parameters).
WRITE_BATCH = 1000


def unresolved_launches(replica_ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, Launch]:
    """One query: the launches of these replicas whose job id is known and whose log paths are
    not resolved yet (blank, or still holding a ``%`` pattern). Read by ``observe``."""
    ids = list(replica_ids)
    if not ids:
        return {}
    unresolved = (
        Q(stdout_path="")
        | Q(stdout_path__contains="%")
        | Q(stderr_path="")
        | Q(stderr_path__contains="%")
    )
    return {
        launch.pk: launch
        for launch in Launch.objects.filter(unresolved, pk__in=ids)
        .exclude(job_id="")
        .only(*LAUNCH_PATH_FIELDS)
    }


def record(
    *,
    replica_ids_jobs: Mapping[uuid.UUID, str],
    jobs: Mapping[str, JobInfo],
    probe_details: Mapping[uuid.UUID, str],
    now: dt.datetime,
    rows: Mapping[uuid.UUID, Any] | None = None,
    launches: Mapping[uuid.UUID, Launch] | None = None,
) -> int:
    """Write the observed fields; returns how many replica rows changed.

    ``rows`` (the replica rows as the pass read them, with the observed fields) and
    ``launches`` (``unresolved_launches`` of the listed replicas) come from ``observe``; when
    left out they are read here, in one query each. Only changed values are written, grouped
    into a few UPDATEs whatever the number of replicas (a pass that changes nothing writes
    nothing)."""
    if rows is None:
        rows = {
            r.pk: r
            for r in Replica.objects.filter(pk__in=list(replica_ids_jobs)).only(
                "id", *OBSERVED_FIELDS
            )
        }
    if launches is None:
        launches = unresolved_launches(
            rid for rid, job_id in replica_ids_jobs.items() if job_id and job_id in jobs
        )
    changes: dict[uuid.UUID, dict[str, object]] = {}
    paths: dict[uuid.UUID, tuple[str, str]] = {}
    for replica_id, job_id in replica_ids_jobs.items():
        row = rows.get(replica_id)
        if row is None:
            continue
        job = jobs.get(job_id) if job_id else None
        fields = replica_fields(job, probe_details.get(replica_id), now)
        differs = {k: v for k, v in fields.items() if getattr(row, k) != v and k != "last_probe_at"}
        if "last_probe" in fields and (
            "last_probe" in differs
            or row.last_probe_at is None
            or (now - row.last_probe_at).total_seconds() >= PROBE_AT_REFRESH_SECS
        ):
            differs["last_probe_at"] = now  # the same outcome is re-stamped now and then only
        if differs:
            changes[replica_id] = differs
        launch = launches.get(replica_id) if job is not None else None
        if launch is not None and job is not None:
            resolved = _resolved_paths(launch, job)
            if resolved is not None:
                paths[replica_id] = resolved
    _write_replicas(changes)
    _write_launch_paths(paths)
    return len(changes)


def _write_replicas(changes: Mapping[uuid.UUID, Mapping[str, object]]) -> None:
    """Rows changing the same fields are written together: one UPDATE when they all get the
    same values (a re-stamp of ``last_probe_at``), else ``bulk_update`` in batches. Neither
    touches ``updated_at`` (execute compares it with what the plan saw)."""
    groups: dict[tuple[str, ...], dict[uuid.UUID, Mapping[str, object]]] = defaultdict(dict)
    for replica_id, fields in changes.items():
        groups[tuple(sorted(fields))][replica_id] = fields
    for names, members in groups.items():
        values = {tuple(fields[n] for n in names) for fields in members.values()}
        if len(values) == 1:
            same = dict(zip(names, values.pop(), strict=True))
            Replica.objects.filter(pk__in=list(members)).update(**same)
            continue
        Replica.objects.bulk_update(
            [Replica(id=replica_id, **fields) for replica_id, fields in members.items()],
            list(names),
            batch_size=WRITE_BATCH,
        )


def _resolved_paths(launch: Launch, job: JobInfo) -> tuple[str, str] | None:
    """The launch's stdout/stderr paths with the real job id, or None (resolved already, or
    not resolvable yet)."""
    stdout, stderr = launch.stdout_path, launch.stderr_path
    if stdout and "%" not in stdout and stderr and "%" not in stderr:
        return None
    if not launch.nodes and job.nodes:
        launch.nodes = ",".join(job.nodes)  # for the %N pattern only; not written
    resolved = launch_paths(launch)
    if "%" in resolved["stdout"] or "%" in resolved["stderr"]:
        return None
    return resolved["stdout"][:500], resolved["stderr"][:500]


def _write_launch_paths(paths: Mapping[uuid.UUID, tuple[str, str]]) -> None:
    """Store the launches' log paths with the real job id (once per launch), in batches."""
    if not paths:
        return
    Launch.objects.bulk_update(
        [Launch(id=pk, stdout_path=out, stderr_path=err) for pk, (out, err) in paths.items()],
        ["stdout_path", "stderr_path"],
        batch_size=WRITE_BATCH,
    )


def record_observation(observation: Any, now: dt.datetime) -> int:
    """Entry point for the pass: never lets a bookkeeping error stop the pass. Uses the rows
    and launches ``observe`` read (no query of its own but the writes)."""
    try:
        snapshot = observation.snapshot
        details: Mapping[uuid.UUID, str] = observation.probe_details or {}
        ids = {r.id: r.job_id for r in snapshot.replicas}
        return record(
            replica_ids_jobs=ids,
            jobs=snapshot.jobs,
            probe_details=details,
            now=now,
            rows=observation.replica_rows,
            launches=observation.launches,
        )
    except Exception:  # bookkeeping for the admin: the pass goes on without it
        log.exception("could not record what the pass observed")
        return 0
