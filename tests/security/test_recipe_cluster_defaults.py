"""Cluster defaults (cache_dir, images_dir, log_dir, setup, images) are checked when saved, on
every write path: the validators, the service, the API and the admin form."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError

from obleth.core import services
from obleth.core.admin import SlurmSettingsForm
from obleth.core.models import SlurmSettings
from obleth.core.validators import (
    validate_cluster_dir,
    validate_cluster_images,
    validate_cluster_setup,
)

API = "/api/v1"

GOOD_DIRS = ["", "/scratch/obleth", "/scratch/obleth/", "/a_b/c-d/e.f/g+h@i=j%k"]
BAD_DIRS = [
    ("scratch/obleth", "relative"),
    ("./x", "relative"),
    ("/c/$(touch x)", "contains"),
    ("/c/`id`", "contains"),
    ("/c;rm -rf /", "contains"),
    ("/c/a b", "space"),
    ("/c/a,b", ","),
    ("/c/a:/etc", ":"),
    ("/c/x\nrm -rf /", "line break"),
    ("/c/x\r", "line break"),
    ("/c/x\x00", "NUL"),
    ("/c/\x1b[31m", "control"),
    ("/c/'q'", "contains"),
    ('/c/"q"', "contains"),
    ("/c/*", "contains"),
    ("/c/~", "contains"),
    ("/c/#x", "contains"),
]


@pytest.mark.parametrize("value", GOOD_DIRS)
def test_good_dirs(value: str) -> None:
    validate_cluster_dir(value)


@pytest.mark.parametrize(("value", "phrase"), BAD_DIRS, ids=[repr(b[0]) for b in BAD_DIRS])
def test_bad_dirs(value: str, phrase: str) -> None:
    with pytest.raises(ValidationError) as info:
        validate_cluster_dir(value)
    assert phrase in info.value.messages[0]
    assert "\x00" not in info.value.messages[0] or phrase != "NUL"


def test_setup_is_shell_but_not_nul_control_or_directives() -> None:
    validate_cluster_setup("module load cuda\n\tsource /opt/env.sh && export A='$(x)'\r\n")
    for bad, phrase in (
        ("module load cuda\x00", "NUL"),
        ("echo \x07", "control"),
        ("module load cuda\n#SBATCH --qos=high", "line 2 is a #SBATCH"),
        ("  # sbatch --gres=gpu:8", "#SBATCH"),
        ("x" * (64 * 1024 + 1), "characters long"),
    ):
        with pytest.raises(ValidationError) as info:
            validate_cluster_setup(bad)
        assert phrase.lower() in info.value.messages[0].lower(), info.value.messages


def test_images() -> None:
    validate_cluster_images({})
    validate_cluster_images(
        {
            "vllm": "vllm.sif",
            "sglang": "/images/sglang.sif",
            "ollama": "docker://ollama/ollama:0.5",
            "x.y-z_1": "oras://ghcr.io/org/img@sha256:abcd",
        }
    )
    with pytest.raises(ValidationError) as info:
        validate_cluster_images(
            {
                "vllm": "a b.sif",
                "sglang": "$(id).sif",
                "ollama": "x\n",
                "nul": "x\x00",
                "bad engine": "a.sif",
                "empty": "",
                "dash": "-x.sif",
            }
        )
    messages = info.value.messages
    assert len(messages) == 7, messages  # every bad entry is named
    assert any(m.startswith("vllm:") and "space" in m for m in messages)
    assert any(m.startswith("nul:") and "NUL" in m for m in messages)
    assert any("'bad engine'" in m for m in messages)
    with pytest.raises(ValidationError):
        validate_cluster_images(["vllm.sif"])


BAD_SETTINGS = [
    ({"cache_dir": "relative/dir"}, "cache_dir"),
    ({"cache_dir": "/c/$(touch x)"}, "cache_dir"),
    ({"images_dir": "/i\nrm -rf /"}, "images_dir"),
    ({"log_dir": "/l\x00"}, "log_dir"),
    ({"setup": "a\x00"}, "setup"),
    ({"setup": "#SBATCH --qos=x"}, "setup"),
    ({"images": {"vllm": "v\x00.sif"}}, "images"),
    ({"images": {"vllm": "`id`"}}, "images"),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("values", "field"), BAD_SETTINGS)
def test_service_refuses(values: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        services.update_slurm_settings(values)
    assert field in info.value.message_dict
    row = SlurmSettings.load()
    assert getattr(row, field) in ("", {})


@pytest.mark.django_db
@pytest.mark.parametrize(("values", "field"), BAD_SETTINGS)
def test_api_answers_400_naming_the_field(
    api_client: Any, values: dict[str, Any], field: str
) -> None:
    response = api_client.patch(f"{API}/settings/slurm", values, format="json")
    assert response.status_code == 400, response.content
    assert field in response.content.decode()
    assert getattr(SlurmSettings.load(), field) in ("", {})


@pytest.mark.django_db
def test_api_accepts_good_defaults(api_client: Any) -> None:
    values = {
        "cache_dir": "/scratch/obleth",
        "images_dir": "/images",
        "log_dir": "/scratch/logs",
        "setup": "module load cuda\nexport HF_HUB_OFFLINE=1",
        "images": {"vllm": "vllm.sif", "ollama": "docker://ollama/ollama"},
    }
    response = api_client.patch(f"{API}/settings/slurm", values, format="json")
    assert response.status_code == 200, response.content
    row = SlurmSettings.load()
    assert (row.cache_dir, row.images["ollama"]) == ("/scratch/obleth", "docker://ollama/ollama")


@pytest.mark.django_db
@pytest.mark.parametrize(("values", "field"), BAD_SETTINGS)
def test_admin_form_refuses(values: dict[str, Any], field: str) -> None:
    import json

    row = SlurmSettings.load()
    data: dict[str, Any] = {
        "enabled": "",
        "slurmrestd_url": "",
        "api_version": "",
        "user": "",
        "cache_dir": "",
        "images_dir": "",
        "log_dir": "",
        "setup": "",
        "images": "{}",
        "node_addresses": "{}",
    }
    for key, value in values.items():
        data[key] = json.dumps(value) if key == "images" else value
    form = SlurmSettingsForm(data=data, instance=row)
    assert not form.is_valid()
    assert field in form.errors, form.errors
