"""The cockpit on the REAL local Slurm: a replica goes pending/starting -> healthy with its probe
outcome recorded; its job's output is readable from the admin and the API while it runs; after
``scancel`` the page shows the loss with Slurm's state and the replacement, and the ended job's
output is still readable. Nothing is faked (real slurmrestd, jobs, probes, files)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from obleth.accounts.services import create_token
from obleth.core.choices import ReplicaState
from obleth.core.models import Launch, Replica
from tests.e2e.conftest import ProvisionerEnv
from tests.plugins.real_slurm import scancel

pytestmark = [pytest.mark.slurm, pytest.mark.e2e, pytest.mark.timeout(300)]


def test_cockpit_shows_a_real_replica_its_log_and_its_loss(
    provisioner_env: ProvisionerEnv, settings: Any
) -> None:
    env = provisioner_env
    settings.OBLETH_JOB_LOGS_READABLE = [env.log_dir]
    user = get_user_model().objects.create_user("e2e-op", password="x", is_staff=True)
    user.groups.add(Group.objects.get(name="operator"))
    admin = Client()
    admin.force_login(user)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {create_token(user, 'e2e').secret}")

    model = env.deploy("e2e-cockpit", replicas=1)
    live_url = reverse("admin:core_model_live", args=[model.pk])
    seen: list[tuple[str, str, str]] = []  # (state, slurm state, probe) after each pass

    def panel() -> dict[str, Any]:
        data: dict[str, Any] = admin.get(live_url).json()
        for r in data["replicas"]:
            seen.append((r["state"], r["slurm_state"], r["last_probe"]))
        return data

    env.passes_until(
        lambda: any(r["state"] == "healthy" for r in panel()["replicas"]), what="healthy"
    )
    replica = Replica.objects.get(model_id=model.pk, state=ReplicaState.HEALTHY)
    assert any(state in {"pending", "starting"} for state, _, _ in seen), seen
    assert replica.slurm_state == "RUNNING"
    assert replica.last_probe.startswith("ready on port"), replica.last_probe
    launch = Launch.objects.get(pk=replica.pk)
    assert "%" not in launch.stdout_path and launch.job_id in launch.stdout_path
    assert launch.stdout_path.startswith(env.log_dir)

    expected = f"replica of {model.name} on"
    # Running: the admin's log view and the API read the job's stdout.
    log_url = reverse("admin:core_model_log", args=[model.pk, launch.pk])
    running = admin.get(log_url, {"stream": "stdout"}).json()
    assert running["readable"], running
    assert expected in running["text"]
    api_url = reverse("api:replica-log", kwargs={"pk": replica.pk})
    answer = api.get(api_url, {"stream": "stdout", "tail": "50"})
    assert answer.status_code == 200 and expected in answer.json()["text"]

    # scancel from the shell: the page shows the loss with Slurm's state, and a replacement.
    scancel(int(replica.job_id))

    def replaced() -> bool:
        data = panel()
        lost = [r for r in data["replicas"] if r["id"] == str(replica.pk)]
        others = [r for r in data["replicas"] if r["id"] != str(replica.pk)]
        return bool(lost and lost[0]["state"] == "lost" and others)

    env.passes_until(replaced, what="the loss and a replacement")
    # Slurm 22.05 lists the job as COMPLETING while its server drains (obleth_serve, for
    # OBLETH_DRAIN_SECS): it is out of routing and replaced already; the pass that lists the real
    # end records it on the lost row and its launch.

    def settled() -> bool:
        lost = next(r for r in panel()["replicas"] if r["id"] == str(replica.pk))
        return bool(lost["slurm_state"] == "CANCELLED")

    env.passes_until(settled, what="Slurm's end state on the lost replica")
    data = panel()
    lost = next(r for r in data["replicas"] if r["id"] == str(replica.pk))
    assert lost["slurm_state"] == "CANCELLED", lost
    assert "job ended: CANCELLED" in lost["message"]
    history = {x["job_id"]: x for x in data["launches"]}
    assert history[replica.job_id]["end_state"] == "CANCELLED" and history[replica.job_id]["ended"]

    # The ended job's output is still readable (admin and API).
    ended = admin.get(log_url, {"stream": "stdout"}).json()
    assert ended["readable"] and expected in ended["text"]
    answer = api.get(api_url, {"stream": "stdout"})
    assert answer.status_code == 200 and expected in answer.json()["text"]
    download = api.get(api_url, {"stream": "stdout", "download": "1"})
    assert expected in b"".join(download.streaming_content).decode()
