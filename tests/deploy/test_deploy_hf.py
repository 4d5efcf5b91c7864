"""From Hugging Face: a repo id -> its files -> the engines -> a library recipe, via the API.

What is faked: the hub (not reachable here). ``HfApi.model_info`` answers from the JSON files in
tests/deploy/hub (the hub's model answer shape, parsed by the library's own ``ModelInfo``); the
"hub unreachable" test lets the real client fail against a closed local port.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from huggingface_hub import HfApi, constants
from huggingface_hub.hf_api import ModelInfo
from rest_framework.test import APIClient

from obleth.core.models import ManagedSpec, SlurmSettings
from recipes.deploy.hf import EngineChoice, engines_for
from tests.plugins.factories import ADMIN_TOKEN

pytestmark = pytest.mark.django_db
HUB = Path(__file__).parent / "hub"
URL = "/api/v1/deployments"
LIBRARY = [
    ("vllm", "vllm", {"model", "image"}),
    ("sglang", "sglang", {"model"}),
    ("ollama", "ollama", {"model", "image"}),
    ("llamacpp-smollm2", "llamacpp", {"engines_dir"}),
]


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        (
            ["config.json", "model-00001-of-00002.safetensors"],
            [
                EngineChoice("vllm", "vllm", {"model": "o/r"}, "library recipe 'vllm'"),
                EngineChoice("sglang", "sglang", {"model": "o/r"}, "library recipe 'sglang'"),
            ],
        ),
        (
            ["m-Q4_K_M.GGUF"],
            [
                EngineChoice(
                    "llamacpp",
                    "",
                    {},
                    "no library recipe runs llamacpp with a model input: enter it by hand",
                ),
                EngineChoice("ollama", "ollama", {"model": "hf.co/o/r"}, "library recipe 'ollama'"),
            ],
        ),
        (["pytorch_model.bin", "README.md"], []),
    ],
)
def test_engines_follow_the_files(files: list[str], expected: list[EngineChoice]) -> None:
    assert engines_for("o/r", files, LIBRARY) == expected


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = []

    def model_info(self: HfApi, repo_id: str, **kw: Any) -> ModelInfo:
        calls.append({"repo_id": repo_id, "token": self.token, **kw})
        path = HUB / (repo_id.replace("/", "--") + ".json")
        if not path.is_file():
            import httpx2
            from huggingface_hub.errors import RepositoryNotFoundError

            url = f"https://huggingface.co/api/models/{repo_id}"
            answer = httpx2.Response(404, request=httpx2.Request("GET", url))
            raise RepositoryNotFoundError(
                f"404 Client Error: Repository Not Found for url: {url}", response=answer
            )
        return ModelInfo(**json.loads(path.read_text()))

    monkeypatch.setattr(HfApi, "model_info", model_info)
    return calls


@pytest.fixture
def admin() -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {ADMIN_TOKEN}")
    return client


def test_a_safetensors_repo_preselects_vllm_with_the_repo_as_model(
    admin: APIClient, hub: list[dict[str, Any]]
) -> None:
    slurm = SlurmSettings.load()
    slurm.hf_token = "hf_GATEDTOKEN12345678"
    slurm.images = {"vllm": "/img/vllm.sif"}
    slurm.cache_dir = "/scratch/cache"
    slurm.save()
    request = {"hf_repo": "HuggingFaceTB/SmolLM2-135M-Instruct", "name": "smol"}
    review = admin.post(
        URL, {**request, "dry_run": True, "overrides": {"partition": "gpu"}}, format="json"
    )
    assert review.status_code == 200, review.json()
    data = review.json()
    assert data["source"]["kind"] == "hugging face"
    assert data["source"]["library"] == "vllm"
    assert [e["engine"] for e in data["source"]["hub"]["engines"]] == ["vllm", "sglang"]
    assert "model.safetensors" in data["source"]["hub"]["files"]
    assert data["inputs"]["model"]["value"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert "HuggingFaceTB/SmolLM2-135M-Instruct" in data["script"]
    assert hub[0]["token"] == "hf_GATEDTOKEN12345678"  # the Slurm settings' token reads gated repos
    assert "hf_GATEDTOKEN" not in json.dumps(data)
    launched = admin.post(URL, {**request, "overrides": {"partition": "gpu"}}, format="json")
    assert launched.status_code == 201, launched.json()
    spec = ManagedSpec.objects.get(model__name="smol")
    assert spec.launcher_spec["recipe"]["hf_repo"] == "HuggingFaceTB/SmolLM2-135M-Instruct"


def test_a_gguf_repo_preselects_ollama(admin: APIClient, hub: list[dict[str, Any]]) -> None:
    slurm = SlurmSettings.load()
    slurm.images = {"ollama": "/img/ollama.sif"}
    slurm.cache_dir = "/scratch/cache"
    slurm.save()
    data = admin.post(
        URL,
        {
            "hf_repo": "bartowski/SmolLM2-135M-Instruct-GGUF",
            "name": "g",
            "dry_run": True,
            "overrides": {"partition": "cpu"},
        },
        format="json",
    ).json()
    assert data["source"]["library"] == "ollama"
    assert data["source"]["hub"]["gated"] is True
    assert data["inputs"]["model"] == {
        "value": "hf.co/bartowski/SmolLM2-135M-Instruct-GGUF",
        "source": "hugging face",  # filled from the repo, not typed
    }


def test_a_model_input_given_with_the_repo_is_the_operators(
    admin: APIClient, hub: list[dict[str, Any]]
) -> None:
    slurm = SlurmSettings.load()
    slurm.images = {"ollama": "/img/ollama.sif"}
    slurm.cache_dir = "/scratch/cache"
    slurm.save()
    data = admin.post(
        URL,
        {
            "hf_repo": "bartowski/SmolLM2-135M-Instruct-GGUF",
            "name": "g",
            "dry_run": True,
            "inputs": {"model": "hf.co/bartowski/SmolLM2-135M-Instruct-GGUF:Q8_0"},
            "overrides": {"partition": "cpu"},
        },
        format="json",
    ).json()
    assert data["inputs"]["model"] == {
        "value": "hf.co/bartowski/SmolLM2-135M-Instruct-GGUF:Q8_0",
        "source": "you",
    }


def test_an_unknown_repo_says_enter_the_engine_by_hand(
    admin: APIClient, hub: list[dict[str, Any]]
) -> None:
    answer = admin.post(URL, {"hf_repo": "nobody/nothing", "name": "x"}, format="json")
    assert answer.status_code == 400
    message = answer.json()["fields"]["hf_repo"][0]
    assert message.startswith("nobody/nothing: no such repo")
    assert "Enter the engine by hand: pick a library recipe" in message


def test_the_hub_unreachable_degrades_with_the_reason(
    admin: APIClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:1")
    answer = admin.post(URL, {"hf_repo": "org/model", "name": "x"}, format="json")
    assert answer.status_code == 400
    message = answer.json()["fields"]["hf_repo"][0]
    assert "the Hugging Face hub could not be read (ConnectError" in message, message
    assert "Enter the engine by hand" in message


@pytest.mark.parametrize("repo", ["no-slash", "../../etc", "a/b/c", "o/" + "r" * 200, "o/r;id"])
def test_a_bad_repo_id_is_refused(admin: APIClient, hub: list[dict[str, Any]], repo: str) -> None:
    answer = admin.post(URL, {"hf_repo": repo, "name": "x"}, format="json")
    assert answer.status_code == 400
    assert "a repo id is owner/name" in answer.json()["fields"]["hf_repo"][0]
    assert hub == []  # never sent to the hub
