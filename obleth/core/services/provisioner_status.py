"""The provisioner status view: its heartbeat row summarised as running, failing or not
running, for the API, the admin and the cockpit."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from django.utils import timezone

from obleth.core.choices import PassStatus
from obleth.core.models import ProvisionerStatus, SlurmSettings

#: A provisioner whose heartbeat is at most this old is "running" (inclusive).
RUNNING_WINDOW_SECS = 60


@dataclasses.dataclass(frozen=True)
class ProvisionerView:
    """The provisioner as operators see it: alive or not, and whether its passes succeed."""

    state: str  # "running" | "failing" | "not_running"
    label: str  # "running", "running but failing since <time>", "not running"
    running: bool
    failing: bool
    failing_since: dt.datetime | None
    held_secs: int | None
    last_seen_at: dt.datetime | None
    last_seen_secs: int | None
    version: str
    host: str
    last_pass_status: str
    last_pass_detail: str
    last_pass_at: dt.datetime | None
    last_pass_ms: int | None
    last_ok_at: dt.datetime | None
    held_alert_active: bool

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def provisioner_view(
    status: ProvisionerStatus | None = None,
    *,
    slurm_enabled: bool | None = None,
    now: dt.datetime | None = None,
) -> ProvisionerView:
    """Summarise the heartbeat row.

    Running means a heartbeat at most ``RUNNING_WINDOW_SECS`` ago. Failing means the last pass
    ended in ``error`` (or ``idle`` while Slurm is enabled, which freezes replica states just the
    same); ``failing_since`` is the start of that streak.
    """
    now = now or timezone.now()
    status = status or ProvisionerStatus.load()
    if slurm_enabled is None:
        slurm_enabled = bool(
            SlurmSettings.objects.filter(pk=1).values_list("enabled", flat=True).first()
        )
    last_seen_secs = (
        max(0, int((now - status.heartbeat_at).total_seconds()))
        if status.heartbeat_at is not None
        else None
    )
    running = last_seen_secs is not None and last_seen_secs <= RUNNING_WINDOW_SECS
    pass_status = status.last_pass_status or ""
    non_ok = pass_status == PassStatus.ERROR or (pass_status == PassStatus.IDLE and slurm_enabled)
    failing_since = (status.non_ok_since or status.last_pass_at) if non_ok else None
    held_secs = (
        max(0, int((now - failing_since).total_seconds())) if failing_since is not None else None
    )
    failing = running and non_ok
    if not running:
        state, label = "not_running", "not running"
    elif failing and failing_since is not None:
        state = "failing"
        label = (
            f"running but failing since {timezone.localtime(failing_since):%Y-%m-%d %H:%M:%S %Z}"
        )
    else:
        state, label = "running", "running"
    return ProvisionerView(
        state=state,
        label=label,
        running=running,
        failing=failing,
        failing_since=failing_since,
        held_secs=held_secs,
        last_seen_at=status.heartbeat_at,
        last_seen_secs=last_seen_secs,
        version=status.version,
        host=status.host,
        last_pass_status=pass_status,
        last_pass_detail=status.last_pass_detail,
        last_pass_at=status.last_pass_at,
        last_pass_ms=status.last_pass_ms,
        last_ok_at=status.last_ok_at,
        held_alert_active=status.held_alert_active,
    )
