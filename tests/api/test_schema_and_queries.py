"""The OpenAPI schema validates without warnings and is served; list routes avoid N+1."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.management import call_command

from obleth.core.models import Alert, Launch, Recipe, Replica
from tests.api.conftest import API
from tests.api.test_launches_recipes_alerts import GOOD_RECIPE
from tests.plugins.factories import make_endpoint, make_model, make_slurm_model


def test_schema_generation_validates_with_no_warnings(tmp_path: Path) -> None:
    """Same as `manage.py spectacular --validate --fail-on-warn` (a warning raises)."""
    out = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))
    schema = yaml.safe_load(out.read_text())
    paths = set(schema["paths"])
    for expected in (
        "/api/v1/models/{model_id}/managed",
        "/api/v1/models/{model_id}/managed/provision-error",
        "/api/v1/replicas/{id}/restart",
        "/api/v1/models/{model_id}/replicas/clear-lost",
        "/api/v1/settings/slurm",
        "/api/v1/settings/slurm/test",
        "/api/v1/slurm/resources",
        "/api/v1/deployments/launches",
        "/api/v1/recipes/library",
        "/api/v1/provisioner/status",
        "/api/v1/alerts",
        "/api/v1/endpoints",
        "/api/v1/managed",
    ):
        assert expected in paths
    assert schema["components"]["securitySchemes"]["adminToken"]["scheme"] == "bearer"
    settings_schema = schema["components"]["schemas"]["SlurmSettings"]["properties"]
    assert "jwt" not in settings_schema  # write-only: only in the request component
    assert "jwt" in schema["components"]["schemas"]["SlurmSettingsRequest"]["properties"]


@pytest.mark.django_db
def test_schema_and_docs_answer_a_staff_user(staff_client: Any, anon_client: Any) -> None:
    schema = staff_client.get("/api/schema/")
    assert schema.status_code == 200
    assert b"openapi" in schema.content
    docs = staff_client.get("/api/docs/")
    assert docs.status_code == 200
    html = docs.content.decode()
    assert "swagger-ui" in html
    assert "drf_spectacular_sidecar" in html  # assets served locally, no CDN
    assert anon_client.get("/api/schema/").status_code == 401
    assert anon_client.get("/api/docs/").status_code == 401


# ------------------------------------------------------------------------------------------ N+1


def _populate(n: int) -> None:
    recipe = Recipe.objects.create(name=f"r-{uuid.uuid4()}", body=GOOD_RECIPE)
    for _ in range(n):
        static = make_model()
        make_endpoint(static, api_key="sk-abcdefgh")
        make_endpoint(static)
        slurm = make_slurm_model(spec={"recipe": recipe})
        replica = Replica.objects.create(model_id=slurm.pk, model_name=slurm.name, job_name="j")
        Launch.objects.create(id=replica.pk, model_id=slurm.pk, model_name=slurm.name, job_name="j")
        Alert.objects.create(key="k", title="t")
        Recipe.objects.create(name=f"r-{uuid.uuid4()}", body=GOOD_RECIPE)


LISTS = [
    f"{API}/models",
    f"{API}/endpoints",
    f"{API}/managed",
    f"{API}/replicas",
    f"{API}/deployments/launches",
    f"{API}/recipes",
    f"{API}/alerts",
]


@pytest.mark.django_db
@pytest.mark.parametrize("url", LISTS)
def test_list_routes_run_a_fixed_number_of_queries(
    api_client: Any, url: str, django_assert_max_num_queries: Any
) -> None:
    _populate(12)
    # count + page (+ a savepoint pair at most): independent of the 12 rows per kind
    with django_assert_max_num_queries(4):
        response = api_client.get(url)
    assert response.status_code == 200
    assert response.json()["count"] >= 12


@pytest.mark.django_db
def test_model_endpoint_list_runs_a_fixed_number_of_queries(
    api_client: Any, django_assert_max_num_queries: Any
) -> None:
    model = make_model()
    for _ in range(15):
        make_endpoint(model, api_key="sk-abcdefgh")
    with django_assert_max_num_queries(4):
        response = api_client.get(f"{API}/models/{model.pk}/endpoints")
    assert response.json()["count"] == 15
