"""The OpenAI Python client streams through the /v1 gateway service from REAL llama.cpp replicas
on the REAL local Slurm while one of the two replicas is scancel'ed: no request fails.

What is real: the llama.cpp server with SmolLM2-135M (``scripts/real-engines``, built once), the
library recipe ``recipes/library/llamacpp-smollm2.recipe``, Slurm jobs through slurmrestd, the
provisioner's passes, the gateway service (``python -m obleth.gateway.serve`` in its own process,
reading the test database), the official ``openai`` client. Nothing is faked.
"""

from __future__ import annotations

import subprocess
import threading
import time
from typing import Any

import pytest

from obleth.core.models import Endpoint, Replica, SlurmSettings
from obleth.gateway import keys
from recipes.deploy.spec import deploy
from tests.e2e.conftest import ProvisionerEnv
from tests.e2e.test_real_engine import ENGINES_DIR, RECIPE, llamacpp_engine  # noqa: F401
from tests.gateway.service_fixtures import gateway_factory  # noqa: F401

pytestmark = [pytest.mark.slurm, pytest.mark.e2e]


@pytest.mark.timeout(30 * 60)
def test_openai_client_streams_through_the_gateway_while_a_replica_is_cancelled(
    llamacpp_engine: tuple[str, str],  # noqa: F811
    provisioner_env: ProvisionerEnv,
    gateway_factory: Any,  # noqa: F811
) -> None:
    from openai import OpenAI

    env = provisioner_env
    model = deploy(
        recipe_text=RECIPE.read_text(),
        model_name="smollm2",
        overrides={
            "target_replicas": 2,
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
    env.passes_until(lambda: len(env.healthy(model)) == 2, timeout=600, what="2 healthy replicas")
    assert Endpoint.objects.filter(model=model).count() == 2

    secret = keys.create_key("e2e-openai", models=[model]).secret
    gw = gateway_factory(OBLETH_GATEWAY_OPEN="0", OBLETH_GATEWAY_TTFB_TIMEOUT_SECS="30")
    gw.settle()
    client = OpenAI(base_url=gw.url + "/v1", api_key=secret, max_retries=0, timeout=60)

    outcomes: list[str] = []
    texts: list[str] = []
    stop = threading.Event()

    def stream_loop() -> None:
        while not stop.is_set():
            try:
                chunks = client.chat.completions.create(
                    model="smollm2",
                    messages=[{"role": "user", "content": "Name a colour."}],
                    max_tokens=48,  # long enough that streams are in flight at the cancel
                    temperature=0,
                    stream=True,
                )
                text = "".join((c.choices[0].delta.content or "") for c in chunks if c.choices)
                texts.append(text)
                outcomes.append("ok" if text.strip() else "empty")
            except Exception as exc:  # any failure is what this test counts
                outcomes.append(f"{type(exc).__name__}: {exc}")

    # Two callers, so both replicas have a stream in flight when one is cancelled: its server
    # drains it (obleth_serve) while the pass takes the replica out of routing.
    loaders = [threading.Thread(target=stream_loop) for _ in range(2)]
    for loader in loaders:
        loader.start()
    try:
        deadline = time.monotonic() + 60
        while len(outcomes) < 5 and time.monotonic() < deadline:
            time.sleep(0.2)
        victim = Replica.objects.filter(model_id=model.pk, state="healthy").first()
        assert victim is not None and victim.job_id
        subprocess.run(["scancel", victim.job_id], check=True)
        cancelled_at = len(outcomes)
        # The provisioner notices the loss and replaces it while the streams go on.
        env.passes_until(
            lambda: not Replica.objects.filter(pk=victim.pk, state="healthy").exists(),
            timeout=120,
            what="the cancelled replica lost",
        )
        env.passes_until(
            lambda: len(env.healthy(model)) == 2, timeout=600, what="the replacement healthy"
        )
        after = len(outcomes)
        time.sleep(3)  # and streams through the replacement
    finally:
        stop.set()
        for loader in loaders:
            loader.join(timeout=120)

    failures = [o for o in outcomes if o != "ok"]
    assert not failures, f"{len(failures)} of {len(outcomes)} streams failed: {failures[:5]}"
    assert cancelled_at >= 5 and after > cancelled_at and len(outcomes) > after
    assert all(t.strip() for t in texts)
