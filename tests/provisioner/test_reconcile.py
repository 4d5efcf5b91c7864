"""The pass as a whole (provisioner/reconcile.py, services.run_loop, manage.py reconcile): holds,
dry runs, idle reasons, Celery dispatch, model leases and keeping secrets out of logs.

Slurm is the in-process FakeSlurmrestd (provisioner/slurm/fake.py, API v0.0.38 shapes recorded
from Slurm 22.05). It stands in for fault injection only (slurmrestd down, refused tokens, a
proxy's HTML 502, purged jobs); the same behaviours are proven against the real slurmrestd in
tests/e2e. Celery runs eagerly (tests/settings.py), so dispatched per-model tasks run in-process.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import io
import json
import logging
import os
import signal
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import jwt as pyjwt
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from obleth.core.models import (
    Launch,
    ManagedSpec,
    Model,
    ProvisionerStatus,
    Replica,
    SlurmSettings,
)
from provisioner import lease, reconcile
from provisioner.observe import fingerprint
from provisioner.reconcile import (
    EMPTY_FINGERPRINT,
    MODEL_LEASE,
    PassReport,
    run_model_task,
    run_pass,
    slurm_client_for,
)
from provisioner.services import StopFlag, run_loop
from provisioner.slurm.client import SlurmClient
from provisioner.slurm.fake import FakeJob, FakeNode, FakeSlurmrestd
from tests.plugins.factories import make_slurm_model

TOKEN = "fake-slurm-token"
OTHER_OWNER = "another-host:1:0123456789abcdef"


@dataclasses.dataclass
class Cluster:
    fake: FakeSlurmrestd
    prefix: str

    def our_jobs(self) -> list[FakeJob]:
        return [j for j in list(self.fake.jobs.values()) if j.name.startswith(self.prefix)]

    def writes(self) -> list[tuple[str, str]]:
        return [r for r in list(self.fake.requests) if r[0] in ("POST", "DELETE")]


@pytest.fixture
def cluster(db: Any, settings: Any) -> Iterator[Cluster]:
    """Slurm enabled against a fresh fake; jobs stay PENDING, so nothing is probed."""
    prefix = f"obr{uuid.uuid4().hex[:6]}-"
    settings.OBLETH_PROVISIONER_JOB_PREFIX = prefix
    settings.OBLETH_PROVISIONER_DISPATCH = "inline"
    settings.OBLETH_PROVISIONER_WARMUP_TIMEOUT_SECS = 0
    settings.OBLETH_PROVISIONER_INTERVAL_SECS = 15
    settings.OBLETH_MODEL_HEALTH_ENABLED = False
    with FakeSlurmrestd(token=TOKEN, start_delay=3600, nodes=[FakeNode("localhost")]) as fake:
        slurm = SlurmSettings.load()
        slurm.enabled = True
        slurm.slurmrestd_url = fake.url
        slurm.user = "obleth"
        slurm.jwt = TOKEN
        slurm.api_version = "v0.0.38"
        slurm.save()
        yield Cluster(fake, prefix)


def rows_state(model: Model | None = None) -> list[tuple[Any, ...]]:
    rows = Replica.objects.all() if model is None else Replica.objects.filter(model_id=model.pk)
    return list(
        rows.order_by("id").values_list(
            "id", "state", "job_id", "last_message", "endpoint_id", "updated_at"
        )
    )


def status_row() -> ProvisionerStatus:
    return ProvisionerStatus.load()


# ------------------------------------------------------------------------------------- holds


def _set_down(c: Cluster) -> None:
    c.fake.set_down(True)


def _auth(c: Cluster) -> None:
    c.fake.auth_failure = True


def _html(c: Cluster) -> None:
    c.fake.html_502 = True


def _controller(c: Cluster) -> None:
    c.fake.controller_down = True


def _purge_all(c: Cluster) -> None:
    for job in c.our_jobs():
        c.fake.purge(job.job_id)


@pytest.mark.parametrize(
    ("fault", "words"),
    [
        (_set_down, "slurm job listing failed; holding"),
        (_auth, "did not accept the JWT"),
        (_html, "slurm job listing failed; holding"),
        (_controller, "slurm job listing failed; holding"),
        (_purge_all, "all 2 tracked slurm jobs are missing"),
    ],
    ids=["listing-down", "auth-failure", "html-502", "controller-down", "all-vanished"],
)
def test_pass_holds_and_changes_nothing(
    cluster: Cluster, fault: Callable[[Cluster], None], words: str
) -> None:
    model = make_slurm_model(spec={"target_replicas": 2})
    assert run_pass().status == "ok"
    before = rows_state()
    assert len(before) == 2 and all(r[2] for r in before)
    writes_before = len(cluster.writes())
    launches_before = list(Launch.objects.values_list("id", "end_state", "ended_at"))
    # A change of target would normally be acted on: prove the held pass does not.
    ManagedSpec.objects.filter(pk=model.pk).update(target_replicas=3)

    fault(cluster)
    report = run_pass()

    assert report.status == "error"
    assert words in report.detail, report.detail
    assert report.planned == [] and report.results == []
    assert rows_state() == before
    assert list(Launch.objects.values_list("id", "end_state", "ended_at")) == launches_before
    assert len(cluster.writes()) == writes_before
    status = status_row()
    assert status.last_pass_status == "error"
    assert words in status.last_pass_detail
    assert status.non_ok_since is not None


def test_a_held_pass_does_not_stop_the_next_one(cluster: Cluster) -> None:
    make_slurm_model(spec={"target_replicas": 1})
    cluster.fake.html_502 = True
    assert run_pass().status == "error"
    assert Replica.objects.count() == 0
    cluster.fake.html_502 = False
    assert run_pass().status == "ok"
    assert Replica.objects.count() == 1
    status = status_row()
    assert status.last_pass_status == "ok" and status.non_ok_since is None


# ----------------------------------------------------------------------------------- dry run


def test_dry_run_plans_but_changes_nothing(cluster: Cluster) -> None:
    model = make_slurm_model(spec={"target_replicas": 2})
    [orphan] = cluster.fake.bulk_add(1, name_prefix=f"{cluster.prefix}ghost-")
    requests_before = len(cluster.fake.requests)

    report = run_pass(dry_run=True)

    assert report.status == "ok"
    assert report.detail == "dry run: 3 action(s) planned"
    kinds = [a["type"] for a in report.planned]
    assert kinds == ["Submit", "Submit", "CancelOrphan"]
    assert {a["model_id"] for a in report.planned if a["type"] == "Submit"} == {str(model.pk)}
    assert report.results == []
    assert Replica.objects.count() == 0 and Launch.objects.count() == 0
    assert cluster.writes() == []
    assert len(cluster.fake.requests) > requests_before  # it did look
    orphan_job = cluster.fake.job(orphan)
    assert orphan_job is not None and orphan_job.state == "RUNNING"
    assert status_row().last_pass_status == ""  # a dry run is not a pass outcome


def test_command_dry_run_prints_the_plan(cluster: Cluster) -> None:
    model = make_slurm_model(spec={"target_replicas": 1})
    out = io.StringIO()
    call_command("reconcile", "--dry-run", stdout=out)
    text = out.getvalue()
    assert text.startswith("pass ok: dry run: 1 action(s) planned")
    assert "  planned: Submit " in text
    assert f"model_id={model.pk}" in text and f"job_name={cluster.prefix}" in text
    assert Replica.objects.count() == 0 and cluster.writes() == []


def test_command_json_output(cluster: Cluster) -> None:
    make_slurm_model(spec={"target_replicas": 1})
    out = io.StringIO()
    call_command("reconcile", "--dry-run", "--json", stdout=out)
    data = json.loads(out.getvalue())
    assert data["status"] == "ok" and data["failed"] == 0
    assert [a["type"] for a in data["planned"]] == ["Submit"]
    assert data["results"] == [] and data["slurm_requests"] >= 1

    out = io.StringIO()
    call_command("reconcile", "--json", stdout=out)
    data = json.loads(out.getvalue())
    assert data["status"] == "ok"
    assert [(r["action"], r["ok"]) for r in data["results"]] == [("Submit", True)]
    assert Replica.objects.count() == 1


def test_command_reports_a_held_pass_as_an_error(cluster: Cluster) -> None:
    cluster.fake.html_502 = True
    out = io.StringIO()
    with pytest.raises(CommandError, match="slurm job listing failed"):
        call_command("reconcile", stdout=out)
    assert out.getvalue().startswith("pass error: ")


def test_command_refuses_loop_with_dry_run(cluster: Cluster) -> None:
    with pytest.raises(CommandError, match="--loop and --dry-run"):
        call_command("reconcile", "--loop", "--dry-run")
    assert status_row().last_pass_status == ""


@pytest.fixture
def loop_calls(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The command's loop, recorded instead of run (signal handlers left alone)."""
    calls: list[float] = []

    def fake_loop(*, interval: float, stop: Any = None, once_hook: Any = None) -> None:
        calls.append(interval)

    monkeypatch.setattr("provisioner.services.run_loop", fake_loop)
    monkeypatch.setattr("provisioner.services.StopFlag.install", lambda self: None)
    return calls


def test_command_loop_interval(cluster: Cluster, loop_calls: list[float]) -> None:
    call_command("reconcile", "--loop", "--interval", "2.5", stderr=io.StringIO())
    call_command("reconcile", "--loop", stderr=io.StringIO())
    assert loop_calls == [2.5, 15.0]
    with pytest.raises(CommandError, match="--interval must be a positive"):
        call_command("reconcile", "--loop", "--interval", "-1")
    assert loop_calls == [2.5, 15.0]


def test_command_refuses_a_zero_interval(cluster: Cluster, loop_calls: list[float]) -> None:
    with pytest.raises(CommandError, match="--interval must be a positive"):
        call_command("reconcile", "--loop", "--interval", "0", stderr=io.StringIO())
    assert loop_calls == []


# -------------------------------------------------------------------------------------- loop


def test_loop_stops_on_the_flag_after_finishing_the_pass(cluster: Cluster) -> None:
    make_slurm_model(spec={"target_replicas": 1})
    stop = StopFlag()
    reports: list[PassReport] = []

    def once(report: PassReport) -> None:
        reports.append(report)
        if len(reports) == 2:
            stop.event.set()

    run_loop(interval=0.01, once_hook=once, stop=stop)
    assert [r.status for r in reports] == ["ok", "ok"]
    assert Replica.objects.count() == 1 and len(cluster.our_jobs()) == 1


def test_sigterm_during_a_pass_lets_it_finish_then_stops_the_loop(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_slurm_model(spec={"target_replicas": 2})
    stop = StopFlag()
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    real_run_pass = reconcile.run_pass
    reports: list[PassReport] = []

    def pass_hit_by_sigterm(**kwargs: Any) -> PassReport:
        os.kill(os.getpid(), signal.SIGTERM)  # handled at once by StopFlag: sets the flag only
        assert stop.event.is_set()
        return real_run_pass(**kwargs)

    monkeypatch.setattr(reconcile, "run_pass", pass_hit_by_sigterm)
    try:
        stop.install()
        run_loop(interval=3600, once_hook=reports.append, stop=stop)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    assert [r.status for r in reports] == ["ok"]
    assert len(reports[0].results) == 2 and all(r.ok for r in reports[0].results)
    assert Replica.objects.count() == 2 and len(cluster.our_jobs()) == 2


# ------------------------------------------------------------------------------- idle reasons


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"enabled": False}, "slurm disabled in settings"),
        ({"slurmrestd_url": ""}, "slurm enabled but slurmrestd_url is empty"),
        ({"user": " "}, "slurm enabled but no slurm user is set"),
        ({"jwt": ""}, "slurm enabled but no JWT is set"),
    ],
    ids=["disabled", "no-url", "no-user", "no-jwt"],
)
def test_idle_reasons_are_recorded_and_nothing_is_contacted(
    cluster: Cluster, change: dict[str, Any], reason: str
) -> None:
    make_slurm_model(spec={"target_replicas": 1})
    slurm = SlurmSettings.load()
    for field, value in change.items():
        setattr(slurm, field, value)
    slurm.save()
    made: list[SlurmSettings] = []

    def factory(s: SlurmSettings) -> SlurmClient:
        made.append(s)
        return slurm_client_for(s)

    report = run_pass(client_factory=factory)
    assert (report.status, report.detail) == ("idle", reason)
    assert made == [] and cluster.fake.request_count == 0
    assert Replica.objects.count() == 0
    status = status_row()
    assert status.last_pass_status == "idle" and status.last_pass_detail == reason
    assert status.heartbeat_at is not None


# ----------------------------------------------------------------------- celery and leases


def test_celery_dispatch_runs_per_model_tasks_like_inline(cluster: Cluster) -> None:
    first = make_slurm_model(spec={"target_replicas": 2})
    second = make_slurm_model(spec={"target_replicas": 1, "serving_port": 19000})
    report = run_pass(dispatch="celery")
    assert report.status == "ok", report.detail
    assert report.dispatched_models == 2
    assert "2 model task(s) dispatched" in report.detail
    assert report.results == []  # the tasks ran them, not the pass
    assert Replica.objects.filter(model_id=first.pk).exclude(job_id="").count() == 2
    assert Replica.objects.filter(model_id=second.pk).exclude(job_id="").count() == 1
    assert len(cluster.our_jobs()) == 3
    assert Launch.objects.count() == 3

    # the next pass only annotates the rows ("submitted" -> the job's state) ...
    report = run_pass(dispatch="celery")
    assert {a["type"] for a in report.planned} == {"UpdateMessage"}
    assert set(Replica.objects.values_list("last_message", flat=True)) == {"PENDING"}
    # ... and then it is the steady state: nothing planned, nothing dispatched, nothing changed
    before = rows_state()
    report = run_pass(dispatch="celery")
    assert report.planned == [] and report.dispatched_models == 0
    assert rows_state() == before
    assert len(cluster.our_jobs()) == 3


def _planned_for(model: Model) -> list[dict[str, Any]]:
    report = run_pass(dry_run=True)
    return [a for a in report.planned if a.get("model_id") == str(model.pk)]


def test_model_task_runs_a_fresh_plan(cluster: Cluster) -> None:
    model = make_slurm_model(spec={"target_replicas": 1})
    payload = _planned_for(model)
    result = run_model_task(str(model.pk), payload, EMPTY_FINGERPRINT, timezone.now().isoformat())
    assert [(r["action"], r["ok"]) for r in result["results"]] == [("Submit", True)]
    assert Replica.objects.filter(model_id=model.pk).exclude(job_id="").count() == 1


def test_model_task_skips_a_stale_plan(cluster: Cluster) -> None:
    model = make_slurm_model(spec={"target_replicas": 1})
    payload = _planned_for(model)
    planned_at = (timezone.now() - dt.timedelta(seconds=2 * 15 + 31 + 5)).isoformat()
    result = run_model_task(str(model.pk), payload, EMPTY_FINGERPRINT, planned_at)
    assert "results" not in result and result["skipped"].startswith("plan is ")
    assert Replica.objects.count() == 0 and cluster.our_jobs() == []


def test_model_task_skips_when_rows_changed_since_the_plan(cluster: Cluster) -> None:
    model = make_slurm_model(spec={"target_replicas": 1})
    run_pass()
    row = Replica.objects.get(model_id=model.pk)
    seen = fingerprint(Replica.objects.filter(model_id=model.pk))
    ManagedSpec.objects.filter(pk=model.pk).update(target_replicas=2)
    payload = _planned_for(model)
    assert "Submit" in [a["type"] for a in payload]
    # An operator's restart request lands between the plan and the task.
    Replica.objects.filter(pk=row.pk).update(cancel_requested=True, updated_at=timezone.now())

    result = run_model_task(str(model.pk), payload, seen, timezone.now().isoformat())
    [outcome] = result["results"]
    assert outcome["ok"] and "rows changed since observed" in outcome["detail"]
    assert Replica.objects.filter(model_id=model.pk).count() == 1
    assert len(cluster.our_jobs()) == 1


def test_busy_model_is_left_for_the_next_pass(cluster: Cluster) -> None:
    busy = make_slurm_model(spec={"target_replicas": 1})
    free = make_slurm_model(spec={"target_replicas": 1, "serving_port": 19000})
    name = f"{MODEL_LEASE}{busy.pk}"
    assert lease.acquire(name, OTHER_OWNER, 60)

    report = run_pass()
    assert report.status == "ok"
    assert "1 model(s) busy, left for the next pass" in report.detail
    assert not Replica.objects.filter(model_id=busy.pk).exists()
    assert Replica.objects.filter(model_id=free.pk).count() == 1

    # The lease taken between the plan and the task: the task acts on nothing.
    payload = _planned_for(busy)
    result = run_model_task(str(busy.pk), payload, EMPTY_FINGERPRINT, timezone.now().isoformat())
    assert [r["detail"] for r in result["results"]] == ["busy: another pass acts on it"]
    assert not Replica.objects.filter(model_id=busy.pk).exists()

    assert lease.release(name, OTHER_OWNER)
    report = run_pass()
    assert "busy" not in report.detail
    assert Replica.objects.filter(model_id=busy.pk).count() == 1


def test_a_second_pass_is_skipped_while_one_runs(cluster: Cluster) -> None:
    make_slurm_model(spec={"target_replicas": 1})
    assert lease.acquire(reconcile.PASS_LEASE, OTHER_OWNER, 60)
    report = run_pass()
    assert (report.status, report.detail) == ("skipped", "another pass is running")
    assert Replica.objects.count() == 0 and cluster.fake.request_count == 0


# ------------------------------------------------------------------------- secrets in logs


class RawRecords(logging.Handler):
    """Keeps every record's text as emitted, BEFORE the console handler's redaction filter
    (which rewrites records in place): a secret masked there was still logged."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.texts: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info:
            text += "\n" + logging.Formatter().formatException(record.exc_info)
        self.texts.append(text)


def test_secrets_never_reach_logs_or_stored_messages(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    slurm_jwt = pyjwt.encode(
        {"sun": "obleth", "exp": 4_102_444_800, "n": uuid.uuid4().hex}, "k" * 32, "HS256"
    )
    hf_token = f"hf_{uuid.uuid4().hex}SECRET"
    cluster.fake.add_token(slurm_jwt, "obleth")
    slurm = SlurmSettings.load()
    slurm.jwt = slurm_jwt
    slurm.hf_token = hf_token
    slurm.api_version = ""  # detection requests too
    slurm.save()
    good = make_slurm_model(spec={"target_replicas": 1})
    # refused submit (a range of its own: models' port ranges do not overlap)
    make_slurm_model(spec={"target_replicas": 1, "partition": "nope", "serving_port": 18100})

    raw = RawRecords()
    root = logging.getLogger()
    root.handlers.insert(0, raw)
    caplog.set_level(logging.DEBUG)
    try:
        reports = [run_pass()]
        cluster.fake.auth_failure = True
        reports.append(run_pass())
        cluster.fake.auth_failure = False
        cluster.fake.html_502 = True
        reports.append(run_pass())
        cluster.fake.html_502 = False
        cluster.fake.purge(Replica.objects.get(model_id=good.pk).job_id)
        reports.append(run_pass())
        cluster.fake.set_down(True)
        reports.append(run_pass())
    finally:
        root.removeHandler(raw)

    # The first pass's refused submit (partition "nope") is a failed action: that pass is an error
    # too (failed actions reach the pass outcome); the fourth is in that model's backoff.
    assert [r.status for r in reports] == ["error", "error", "error", "ok", "error"]
    # The secrets were really in play: the job got the HF token, slurmrestd the JWT.
    assert any(j.environment.get("HF_TOKEN") == hf_token for j in cluster.our_jobs())
    assert len(raw.texts) > 5
    stored = [
        json.dumps([r.as_dict() for r in reports], default=str),
        caplog.text,
        "\n".join(raw.texts),
        json.dumps(list(Launch.objects.values_list("submission", "end_reason")), default=str),
        "\n".join(Replica.objects.values_list("last_message", flat=True)),
        "\n".join(ManagedSpec.objects.values_list("last_provision_error", flat=True)),
        status_row().last_pass_detail,
    ]
    for text in stored:
        assert slurm_jwt not in text
        assert hf_token not in text
        assert slurm_jwt.split(".")[2] not in text  # not even the signature part


# ------------------------------------------------------------------ client construction errors


def test_unsupported_pinned_api_version_is_a_recorded_pass_error(cluster: Cluster) -> None:
    make_slurm_model(spec={"target_replicas": 1})
    # The settings validator accepts any "letters, digits and dots" version.
    SlurmSettings.objects.filter(pk=1).update(api_version="v0.0.35")
    report = run_pass()
    assert report.status == "error"
    assert "v0.0.35" in report.detail
    status = status_row()
    assert status.last_pass_status == "error" and "v0.0.35" in status.last_pass_detail
    assert Replica.objects.count() == 0 and cluster.fake.request_count == 0
