"""The model page as the cockpit: job log paths and reading, what a pass records on replicas,
refused submits, the live panel's JSON, its actions and the job log views (admin and API).

Nothing is faked but Slurm itself in the unit parts: ``JobInfo`` rows stand in for what
slurmrestd would list, and a tiny client object for the partitions a refusal hint reads. Log
files are real files under tmp_path; users are real users in the real role groups.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from obleth.accounts.services import create_token
from obleth.core import joblogs
from obleth.core.models import Launch, ManagedSpec, Model, Replica
from obleth.logging import register_secret
from provisioner import observed, refusals
from provisioner.slurm.errors import SlurmRejected
from provisioner.slurm.types import JobInfo, JobPhase
from tests.plugins.factories import make_slurm_model

pytestmark = pytest.mark.django_db

FAKE_JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdW4iOiJvYmxldGgifQ.c2lnbmF0dXJlLXNpZ25hdHVyZQ"


# ------------------------------------------------------------------------------ paths (pure)


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("/logs/m-%j.out", "/logs/m-4242.out"),
        ("/logs/%x-%j.err", "/logs/obt-m-abc-4242.err"),
        ("/logs/%8j.out", "/logs/00004242.out"),
        ("/logs/%A_%a.out", "/logs/4242_4294967294.out"),
        ("/logs/%N/%u/%J.out", "/logs/node1/alice/4242.out"),
        ("/logs/100%%-%j.out", "/logs/100%-4242.out"),
        ("slurm-%j.out", "/home/alice/work/slurm-4242.out"),
        ("/logs/plain.out", "/logs/plain.out"),
    ],
)
def test_slurm_filename_patterns_resolve_with_the_job(pattern: str, expected: str) -> None:
    got = joblogs.resolve_pattern(
        pattern,
        job_id="4242",
        job_name="obt-m-abc",
        user="alice",
        node="node1.cluster.example",
        workdir="/home/alice/work",
    )
    assert got == expected


def test_without_a_job_id_the_pattern_stays_a_pattern() -> None:
    assert joblogs.resolve_pattern("/logs/%j.out", job_id="") == "/logs/%j.out"


def test_without_a_log_folder_the_job_writes_slurm_jobid_out_in_its_workdir() -> None:
    launch = Launch(
        id=uuid.uuid4(),
        job_id="77",
        job_name="j",
        submission={"current_working_directory": "/tmp"},
    )
    assert joblogs.launch_paths(launch) == {
        "stdout": "/tmp/slurm-77.out",
        "stderr": "/tmp/slurm-77.out",  # sbatch: stderr goes with stdout
    }


# ------------------------------------------------------------------------ readable (files)


def _mounts(*entries: str) -> list[joblogs.Mount]:
    return joblogs.parse_mounts(list(entries))


def test_no_readable_folder_says_how_to_configure_it() -> None:
    found = joblogs.locate("/logs/a.out", [])
    assert found.local is None and "OBLETH_JOB_LOGS_READABLE" in found.why


def test_a_path_outside_the_folders_is_refused_with_where_it_may_be(tmp_path: Path) -> None:
    found = joblogs.locate("/etc/passwd", _mounts(str(tmp_path)))
    assert found.local is None and str(tmp_path) in found.why


@pytest.mark.parametrize("path", ["/logs/../etc/passwd", "/logs/a\x00.out", "relative/a.out"])
def test_tricky_paths_are_never_opened(path: str, tmp_path: Path) -> None:
    found = joblogs.locate(path, _mounts(f"/logs={tmp_path}"))
    assert found.local is None


def test_a_cluster_path_maps_to_its_local_mount(tmp_path: Path) -> None:
    found = joblogs.locate("/cluster/logs/sub/a.out", _mounts(f"/cluster/logs={tmp_path}"))
    assert found.local == tmp_path / "sub" / "a.out"


def test_a_symlink_out_of_the_folder_is_refused(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret")
    os.symlink(secret, logs / "evil.out")
    found = joblogs.locate(str(logs / "evil.out"), _mounts(str(logs)))
    assert found.local is None and "symlink" in found.why


def _launch(model: Model, log_dir: Path, job_id: str = "900", **kwargs: Any) -> Launch:
    values: dict[str, Any] = {
        "id": uuid.uuid4(),
        "model_id": model.pk,
        "model_name": model.name,
        "job_id": job_id,
        "job_name": f"obt-{model.name}",
        "stdout_path": f"{log_dir}/%x-%j.out",
        "stderr_path": f"{log_dir}/%x-%j.err",
        "submission": {"current_working_directory": "/tmp"},
    }
    values.update(kwargs)
    return Launch.objects.create(**values)


def test_the_tail_is_redacted_and_bounded(tmp_path: Path, settings: Any) -> None:
    settings.OBLETH_JOB_LOGS_READABLE = [str(tmp_path)]
    settings.OBLETH_JOB_LOGS_MAX_KIB = 1
    model = make_slurm_model()
    launch = _launch(model, tmp_path)
    register_secret("hf_registeredsecretvalue")
    lines = [f"line {i}" for i in range(500)]
    lines += [f"token {FAKE_JWT}", "HF hf_registeredsecretvalue", "nul\x00byte"]
    (tmp_path / f"obt-{model.name}-900.out").write_text("\n".join(lines) + "\n")
    tail = joblogs.read_tail(launch, "stdout", 50)
    assert tail.readable and tail.truncated
    assert tail.text.splitlines()[-1] == "nulbyte"
    assert FAKE_JWT not in tail.text and "[redacted-jwt]" in tail.text
    assert "hf_registeredsecretvalue" not in tail.text
    assert len(tail.text.splitlines()) == 50
    missing = joblogs.read_tail(launch, "stderr", 10)
    assert not missing.readable and "does not exist" in missing.why


# --------------------------------------------------------------- what a pass records (DB)


def _job(job_id: str, state: str, phase: JobPhase, **kwargs: Any) -> JobInfo:
    return JobInfo(job_id=job_id, name="n", state=state, phase=phase, **kwargs)


def test_a_pass_records_probe_outcome_slurm_reason_and_resolved_paths(tmp_path: Path) -> None:
    model = make_slurm_model()
    pending = Replica.objects.create(
        model_id=model.pk, model_name=model.name, job_name="a", job_id="11"
    )
    running = Replica.objects.create(
        model_id=model.pk, model_name=model.name, job_name="b", job_id="12", state="starting"
    )
    launch = _launch(model, tmp_path, job_id="12", id=running.pk, job_name="b")
    now = timezone.now()
    start = int((now + dt.timedelta(hours=1)).timestamp())
    jobs = {
        "11": _job("11", "PENDING", JobPhase.PENDING, reason="Resources", start_time=start),
        "12": _job("12", "RUNNING", JobPhase.RUNNING, nodes=("node7",)),
    }
    changed = observed.record(
        replica_ids_jobs={pending.pk: "11", running.pk: "12"},
        jobs=jobs,
        probe_details={running.pk: "connection refused on all 8 ports (8000-8007)"},
        now=now,
    )
    assert changed == 2
    pending.refresh_from_db()
    running.refresh_from_db()
    launch.refresh_from_db()
    assert (pending.slurm_state, pending.slurm_reason) == ("PENDING", "Resources")
    assert pending.expected_start_at is not None
    assert int(pending.expected_start_at.timestamp()) == start
    assert pending.last_probe == ""
    assert running.last_probe == "connection refused on all 8 ports (8000-8007)"
    assert running.last_probe_at == now and running.expected_start_at is None
    assert launch.stdout_path == f"{tmp_path}/b-12.out"
    assert launch.stderr_path == f"{tmp_path}/b-12.err"

    # The same outcome on the next pass writes nothing; a new one does.
    later = now + dt.timedelta(seconds=5)
    same = {running.pk: "connection refused on all 8 ports (8000-8007)"}
    ids = {pending.pk: "11", running.pk: "12"}
    assert observed.record(replica_ids_jobs=ids, jobs=jobs, probe_details=same, now=later) == 0
    new = {running.pk: "loading (HTTP 200, status 'loading') on port 8000"}
    assert observed.record(replica_ids_jobs=ids, jobs=jobs, probe_details=new, now=later) == 1
    running.refresh_from_db()
    assert running.last_probe.startswith("loading") and running.last_probe_at == later


def test_a_refused_submit_keeps_the_whole_answer_and_lists_partitions() -> None:
    model = make_slurm_model()
    launch = Launch.objects.create(
        id=uuid.uuid4(), model_id=model.pk, model_name=model.name, job_name="x"
    )

    class Partitions:
        def partitions(self) -> list[Any]:
            return [type("P", (), {"name": name})() for name in ("debug", "gpu")]

    exc = SlurmRejected(
        "Invalid partition name specified",
        status=500,
        detail='{"errors": [{"error": "Invalid partition name specified", "error_number": 2000,'
        ' "token": "' + FAKE_JWT + '"}]}',
    )
    hint = refusals.record_refusal(Partitions(), launch.pk, exc, "gpux")
    launch.refresh_from_db()
    assert "The cluster has: debug, gpu ('gpux' is not one)." in hint
    assert launch.refusal_hint == hint
    assert launch.slurm_answer.startswith("HTTP 500\n")
    assert '"error_number": 2000' in launch.slurm_answer
    assert FAKE_JWT not in launch.slurm_answer


# --------------------------------------------------------------------- live panel and actions


def _user(name: str, role: str | None) -> Any:
    user = get_user_model().objects.create_user(name, password="pw-" + name, is_staff=True)
    if role:
        user.groups.add(Group.objects.get(name=role))
    return user


def _client(role: str | None, **kwargs: Any) -> Client:
    client = Client(**kwargs)
    client.force_login(_user(f"u-{role}-{uuid.uuid4().hex[:6]}", role))
    return client


@pytest.fixture
def world(tmp_path: Path) -> dict[str, Any]:
    model = make_slurm_model(name="cockpit-m", spec={"target_replicas": 2, "max_job_failures": 3})
    pending = Replica.objects.create(
        model_id=model.pk,
        model_name=model.name,
        job_name="obt-a",
        job_id="501",
        slurm_state="PENDING",
        slurm_reason="QOSMaxJobsPerUserLimit",
        last_message="PENDING \u2014 QOSMaxJobsPerUserLimit",
        submitted_at=timezone.now() - dt.timedelta(minutes=3),
    )
    Replica.objects.filter(pk=pending.pk).update(
        created_at=timezone.now() - dt.timedelta(minutes=3, seconds=5)
    )
    starting = Replica.objects.create(
        model_id=model.pk,
        model_name=model.name,
        job_name="obt-b",
        job_id="502",
        state="starting",
        nodes="node3",
        port_base=18000,
        last_probe="loading (HTTP 200, status 'loading') on port 18000",
        last_probe_at=timezone.now(),
    )
    launch = _launch(model, tmp_path, job_id="502", id=starting.pk, job_name="obt-b")
    old = _launch(
        model,
        tmp_path,
        job_id="400",
        job_name="obt-old",
        ended_at=timezone.now(),
        end_state="CANCELLED",
        end_reason="None",
    )
    return {
        "model": model,
        "pending": pending,
        "starting": starting,
        "launch": launch,
        "old": old,
        "logs": tmp_path,
    }


def _live(client: Client, model: Model) -> Any:
    return client.get(reverse("admin:core_model_live", args=[model.pk]))


def test_the_change_page_carries_the_live_panel_and_its_script(world: dict[str, Any]) -> None:
    page = _client("operator").get(reverse("admin:core_model_change", args=[world["model"].pk]))
    html = page.content.decode()
    assert page.status_code == 200
    assert 'id="obleth-cockpit"' in html and "obleth/cockpit.js" in html
    assert "onclick" not in html.split('id="obleth-cockpit"')[1].split("</section>")[0]


def test_the_live_panel_says_what_each_replica_is_doing(world: dict[str, Any]) -> None:
    data = _live(_client("operator"), world["model"]).json()
    rows = {r["job_id"]: r for r in data["replicas"]}
    assert rows["501"]["state_words"] == "waiting in the Slurm queue"
    assert "no more running jobs for this user" in rows["501"]["pending"]["sentence"]
    assert "MaxJobsPerUser" in rows["501"]["pending"]["fix"]
    assert rows["502"]["probe"]["code"] == "loading"
    assert rows["502"]["node"] == "node3"
    assert rows["501"]["age_secs"] >= 170 and rows["501"]["in_state"].startswith("3m")
    assert data["model"]["reason"].startswith("Pending in the Slurm queue")
    assert data["spec"]["target_replicas"] == 2
    assert [x["job_id"] for x in data["launches"]] == ["400", "502"]  # newest first
    ended = next(x for x in data["launches"] if x["job_id"] == "400")
    assert ended["end_state"] == "CANCELLED" and ended["ended"]
    assert rows["502"]["previous_logs"]["job_id"] == "400"
    assert data["can"] == {
        "restart": True,
        "scale": True,
        "enable": True,
        "try_again": True,
        "read_logs": True,
    }


def test_a_viewer_sees_the_panel_but_no_action_and_no_log(world: dict[str, Any]) -> None:
    data = _live(_client("viewer"), world["model"]).json()
    assert not any(data["can"].values())
    assert _live(_client(None), world["model"]).status_code == 403  # staff, no role


def test_the_untrusted_banner_shows_when_the_provisioner_is_not_running(
    world: dict[str, Any],
) -> None:
    from obleth.core.models import SlurmSettings

    SlurmSettings.objects.update_or_create(pk=1, defaults={"enabled": True})
    data = _live(_client("viewer"), world["model"]).json()
    assert data["banner"]["kind"] == "not_running"


def _act(client: Client, model: Model, action: str, **data: Any) -> Any:
    return client.post(reverse("admin:core_model_act", args=[model.pk, action]), data)


def test_actions_are_permission_checked(world: dict[str, Any]) -> None:
    viewer = _client("viewer")
    model, replica = world["model"], world["starting"]
    for action, data in (
        ("restart", {"replica": str(replica.pk)}),
        ("scale", {"target_replicas": "3"}),
        ("disable", {}),
        ("try_again", {}),
    ):
        answer = _act(viewer, model, action, **data)
        assert answer.status_code == 403, action
        assert "core." in answer.json()["message"]
    replica.refresh_from_db()
    assert not replica.cancel_requested
    assert ManagedSpec.objects.get(pk=model.pk).target_replicas == 2


def test_csrf_is_required_for_actions(world: dict[str, Any]) -> None:
    client = _client("operator", enforce_csrf_checks=True)
    assert _act(client, world["model"], "disable").status_code == 403
    world["model"].refresh_from_db()
    assert world["model"].enabled


def test_operator_restarts_scales_disables_enables_and_tries_again(world: dict[str, Any]) -> None:
    operator = _client("operator")
    model, replica = world["model"], world["starting"]
    assert _act(operator, model, "restart", replica=str(replica.pk)).json()["ok"]
    replica.refresh_from_db()
    assert replica.cancel_requested

    other = make_slurm_model()
    stranger = Replica.objects.create(model_id=other.pk, model_name=other.name, job_name="s")
    bad = _act(operator, model, "restart", replica=str(stranger.pk))
    assert bad.status_code == 400 and "replica" in bad.json()["errors"]
    assert _act(operator, model, "restart", replica="x;rm -rf /").status_code == 400

    for value in ("abc", "-1", "1001", "", "2\n3", "1e3"):
        answer = _act(operator, model, "scale", target_replicas=value)
        assert answer.status_code == 400, value
        assert "target_replicas" in answer.json()["errors"]
    assert _act(operator, model, "scale", target_replicas="5").json()["ok"]
    assert ManagedSpec.objects.get(pk=model.pk).target_replicas == 5

    assert _act(operator, model, "disable").json()["ok"]
    model.refresh_from_db()
    assert not model.enabled and not ManagedSpec.objects.get(pk=model.pk).enabled
    assert _live(operator, model).json()["model"]["reason"].startswith("Disabled")
    assert _act(operator, model, "enable").json()["ok"]
    model.refresh_from_db()
    assert model.enabled and ManagedSpec.objects.get(pk=model.pk).enabled

    for _ in range(3):
        Replica.objects.create(model_id=model.pk, model_name=model.name, job_name="l", state="lost")
    ManagedSpec.objects.filter(pk=model.pk).update(
        last_provision_error="Slurm refused the job: Invalid partition name specified",
        last_provision_error_at=timezone.now(),
    )
    stopped = _live(operator, model).json()
    assert (
        stopped["spec"]["stopped"]
        and "Stopped after 3 failed launches" in (stopped["model"]["reason"])
    )
    answer = _act(operator, model, "try_again").json()
    assert answer["ok"] and "3 lost replica(s) cleared" in answer["message"]
    assert not Replica.objects.filter(model_id=model.pk, state="lost").exists()
    assert ManagedSpec.objects.get(pk=model.pk).last_provision_error == ""
    assert _act(operator, model, "explode").status_code == 400
    assert (
        operator.get(reverse("admin:core_model_act", args=[model.pk, "disable"])).status_code == 405
    )


# ------------------------------------------------------------------------------ job log views


def _log_url(world: dict[str, Any], launch: Launch, **query: str) -> str:
    base = reverse("admin:core_model_log", args=[world["model"].pk, launch.pk])
    return base + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")


def test_the_log_view_shows_the_tail_or_says_why_not(world: dict[str, Any], settings: Any) -> None:
    launch, logs = world["launch"], world["logs"]
    (logs / "obt-b-502.out").write_text(f"engine up\nkey {FAKE_JWT}\n")
    operator = _client("operator")
    settings.OBLETH_JOB_LOGS_READABLE = []
    closed = operator.get(_log_url(world, launch, stream="stdout")).json()
    assert closed["readable"] is False and closed["path"] == f"{logs}/obt-b-502.out"
    assert "OBLETH_JOB_LOGS_READABLE" in closed["why"]

    settings.OBLETH_JOB_LOGS_READABLE = [str(logs)]
    opened = operator.get(_log_url(world, launch, stream="stdout", tail="10")).json()
    assert opened["readable"] and opened["text"].startswith("engine up")
    assert FAKE_JWT not in opened["text"]
    download = operator.get(_log_url(world, launch, stream="stdout", download="1"))
    assert download["Content-Disposition"] == 'attachment; filename="obt-b-502.out"'
    body = b"".join(download.streaming_content).decode()
    assert "engine up" in body and FAKE_JWT not in body

    assert operator.get(_log_url(world, launch, stream="bogus")).status_code == 400
    assert operator.get(_log_url(world, launch, tail="0")).status_code == 400
    assert operator.get(_log_url(world, launch, tail="99999999")).status_code == 400
    assert _client("viewer").get(_log_url(world, launch)).status_code == 403
    foreign = _launch(make_slurm_model(), logs)
    assert operator.get(_log_url(world, foreign)).status_code == 404


def test_the_api_log_route(world: dict[str, Any], settings: Any) -> None:
    settings.OBLETH_JOB_LOGS_READABLE = [str(world["logs"])]
    (world["logs"] / "obt-b-502.err").write_text("Traceback: boom\n")
    url = reverse("api:replica-log", kwargs={"pk": world["starting"].pk})
    clients = {}
    for role in ("viewer", "operator"):
        client = APIClient()
        secret = create_token(_user(f"api-{role}", role), "t").secret
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
        clients[role] = client
    answer = clients["operator"].get(url, {"stream": "stderr", "tail": "5"})
    assert answer.status_code == 200, answer.content
    assert answer.json()["text"] == "Traceback: boom"
    assert answer.json()["job_id"] == "502"
    assert clients["viewer"].get(url).status_code == 403
    bad = clients["operator"].get(url, {"tail": "ten"})
    body = json.loads(bad.content)
    assert bad.status_code == 400 and "tail" in body["fields"]
    assert body["error"].startswith("tail: Give a number of lines")
    gone = reverse("api:replica-log", kwargs={"pk": uuid.uuid4()})
    assert clients["operator"].get(gone).status_code == 404
