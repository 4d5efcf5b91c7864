"""manage.py deploy_recipe --input NAME=VALUE --dry-run, through the deploy service."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError

from obleth.core.models import ManagedSpec, Model, Recipe

pytestmark = pytest.mark.django_db
DEMO = Path(settings.BASE_DIR, "recipes", "library", "test-engine.recipe")


def run(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("deploy_recipe", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_inputs_reach_the_script_and_sources_say_you() -> None:
    run(str(DEMO), "--name", "cli", "--input", "loading=7", "--input", "extra=--latency-ms 5")
    spec = ManagedSpec.objects.get(model__name="cli")
    assert spec.launcher_spec["inputs"]["loading"] == "7"
    assert spec.launcher_spec["input_sources"]["loading"] == "override"
    assert 'LOADING="7"' in spec.script_body


def test_dry_run_prints_the_review_and_writes_nothing() -> None:
    out, _ = run("test-engine", "--name", "cli-dry", "--dry-run", "--set", "replicas=1")
    review = json.loads(out)
    assert review["dry_run"] is True
    assert review["values"]["replicas"] == {"value": 1, "source": "you"}
    assert review["source"] == {
        "kind": "library",
        "library": "test-engine",
        "name": "Test engine (demo)",
    }
    assert review["script"].startswith("#!/bin/bash")
    assert not Model.objects.filter(name="cli-dry").exists()


def test_a_saved_recipe_by_name() -> None:
    Recipe.objects.create(name="mine", body=DEMO.read_text())
    run("mine", "--name", "from-saved", "--set", "cpus=1", "--set", "target_replicas=3")
    spec = ManagedSpec.objects.get(model__name="from-saved")
    assert spec.recipe is not None and spec.recipe.name == "mine"
    assert (spec.cpus_per_task, spec.target_replicas) == (1, 3)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--input", "loading"], "--input 'loading': write NAME=VALUE"),
        (["--input", "nope=1"], "inputs.nope: `nope` is not an input of this recipe"),
        (["--input", "loading=lots"], "inputs.loading: Loading time must be a number"),
        (["--set", "gpus=-1"], "overrides.gpus"),
    ],
)
def test_bad_values_are_refused_naming_them(args: list[str], words: str) -> None:
    with pytest.raises(CommandError) as info:
        run(str(DEMO), "--name", "cli-bad", *args)
    assert words in str(info.value), str(info.value)
    assert not Model.objects.filter(name="cli-bad").exists()


def test_an_unknown_library_recipe(capsys: Any) -> None:
    with pytest.raises(CommandError, match="library: No library recipe 'nope'"):
        run("nope", "--name", "x")
