"""Launch history, recipes (saved and library) and the alert log."""

from __future__ import annotations

import datetime as dt
import uuid
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings
from django.utils import timezone

from obleth.core.models import Alert, Launch, Recipe
from tests.api.conftest import API

pytestmark = pytest.mark.django_db

GOOD_RECIPE = """---
name: Tiny
engine: vllm
model_type: chat
api_model_name: tiny
port: 8000
---
#!/bin/bash
exec vllm serve /models/tiny --port "$OBLETH_SERVING_PORT"
"""


def _launches(count: int, **fields: Any) -> list[Launch]:
    rows = [
        Launch(
            id=uuid.uuid4(),
            model_id=fields.get("model_id", uuid.uuid4()),
            model_name="m",
            recipe_id=fields.get("recipe_id"),
            job_name="obleth-m",
            job_id=str(1000 + i),
        )
        for i in range(count)
    ]
    Launch.objects.bulk_create(rows)
    # submitted_at is auto_now_add: spread them out so "newest first" is observable.
    base = timezone.now()
    for i, row in enumerate(rows):
        Launch.objects.filter(pk=row.pk).update(submitted_at=base - dt.timedelta(minutes=count - i))
    return rows


# --------------------------------------------------------------------------------------- launches


def test_launches_newest_first_with_filters(api_client: Any) -> None:
    model_id, recipe_id = uuid.uuid4(), uuid.uuid4()
    mine = _launches(3, model_id=model_id, recipe_id=recipe_id)
    _launches(2)
    body = api_client.get(f"{API}/deployments/launches").json()
    assert body["count"] == 5
    stamps = [row["submitted_at"] for row in body["results"]]
    assert stamps == sorted(stamps, reverse=True)

    by_model = api_client.get(f"{API}/deployments/launches", {"model_id": str(model_id)}).json()
    assert [r["id"] for r in by_model["results"]] == [str(r.pk) for r in reversed(mine)]
    by_recipe = api_client.get(f"{API}/deployments/launches", {"recipe_id": str(recipe_id)}).json()
    assert by_recipe["count"] == 3


def test_launches_limit_defaults_to_50_and_caps_at_500(api_client: Any) -> None:
    _launches(510)
    url = f"{API}/deployments/launches"
    assert len(api_client.get(url).json()["results"]) == 50
    assert len(api_client.get(url, {"limit": 7}).json()["results"]) == 7
    assert len(api_client.get(url, {"limit": 10000}).json()["results"]) == 500


def test_launches_are_read_only(api_client: Any) -> None:
    (row,) = _launches(1)
    assert api_client.delete(f"{API}/deployments/launches/{row.pk}").status_code == 405
    assert api_client.post(f"{API}/deployments/launches", {}, format="json").status_code == 405
    assert Launch.objects.filter(pk=row.pk).exists()


# ---------------------------------------------------------------------------------------- recipes


def test_recipe_crud(api_client: Any) -> None:
    created = api_client.post(
        f"{API}/recipes", {"name": "tiny", "body": GOOD_RECIPE, "author": "ops"}, format="json"
    )
    assert created.status_code == 201, created.json()
    recipe_id = created.json()["id"]
    assert api_client.get(f"{API}/recipes/{recipe_id}").json()["author"] == "ops"
    renamed = api_client.patch(f"{API}/recipes/{recipe_id}", {"name": "tiny-2"}, format="json")
    assert renamed.status_code == 200
    assert Recipe.objects.get(pk=recipe_id).name == "tiny-2"
    assert api_client.get(f"{API}/recipes").json()["count"] == 1
    assert api_client.delete(f"{API}/recipes/{recipe_id}").status_code == 204
    assert not Recipe.objects.exists()


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"body": GOOD_RECIPE}, "name"),
        ({"name": "", "body": GOOD_RECIPE}, "name"),
        ({"name": "x", "body": "no header at all"}, "body"),
        ({"name": "x", "body": GOOD_RECIPE.replace("port: 8000", "port: zero")}, "body"),
        ({"name": "x", "body": GOOD_RECIPE.replace("engine: vllm\n", "")}, "body"),
    ],
)
def test_recipe_validation_names_the_field(
    api_client: Any, payload: dict[str, Any], field: str
) -> None:
    response = api_client.post(f"{API}/recipes", payload, format="json")
    assert response.status_code == 400, response.json()
    assert next(iter(response.json()["fields"])) == field
    assert response.json()["error"].startswith(f"{field}: ")


def test_recipe_body_error_carries_the_parsers_explanation(api_client: Any) -> None:
    body = GOOD_RECIPE.replace("engine: vllm\n", "")
    response = api_client.post(f"{API}/recipes", {"name": "x", "body": body}, format="json")
    assert "engine" in response.json()["error"]


def test_recipe_names_are_unique(api_client: Any) -> None:
    Recipe.objects.create(name="same", body=GOOD_RECIPE)
    response = api_client.post(
        f"{API}/recipes", {"name": "same", "body": GOOD_RECIPE}, format="json"
    )
    assert response.status_code == 400
    assert "same" in response.json()["error"]


def test_library_lists_recipe_files_with_their_errors(api_client: Any, tmp_path: Path) -> None:
    (tmp_path / "tiny.recipe").write_text(GOOD_RECIPE)
    (tmp_path / "broken.recipe").write_text("---\nname: Broken\n---\n")
    (tmp_path / "notes.txt").write_text("not a recipe")
    with override_settings(OBLETH_RECIPES_DIR=tmp_path):
        response = api_client.get(f"{API}/recipes/library")
    assert response.status_code == 200
    items = {item["name"]: item for item in response.json()}
    assert set(items) == {"Tiny", "Broken"}
    assert items["Tiny"]["error"] is None
    assert items["Tiny"]["header"]["api_model_name"] == "tiny"
    assert items["Tiny"]["path"].endswith("tiny.recipe")
    assert items["Broken"]["error"]


# ----------------------------------------------------------------------------------------- alerts


def test_alert_log_newest_first_and_filterable(api_client: Any) -> None:
    old = Alert.objects.create(key="slurm_reconcile_held", title="reconciliation is failing")
    Alert.objects.filter(pk=old.pk).update(created_at=timezone.now() - dt.timedelta(hours=1))
    new = Alert.objects.create(key="slurm_reconcile_recovered", title="recovered", severity="info")
    body = api_client.get(f"{API}/alerts").json()
    assert [a["id"] for a in body["results"]] == [new.pk, old.pk]
    held = api_client.get(f"{API}/alerts", {"key": "slurm_reconcile_held"}).json()
    assert [a["title"] for a in held["results"]] == ["reconciliation is failing"]
    assert api_client.delete(f"{API}/alerts/{new.pk}").status_code == 405
