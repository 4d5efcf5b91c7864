"""render, input_defaults and validate_inputs (reference 4.5)."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings

from obleth.core.models import SlurmSettings
from recipes.cluster import cluster_defaults
from recipes.document import parse_recipe
from recipes.inputs import input_defaults, validate_inputs
from recipes.render import render
from recipes.types import RecipeError
from tests.recipes.helpers import with_header

INPUTS = """\
inputs:
  - name: model
    required: true
  - name: tp
    type: number
    min: 1
    max: 8
    default: "1"
    by_nodes: {2: "4"}
  - name: fast
    type: flag
    adds: --fast --level 2
  - name: dtype
    type: choice
    options: [bf16, fp8]
  - name: note
    type: text
  - name: cache
    type: path
    default: "{{cluster.cache}}/hf"
    required: true
  - name: scratch
    type: path
    default: "{{cluster.logs}}/scratch"
"""

CLUSTER: dict[str, Any] = {
    "cache_dir": "/c",
    "images_dir": "/img/",
    "log_dir": "/logs",
    "setup": "module load cuda\nexport X=1",
    "images": {"vllm": "vllm.sif", "abs": "/opt/a.sif", "oci": "docker://vllm/vllm-openai:v1"},
}


def one(token: str, *, values: dict[str, Any] | None = None, **kw: Any) -> str:
    parsed = parse_recipe(with_header(INPUTS, f"#!/bin/bash\nX={token}\n"))
    options: dict[str, Any] = {"cluster": CLUSTER, "api_model_name": "served", "strict": False}
    options.update(kw)
    out = render(parsed, values=values or {"model": "org/m"}, **options)
    return out.split("X=", 1)[1].rstrip("\n")


RENDER_TABLE = [
    ("{{model}}", {"model": "  org/m  "}, {}, "org/m"),
    ("{{ model }}", {"model": "org/m"}, {}, "org/m"),
    ("{{tp}}", {"model": "m"}, {}, "1"),
    ("{{tp}}", {"model": "m"}, {"node_count": 2}, "4"),
    ("{{tp}}", {"model": "m"}, {"node_count": 3}, "1"),
    ("{{tp}}", {"model": "m", "tp": "2"}, {"node_count": 2}, "2"),
    ("{{fast}}", {"model": "m"}, {}, ""),
    ("{{fast}}", {"model": "m", "fast": "on"}, {}, "--fast --level 2"),
    ("{{fast}}", {"model": "m", "fast": True}, {}, "--fast --level 2"),
    ("{{fast}}", {"model": "m", "fast": "no"}, {}, ""),
    ("{{note}}", {"model": "m"}, {}, ""),
    ("{{dtype}}", {"model": "m", "dtype": "fp8"}, {}, "fp8"),
    ("{{model}}", {"model": ""}, {}, "{{model}}"),
    ("{{cache}}", {"model": "m"}, {}, "/c/hf"),
    ("{{cache}}", {"model": "m"}, {"cluster": {}}, "{{cluster.cache}}/hf"),
    ("{{scratch}}", {"model": "m"}, {"cluster": {}}, ""),
    ("{{scratch}}", {"model": "m"}, {}, "/logs/scratch"),
    ("{{api_model_name}}", {"model": "m"}, {}, "served"),
    ("{{obleth_root}}", {"model": "m"}, {}, str(settings.BASE_DIR)),
    ("{{cluster.cache}}", {"model": "m"}, {}, "/c"),
    ("{{cluster.images}}", {"model": "m"}, {}, "/img"),
    ("{{cluster.logs}}", {"model": "m"}, {}, "/logs"),
    ("{{cluster.setup}}", {"model": "m"}, {}, "module load cuda\nexport X=1"),
    ("{{cluster.setup}}", {"model": "m"}, {"cluster": None}, ""),
    ("{{image.vllm}}", {"model": "m"}, {}, "/img/vllm.sif"),
    ("{{cluster.image.vllm}}", {"model": "m"}, {}, "/img/vllm.sif"),
    ("{{image.abs}}", {"model": "m"}, {}, "/opt/a.sif"),
    ("{{image.oci}}", {"model": "m"}, {}, "docker://vllm/vllm-openai:v1"),
    ("{{image.sglang}}", {"model": "m"}, {}, "{{image.sglang}}"),
    ("{{cluster.cache}}", {"model": "m"}, {"cluster": None}, "{{cluster.cache}}"),
    ("{{undeclared}}", {"model": "m"}, {}, "{{undeclared}}"),
    ("${HOME} $(hostname) ${X:-{{model}}}", {"model": "m"}, {}, "${HOME} $(hostname) ${X:-m}"),
    ("{{model}}", {"model": "a;b"}, {}, '"${OBLETH_INPUT_model[@]}"'),
    ("{{model}}", {"model": "it's"}, {}, "{{model}}"),  # unpaired quote: refused
    ('"{{model}}"', {"model": "a b"}, {}, '"${OBLETH_INPUT_model}"'),
    ("{{model}}", {"model": "--a x --b"}, {}, "--a x --b"),
    ('"{{cache}}"', {"model": "m", "cache": "/my dir"}, {}, '"${OBLETH_INPUT_cache}"'),
    ("{{cache}}", {"model": "m", "cache": "/my dir"}, {}, '"${OBLETH_INPUT_cache}"'),
    ("'{{cache}}'", {"model": "m", "cache": "/my dir"}, {}, "''\"${OBLETH_INPUT_cache}\"''"),
]


@pytest.mark.parametrize(
    ("token", "values", "options", "expected"),
    RENDER_TABLE,
    ids=[f"{i}:{row[0]}" for i, row in enumerate(RENDER_TABLE)],
)
def test_render_table(
    token: str, values: dict[str, Any], options: dict[str, Any], expected: str
) -> None:
    assert one(token, values=values, **options) == expected


def test_slurm_settings_row_as_cluster() -> None:
    row = SlurmSettings(cache_dir="/scratch/", images_dir="/img", images={"vllm": "v.sif"})
    assert one("{{cluster.cache}} {{image.vllm}}", cluster=row) == "/scratch /img/v.sif"
    assert cluster_defaults(row).logs == ""


def test_env_is_exported_after_the_sbatch_block() -> None:
    parsed = parse_recipe(
        with_header(
            'env:\n  HF_HOME: "{{cluster.cache}}/hf"\n  MSG: it\'s ok\n',
            "#!/bin/bash\n#SBATCH --mem=1G\n# a comment\n#SBATCH -p x\nset -e\necho hi\n",
        )
    )
    out = render(parsed, cluster=CLUSTER, values={}, api_model_name="m", strict=True)
    assert out.split("\n")[:7] == [
        "#!/bin/bash",
        "#SBATCH --mem=1G",
        "# a comment",
        "#SBATCH -p x",
        "export HF_HOME=/c/hf",
        "export MSG='it'\"'\"'s ok'",
        "set -e",
    ]


def test_strict_names_each_missing_value() -> None:
    parsed = parse_recipe(
        with_header(
            INPUTS,
            "#!/bin/bash\nrun {{model}} {{cache}} {{image.vllm}} {{cluster.logs}} {{cluster.bogus}}"
            " {{cluster.setup}} {{undeclared}}\n",
        )
    )
    with pytest.raises(RecipeError) as info:
        render(parsed, cluster=None, values={}, api_model_name="m", strict=True)
    err = info.value
    assert set(err.errors) == {
        "inputs.model",
        "cluster.cache",
        "image.vllm",
        "cluster.logs",
        "cluster.bogus",
    }
    message = str(err)
    assert "input `model`" in message and "is needed" in message
    assert message.count("set it on the Slurm connection") >= 4
    assert "cache_dir" in message and "log_dir" in message
    # Review mode shows the same script with the tokens kept.
    review = render(parsed, cluster=None, values={}, api_model_name="m", strict=False)
    assert "run {{model}} {{cluster.cache}}/hf {{image.vllm}} {{cluster.logs}}" in review


def test_strict_passes_when_everything_is_set() -> None:
    parsed = parse_recipe(with_header(INPUTS, "#!/bin/bash\nrun {{model}} {{cache}} {{fast}}\n"))
    out = render(
        parsed,
        cluster=CLUSTER,
        values={"model": "org/m", "fast": "1"},
        api_model_name="m",
        strict=True,
    )
    assert out == "#!/bin/bash\nrun org/m /c/hf --fast --level 2\n"


def test_input_defaults() -> None:
    parsed = parse_recipe(with_header(INPUTS))
    assert input_defaults(parsed, cluster=CLUSTER, node_count=2) == {
        "model": "",
        "tp": "4",
        "fast": "false",
        "dtype": "",
        "note": "",
        "cache": "/c/hf",
        "scratch": "/logs/scratch",
    }
    unset = input_defaults(parsed, cluster=None)
    assert unset["cache"] == "{{cluster.cache}}/hf"  # required: keeps the token
    assert unset["scratch"] == ""  # optional: starts empty


VALIDATE_TABLE = [
    ({"model": "m"}, CLUSTER, {}),
    ({}, CLUSTER, {"model": "is needed"}),
    ({"model": "  "}, CLUSTER, {"model": "is needed"}),
    ({"model": "m"}, None, {"cache": "cluster default that isn't set"}),
    ({"model": "m", "cache": "/mine"}, None, {}),
    ({"model": "m", "tp": "0"}, CLUSTER, {"tp": "at least 1"}),
    ({"model": "m", "tp": "9"}, CLUSTER, {"tp": "at most 8"}),
    ({"model": "m", "tp": "two"}, CLUSTER, {"tp": "must be a number"}),
    ({"model": "m", "tp": "nan"}, CLUSTER, {"tp": "finite"}),
    ({"model": "m", "tp": "2.5"}, CLUSTER, {}),
    ({"model": "m", "dtype": "int4"}, CLUSTER, {"dtype": "one of: bf16, fp8"}),
    ({"model": "m", "fast": "maybe"}, CLUSTER, {"fast": "true or false"}),
    ({"model": "m", "fast": "YES"}, CLUSTER, {}),
    ({"model": "m", "colour": "red"}, CLUSTER, {"colour": "not an input"}),
]


@pytest.mark.parametrize(("values", "cluster", "expected"), VALIDATE_TABLE)
def test_validate_inputs(
    values: dict[str, Any], cluster: dict[str, Any] | None, expected: dict[str, str]
) -> None:
    parsed = parse_recipe(with_header(INPUTS))
    errors = validate_inputs(parsed, values, cluster=cluster)
    assert set(errors) == set(expected), errors
    for name, phrase in expected.items():
        assert phrase in errors[name]
