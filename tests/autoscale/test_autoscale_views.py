"""Autoscaling's decision where operators look: the model page's live panel (one line with the
reason, in the JSON feed and the page), its badge reason at zero, and the model's health (a model
at zero on purpose is not a model that went down).

Real database rows and the real admin views; nothing is faked.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from obleth.core.choices import HealthStatus
from obleth.core.models import ManagedSpec
from obleth.gateway.health import SCALED_TO_ZERO, model_health
from tests.admin.test_cockpit import _client
from tests.plugins.factories import make_endpoint, make_slurm_model

pytestmark = pytest.mark.django_db

REASON = "3 replicas: 41 requests in flight for 2 min, target 16 per replica"


def _live(model: Any) -> dict[str, Any]:
    response = _client("operator").get(reverse("admin:core_model_live", args=[model.pk]))
    assert response.status_code == 200
    return dict(response.json())


def test_the_live_panel_shows_the_decision_in_one_line() -> None:
    model = make_slurm_model(
        name="auto-panel", spec={"min_replicas": 1, "max_replicas": 4, "target_in_flight": 16}
    )
    ManagedSpec.objects.filter(model=model).update(autoscale_replicas=3, autoscale_message=REASON)
    auto = _live(model)["spec"]["autoscale"]
    assert auto["replicas"] == 3 and auto["sentence"] == REASON
    assert auto["line"] == f"Autoscaling (1\u20134, target 16 in flight per replica): {REASON}"
    page = _client("operator").get(reverse("admin:core_model_change", args=[model.pk]))
    assert 'id="ck-autoscale"' in page.content.decode()


def test_the_panel_says_nothing_of_autoscaling_for_a_fixed_model_and_waits_for_a_decision() -> None:
    fixed = make_slurm_model(name="fixed-panel")
    assert _live(fixed)["spec"]["autoscale"] is None
    fresh = make_slurm_model(name="fresh-panel", spec={"max_replicas": 2})
    assert "has not decided yet" in _live(fresh)["spec"]["autoscale"]["sentence"]


def test_a_model_at_zero_says_so_and_is_not_down() -> None:
    model = make_slurm_model(
        name="auto-zero", spec={"target_replicas": 0, "min_replicas": 0, "max_replicas": 2}
    )
    ManagedSpec.objects.filter(model=model).update(
        autoscale_replicas=0, autoscale_message="0 replicas: idle for 15 min ..."
    )
    assert _live(model)["model"]["reason"] == (
        "Scaled to zero while idle: the next request wakes it."
    )
    health = model_health(model)
    assert (health.status, health.message) == (HealthStatus.UNKNOWN, SCALED_TO_ZERO)
    # with an endpoint (woken), the pool decides again
    make_endpoint(model, health_status=HealthStatus.HEALTHY)
    assert model_health(model).status == HealthStatus.HEALTHY


def test_a_fixed_model_without_endpoints_is_still_unhealthy() -> None:
    model = make_slurm_model(name="fixed-down", spec={"target_replicas": 0, "min_replicas": 0})
    assert model_health(model).status == HealthStatus.UNHEALTHY


def test_the_scale_button_of_an_autoscaled_model_says_what_sets_its_count() -> None:
    from tests.admin.test_cockpit import _act

    model = make_slurm_model(name="auto-button", spec={"min_replicas": 1, "max_replicas": 4})
    answer = _act(_client("operator"), model, "scale", target_replicas="3")
    body = answer.json()
    assert answer.status_code == 400 and not body["ok"], body
    assert "Autoscaling sets this model's count" in str(body)
    assert ManagedSpec.objects.get(model=model).target_replicas == 1
