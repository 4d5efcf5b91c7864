"""The autoscaling settings of a managed spec: one validator per field, used by the API, the
admin and recipe deploys; every refusal names the field and says how to fix it.

Nothing is faked: real database rows, the real API client, the admin form and recipe deploy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.exceptions import ValidationError

from obleth.core.models import ManagedSpec
from recipes.deploy.spec import deploy
from tests.api.conftest import API
from tests.plugins.factories import make_slurm_model

pytestmark = pytest.mark.django_db

BAD_VALUES = [
    ({"max_replicas": 0}, "max_replicas", "from 1 to 1000"),
    ({"max_replicas": 1001}, "max_replicas", "from 1 to 1000"),
    ({"target_in_flight": 0}, "target_in_flight", "from 1 to 100000"),
    ({"scale_up_delay_secs": -1}, "scale_up_delay_secs", "from 0 to 86400"),
    ({"scale_up_delay_secs": 86401}, "scale_up_delay_secs", "from 0 to 86400"),
    ({"scale_down_delay_secs": 10**9}, "scale_down_delay_secs", "from 0 to 86400"),
    ({"scale_to_zero_after_secs": -5}, "scale_to_zero_after_secs", "from 0 to 86400"),
    ({"min_replicas": 3, "max_replicas": 2}, "max_replicas", "below min_replicas"),
]


@pytest.mark.parametrize(("body", "field", "words"), BAD_VALUES)
def test_api_refuses_bad_autoscaling_values_naming_the_field(
    api_client: Any, body: dict[str, Any], field: str, words: str
) -> None:
    model = make_slurm_model(name="auto-api")
    response = api_client.patch(f"{API}/models/{model.pk}/managed", body, format="json")
    assert response.status_code == 400, response.json()
    answer = response.json()
    assert list(answer["fields"]) == [field], answer
    assert answer["error"].startswith(f"{field}: "), answer
    assert words in answer["error"], answer
    assert ManagedSpec.objects.get(model=model).max_replicas is None


def test_api_takes_the_autoscaling_settings_and_shows_the_decision(api_client: Any) -> None:
    model = make_slurm_model(name="auto-ok", spec={"target_replicas": 2})
    response = api_client.patch(
        f"{API}/models/{model.pk}/managed",
        {
            "min_replicas": 0,
            "max_replicas": 4,
            "target_in_flight": 8,
            "scale_up_delay_secs": 10,
            "scale_down_delay_secs": 20,
            "scale_to_zero_after_secs": 30,
        },
        format="json",
    )
    assert response.status_code == 200, response.json()
    body = response.json()
    assert (body["max_replicas"], body["target_in_flight"], body["scale_to_zero_after_secs"]) == (
        4,
        8,
        30,
    )
    assert (body["autoscale_replicas"], body["autoscale_message"]) == (None, "")
    ManagedSpec.objects.filter(model=model).update(
        autoscale_replicas=3,
        autoscale_message="3 replicas: 41 requests in flight for 2 min, target 8 per replica",
    )
    shown = api_client.get(f"{API}/models/{model.pk}/managed").json()
    assert shown["autoscale_replicas"] == 3
    assert shown["autoscale_message"].startswith("3 replicas: 41 requests in flight")
    # the provisioner's fields are read only
    refused = api_client.patch(
        f"{API}/models/{model.pk}/managed", {"autoscale_replicas": 9}, format="json"
    )
    assert ManagedSpec.objects.get(model=model).autoscale_replicas == 3, refused.json()


def test_autoscaling_lifts_the_min_below_target_rule_and_sizes_the_port_range(
    api_client: Any,
) -> None:
    model = make_slurm_model(name="auto-range", spec={"target_replicas": 1})
    url = f"{API}/models/{model.pk}/managed"
    # min_replicas above target_replicas is fine when autoscaling bounds the count
    ok = api_client.patch(url, {"min_replicas": 2, "max_replicas": 3}, format="json")
    assert ok.status_code == 200, ok.json()
    # the model's port range must hold max_replicas windows
    span = settings.OBLETH_PORT_SPAN
    port = 65535 - 2 * span + 1  # room for 2 windows, not 3
    tight = api_client.patch(url, {"serving_port": port}, format="json")
    assert tight.status_code == 400
    assert list(tight.json()["fields"]) == ["serving_port"]


def test_admin_form_refuses_bad_autoscaling_values(admin_client: Any) -> None:
    model = make_slurm_model(name="auto-admin")
    spec = ManagedSpec.objects.get(model=model)
    url = f"/admin/core/managedspec/{spec.pk}/change/"
    page = admin_client.get(url)
    assert page.status_code == 200
    assert b"Autoscaling" in page.content
    data = {
        "enabled": "on",
        "partition": "debug",
        "nodes": "1",
        "serving_port": "18000",
        "health_path": "/health",
        "target_replicas": "1",
        "min_replicas": "2",
        "max_job_failures": "0",
        "launch_command": "x",
        "max_replicas": "1",
        "target_in_flight": "0",
        "scale_up_delay_secs": "90000",
        "scale_down_delay_secs": "10",
        "scale_to_zero_after_secs": "10",
    }
    response = admin_client.post(url, data)
    assert response.status_code == 200  # the form again, with errors; not a 500, not saved
    errors = response.context["adminform"].form.errors
    assert "target_in_flight: use a whole number from 1" in str(errors["target_in_flight"])
    assert "scale_up_delay_secs" in str(errors["scale_up_delay_secs"])
    assert "below min_replicas" in str(errors["max_replicas"])
    assert ManagedSpec.objects.get(pk=spec.pk).max_replicas is None


def _recipe() -> str:
    return (Path(settings.BASE_DIR) / "recipes" / "library" / "test-engine.recipe").read_text()


def test_recipe_deploy_takes_autoscaling_overrides() -> None:
    model = deploy(
        recipe_text=_recipe(),
        model_name="auto-recipe",
        overrides={"min_replicas": 0, "max_replicas": 5, "target_in_flight": "4"},
        cluster=None,
    )
    spec = ManagedSpec.objects.get(model=model)
    assert (spec.min_replicas, spec.max_replicas, spec.target_in_flight) == (0, 5, 4)
    assert spec.autoscaled


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"max_replicas": 0}, "max_replicas"),
        ({"max_replicas": 5000}, "max_replicas"),
        ({"target_in_flight": "many"}, "target_in_flight"),
        ({"scale_down_delay_secs": 999999}, "scale_down_delay_secs"),
        ({"min_replicas": 4, "max_replicas": 2}, "max_replicas"),
    ],
)
def test_recipe_deploy_refuses_bad_autoscaling_overrides(
    overrides: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        deploy(recipe_text=_recipe(), model_name="auto-bad", overrides=overrides, cluster=None)
    errors = caught.value.message_dict
    assert field in errors, errors
    assert all(field in message for message in errors[field]), errors
    assert not ManagedSpec.objects.filter(model__name="auto-bad").exists()
