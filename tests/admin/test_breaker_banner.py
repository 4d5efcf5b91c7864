"""The admin says when the provisioner stopped launching a model, and "Try once more" resumes it.

The breaker state is written as the provisioner writes it (ManagedSpec fields); nothing is faked.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from obleth.core.models import ManagedSpec, Replica
from tests.plugins.factories import make_slurm_model

STOPPED = (
    "Stopped launching replicas after 3 failed launches (Stop after failed launches = 3) "
    '(last: job ended: FAILED). Fix the cause, then press "Try once more".'
)


@pytest.fixture
def stopped(db: Any) -> Any:
    model = make_slurm_model(name="stopped-model", spec={"max_job_failures": 3})
    ManagedSpec.objects.filter(pk=model.pk).update(
        breaker_message=STOPPED, breaker_tripped_at=timezone.now()
    )
    for n in range(3):
        Replica.objects.create(
            model_id=model.pk, model_name=model.name, state="lost", job_name=f"obleth-x-{n}"
        )
    return model


def test_change_page_leads_with_the_banner_and_the_button(
    admin_client: Client, stopped: Any
) -> None:
    page = admin_client.get(reverse("admin:core_model_change", args=[stopped.pk]))
    html = page.content.decode()
    assert page.status_code == 200
    assert "The provisioner stopped launching this model" in html
    assert "after 3 failed launches" in html and "Try once more</button>" in html
    assert reverse("admin:core_model_try_once_more", args=[stopped.pk]) in html
    listing = admin_client.get(reverse("admin:core_model_changelist")).content.decode()
    assert "STOPPED after failed launches" in listing


def test_try_once_more_clears_the_lost_rows_and_the_breaker(
    admin_client: Client, stopped: Any
) -> None:
    url = reverse("admin:core_model_try_once_more", args=[stopped.pk])
    assert admin_client.get(url).status_code == 302  # a GET changes nothing
    assert Replica.objects.filter(model_id=stopped.pk).count() == 3
    answer = admin_client.post(url, follow=True)
    assert "Cleared 3 lost replica(s)" in answer.content.decode()
    assert not Replica.objects.filter(model_id=stopped.pk).exists()
    spec = ManagedSpec.objects.get(pk=stopped.pk)
    assert spec.breaker_message == "" and spec.breaker_tripped_at is None
    page = admin_client.get(reverse("admin:core_model_change", args=[stopped.pk]))
    assert "stopped launching this model" not in page.content.decode()


def test_a_user_without_change_rights_cannot_resume(db: Any, stopped: Any) -> None:
    viewer = User.objects.create_user("viewer", password="pw-123456789", is_staff=True)
    client = Client()
    client.force_login(viewer)
    client.post(reverse("admin:core_model_try_once_more", args=[stopped.pk]))
    assert Replica.objects.filter(model_id=stopped.pk).count() == 3
    assert ManagedSpec.objects.get(pk=stopped.pk).breaker_message == STOPPED
