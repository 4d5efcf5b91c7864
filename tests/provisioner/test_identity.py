"""Which identity check a replica gets (provisioner/identity.py) and what the probe accepts as
a model listing (provisioner/probe.py). Tables of cases; and how a loaded replica key is masked."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from provisioner.identity import identity_check_for, identity_path_for, new_replica_key
from provisioner.probe import listed_model_ids, model_listed


def recipe(engine: str, **extra: Any) -> dict[str, Any]:
    return {"recipe": {"id": None, "name": "x", "engine": engine}, **extra}


@pytest.mark.parametrize(
    ("launcher_spec", "check", "path"),
    [
        (None, "key", "/v1/models"),  # hand-written spec: its command must pass the key
        ({}, "key", "/v1/models"),
        ("not a mapping", "key", "/v1/models"),
        (recipe("vllm"), "key", "/v1/models"),
        (recipe("sglang"), "key", "/v1/models"),
        (recipe("infinity"), "key", "/v1/models"),
        (recipe("test"), "key", "/v1/models"),
        (recipe("llamacpp"), "key", "/props"),  # llama-server leaves /v1/models open
        (recipe("ollama"), "model-name", "/v1/models"),
        (recipe("Ollama"), "model-name", "/v1/models"),
        (recipe("ollama", identity_check="key"), "key", "/v1/models"),  # the operator's word
        (recipe("vllm", identity_check="model-name"), "model-name", "/v1/models"),
        (recipe("vllm", identity_check="none"), "key", "/v1/models"),  # unknown: the safe one
        (recipe("vllm", identity_path="/v1/props"), "key", "/v1/props"),
        (recipe("vllm", identity_path="v1/models"), "key", "/v1/models"),  # not a path
        (recipe("vllm", identity_path="/v1/models?x=$(id)"), "key", "/v1/models"),
        (recipe("vllm", identity_path="/a b"), "key", "/v1/models"),
        (recipe("vllm", identity_path="/x\r\nHost: evil"), "key", "/v1/models"),
        ({"recipe": {"engine": 7}}, "key", "/v1/models"),
    ],
)
def test_identity_rule(launcher_spec: Any, check: str, path: str) -> None:
    assert identity_check_for(launcher_spec) == check
    assert identity_path_for(launcher_spec) == path


def test_replica_keys_are_fresh_long_and_header_safe() -> None:
    keys = {new_replica_key() for _ in range(200)}
    assert len(keys) == 200
    for key in keys:
        assert key.startswith("obr_") and len(key) >= 40
        assert all(c.isalnum() or c in "_-" for c in key)


@pytest.mark.parametrize(
    ("body", "ids"),
    [
        (b'{"data": [{"id": "a"}, {"id": "b"}]}', ["a", "b"]),
        (b'{"data": [{"id": 1}, "x", {"name": "c"}]}', []),
        (b'{"data": "a"}', []),
        (b"[]", []),
        (b"not json", []),
        (b"\xff\xfe", []),
    ],
)
def test_listed_model_ids(body: bytes, ids: list[str]) -> None:
    assert listed_model_ids(body) == ids


@pytest.mark.parametrize(
    ("expected", "listed", "ok"),
    [
        ("qwen2.5:0.5b", ["qwen2.5:0.5b"], True),
        ("llama3", ["llama3:latest"], True),  # Ollama tags a bare name :latest
        ("llama3:8b", ["llama3:latest"], False),
        ("llama3", ["llama3.1:latest"], False),
        ("", [""], False),
        ("m", [], False),
    ],
)
def test_model_listed(expected: str, listed: list[str], ok: bool) -> None:
    assert model_listed(expected, listed) is ok


def test_a_stale_installed_test_engine_is_refreshed_before_a_submit(
    db: Any, settings: Any, tmp_path: Any
) -> None:
    """A spec rendered before an upgrade points at the installed copy of the test engine; an
    old copy would not demand the replica key, so the submit brings it up to date."""
    from obleth.core.models import ManagedSpec, SlurmSettings
    from provisioner import submission
    from provisioner.testengine import SERVER_PATH
    from tests.plugins.factories import make_slurm_model

    settings.OBLETH_ENGINES_DIR = tmp_path
    stale = tmp_path / "testengine" / "server.py"
    stale.parent.mkdir(parents=True)
    stale.write_text("# an old engine without --api-key\n")
    model = make_slurm_model(
        spec={"script_body": f"#!/bin/bash\nexec /usr/bin/python3 {stale} --port 1\n"}
    )
    submission._install_once.cache_clear()
    submission.build_submission(
        spec=ManagedSpec.objects.get(model=model),
        slurm=SlurmSettings.load(),
        job_name="j",
        port_base=20400,
        port_span=8,
        replica_api_key=new_replica_key(),
    )
    assert stale.read_bytes() == SERVER_PATH.read_bytes()
    submission._install_once.cache_clear()


def test_a_loaded_replica_key_is_masked_and_a_row_without_it_costs_no_query(
    db: Any, monkeypatch: Any
) -> None:
    """Every process that loads a replica key masks it in its logs (obleth.core.apps); a row
    read without the key (``.only()``) is not made to read it, one query per row, for that."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    import obleth.logging
    from obleth.core.models import Replica
    from obleth.logging import redact

    key = new_replica_key()
    Replica.objects.create(model_id=uuid.uuid4(), model_name="m", job_name="j", api_key=key)
    monkeypatch.setattr(obleth.logging, "_known", set())  # a process that never wrote it
    with CaptureQueriesContext(connection) as queries:
        rows = list(Replica.objects.only("id", "state"))
    assert len(rows) == 1 and len(queries) == 1
    assert redact(f"key {key}") == f"key {key}"  # not loaded, so nothing to mask yet
    assert rows[0].api_key == key  # loading it later (one query) ...
    assert redact(f"key {key}") == "key [redacted]"  # ... masks it
    monkeypatch.setattr(obleth.logging, "_known", set())
    list(Replica.objects.all())
    assert redact(f"key {key}") == "key [redacted]"
