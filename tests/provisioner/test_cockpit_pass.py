"""What a pass leaves for the cockpit, through ``run_pass``: a refused submit keeps slurmrestd's
whole answer and a hint naming the cluster's partitions (shown folded on the model page); a
queued job's Slurm state and its log paths with the real job id are stored on the rows.

Slurm is the in-process FakeSlurmrestd (the ``cluster`` fixture of test_execute: fault
injection only); the same recording is proven on the real slurmrestd in tests/e2e."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import Group
from django.test import Client
from django.urls import reverse

from obleth.core.models import Launch, Replica, SlurmSettings
from provisioner.reconcile import run_pass
from tests.plugins.factories import make_slurm_model
from tests.provisioner.test_execute import Cluster, cluster  # noqa: F401  (the fixture)


def test_a_refused_submit_keeps_the_whole_answer_and_the_valid_partitions(
    cluster: Cluster,  # noqa: F811
    django_user_model: Any,
) -> None:
    model = make_slurm_model(spec={"partition": "no-such-partition", "target_replicas": 1})
    run_pass()
    launch = Launch.objects.get(model_id=model.pk)
    assert launch.end_state == "rejected"
    assert "Invalid partition name specified" in launch.slurm_answer
    assert launch.slurm_answer.startswith("HTTP ")
    assert launch.refusal_hint.endswith("The cluster has: debug ('no-such-partition' is not one).")

    user = django_user_model.objects.create_user("op-refusal", password="x", is_staff=True)
    user.groups.add(Group.objects.get(name="operator"))
    client = Client()
    client.force_login(user)
    html = client.get(reverse("admin:core_model_change", args=[model.pk])).content.decode()
    assert "What to change:" in html and "The cluster has: debug" in html
    assert "<summary>Slurm's whole answer</summary>" in html


def test_a_queued_job_gets_its_slurm_state_and_resolved_log_paths(
    cluster: Cluster,  # noqa: F811
) -> None:
    slurm = SlurmSettings.load()
    slurm.log_dir = "/cluster/logs"
    slurm.save()
    model = make_slurm_model(spec={"target_replicas": 1})
    run_pass()  # submits (the job stays PENDING: start_delay)
    run_pass()  # sees it queued
    row = Replica.objects.get(model_id=model.pk)
    assert row.job_id and row.slurm_state == "PENDING"
    launch = Launch.objects.get(pk=row.pk)
    assert launch.stdout_path == f"/cluster/logs/{row.job_name}-{row.job_id}.out"
    assert launch.stderr_path == f"/cluster/logs/{row.job_name}-{row.job_id}.err"
