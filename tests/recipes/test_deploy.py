"""deploy: one recipe -> a Slurm model and its managed spec, with the value precedence
recipe header < #SBATCH in the script < deploy overrides."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.exceptions import ValidationError

from obleth.core.choices import HostingMode
from obleth.core.models import ManagedSpec, Model, Recipe, SlurmSettings
from recipes.deploy.spec import deploy
from tests.recipes.helpers import with_header

pytestmark = pytest.mark.django_db

LAYERED = with_header(
    """\
    partition: from-header
    qos: header-qos
    mem: 1G
    time_limit: "2:00:00"
    target_replicas: 3
    inputs:
      - name: model
        required: true
      - name: tp
        type: number
        default: "1"
        by_nodes: {2: "8"}
      - name: cache
        type: path
        default: "{{cluster.cache}}"
    """,
    """\
    #!/bin/bash
    #SBATCH -p from-script
    #SBATCH --mem=2G
    #SBATCH --job-name=ignored
    #SBATCH --cpus-per-task=4
    serve {{model}} --tp {{tp}} --cache "{{cache}}" --name {{api_model_name}} \\
      --port "$OBLETH_SERVING_PORT"
    """,
)


def _cluster(**kwargs: Any) -> SlurmSettings:
    row = SlurmSettings.load()
    for key, value in kwargs.items():
        setattr(row, key, value)
    row.save()
    return row


def test_demo_recipe_deploys() -> None:
    text = (Path(settings.BASE_DIR) / "recipes" / "library" / "test-engine.recipe").read_text()
    model = deploy(recipe_text=text, model_name="demo", overrides={}, cluster=None)
    model.refresh_from_db()
    spec = ManagedSpec.objects.get(model=model)
    assert model.hosting_mode == HostingMode.SLURM
    assert model.model_type == "chat"
    assert model.upstream_model == "test-engine"
    assert (spec.partition, spec.mem, spec.time_limit) == ("debug", "256M", "1-00:00:00")
    assert spec.cpus_per_task == 1  # lifted from #SBATCH
    assert (spec.serving_port, spec.health_path, spec.target_replicas) == (18000, "/health", 2)
    assert spec.max_job_failures == 3
    assert "{{" not in spec.script_body
    assert f"{settings.OBLETH_ENGINES_DIR}/testengine/server.py" in spec.script_body
    assert spec.launcher_spec["recipe"] == {
        "id": None,
        "name": "Test engine (demo)",
        "engine": "test",
    }


def test_precedence_header_then_script_then_overrides() -> None:
    model = deploy(
        recipe_text=LAYERED,
        model_name="layered",
        overrides={"partition": "from-override", "inputs": {"model": "org/m"}},
        cluster=_cluster(cache_dir="/scratch"),
    )
    spec = model.managed_spec
    assert spec.partition == "from-override"
    assert spec.mem == "2G"
    assert spec.qos == "header-qos"
    assert spec.time_limit == "2:00:00"
    assert spec.cpus_per_task == 4
    assert spec.target_replicas == 3
    sources = spec.launcher_spec["sources"]
    assert sources["partition"] == "override"
    assert sources["mem"] == "script"
    assert sources["qos"] == "recipe"
    assert sources["cpus_per_task"] == "script"
    assert sources["serving_port"] == "recipe"
    assert spec.launcher_spec["inputs"] == {"model": "org/m", "tp": "1", "cache": "/scratch"}
    assert spec.launcher_spec["input_sources"] == {
        "model": "override",
        "tp": "recipe",
        "cache": "cluster",
    }
    assert "`--job-name` (not applied)" in spec.launcher_spec["warnings"]
    assert 'serve org/m --tp 1 --cache "/scratch" --name demo-model' in spec.script_body


def test_every_override_field_applies() -> None:
    overrides = {
        "partition": "p",
        "qos": "q",
        "account": "a",
        "time_limit": "30",
        "target_replicas": 4,
        "mem": "0",
        "cpus_per_task": "2",
        "gres": "gpu:1",
        "nodes": 2,
        "exclude": "n1",
        "constraints": "a100",
        "health_path": "/v1/models",
        "serving_port": 9100,
        "log_output_dir": "/logs/mine",
        "api_model_name": "renamed",
        "inputs": {"model": "x"},
    }
    model = deploy(recipe_text=LAYERED, model_name="all", overrides=overrides, cluster=None)
    spec = model.managed_spec
    for key, value in overrides.items():
        if key in ("inputs", "api_model_name"):
            continue
        expected = int(value) if key == "cpus_per_task" else value
        assert getattr(spec, key) == expected, key
    assert model.upstream_model == "renamed"
    assert "--tp 8" in spec.script_body  # by_nodes for 2 nodes
    assert "--name renamed" in spec.script_body
    assert 'cache ""' in spec.script_body  # optional input, cluster cache unset


def test_recipe_row_and_cluster_log_dir() -> None:
    recipe = Recipe.objects.create(name="saved", body=LAYERED)
    model = deploy(
        recipe_text=recipe.body,
        model_name="saved-model",
        overrides={"inputs": {"model": "x"}},
        cluster=_cluster(log_dir="/var/obleth/logs/"),
        recipe=recipe,
    )
    spec = model.managed_spec
    assert spec.recipe == recipe
    assert spec.launcher_spec["recipe"]["id"] == str(recipe.pk)
    assert spec.log_output_dir == "/var/obleth/logs"
    assert spec.launcher_spec["sources"]["log_output_dir"] == "cluster"


def test_edited_script_is_rendered_and_lifted() -> None:
    model = deploy(
        recipe_text=LAYERED,
        model_name="edited",
        overrides={
            "inputs": {"model": "x"},
            "script_body": (
                "#!/bin/bash\n#SBATCH --qos=edited\nserve {{model}} $OBLETH_SERVING_PORT\n"
            ),
        },
        cluster=None,
    )
    spec = model.managed_spec
    assert spec.qos == "edited"
    assert spec.script_body == "#!/bin/bash\n#SBATCH --qos=edited\nserve x $OBLETH_SERVING_PORT\n"
    assert spec.launcher_spec["sources"]["script_body"] == "override"


BAD_OVERRIDES = [
    ({"time_limit": "4h"}, "time_limit"),
    ({"mem": "lots"}, "mem"),
    ({"partition": ""}, "partition"),
    ({"serving_port": 0}, "serving_port"),
    ({"serving_port": 70000}, "serving_port"),
    ({"target_replicas": "many"}, "target_replicas"),
    ({"target_replicas": 5000}, "target_replicas"),
    ({"nodes": 0}, "nodes"),
    ({"health_path": "health"}, "health_path"),
    ({"colour": "red"}, "colour"),
    ({"enabled": "yes"}, "enabled"),
    ({"inputs": {"model": ""}}, "inputs.model"),
    ({"inputs": {"model": "x", "tp": "abc"}}, "inputs.tp"),
    ({"inputs": {"model": "x", "nope": "1"}}, "inputs.nope"),
    ({"inputs": ["model"]}, "inputs"),
]


@pytest.mark.parametrize(("overrides", "field"), BAD_OVERRIDES)
def test_bad_overrides_name_the_field(overrides: dict[str, Any], field: str) -> None:
    values = {"inputs": {"model": "x"}, **overrides}
    with pytest.raises(ValidationError) as info:
        deploy(recipe_text=LAYERED, model_name="bad", overrides=values, cluster=None)
    assert field in info.value.message_dict, info.value.message_dict
    assert Model.objects.count() == 0 and ManagedSpec.objects.count() == 0


def test_unset_cluster_default_is_named() -> None:
    text = with_header("", "#!/bin/bash\nserve --cache {{cluster.cache}} {{image.vllm}}\n")
    with pytest.raises(ValidationError) as info:
        deploy(recipe_text=text, model_name="c", overrides={"partition": "p"}, cluster=None)
    errors = info.value.message_dict
    assert set(errors) == {"cluster.cache", "image.vllm"}
    assert "set it on the Slurm connection" in errors["cluster.cache"][0]
    assert Model.objects.count() == 0


def test_taken_name_is_refused() -> None:
    deploy(
        recipe_text=LAYERED, model_name="taken", overrides={"inputs": {"model": "x"}}, cluster=None
    )
    with pytest.raises(ValidationError) as info:
        deploy(
            recipe_text=LAYERED,
            model_name="taken",
            overrides={"inputs": {"model": "x"}},
            cluster=None,
        )
    assert "already exists" in info.value.message_dict["name"][0]
    assert Model.objects.count() == 1


def test_blank_name_and_bad_recipe() -> None:
    with pytest.raises(ValidationError) as info:
        deploy(
            recipe_text=LAYERED, model_name="  ", overrides={"inputs": {"model": "x"}}, cluster=None
        )
    assert "name" in info.value.message_dict
    with pytest.raises(ValidationError) as info:
        deploy(recipe_text="no header", model_name="m", overrides={}, cluster=None)
    assert "`---`" in info.value.message_dict["recipe"][0]


def test_missing_partition_everywhere_is_named() -> None:
    text = with_header("", "#!/bin/bash\nserve $OBLETH_SERVING_PORT\n")
    with pytest.raises(ValidationError) as info:
        deploy(recipe_text=text, model_name="nopart", overrides={}, cluster=None)
    assert "partition" in info.value.message_dict
