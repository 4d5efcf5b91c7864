"""parse_recipe: document shape, required fields, defaults, types, warnings."""

from __future__ import annotations

import pytest

from recipes.document import parse_recipe
from recipes.types import RecipeError
from tests.recipes.helpers import BASE_HEADER, doc, with_header


def test_minimal_recipe_gets_defaults() -> None:
    parsed = parse_recipe(doc())
    assert parsed.name == "Demo"
    assert parsed.engine == "vllm"
    assert parsed.model_type == "chat"
    assert parsed.api_model_name == "demo-model"
    assert parsed.port == 8000
    assert parsed.health_path == "/health"
    assert parsed.target_replicas == 2
    assert parsed.max_job_failures == 3
    assert parsed.script == "#!/bin/bash\necho serve\n"
    assert parsed.placement == {}
    assert parsed.inputs == ()
    assert parsed.warnings == ()


def test_ollama_health_path_defaults_to_api_tags() -> None:
    parsed = parse_recipe(doc(BASE_HEADER.replace("engine: vllm", "engine: ollama")))
    assert parsed.health_path == "/api/tags"


def test_crlf_is_normalized() -> None:
    text = doc().replace("\n", "\r\n")
    parsed = parse_recipe(text)
    assert "\r" not in parsed.script
    assert parsed.script.startswith("#!/bin/bash\n")
    assert parsed.port == 8000


def test_explicit_values_win_over_defaults() -> None:
    parsed = parse_recipe(
        with_header(
            """\
            health_path: /v1/models
            target_replicas: 5
            max_job_failures: 0
            description: hello
            """
        )
    )
    assert (parsed.health_path, parsed.target_replicas, parsed.max_job_failures) == (
        "/v1/models",
        5,
        0,
    )
    assert parsed.description == "hello"


def test_time_and_dates_stay_text() -> None:
    """YAML 1.1 would read 4:00:00 as the number 14400 and a date as a date object."""
    parsed = parse_recipe(
        with_header(
            """\
            time_limit: 4:00:00
            tested:
              - date: 2026-10-03
                result: ok
            """
        )
    )
    assert parsed.placement["time_limit"] == "4:00:00"
    assert parsed.tested == ({"date": "2026-10-03", "result": "ok"},)


def test_placement_fields_are_kept() -> None:
    parsed = parse_recipe(
        with_header(
            """\
            partition: gpu
            gres: gpu:2
            cpus_per_task: 16
            mem: 64G
            time_limit: 1-00:00:00
            nodes: 2
            account: lab
            qos: high
            constraints: a100
            exclude: [n1, n2]
            """
        )
    )
    assert parsed.placement == {
        "partition": "gpu",
        "gres": "gpu:2",
        "cpus_per_task": 16,
        "mem": "64G",
        "time_limit": "1-00:00:00",
        "nodes": 2,
        "account": "lab",
        "qos": "high",
        "constraints": "a100",
        "exclude": "n1,n2",
    }


def test_unknown_keys_are_warnings() -> None:
    parsed = parse_recipe(with_header("flavour: spicy\n"))
    assert len(parsed.warnings) == 1
    assert "`flavour`" in parsed.warnings[0]


def test_undeclared_token_is_a_warning() -> None:
    parsed = parse_recipe(doc(script="#!/bin/bash\nrun {{modle}} {{api_model_name}}\n"))
    assert any("{{modle}}" in w for w in parsed.warnings)
    assert not any("api_model_name" in w for w in parsed.warnings)


def test_env_and_inputs() -> None:
    parsed = parse_recipe(
        with_header(
            """\
            env:
              HF_HUB_OFFLINE: 1
              FLAG: true
            inputs:
              - name: model
                label: HF model
                required: true
              - name: tp
                type: number
                min: 1
                max: 8
                by_nodes: {1: "1", 2: "4"}
              - name: fast
                type: flag
                adds: --fast
              - name: dtype
                type: choice
                options: [bf16, fp8]
                default: bf16
            """
        )
    )
    assert parsed.env == {"HF_HUB_OFFLINE": "1", "FLAG": "true"}
    names = [i.name for i in parsed.inputs]
    assert names == ["model", "tp", "fast", "dtype"]
    model, tp, fast, dtype = parsed.inputs
    assert model.required and model.label == "HF model" and model.type == "text"
    assert (
        tp.type == "number"
        and tp.min == 1
        and tp.max == 8
        and dict(tp.by_nodes) == {1: "1", 2: "4"}
    )
    assert fast.adds == "--fast" and fast.label == "fast"
    assert dtype.options == ("bf16", "fp8") and dtype.default == "bf16"


# Each bad document and the field (or line) its error must name.
BAD = [
    ("no fences", "name: x\n#!/bin/bash\n", "header", "`---`"),
    ("unclosed header", "---\nname: x\nport: 1\n", "header", "not closed"),
    ("bad yaml", "---\nname: x\n  port: [1\n---\necho\n", "header", "Line "),
    ("header not a mapping", "---\n- a\n- b\n---\necho\n", "header", "mapping"),
    ("empty header", "---\n---\necho\n", "header", "empty"),
    ("empty body", doc(script="\n  \n"), "script", "empty"),
    ("missing name", doc(BASE_HEADER.replace("name: Demo\n", "")), "name", "`name`"),
    ("missing engine", doc(BASE_HEADER.replace("engine: vllm\n", "")), "engine", "`engine`"),
    (
        "missing model_type",
        doc(BASE_HEADER.replace("model_type: chat\n", "")),
        "model_type",
        "`model_type`",
    ),
    (
        "bad model_type",
        doc(BASE_HEADER.replace("model_type: chat", "model_type: image")),
        "model_type",
        "chat, completion or embedding",
    ),
    (
        "missing api_model_name",
        doc(BASE_HEADER.replace("api_model_name: demo-model\n", "")),
        "api_model_name",
        "`api_model_name`",
    ),
    ("missing port", doc(BASE_HEADER.replace("port: 8000\n", "")), "port", "`port`"),
    ("port zero", doc(BASE_HEADER.replace("port: 8000", "port: 0")), "port", "1 to 65535"),
    ("port too big", doc(BASE_HEADER.replace("port: 8000", "port: 70000")), "port", "65535"),
    ("port text", doc(BASE_HEADER.replace("port: 8000", "port: eighty")), "port", "whole number"),
    ("port bool", doc(BASE_HEADER.replace("port: 8000", "port: true")), "port", "whole number"),
    ("name not text", doc(BASE_HEADER.replace("name: Demo", "name: [a]")), "name", "text"),
    ("health path", with_header("health_path: health\n"), "health_path", "'/'"),
    ("replicas", with_header("target_replicas: -1\n"), "target_replicas", "whole number"),
    ("failures", with_header("max_job_failures: lots\n"), "max_job_failures", "whole number"),
    ("mem", with_header("mem: lots\n"), "mem", "mem"),
    ("time", with_header("time_limit: 4h\n"), "time_limit", "time_limit"),
    ("cpus", with_header("cpus_per_task: 0\n"), "cpus_per_task", "cpus_per_task"),
    ("nodes", with_header("nodes: two\n"), "nodes", "nodes"),
    ("env not a map", with_header("env: [A]\n"), "env", "env"),
    ("env name", with_header("env: {'bad-name': 1}\n"), "env", "environment variable"),
    ("inputs not a list", with_header("inputs: {a: 1}\n"), "inputs", "list"),
    ("input not a map", with_header("inputs: [model]\n"), "inputs[0]", "mapping"),
    ("input name", with_header("inputs: [{name: 'a b'}]\n"), "inputs[0].name", "input name"),
    (
        "input type",
        with_header("inputs: [{name: a, type: colour}]\n"),
        "inputs[0] (a).type",
        "text, choice, number, path, flag",
    ),
    (
        "duplicate input",
        with_header("inputs: [{name: a}, {name: a}]\n"),
        "inputs[1] (a).name",
        "twice",
    ),
    (
        "choice without options",
        with_header("inputs: [{name: a, type: choice}]\n"),
        "inputs[0] (a).options",
        "options",
    ),
    (
        "choice default not an option",
        with_header("inputs: [{name: a, type: choice, options: [x], default: y}]\n"),
        "inputs[0] (a).default",
        "not one of",
    ),
    (
        "flag default",
        with_header("inputs: [{name: a, type: flag, default: maybe}]\n"),
        "inputs[0] (a).default",
        "true or false",
    ),
    (
        "min not a number",
        with_header("inputs: [{name: a, type: number, min: low}]\n"),
        "inputs[0] (a).min",
        "number",
    ),
    (
        "max below min",
        with_header("inputs: [{name: a, type: number, min: 5, max: 1}]\n"),
        "inputs[0] (a).max",
        "below min",
    ),
    (
        "unknown input setting",
        with_header("inputs: [{name: a, colour: red}]\n"),
        "inputs[0] (a).colour",
        "not an input setting",
    ),
    (
        "required not bool",
        with_header("inputs: [{name: a, required: sometimes}]\n"),
        "inputs[0] (a).required",
        "true or false",
    ),
    (
        "by_nodes",
        with_header("inputs: [{name: a, by_nodes: [1]}]\n"),
        "inputs[0] (a).by_nodes",
        "node count",
    ),
    ("tested", with_header("tested: yes\n"), "tested", "list"),
]


@pytest.mark.parametrize(("case", "text", "field", "phrase"), BAD, ids=[b[0] for b in BAD])
def test_errors_name_the_field(case: str, text: str, field: str, phrase: str) -> None:
    with pytest.raises(RecipeError) as info:
        parse_recipe(text)
    err = info.value
    assert err.field == field, f"{case}: {err}"
    assert phrase in str(err), f"{case}: {err}"
    if field not in ("header", "script"):
        assert f"`{field}`" in str(err)


def test_yaml_error_reports_the_document_line() -> None:
    text = "---\nname: x\nengine: vllm\nport: [1\n---\necho\n"
    with pytest.raises(RecipeError) as info:
        parse_recipe(text)
    # The header starts on line 2; the unclosed list is noticed at the closing fence or later.
    assert info.value.line is not None and info.value.line >= 4
    assert f"Line {info.value.line}" in str(info.value)


def test_recipe_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        parse_recipe("nothing")
