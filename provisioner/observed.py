"""Keep what a pass saw on the rows operators read: the probe's outcome in words, Slurm's state,
pending reason and expected start on each replica, and its launch's log paths resolved with
the real job id. Written after the observation, before the plan's actions; only rows whose
values changed are written."""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections.abc import Mapping
from typing import Any

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


def record(
    *,
    replica_ids_jobs: Mapping[uuid.UUID, str],
    jobs: Mapping[str, JobInfo],
    probe_details: Mapping[uuid.UUID, str],
    now: dt.datetime,
) -> int:
    """Write the observed fields; returns how many replica rows changed."""
    changed = 0
    rows = {
        r.pk: r
        for r in Replica.objects.filter(pk__in=list(replica_ids_jobs)).only(
            "id",
            "job_id",
            "last_probe",
            "last_probe_at",
            "slurm_state",
            "slurm_reason",
            "expected_start_at",
        )
    }
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
            Replica.objects.filter(pk=replica_id).update(**differs)
            changed += 1
        if job is not None:
            _resolve_launch(replica_id, job)
    return changed


def _resolve_launch(replica_id: uuid.UUID, job: JobInfo) -> None:
    """Store the launch's stdout/stderr paths with the real job id (once)."""
    launch = (
        Launch.objects.filter(pk=replica_id)
        .only("id", "job_id", "job_name", "nodes", "submission", "stdout_path", "stderr_path")
        .first()
    )
    if launch is None or not launch.job_id:
        return
    stdout, stderr = launch.stdout_path, launch.stderr_path
    if stdout and "%" not in stdout and stderr and "%" not in stderr:
        return
    if not launch.nodes and job.nodes:
        launch.nodes = ",".join(job.nodes)
    paths = launch_paths(launch)
    if "%" in paths["stdout"] or "%" in paths["stderr"]:
        return
    Launch.objects.filter(pk=replica_id).update(
        stdout_path=paths["stdout"][:500], stderr_path=paths["stderr"][:500]
    )


def record_observation(observation: Any, now: dt.datetime) -> int:
    """Entry point for the pass: never lets a bookkeeping error stop the pass."""
    try:
        snapshot = observation.snapshot
        details: Mapping[uuid.UUID, str] = observation.probe_details or {}
        ids = {r.id: r.job_id for r in snapshot.replicas}
        return record(replica_ids_jobs=ids, jobs=snapshot.jobs, probe_details=details, now=now)
    except Exception:  # bookkeeping for the admin: the pass goes on without it
        log.exception("could not record what the pass observed")
        return 0
