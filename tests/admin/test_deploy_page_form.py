"""The deploy page's form <-> request mapping (recipes.admin_deploy_form), without HTTP:
only changed fields are sent, "Edit as YAML" round-trips every state, a service error key
lands on its field.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from recipes import admin_deploy_form as pf
from recipes.document import parse_recipe

PARSED = parse_recipe(
    Path(settings.BASE_DIR, "recipes", "library", "test-engine.recipe").read_text()
)
VALUES = {
    key: {"value": value, "source": source}
    for key, value, source in [
        ("partition", "debug", "recipe"),
        ("account", "", "not set"),
        ("qos", "", "not set"),
        ("time_limit", "1-00:00:00", "recipe"),
        ("nodes", 1, "not set"),
        ("gpus", 0, "not set"),
        ("cpus", 1, "recipe"),
        ("mem", "256M", "recipe"),
        ("constraints", "", "not set"),
        ("exclude", "", "not set"),
        ("replicas", 2, "recipe"),
        ("min_replicas", 0, "not set"),
        ("max_job_failures", 3, "recipe"),
        ("health_check", "/health", "recipe"),
        ("serving_port", 18000, "recipe"),
        ("api_model_name", "test-engine", "recipe"),
        ("log_output_dir", "/scratch/logs", "cluster default"),
        ("env", {"A": "1"}, "recipe"),
    ]
}
INPUTS = {
    "loading": {"value": "0", "source": "recipe"},
    "hang_inference": {"value": "false", "source": "recipe"},
    "control": {"value": "true", "source": "recipe"},
    "extra": {"value": "", "source": "recipe"},
}


def fresh() -> pf.PageState:
    state = pf.PageState(source="library:test-engine", name="demo", script=PARSED.script)
    state.base = pf.Base.of(VALUES, INPUTS, PARSED, PARSED.script)
    pf.fill_from_base(state)
    return state


def test_an_untouched_form_sends_only_name_and_recipe() -> None:
    assert pf.request_data(fresh(), dry_run=True) == {
        "name": "demo",
        "dry_run": True,
        "library": "test-engine",
    }


def test_only_changed_fields_are_sent_and_become_you() -> None:
    state = fresh()
    state.overrides["replicas"] = "1"
    state.overrides["env"] = "A=1\r\nB=two words"
    state.inputs["control"] = "false"
    state.inputs["hang_inference"] = "false"  # unchanged
    state.script = PARSED.script.replace("\n", "\r\n")  # a browser's newlines: unchanged
    assert pf.request_data(state, dry_run=False) == {
        "name": "demo",
        "dry_run": False,
        "library": "test-engine",
        "inputs": {"control": "false"},
        "overrides": {"replicas": "1", "env": {"A": "1", "B": "two words"}},
    }
    assert state.source_of_override("replicas") == "you"
    assert state.source_of_override("mem") == "recipe"
    assert state.source_of_input("control") == "you"
    state.script += "echo more\n"
    assert pf.request_data(state, dry_run=True)["script"].endswith("echo more\n")


def test_a_tampered_base_sends_more_never_less_than_typed() -> None:
    state = pf.state_from_post({"source": "library:test-engine", "name": "x", "base": "[1,2]"})
    state.overrides["mem"] = "1G"
    assert pf.request_data(state, dry_run=True)["overrides"] == {"mem": "1G"}


@pytest.mark.parametrize(
    ("key", "field"),
    [
        ("name", "name"),
        ("inputs.loading", "in.loading"),
        ("inputs.nope", None),
        ("overrides.partition", "ov.partition"),
        ("overrides.env.SLURM_X", "ov.env"),
        ("overrides.gres", "ov.gpus"),
        ("overrides.gpus", "ov.gpus"),
        ("overrides.colour", None),
        ("library", "source"),
        ("hf_repo", "source"),
        ("cluster.cache", None),
        ("script", "script"),
    ],
)
def test_each_service_error_lands_on_its_field(key: str, field: str | None) -> None:
    assert pf.field_of(key, {i.name for i in PARSED.inputs}) == field


texts = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"), max_size=30
).map(str.strip)


@hsettings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=texts,
    overrides=st.dictionaries(st.sampled_from([k for k in pf.KEYS if k != "env"]), texts),
    env=st.dictionaries(st.from_regex(r"[A-Z][A-Z0-9_]{0,8}", fullmatch=True), texts, max_size=3),
    inputs=st.dictionaries(st.sampled_from(["loading", "extra"]), texts),
    flag=st.booleans(),
)
def test_edit_as_yaml_round_trips_every_state(
    name: str, overrides: dict[str, str], env: dict[str, str], inputs: dict[str, str], flag: bool
) -> None:
    state = fresh()
    state.name = name
    state.overrides.update(overrides)
    state.overrides["env"] = "\n".join(f"{k}={v}" for k, v in env.items())
    state.inputs.update(inputs)
    state.inputs["control"] = "true" if flag else "false"
    before = pf.request_data(state, dry_run=True)
    document = pf.state_to_yaml(state)
    back = fresh()
    pf.state_from_yaml(back, document)
    assert pf.request_data(back, dry_run=True) == before
    assert back.name == state.name


def test_numbers_read_back_as_typed() -> None:
    state = fresh()
    state.overrides.update({"replicas": "007", "nodes": "2", "cpus": "٣", "gpus": "²5"})
    document = pf.state_to_yaml(state)
    assert "  nodes: 2\n" in document
    back = fresh()
    pf.state_from_yaml(back, document)
    assert [back.overrides[k] for k in ("replicas", "nodes", "cpus", "gpus")] == [
        "007",
        "2",
        "٣",
        "²5",
    ]


def test_a_key_left_out_of_the_yaml_keeps_its_value_without_changes() -> None:
    state = fresh()
    state.overrides["mem"] = "4G"
    pf.state_from_yaml(state, "name: demo\noverrides:\n  replicas: 5\n")
    assert state.overrides["mem"] == "256M" and state.overrides["replicas"] == "5"
    assert pf.request_data(state, dry_run=True)["overrides"] == {"replicas": "5"}


def test_a_plan_updates_the_unchanged_fields_only() -> None:
    state = fresh()
    state.overrides["replicas"] = "1"
    newer = dict(VALUES)
    newer["serving_port"] = {"value": 18016, "source": "free range"}
    newer["replicas"] = {"value": 1, "source": "you"}
    newer["account"] = {"value": "ml", "source": "learned"}
    state.rebase(pf.Base.of(newer, INPUTS, PARSED, PARSED.script))
    assert state.overrides["serving_port"] == "18016"
    assert state.source_of_override("serving_port") == "free range"
    assert state.source_of_override("account") == "learned"
    # replicas stays the operator's: its base is still the recipe's 2.
    assert state.base.overrides["replicas"] == ("2", "recipe")
    assert pf.request_data(state, dry_run=True)["overrides"] == {"replicas": "1"}


def test_the_digest_tells_a_changed_request() -> None:
    state = fresh()
    reviewed = pf.digest(pf.request_data(state, dry_run=True))
    assert pf.digest(pf.request_data(state, dry_run=False)) == reviewed
    state.overrides["replicas"] = "3"
    assert pf.digest(pf.request_data(state, dry_run=False)) != reviewed
