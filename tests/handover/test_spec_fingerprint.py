"""The spec fingerprint (provisioner/spec_fingerprint.py): job fields change it, routing
fields never."""

from __future__ import annotations

import types
import uuid

import pytest

from provisioner.spec_fingerprint import JOB_FIELDS, fingerprint_of, spec_fingerprint

BASE = {
    "partition": "gpu",
    "gres": "gpu:1",
    "nodes": 1,
    "constraints": "",
    "exclude": "",
    "account": "",
    "qos": "",
    "time_limit": "4:00:00",
    "cpus_per_task": None,
    "mem": "64G",
    "image": "/images/vllm.sif",
    "preamble": "",
    "launch_command": "",
    "script_body": "#!/bin/bash\nexec vllm serve x\n",
    "log_output_dir": "",
    "serving_port": 8000,
    "launcher_spec": {"recipe_id": "r1", "inputs": {"model": "x"}},
    "recipe_id": uuid.UUID(int=7),
}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("image", "/images/vllm-0.7.sif"),
        ("script_body", "#!/bin/bash\nexec vllm serve y\n"),
        ("launch_command", "vllm serve x"),
        ("gres", "gpu:2"),
        ("mem", "128G"),
        ("cpus_per_task", 8),
        ("time_limit", "8:00:00"),
        ("launcher_spec", {"recipe_id": "r1", "inputs": {"model": "y"}}),
        ("recipe_id", uuid.UUID(int=8)),
        ("serving_port", 9000),
        ("partition", "gpu-big"),
    ],
)
def test_a_job_field_changes_the_fingerprint(field: str, value: object) -> None:
    assert fingerprint_of({**BASE, field: value}) != fingerprint_of(BASE)


@pytest.mark.parametrize(
    "field",
    ["target_replicas", "min_replicas", "max_job_failures", "health_path", "handover_secs"],
)
def test_routing_and_counting_fields_do_not(field: str) -> None:
    assert field not in JOB_FIELDS
    assert fingerprint_of({**BASE, field: 42}) == fingerprint_of(BASE)


def test_line_endings_and_surrounding_blanks_do_not_count() -> None:
    crlf = {**BASE, "script_body": "  #!/bin/bash\r\nexec vllm serve x\r\n"}
    assert fingerprint_of(crlf) == fingerprint_of(BASE)


def test_key_order_of_recipe_inputs_does_not_count() -> None:
    swapped = {**BASE, "launcher_spec": {"inputs": {"model": "x"}, "recipe_id": "r1"}}
    assert fingerprint_of(swapped) == fingerprint_of(BASE)


def test_spec_fingerprint_reads_attributes_and_is_hex_sha256() -> None:
    value = spec_fingerprint(types.SimpleNamespace(**BASE))
    assert value == fingerprint_of(BASE)
    assert len(value) == 64 and int(value, 16) >= 0
