"""The web process's /metrics: provisioner figures read from the database at scrape time."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from obleth.core.models import Launch, ProvisionerStatus, Replica
from provisioner import status
from provisioner.reconcile import run_pass

pytestmark = pytest.mark.django_db


def _sample(text: str, name: str, **labels: str) -> float | None:
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        metric, _, value = line.rpartition(" ")
        base, _, rest = metric.partition("{")
        if base == name and ",".join(sorted(rest.rstrip("}").split(","))) == want:
            return float(value)
    return None


def test_metrics_count_replicas_launches_and_start_to_serving(client: Client) -> None:
    now = timezone.now()
    for state in ("healthy", "healthy", "pending"):
        Replica.objects.create(
            model_id="00000000-0000-0000-0000-000000000001",
            model_name="m",
            state=state,
            job_name="j",
        )
    for i, (end_state, serve_secs) in enumerate([("", 12), ("PREEMPTED", 40), ("TIMEOUT", None)]):
        Launch.objects.create(
            id=f"00000000-0000-0000-0000-00000000001{i}",
            model_id="00000000-0000-0000-0000-000000000001",
            model_name="m",
            job_name=f"j{i}",
            started_at=now,
            healthy_at=now + dt.timedelta(seconds=serve_secs) if serve_secs else None,
            end_state=end_state,
        )
    status.record_pass("ok", "", 250, kind="full", now=now)
    r = client.get("/metrics")
    assert r.status_code == 200
    text = r.content.decode()
    assert _sample(text, "obleth_provisioner_replicas", model="m", state="healthy") == 2
    assert _sample(text, "obleth_provisioner_replicas", model="m", state="pending") == 1
    assert _sample(text, "obleth_provisioner_launches_total", end_state="PREEMPTED") == 1
    assert _sample(text, "obleth_provisioner_launches_total", end_state="running") == 1
    assert _sample(text, "obleth_provisioner_job_start_to_serving_seconds_bucket", le="20") == 1
    assert _sample(text, "obleth_provisioner_job_start_to_serving_seconds_count") == 2
    assert _sample(text, "obleth_provisioner_last_pass_seconds", kind="full") == 0.25
    assert _sample(text, "obleth_provisioner_last_pass_ok", kind="full") == 1
    assert _sample(text, "obleth_provisioner_last_pass_seconds", kind="fast") is None


def test_pass_duration_and_outcome_are_labelled_by_kind(client: Client) -> None:
    """Full and fast passes each keep their last duration and outcome, and are counted by
    outcome: a fast pass every second does not hide a failing full pass."""
    t0 = timezone.now()
    status.record_pass("ok", "", 1200, kind="full", now=t0)
    status.record_pass("ok", "", 40, kind="fast", now=t0)
    status.record_pass("error", "listing failed", 2500, kind="full", now=t0)
    status.record_pass("ok", "", 35, kind="fast", now=t0)
    status.record_pass("idle", "slurm disabled in settings", 1, kind="fast", now=t0)
    text = client.get("/metrics").content.decode()
    assert _sample(text, "obleth_provisioner_last_pass_seconds", kind="full") == 2.5
    assert _sample(text, "obleth_provisioner_last_pass_seconds", kind="fast") == 0.001
    assert _sample(text, "obleth_provisioner_last_pass_ok", kind="full") == 0
    assert _sample(text, "obleth_provisioner_last_pass_ok", kind="fast") == 1  # idle counts ok
    counts = {
        (kind, outcome): _sample(
            text, "obleth_provisioner_passes_total", kind=kind, outcome=outcome
        )
        for kind in ("full", "fast")
        for outcome in ("ok", "idle", "error")
    }
    assert counts == {
        ("full", "ok"): 1,
        ("full", "idle"): 0,
        ("full", "error"): 1,
        ("fast", "ok"): 2,
        ("fast", "idle"): 1,
        ("fast", "error"): 0,
    }
    # The last pass of either kind stays on the status row (dashboard, API, held alert).
    row = ProvisionerStatus.load()
    assert (row.last_pass_status, row.last_pass_ms) == ("idle", 1)
    with pytest.raises(ValueError, match="kind must be 'full' or 'fast'"):
        status.record_pass("ok", "", 1, kind="slow")  # type: ignore[arg-type]


def test_run_pass_records_its_kind(client: Client) -> None:
    """Through run_pass (Slurm disabled, so both passes are idle): each pass counts under its
    own kind."""
    run_pass()
    run_pass(fast=True)
    run_pass(fast=True)
    text = client.get("/metrics").content.decode()
    full = _sample(text, "obleth_provisioner_passes_total", kind="full", outcome="idle")
    fast = _sample(text, "obleth_provisioner_passes_total", kind="fast", outcome="idle")
    assert (full, fast) == (1, 2)
    assert _sample(text, "obleth_provisioner_last_pass_ok", kind="fast") == 1


def test_metrics_are_not_for_the_public(client: Client, settings: Any) -> None:
    assert client.get("/metrics", REMOTE_ADDR="203.0.113.9").status_code == 403
    settings.OBLETH_METRICS_TOKEN = "scrape-token-0123456789"
    assert client.get("/metrics").status_code == 401
    ok = client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-token-0123456789")
    assert ok.status_code == 200


def test_the_grafana_dashboard_uses_only_metrics_obleth_exports() -> None:
    """Every metric a panel of deploy/grafana/obleth-dashboard.json queries is one we define
    (the gateway's in obleth.gateway.metrics, the provisioner's in provisioner.metrics)."""
    import json
    import re
    from pathlib import Path

    import obleth.gateway.metrics as gateway_metrics
    import provisioner.metrics as provisioner_metrics

    root = Path(__file__).resolve().parents[2]
    dash = json.loads((root / "deploy" / "grafana" / "obleth-dashboard.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    assert len(exprs) >= 14
    used = {m for e in exprs for m in re.findall(r"\b(obleth_[a-z_]+)", e)}
    source = (
        Path(gateway_metrics.__file__).read_text() + Path(provisioner_metrics.__file__).read_text()
    )
    defined = set(re.findall(r'"(obleth_[a-z_]+)"', source))
    suffixes = ("_total", "_bucket", "_count", "_sum")
    for name in used:
        base = name
        for suffix in suffixes:
            if base.endswith(suffix) and base.removesuffix(suffix) in defined:
                base = base.removesuffix(suffix)
        assert base in defined, f"the dashboard queries {name}, which obleth does not export"
