"""The library test-engine recipe on the REAL local Slurm cluster comes up healthy with its
replica key (issue 7, part 5). Nothing is faked: real slurmrestd, a real job running the recipe's
script, real probes that prove identity with the key, a real gateway request."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx
import pytest
from django.conf import settings as django_settings

from obleth.core.models import Endpoint, Launch, SlurmSettings
from obleth.gateway import keys
from recipes.deploy.spec import deploy
from tests.e2e.conftest import ProvisionerEnv
from tests.plugins.gateway_client import GatewayClient

pytestmark = [pytest.mark.slurm, pytest.mark.e2e]

RECIPE = Path(django_settings.BASE_DIR) / "recipes" / "library" / "test-engine.recipe"


def test_library_test_engine_recipe_is_healthy_with_its_replica_key(
    provisioner_env: ProvisionerEnv,
) -> None:
    env = provisioner_env
    model = deploy(
        recipe_text=RECIPE.read_text(),
        model_name="e2e-identity",
        overrides={
            "target_replicas": 1,
            "serving_port": env.port,
            "time_limit": "30",
            "mem": "128M",
        },
        cluster=SlurmSettings.load(),
    )
    env.port += 100
    env.passes_until(lambda: len(env.healthy(model)) == 1, what="1 healthy replica")

    (row,) = env.healthy(model)
    assert row.identity_proven and row.api_key.startswith("obr_")
    endpoint = Endpoint.objects.get(model=model)
    assert endpoint.api_key == row.api_key
    # The server on the promoted port is the replica's own: it refuses /v1 without its key.
    assert httpx.get(endpoint.api_base + "/models", timeout=5).status_code == 401
    keyed = httpx.get(
        endpoint.api_base + "/models",
        headers={"Authorization": f"Bearer {row.api_key}"},
        timeout=5,
    )
    assert keyed.status_code == 200 and keyed.json()["data"][0]["id"] == "test-engine"

    secret = keys.create_key("e2e").secret  # the gateway is closed
    with GatewayClient(HTTP_AUTHORIZATION=f"Bearer {secret}") as gateway:
        answer = gateway.post(
            "/v1/chat/completions",
            data=json.dumps(
                {"model": "e2e-identity", "messages": [{"role": "user", "content": "x"}]}
            ),
        )
    assert answer.status_code == 200, answer.content  # the gateway sent the key upstream

    # The key went through the job's environment only: not in the launch record, and no
    # process on the node shows it on its command line.
    launch = Launch.objects.get(pk=row.pk)
    assert row.api_key not in json.dumps(launch.submission)
    assert launch.submission["environment"]["OBLETH_REPLICA_API_KEY"] == "[set]"
    processes = subprocess.run(["ps", "-eww", "-o", "args"], capture_output=True, text=True).stdout
    assert "--model test-engine" in processes  # the engine runs here...
    assert row.api_key not in processes  # ...without its key in argv
