"""The provisioner end to end on the REAL local Slurm cluster (issue 4, "What it must show").

Real slurmrestd, real jobs running the project's test engine, real probes, endpoints, warm-ups and
gateway requests. Only the engine is ours: it is what lets a test kill or wedge a server on demand.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings

from obleth.core.choices import ReplicaState
from obleth.core.models import (
    Endpoint,
    Launch,
    ManagedSpec,
    ProvisionerStatus,
    Replica,
    SlurmSettings,
)
from obleth.gateway import keys
from provisioner.reconcile import run_pass
from tests.e2e.conftest import ProvisionerEnv, engine_control, engine_stats, squeue
from tests.plugins.gateway_client import GatewayClient
from tests.plugins.real_slurm import run_slurm_local, scancel

pytestmark = [pytest.mark.slurm, pytest.mark.e2e]

ROOT = Path(django_settings.BASE_DIR)


def live_rows(model_id: Any) -> list[Replica]:
    return list(
        Replica.objects.filter(
            model_id=model_id,
            state__in=[ReplicaState.PENDING, ReplicaState.STARTING, ReplicaState.HEALTHY],
        )
    )


def assert_jobs_match_rows(env: ProvisionerEnv, expected: int) -> None:
    """No duplicate and no orphan: the live jobs are exactly the live rows' jobs."""
    jobs = env.live_jobs()
    rows = Replica.objects.exclude(state__in=[ReplicaState.LOST, ReplicaState.DRAINING])
    row_jobs = {r.job_id for r in rows}
    assert set(jobs) == row_jobs, (jobs, row_jobs)
    assert len(jobs) == expected, jobs
    for endpoint in Endpoint.objects.exclude(replica_id=None):
        replica = Replica.objects.filter(pk=endpoint.replica_id).first()
        assert replica is not None and replica.state == ReplicaState.HEALTHY, endpoint.api_base
        assert replica.job_id in jobs and jobs[replica.job_id][1] == "RUNNING"


def test_two_replicas_become_healthy_routable_and_warmed_up(
    provisioner_env: ProvisionerEnv,
) -> None:
    env = provisioner_env
    model = env.deploy("e2e-chat", replicas=2)
    env.passes_until(lambda: len(env.healthy(model)) == 2, what="2 healthy replicas")

    endpoints = list(Endpoint.objects.filter(model=model))
    assert len(endpoints) == 2
    for endpoint in endpoints:
        assert endpoint.api_base.startswith("http://127.0.0.1:") and endpoint.api_base.endswith(
            "/v1"
        )
        assert endpoint.replica_id is not None
        stats = engine_stats(endpoint)
        assert stats["warmup_seen"] is True, stats  # the warm-up reached the engine
    assert {r.job_id for r in env.healthy(model)} == set(env.live_jobs())
    launches = Launch.objects.filter(model_id=model.pk)
    assert launches.count() == 2 and all(launch.healthy_at and launch.job_id for launch in launches)

    key = keys.create_key("e2e")  # the gateway is closed without a key
    with GatewayClient(HTTP_AUTHORIZATION=f"Bearer {key.secret}") as gateway:
        answer = gateway.post(
            "/v1/chat/completions",
            data=json.dumps({"model": "e2e-chat", "messages": [{"role": "user", "content": "hi"}]}),
        )
    assert answer.status_code == 200, answer.content
    assert answer.json()["choices"][0]["message"]["content"]
    status = ProvisionerStatus.load()
    assert status.last_pass_status == "ok" and status.last_ok_at is not None


def test_cancelled_job_is_marked_lost_and_replaced(provisioner_env: ProvisionerEnv) -> None:
    env = provisioner_env
    model = env.deploy("e2e-scancel", replicas=2)
    env.passes_until(lambda: len(env.healthy(model)) == 2, what="2 healthy")
    victim = env.healthy(model)[0]
    scancel(int(victim.job_id))

    env.passes_until(
        lambda: (
            Replica.objects.get(pk=victim.pk).state == ReplicaState.LOST
            and len(env.healthy(model)) == 2
        ),
        what="lost + replacement healthy",
    )
    lost = Replica.objects.get(pk=victim.pk)
    assert lost.last_message.startswith(("job ended: CANCELLED", "job gone")), lost.last_message
    assert not Endpoint.objects.filter(replica_id=victim.pk).exists()
    assert victim.job_id not in {r.job_id for r in env.healthy(model)}
    assert Launch.objects.get(pk=victim.pk).end_state in {"CANCELLED", "gone"}
    assert_jobs_match_rows(env, 2)


def test_server_killed_inside_running_job_is_restarted_by_probe_counter(
    provisioner_env: ProvisionerEnv,
) -> None:
    env = provisioner_env
    model = env.deploy("e2e-zombie", replicas=1)
    env.passes_until(lambda: len(env.healthy(model)) == 1, what="healthy")
    victim = env.healthy(model)[0]
    engine_control(Endpoint.objects.get(pk=victim.endpoint_id), exit=True)
    time.sleep(0.5)
    assert env.live_jobs()[victim.job_id][1] == "RUNNING"  # the job lives on, the server is dead

    env.passes_until(
        lambda: (
            not Replica.objects.filter(pk=victim.pk, state=ReplicaState.HEALTHY).exists()
            and len(env.healthy(model)) == 1
        ),
        what="zombie restarted",
    )
    assert Launch.objects.get(pk=victim.pk).end_state == "cancelled:probe-failed"
    assert_jobs_match_rows(env, 1)


def test_hanging_inference_is_restarted_by_gateway_verdict(
    provisioner_env: ProvisionerEnv, settings: Any
) -> None:
    from obleth.gateway.health import check_endpoint

    env = provisioner_env
    settings.OBLETH_MODEL_HEALTH_TIMEOUT_SECS = 1
    settings.OBLETH_PROVISIONER_RESTART_AFTER_FAILURES = 50  # the probe signal cannot trip here
    model = env.deploy("e2e-hang", replicas=1)
    env.passes_until(lambda: len(env.healthy(model)) == 1, what="healthy")
    victim = env.healthy(model)[0]
    endpoint = Endpoint.objects.get(pk=victim.endpoint_id)
    engine_control(endpoint, hang_inference=True)

    report = run_pass(dispatch="inline")  # health still answers: nothing to do yet
    assert Replica.objects.get(pk=victim.pk).state == ReplicaState.HEALTHY, report.as_dict()
    for _ in range(2):
        check_endpoint(Endpoint.objects.get(pk=endpoint.pk))
    endpoint.refresh_from_db()
    assert endpoint.health_status == "unhealthy" and endpoint.consecutive_failures >= 2

    env.passes_until(
        lambda: (
            not Replica.objects.filter(pk=victim.pk, state=ReplicaState.HEALTHY).exists()
            and len(env.healthy(model)) == 1
        ),
        what="wedged replica restarted",
    )
    assert Launch.objects.get(pk=victim.pk).end_state == "cancelled:gateway-unhealthy"


def test_scale_down_cancels_oldest_serving_and_deregisters_first(
    provisioner_env: ProvisionerEnv,
) -> None:
    env = provisioner_env
    model = env.deploy("e2e-scale", replicas=2)
    env.passes_until(lambda: len(env.healthy(model)) == 2, what="2 healthy")
    oldest = min(env.healthy(model), key=lambda r: r.created_at)
    ManagedSpec.objects.filter(pk=model.pk).update(target_replicas=1)

    run_pass(dispatch="inline")
    cancelled = Replica.objects.get(pk=oldest.pk)
    assert cancelled.state == ReplicaState.DRAINING and cancelled.last_message == "scaled down"
    assert not Endpoint.objects.filter(pk=oldest.endpoint_id).exists()
    env.passes_until(lambda: oldest.job_id not in env.live_jobs(), what="job ended")
    assert len(env.healthy(model)) == 1
    env.passes_until(
        lambda: not Replica.objects.filter(pk=oldest.pk).exists(), what="drained row removed"
    )
    assert Launch.objects.get(pk=oldest.pk).end_state == "cancelled:scale-down"


def test_disabled_model_is_drained(provisioner_env: ProvisionerEnv) -> None:
    env = provisioner_env
    model = env.deploy("e2e-drain", replicas=2)
    env.passes_until(lambda: len(env.healthy(model)) == 2, what="2 healthy")
    ManagedSpec.objects.filter(pk=model.pk).update(enabled=False)
    env.passes_until(
        lambda: not env.live_jobs() and not Replica.objects.filter(model_id=model.pk).exists(),
        what="drained",
    )
    assert not Endpoint.objects.filter(model=model).exists()


def test_global_disable_cancels_nothing(provisioner_env: ProvisionerEnv) -> None:
    env = provisioner_env
    model = env.deploy("e2e-global-off", replicas=1)
    env.passes_until(lambda: len(env.healthy(model)) == 1, what="healthy")
    SlurmSettings.objects.filter(pk=1).update(enabled=False)
    report = run_pass(dispatch="inline")
    assert report.status == "idle" and "disabled" in report.detail
    assert len(env.live_jobs()) == 1
    assert len(env.healthy(model)) == 1 and Endpoint.objects.filter(model=model).count() == 1


def test_slurmrestd_stopped_holds_the_pass(provisioner_env: ProvisionerEnv) -> None:
    env = provisioner_env
    model = env.deploy("e2e-restd-down", replicas=2)
    env.passes_until(lambda: len(env.healthy(model)) == 2, what="2 healthy")
    before = sorted(Replica.objects.values_list("id", "state", "job_id", "endpoint_id"))
    endpoints = sorted(Endpoint.objects.values_list("id", "api_base"))
    pid = int(Path("/run/obleth-slurm/slurmrestd.pid").read_text().strip())
    os.kill(pid, signal.SIGTERM)
    try:
        for _ in range(50):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        report = run_pass(dispatch="inline")
        assert report.status == "error", report.as_dict()
        assert sorted(Replica.objects.values_list("id", "state", "job_id", "endpoint_id")) == before
        assert sorted(Endpoint.objects.values_list("id", "api_base")) == endpoints
        assert ProvisionerStatus.load().last_pass_status == "error"
    finally:
        run_slurm_local("start", timeout=120)
    env.passes_until(lambda: ProvisionerStatus.load().last_pass_status == "ok", what="recovered")
    assert len(env.healthy(model)) == 2
    assert_jobs_match_rows(env, 2)


def manage(args: list[str], env_extra: dict[str, str]) -> subprocess.Popen[str]:
    db = django_settings.DATABASES["default"]
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": (
            f"postgres://{db['USER'] or 'postgres'}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
        ),
        "OBLETH_PROVISIONER_JOB_PREFIX": django_settings.OBLETH_PROVISIONER_JOB_PREFIX,
        "OBLETH_PROVISIONER_DISPATCH": "inline",
        "OBLETH_PROVISIONER_WARMUP_TIMEOUT_SECS": "0",
        **env_extra,
    }
    return subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "reconcile", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@pytest.mark.parametrize(
    "fault",
    ["after_row_before_submit", "after_submit_before_record", "after_endpoint_before_healthy"],
)
def test_worker_sigkilled_mid_pass_leaves_no_duplicate_and_no_orphan(
    provisioner_env: ProvisionerEnv, fault: str
) -> None:
    env = provisioner_env
    promote = fault == "after_endpoint_before_healthy"
    # For the promotion fault the engines say "loading" for a while, so the passes that get the
    # jobs running cannot promote them; the killed pass is the first to find them ready.
    flags = ("--loading", "6") if promote else ()
    model = env.deploy(f"e2e-kill-{fault[:12]}", replicas=2, flags=flags)
    if promote:
        env.passes_until(
            lambda: (
                len(env.live_jobs()) == 2
                and all(s == "RUNNING" for _, s in env.live_jobs().values())
            ),
            what="jobs running",
        )
        assert not env.healthy(model)
        time.sleep(7.0)
    proc = manage([], {"OBLETH_FAULT_KILL_AT": fault})
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL, out
    if promote:  # killed between registering the endpoint and marking the replica healthy
        assert Endpoint.objects.filter(model=model).exists() and not env.healthy(model)

    env.passes_until(lambda: len(env.healthy(model)) == 2, what="2 healthy after the crash")
    assert_jobs_match_rows(env, 2)


def test_two_workers_racing_submit_one_job_per_missing_replica(
    provisioner_env: ProvisionerEnv,
) -> None:
    env = provisioner_env
    model = env.deploy("e2e-race", replicas=2)
    procs = [manage(["--json"], {}) for _ in range(3)]
    for proc in procs:
        proc.communicate(timeout=120)
    assert len(env.live_jobs()) == 2, env.live_jobs()
    env.passes_until(lambda: len(env.healthy(model)) == 2, what="2 healthy")
    assert_jobs_match_rows(env, 2)
    assert squeue(env.prefix).keys() == {r.job_id for r in env.healthy(model)}


def test_fast_passes_replace_and_promote_without_probing_serving_replicas(
    provisioner_env: ProvisionerEnv,
) -> None:
    """Fast passes (every second by default) act on ended jobs and ready replicas; only full
    passes probe replicas that already serve, so zombie counters move on the full cadence."""
    env = provisioner_env
    model = env.deploy("e2e-fast", replicas=2)
    deadline = time.monotonic() + 60
    while len(env.healthy(model)) < 2:  # fast passes alone bring both up
        assert run_pass(dispatch="inline", fast=True).status == "ok"
        assert time.monotonic() < deadline, list(Replica.objects.values("state", "last_message"))
        time.sleep(0.3)

    dead, victim = env.healthy(model)
    engine_control(Endpoint.objects.get(pk=dead.endpoint_id), exit=True)
    scancel(int(victim.job_id))
    time.sleep(0.5)

    def replaced() -> bool:
        live = Replica.objects.filter(model_id=model.pk).exclude(state=ReplicaState.LOST)
        return Replica.objects.get(pk=victim.pk).state == ReplicaState.LOST and live.count() == 2

    while not replaced():
        run_pass(dispatch="inline", fast=True)
        assert time.monotonic() < deadline + 60
        time.sleep(0.3)
    assert Replica.objects.get(pk=victim.pk).state == ReplicaState.LOST
    assert Replica.objects.get(pk=dead.pk).probe_failures == 0  # not probed by fast passes
    run_pass(dispatch="inline")  # a full pass probes it
    assert Replica.objects.get(pk=dead.pk).probe_failures == 1
