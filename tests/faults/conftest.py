"""Fixtures of the fault matrix: a model serving for real behind a fake or the real slurmrestd.

``serving``: the in-process FakeSlurmrestd (provisioner/slurm/fake.py; jobs RUNNING on node
localhost at once) and REAL test engines (bench/_engines.py: the project's test-engine handlers,
one process, on the first port of each replica's window), a model with 2 replicas promoted by
real passes, endpoints registered, the gateway routing to them. Slurm is fake only to inject the
faults a real slurmrestd cannot be made to show on demand (slow, 5xx, HTML, expired token...).
"""

from __future__ import annotations

import dataclasses
import socket
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from obleth.core.models import Endpoint, Launch, Model, Replica, SlurmSettings
from provisioner.reconcile import PassReport, run_pass
from provisioner.slurm.fake import FakeNode, FakeSlurmrestd
from tests.plugins.factories import make_slurm_model

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "fake-slurm-token"
SPAN = 8


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_windows(count: int, first: int = 20700, last: int = 20899) -> int:
    """A port base in the chaos helper's range with ``count`` free windows of 8."""
    for base in range(first, last - count * SPAN, SPAN):
        if all(_free(base + i * SPAN) for i in range(count)):
            return base
    raise RuntimeError(f"no {count} free port windows in {first}-{last}")


@dataclasses.dataclass
class Serving:
    fake: FakeSlurmrestd
    model: Model
    prefix: str
    port_base: int

    def writes(self) -> list[tuple[str, str]]:
        return [r for r in list(self.fake.requests) if r[0] in ("POST", "DELETE")]

    def snapshot(self) -> dict[str, Any]:
        """What a destructive pass would change: replica rows, endpoints, launches, jobs."""
        return {
            "replicas": sorted(
                Replica.objects.values_list("id", "state", "job_id", "endpoint_id", "port")
            ),
            "endpoints": sorted(Endpoint.objects.values_list("id", "enabled", "api_base")),
            "launches": sorted(Launch.objects.values_list("id", "ended_at", "end_state")),
            "live_jobs": sorted(
                j.job_id for j in self.fake.jobs.values() if j.state in ("RUNNING", "PENDING")
            ),
            "writes": len(self.writes()),
        }

    def passes_until_serving(self, replicas: int, limit: int = 30) -> list[PassReport]:
        import time

        reports = []
        for _ in range(limit):
            reports.append(run_pass(dispatch="inline"))
            healthy = Replica.objects.filter(model_id=self.model.pk, state="healthy").count()
            routed = Endpoint.objects.filter(model=self.model, enabled=True).count()
            if healthy == replicas and routed == replicas:
                return reports
            time.sleep(0.3)
        raise AssertionError(f"never {replicas} serving: {[r.as_dict() for r in reports[-3:]]}")


@pytest.fixture
def serving(transactional_db: Any, settings: Any) -> Iterator[Serving]:
    sys.path.insert(0, str(ROOT))
    from bench._common import Child

    prefix = f"obc-f{uuid.uuid4().hex[:6]}-"
    settings.OBLETH_PROVISIONER_JOB_PREFIX = prefix
    settings.OBLETH_PROVISIONER_DISPATCH = "inline"
    settings.OBLETH_PROVISIONER_WARMUP_TIMEOUT_SECS = 0
    settings.OBLETH_PROVISIONER_HEALTH_TIMEOUT_SECS = 2
    settings.OBLETH_PROVISIONER_HELD_ALERT_SECS = 1
    settings.OBLETH_MODEL_HEALTH_ENABLED = False
    settings.OBLETH_GATEWAY_OPEN = True  # the gateway is closed by default (gateway keys)
    base = free_windows(3)
    engines = Child(
        [sys.executable, str(ROOT / "bench" / "_engines.py"), "--first", str(base), "--count",
         "3", "--step", str(SPAN)],
        "READY",
    )  # fmt: skip
    try:
        with FakeSlurmrestd(token=TOKEN, start_delay=0, nodes=[FakeNode("localhost")]) as fake:
            slurm = SlurmSettings.load()
            slurm.enabled = True
            slurm.slurmrestd_url = fake.url
            slurm.user = "obleth"
            slurm.jwt = TOKEN
            slurm.api_version = "v0.0.38"
            slurm.save()
            # The fake engines (one process for every window) cannot know each replica's key:
            # they are proven by the model name they list, as Ollama replicas are.
            model = make_slurm_model(
                upstream_model="bench-engine",
                spec={
                    "target_replicas": 2,
                    "serving_port": base,
                    "health_path": "/health",
                    "launcher_spec": {"identity_check": "model-name"},
                },
            )
            env = Serving(fake, model, prefix, base)
            env.passes_until_serving(2)
            yield env
    finally:
        engines.stop()
