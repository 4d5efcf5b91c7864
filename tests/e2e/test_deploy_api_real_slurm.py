"""POST /api/v1/deployments on the REAL local Slurm cluster: dry run, then the real launch.

Nothing is faked: discovery reads the real slurmrestd (Slurm 22.05, v0.0.38: partitions and
nodes, no slurmdbd data), the provisioner passes submit real jobs, and the chat request goes
through obleth's gateway (closed: a gateway key is created) to the replica. The dry run's job
script is compared with the one the provisioner really sent (the launch record).
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from rest_framework.test import APIClient

from obleth.core.models import Endpoint, Launch, Model
from obleth.gateway import keys
from tests.e2e.conftest import ProvisionerEnv
from tests.plugins.factories import ADMIN_TOKEN
from tests.plugins.gateway_client import GatewayClient

pytestmark = [pytest.mark.slurm, pytest.mark.e2e]
URL = "/api/v1/deployments"
ROOT = Path(django_settings.BASE_DIR)
ENGINES_DIR = "/opt/obleth-engines"
# This helper's port range is 21000-21099: the test engine uses 21000-21047, llama.cpp 21050+.
TEST_ENGINE_PORT = 21000 + 8 * (uuid.uuid4().int % 4)
LLAMACPP_PORT = 21056


def api() -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {ADMIN_TOKEN}")
    return client


def chat(model: str, question: str) -> Any:
    """Through the gateway service (in this process: tests/plugins/gateway_client.py)."""
    secret = keys.create_key("deploy-e2e").secret
    # temperature 0: the 135M model sampled at llama.cpp's default once answered "La Louisiane"
    body = {
        "model": model,
        "messages": [{"role": "user", "content": question}],
        "max_tokens": 16,
        "temperature": 0,
    }
    with GatewayClient(HTTP_AUTHORIZATION=f"Bearer {secret}") as gateway:
        return gateway.post("/v1/chat/completions", data=json.dumps(body))


def dry_run_then_launch(
    env: ProvisionerEnv, request: dict[str, Any], *, timeout: float
) -> tuple[dict[str, Any], Model]:
    client = api()
    review = client.post(URL, {**request, "dry_run": True}, format="json")
    assert review.status_code == 200, review.json()
    data = review.json()
    assert data["ok"] is True, data["refusals"]
    # The exact body for the API version the real slurmrestd serves.
    assert data["slurm"]["api_version"] == "v0.0.38", data["slurm"]
    job = data["slurm"]["body"]["job"]
    assert data["slurm"]["body"]["script"] == data["script"]
    assert job["partition"] == "debug"
    assert isinstance(job["environment"], dict) and "PATH" in job["environment"]
    assert data["values"]["partition"]["source"] == "you"
    assert data["values"]["log_output_dir"] == {"value": env.log_dir, "source": "cluster default"}
    # Discovery on 22.05 gives partitions and nodes; slurmdbd parts are "not checked".
    by_field = {c["field"]: c for c in data["checks"]}
    assert by_field["partition"]["status"] in ("ok", "warning"), data["checks"]
    assert by_field["partition"]["facts"]["fitting_nodes"] >= 1
    assert not Model.objects.filter(name=request["name"]).exists()

    launched = client.post(URL, {**request, "dry_run": False}, format="json")
    assert launched.status_code == 201, launched.json()
    assert launched.json()["stage"] == "staged"
    model = Model.objects.get(name=request["name"])
    env.passes_until(
        lambda: len(env.healthy(model)) == 1, timeout=timeout, what="1 healthy replica"
    )
    launch = Launch.objects.get(model_id=model.pk)
    # What the provisioner sent is what the review showed (same first port window).
    assert launch.submission["script"] == data["script"]
    assert launch.submission["partition"] == job["partition"]
    assert Endpoint.objects.filter(model=model).count() == 1
    return data, model


@pytest.mark.timeout(15 * 60)
def test_test_engine_recipe_deploys_through_the_api_and_answers(
    provisioner_env: ProvisionerEnv,
) -> None:
    data, model = dry_run_then_launch(
        provisioner_env,
        {
            "library": "test-engine",
            "name": f"dep-te-{uuid.uuid4().hex[:6]}",
            "inputs": {"loading": "1"},
            "overrides": {
                "partition": "debug",
                "replicas": 1,
                "mem": "128M",
                "time_limit": "30",
                "serving_port": TEST_ENGINE_PORT,
            },
        },
        timeout=600,
    )
    assert data["inputs"]["loading"] == {"value": "1", "source": "you"}
    assert data["values"]["mem"] == {"value": "128M", "source": "you"}
    assert data["slurm"]["body"]["job"]["time_limit"] == 30
    answer = chat(model.name, "hello")
    assert answer.status_code == 200, answer.content
    assert answer.json()["choices"][0]["message"]["content"].strip()


def _llamacpp_installed() -> bool:
    status = subprocess.run(
        [str(ROOT / "scripts" / "real-engines"), "status", "llamacpp"],
        capture_output=True,
        check=False,
        env={"OBLETH_ENGINES_DIR": ENGINES_DIR, "PATH": "/usr/bin:/bin"},
    )
    return status.returncode == 0


@pytest.mark.timeout(20 * 60)
@pytest.mark.skipif(
    not _llamacpp_installed(),
    reason="llama.cpp is not built (scripts/real-engines install llamacpp); not building here",
)
def test_llamacpp_recipe_deploys_through_the_api_and_a_real_model_answers(
    provisioner_env: ProvisionerEnv,
) -> None:
    _, model = dry_run_then_launch(
        provisioner_env,
        {
            "library": "llamacpp-smollm2",
            "name": "smollm2-api",
            "inputs": {"engines_dir": ENGINES_DIR},
            "overrides": {
                "partition": "debug",
                "replicas": 1,
                "cpus": 1,
                "time_limit": "30",
                "serving_port": LLAMACPP_PORT,
            },
        },
        timeout=600,
    )
    answer = chat(model.name, "What is the capital of France? Answer in one sentence.")
    assert answer.status_code == 200, answer.content
    assert "Paris" in answer.json()["choices"][0]["message"]["content"], answer.json()
