"""The model page as the operator's cockpit: everything the live panel shows, as plain data.

``model_panel(model, user)`` returns a JSON-ready dict: the badge and why, the untrusted-state
banner, each replica (state in words, node, job, port, age, time in state, last probe outcome,
Slurm's reason with the fix), its endpoint and its next check, the launch history with each
job's end state, the last refused launch with Slurm's whole answer, and which actions the user
may take. The admin view serves it; the actions are in :mod:`obleth.core.cockpit_actions`.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.conf import settings
from django.utils import timezone

from obleth.core import services
from obleth.core.choices import HostingMode, ReplicaState
from obleth.core.joblogs import launch_paths, locate
from obleth.core.models import Endpoint, Launch, ManagedSpec, Model, Replica
from provisioner.reasons import explain_pending, explain_probe

HISTORY_LENGTH = 20

STATE_WORDS = {
    ReplicaState.PENDING: "waiting in the Slurm queue",
    ReplicaState.STARTING: "job running, server not answering yet",
    ReplicaState.HEALTHY: "serving: in the endpoint pool",
    ReplicaState.DRAINING: "being removed",
    ReplicaState.LOST: "lost: its job ended",
}


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value else None


def _secs(now: dt.datetime, since: dt.datetime | None) -> int | None:
    return max(0, int((now - since).total_seconds())) if since else None


def duration_words(secs: int | None) -> str:
    """``42s``, ``3m 05s``, ``2h 10m``, ``3d 4h``; ``—`` when unknown."""
    if secs is None:
        return "—"
    if secs < 60:
        return f"{secs}s"
    if secs < 3600:
        return f"{secs // 60}m {secs % 60:02d}s"
    if secs < 86400:
        return f"{secs // 3600}h {secs % 3600 // 60:02d}m"
    return f"{secs // 86400}d {secs % 86400 // 3600}h"


def state_since(replica: Replica, launch: Launch | None) -> dt.datetime | None:
    """When the replica entered its current state (best known)."""
    state = replica.state
    if state == ReplicaState.PENDING:
        return replica.submitted_at or replica.created_at
    if state == ReplicaState.STARTING:
        return replica.started_at or (launch.started_at if launch else None) or replica.updated_at
    if state == ReplicaState.HEALTHY:
        return replica.healthy_at or replica.updated_at
    if state == ReplicaState.LOST:
        return (
            getattr(replica, "lost_at", None)
            or (launch.ended_at if launch else None)
            or replica.updated_at
        )
    return replica.updated_at


def permissions_of(user: Any) -> dict[str, bool]:
    def has(perm: str) -> bool:
        return bool(user is not None and user.has_perm(perm))

    return {
        "restart": has("core.restart_replica"),
        "scale": has("core.change_managedspec"),
        "enable": has("core.change_managedspec"),
        "try_again": has("core.clear_lost") and has("core.dismiss_error"),
        "read_logs": has("core.read_job_log"),
    }


def endpoint_view(endpoint: Endpoint | None, now: dt.datetime) -> dict[str, Any] | None:
    if endpoint is None:
        return None
    return {
        "id": str(endpoint.pk),
        "name": endpoint.name,
        "api_base": endpoint.api_base,
        "enabled": endpoint.enabled,
        "health_status": endpoint.health_status,
        "consecutive_failures": endpoint.consecutive_failures,
        "last_message": endpoint.last_message,
        "last_http_status": endpoint.last_http_status,
        "last_latency_ms": endpoint.last_latency_ms,
        "last_checked_at": _iso(endpoint.last_checked_at),
        "next_check_at": _iso(endpoint.next_check_at),
        "next_check_in_secs": (
            max(0, int((endpoint.next_check_at - now).total_seconds()))
            if endpoint.next_check_at
            else None
        ),
    }


def log_places(launch: Launch | None) -> dict[str, Any] | None:
    """Where a launch's logs are and whether obleth can show them (no file is read here)."""
    if launch is None:
        return None
    paths = launch_paths(launch)
    out: dict[str, Any] = {"launch_id": str(launch.pk), "job_id": launch.job_id}
    for stream, path in paths.items():
        located = locate(path)
        out[stream] = {"path": path, "readable": located.local is not None, "why": located.why}
    out["same_file"] = paths["stdout"] == paths["stderr"]
    return out


def replica_view(
    replica: Replica,
    launch: Launch | None,
    endpoint: Endpoint | None,
    previous: Launch | None,
    now: dt.datetime,
) -> dict[str, Any]:
    since = state_since(replica, launch)
    age = _secs(now, replica.created_at)
    in_state = _secs(now, since)
    slurm_reason = replica.slurm_reason
    pending = None
    if replica.state == ReplicaState.PENDING and replica.job_id:
        pending = explain_pending(
            slurm_reason, expected_start=replica.expected_start_at, now=now
        ).as_dict()
    probe = explain_probe(replica.last_probe).as_dict() if replica.last_probe else None
    node = replica.nodes.split(",")[0] if replica.nodes else (launch.nodes if launch else "")
    return {
        "id": str(replica.pk),
        "state": replica.state,
        "state_label": replica.get_state_display(),
        "state_words": STATE_WORDS.get(ReplicaState(replica.state), replica.state),
        "message": replica.last_message,
        "node": node,
        "job_id": replica.job_id,
        "port": replica.port,
        "port_base": replica.port_base,
        "age_secs": age,
        "age": duration_words(age),
        "in_state_secs": in_state,
        "in_state": duration_words(in_state),
        "cancel_requested": replica.cancel_requested,
        "probe_failures": replica.probe_failures,
        "last_probe": replica.last_probe,
        "last_probe_at": _iso(replica.last_probe_at),
        "probe": probe,
        "slurm_state": replica.slurm_state,
        "slurm_reason": slurm_reason,
        "pending": pending,
        "endpoint": endpoint_view(endpoint, now),
        "logs": log_places(launch),
        "previous_logs": log_places(previous),
    }


def autoscale_view(spec: ManagedSpec) -> dict[str, Any] | None:
    """Autoscaling's decision in one line (None: the model does not autoscale)."""
    if not spec.autoscaled:
        return None
    bounds = f"{spec.min_replicas}–{spec.max_replicas}"
    sentence = spec.autoscale_message or (
        f"Autoscaling between {bounds} replicas; the provisioner has not decided yet."
    )
    return {
        "replicas": spec.autoscale_replicas,
        "min_replicas": spec.min_replicas,
        "max_replicas": spec.max_replicas,
        "target_in_flight": spec.target_in_flight,
        "sentence": sentence,
        "at": _iso(spec.autoscale_message_at),
        "line": f"Autoscaling ({bounds}, target {spec.target_in_flight} in flight per "
        f"replica): {sentence}",
    }


def launch_view(launch: Launch) -> dict[str, Any]:
    return {
        "id": str(launch.pk),
        "job_id": launch.job_id,
        "partition": launch.partition,
        "nodes": launch.nodes,
        "submitted_at": _iso(launch.submitted_at),
        "started_at": _iso(launch.started_at),
        "healthy_at": _iso(launch.healthy_at),
        "ended_at": _iso(launch.ended_at),
        "end_state": launch.end_state or ("in progress" if launch.job_id else "not submitted"),
        "end_reason": launch.end_reason,
        "ended": launch.ended_at is not None,
        "logs": log_places(launch),
    }


def banner(slurm_enabled: bool) -> dict[str, Any] | None:
    """The untrusted-state banner: replica states are frozen when the provisioner fails."""
    view = services.provisioner_view(slurm_enabled=slurm_enabled)
    if view.failing:
        since = view.last_ok_at
        text = f"The provisioner is {view.label}. Replica states below are frozen"
        text += f": they show the last successful pass ({_iso(since)})." if since else "."
        return {"kind": "failing", "text": text, "detail": view.last_pass_detail[:240]}
    if slurm_enabled and not view.running:
        seen = f" (last seen {_iso(view.last_seen_at)})" if view.last_seen_at else ""
        return {
            "kind": "not_running",
            "text": f"The provisioner is not running{seen}. Replica states are not being updated.",
            "detail": "",
        }
    return None


def model_reason(
    model: Model, spec: ManagedSpec | None, replicas: list[dict[str, Any]], failures: int
) -> str:
    """Why the model is in the state it is, in one sentence (the badge's reason)."""
    if not model.enabled:
        return "Disabled: the model takes no traffic."
    if spec is not None and not spec.enabled:
        return "Provisioning is disabled: its replicas are drained."
    if spec is not None and spec.max_job_failures and failures >= spec.max_job_failures:
        return (
            f"Stopped after {failures} failed launches (the limit is {spec.max_job_failures}). "
            "Fix the cause, then Try once more."
        )
    if spec is not None and spec.last_provision_error:
        return spec.last_provision_error
    serving = [r for r in replicas if r["state"] == ReplicaState.HEALTHY]
    if serving:
        return model.health_message or f"{len(serving)} replica(s) serving."
    live = [r for r in replicas if r["state"] != ReplicaState.LOST]
    if spec is not None and spec.autoscaled and spec.autoscale_replicas == 0 and not live:
        return "Scaled to zero while idle: the next request wakes it."
    lost = [r for r in replicas if r["state"] == ReplicaState.LOST]
    # the most recent loss first: what happened, then what the replacement is doing
    lost.sort(key=lambda r: r["in_state_secs"] if r["in_state_secs"] is not None else 1 << 30)
    before = (
        f"Job {lost[0]['job_id']} was lost ({lost[0]['message']}). Replacement: " if lost else ""
    )
    pending = [r for r in replicas if r["pending"]]
    if pending:
        return f"{before}Pending in the Slurm queue: {pending[0]['pending']['sentence']}"
    starting = [r for r in replicas if r["state"] == ReplicaState.STARTING]
    if starting:
        probe = starting[0]["probe"]
        return f"{before}Starting for {starting[0]['in_state']}" + (
            f": {probe['sentence']}" if probe else "."
        )
    if before:
        return before.removesuffix(" Replacement: ")
    return model.health_message or "No replica yet."


def model_panel(model: Model, user: Any = None, now: dt.datetime | None = None) -> dict[str, Any]:
    now = now or timezone.now()
    spec = ManagedSpec.objects.filter(model=model).first()
    rows = list(Replica.objects.filter(model_id=model.pk).order_by("created_at", "id"))
    launches = {launch.pk: launch for launch in Launch.objects.filter(pk__in=[r.pk for r in rows])}
    history = list(
        Launch.objects.filter(model_id=model.pk).order_by("-submitted_at")[:HISTORY_LENGTH]
    )
    ended = [launch for launch in history if launch.ended_at is not None]
    endpoint_ids = [r.endpoint_id for r in rows if r.endpoint_id]
    endpoints = {e.pk: e for e in Endpoint.objects.filter(pk__in=endpoint_ids)}
    replicas = []
    for row in rows:
        launch = launches.get(row.pk)
        previous = next((x for x in ended if x.pk != row.pk), None)
        endpoint = endpoints.get(row.endpoint_id) if row.endpoint_id else None
        replicas.append(replica_view(row, launch, endpoint, previous, now))
    failures = sum(1 for r in rows if r.state == ReplicaState.LOST)
    slurm_enabled = bool(
        services.SlurmSettings.objects.filter(pk=1).values_list("enabled", flat=True).first()
    )
    refused = next(
        (x for x in history if x.end_state == "rejected"),
        None,
    )
    refusal = None
    if spec is not None and spec.last_provision_error:
        refusal = {
            "sentence": spec.last_provision_error,
            "at": _iso(spec.last_provision_error_at),
            "hint": refused.refusal_hint if refused else "",
            "answer": refused.slurm_answer if refused else "",
        }
    backoff = int(getattr(settings, "OBLETH_PROVISIONER_INTERVAL_SECS", 15))
    cooldown_until = None
    if spec is not None and spec.last_provision_error_at:
        until = spec.last_provision_error_at + dt.timedelta(seconds=backoff)
        if until > now and spec.updated_at <= spec.last_provision_error_at:
            cooldown_until = until
    return {
        "model": {
            "id": str(model.pk),
            "name": model.name,
            "enabled": model.enabled,
            "slurm": model.hosting_mode == HostingMode.SLURM,
            "health_status": model.health_status,
            "health_message": model.health_message,
            "health_checked_at": _iso(model.health_checked_at),
            "reason": model_reason(model, spec, replicas, failures),
        },
        "spec": (
            {
                "enabled": spec.enabled,
                "target_replicas": spec.target_replicas,
                "min_replicas": spec.min_replicas,
                "max_job_failures": spec.max_job_failures,
                "failed_launches": failures,
                "stopped": bool(spec.max_job_failures and failures >= spec.max_job_failures),
                "partition": spec.partition,
                "submit_cooldown_until": _iso(cooldown_until),
                "autoscale": autoscale_view(spec),
            }
            if spec is not None
            else None
        ),
        "banner": banner(slurm_enabled),
        "refusal": refusal,
        "replicas": replicas,
        "launches": [launch_view(x) for x in history],
        "can": permissions_of(user),
        "now": now.isoformat(),
        "refresh_secs": int(getattr(settings, "OBLETH_COCKPIT_REFRESH_SECS", 3)),
    }
