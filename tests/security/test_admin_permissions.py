"""The admin refuses what the API refuses: the same Django permissions, the same roles.

Real groups from the migration, real admin views through Django's test client (no fakes).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client
from django.urls import reverse

from obleth.core.models import ManagedSpec, Replica, SlurmSettings
from tests.plugins.factories import make_endpoint, make_slurm_model

pytestmark = pytest.mark.django_db


def _client(role: str | None, name: str | None = None) -> Client:
    user = get_user_model().objects.create_user(
        name or f"admin-{role or 'none'}", password="x", is_staff=True
    )
    if role:
        user.groups.add(Group.objects.get(name=role))
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def replica() -> Replica:
    slurm = make_slurm_model(name="slurm-adm")
    return Replica.objects.create(
        model_id=slurm.pk, model_name=slurm.name, job_name="j", job_id="7", state="lost"
    )


def _run_action(client: Client, model: str, action: str, pk: Any) -> Any:
    return client.post(
        reverse(f"admin:core_{model}_changelist"),
        {"action": action, "_selected_action": [str(pk)], "index": 0},
        follow=True,
    )


def test_a_viewer_is_not_offered_restart_and_cannot_post_it(replica: Replica) -> None:
    client = _client("viewer")
    page = client.get(reverse("admin:core_replica_changelist"))
    assert page.status_code == 200
    assert b"restart_selected" not in page.content
    assert b"clear_lost_selected" not in page.content
    _run_action(client, "replica", "restart_selected", replica.pk)
    replica.refresh_from_db()
    assert replica.cancel_requested is False
    _run_action(client, "replica", "clear_lost_selected", replica.pk)
    assert Replica.objects.filter(pk=replica.pk).exists()


def test_a_viewer_cannot_restart_through_the_endpoint_page(replica: Replica) -> None:
    from obleth.core.models import Model

    endpoint = make_endpoint(Model.objects.get(pk=replica.model_id), replica_id=replica.pk)
    _run_action(_client("viewer"), "endpoint", "restart_replica", endpoint.pk)
    replica.refresh_from_db()
    assert replica.cancel_requested is False


def test_an_operator_restarts_and_clears_lost(replica: Replica) -> None:
    client = _client("operator")
    page = client.get(reverse("admin:core_replica_changelist"))
    assert b"restart_selected" in page.content
    _run_action(client, "replica", "restart_selected", replica.pk)
    replica.refresh_from_db()
    assert replica.cancel_requested is True
    _run_action(client, "replica", "clear_lost_selected", replica.pk)
    assert not Replica.objects.filter(pk=replica.pk).exists()


@pytest.mark.parametrize("role", ["viewer", "operator", None])
def test_only_an_admin_changes_slurm_settings(role: str | None) -> None:
    settings = SlurmSettings.load()
    url = reverse("admin:core_slurmsettings_change", args=[settings.pk])
    client = _client(role)
    form = {
        "enabled": "",
        "slurmrestd_url": "",
        "api_version": "",
        "user": "",
        "cache_dir": "",
        "images_dir": "",
        "log_dir": "",
        "setup": "touch /tmp/owned-by-admin-form",
        "images": "{}",
        "node_addresses": "{}",
    }
    assert client.post(url, form).status_code == 403
    test = client.post(reverse("admin:core_slurmsettings_test"))
    assert test.status_code in {302, 403}
    assert SlurmSettings.load().setup == ""
    admin = _client("admin", "the-admin")
    saved = admin.post(url, form)
    assert saved.status_code == 302, saved.content[:2000]
    assert SlurmSettings.load().setup == "touch /tmp/owned-by-admin-form"


def test_dismiss_needs_the_dismiss_permission() -> None:
    slurm = make_slurm_model(name="slurm-banner")
    ManagedSpec.objects.filter(model=slurm).update(last_provision_error="refused: bad qos")
    url = reverse("admin:core_model_dismiss_provision_error", args=[slurm.pk])
    viewer = _client("viewer")
    page = viewer.get(reverse("admin:core_model_change", args=[slurm.pk]))
    assert page.status_code == 200
    assert url.encode() not in page.content  # no Dismiss button for a viewer
    viewer.post(url)
    assert ManagedSpec.objects.get(model=slurm).last_provision_error == "refused: bad qos"
    _client("operator").post(url)
    assert ManagedSpec.objects.get(model=slurm).last_provision_error == ""


def test_an_operator_sees_the_spec_shell_read_only() -> None:
    slurm = make_slurm_model(name="slurm-ro")
    url = reverse("admin:core_managedspec_change", args=[slurm.pk])
    operator_page = _client("operator").get(url)
    assert operator_page.status_code == 200
    assert b'name="launch_command"' not in operator_page.content
    assert b'name="target_replicas"' in operator_page.content
    admin_page = _client("admin").get(url)
    assert b'name="launch_command"' in admin_page.content


def test_a_viewer_sees_every_obleth_page_but_no_add_button() -> None:
    client = _client("viewer")
    for name in ("model", "endpoint", "managedspec", "recipe", "replica", "launch", "alert"):
        page = client.get(reverse(f"admin:core_{name}_changelist"))
        assert page.status_code == 200, name
        assert client.get(reverse(f"admin:core_{name}_add")).status_code == 403, name
