"""The web process killed during a deploy.

Real: gunicorn (the same command line as scripts/run) serving the Management API on the test
database, and the provisioner loop in its own process; SIGKILL of gunicorn's whole process group
while deploy requests (create a model, then PUT its managed spec) are in flight; gunicorn
started again (what supervisord, Compose, Kubernetes or systemd do). Slurm is the fake
slurmrestd and the engines are real (conftest.py).

Outcome: every deploy is whole or absent (a model row with a full spec, or a model without one
that the API shows as ``managed: false``; never half a spec), the client of a lost request sees
its connection fail (it cannot mistake it for a success), nothing the provisioner had running is
touched, and once web is back the retried deploys are carried out, with no hand on the
provisioner.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from obleth.core.models import ManagedSpec, Model, Replica
from tests.faults.conftest import Serving
from tests.faults.procs import free_port, http_ok, kill_session, wait_for
from tests.faults.test_database_and_broker_faults import child_env, db_url, started

ROOT = Path(__file__).resolve().parents[2]
TOKEN = os.environ.get("OBLETH_ADMIN_TOKEN", "test-admin-token-0123456789abcdef")


def gunicorn(port: int) -> list[str]:
    return [
        str(Path(sys.executable).with_name("gunicorn")), "obleth.wsgi:application",
        "--bind", f"127.0.0.1:{port}", "--worker-class", "gthread", "--workers", "1",
        "--threads", "8", "--timeout", "0",
    ]  # fmt: skip


def port_of(name: str) -> int:
    """A port range of its own per model ("kill-T-N"): models' ranges never overlap (a model
    whose range another holds waits for it), and these jobs only need to be submitted."""
    _, t, n = name.split("-")
    return 30000 + (int(t) * 60 + int(n)) * 16


def deploy(base: str, name: str, port: int, outcomes: dict[str, str]) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    try:
        with httpx.Client(base_url=base, headers=headers, timeout=20, trust_env=False) as c:
            created = c.post("/api/v1/models", json={"name": name, "hosting_mode": "slurm"})
            if created.status_code != 201:
                outcomes[name] = f"create {created.status_code}"
                return
            spec = {"partition": "debug", "serving_port": port, "health_path": "/health",
                    "launch_command": "true", "target_replicas": 1}  # fmt: skip
            put = c.put(f"/api/v1/models/{created.json()['id']}/managed", json=spec)
            outcomes[name] = f"spec {put.status_code}"
    except httpx.HTTPError as exc:
        outcomes[name] = f"lost: {type(exc).__name__}"


@pytest.mark.timeout(180)
def test_web_killed_during_deploys(serving: Serving, tmp_path: Path) -> None:
    env = child_env(serving, db_url(), OBLETH_PROVISIONER_DISPATCH="inline",
                    OBLETH_ALLOWED_HOSTS="127.0.0.1,localhost")  # fmt: skip
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    before = serving.snapshot()
    loop_argv = [sys.executable, "manage.py", "reconcile", "--loop", "--interval", "2"]
    with started(loop_argv, env, tmp_path / "loop.log") as loop:
        web = subprocess.Popen(
            gunicorn(port), cwd=ROOT, env=env, start_new_session=True,
            stdout=open(tmp_path / "web1.log", "wb"), stderr=subprocess.STDOUT,  # noqa: SIM115
        )  # fmt: skip
        try:
            wait_for("gunicorn", lambda: http_ok(base + "/healthz"), 30, 0.2)
            outcomes: dict[str, str] = {}

            def keep_deploying(t: int) -> None:
                for n in range(60):
                    name = f"kill-{t}-{n}"
                    deploy(base, name, port_of(name), outcomes)
                    if outcomes[name].startswith("lost"):
                        return

            threads = [threading.Thread(target=keep_deploying, args=(t,)) for t in range(4)]
            for t in threads:
                t.start()
            time.sleep(1.0)
            kill_session(web.pid, signal.SIGKILL)  # master and its worker: a crash, no goodbye
            for t in threads:
                t.join(30)
            web.wait(10)
        finally:
            kill_session(web.pid, signal.SIGKILL)
        lost = sorted(n for n, o in outcomes.items() if o.startswith("lost"))
        assert len(lost) == 4, f"every client must see its last deploy fail: {outcomes}"
        assert all(o in ("spec 201", "spec 200") for n, o in outcomes.items() if n not in lost)
        names = sorted(outcomes)

        # whole or absent: a spec is one row written at once; models without one show so
        for model in Model.objects.filter(name__in=names):
            spec = ManagedSpec.objects.filter(model=model).first()
            if spec is not None:
                assert spec.serving_port == port_of(model.name) and spec.partition == "debug"
        # nothing the provisioner had running was touched
        snap = serving.snapshot()
        assert set(before["replicas"]) <= set(snap["replicas"])
        assert not [w for w in serving.writes() if w[0] == "DELETE"]
        assert loop.poll() is None

        # web comes back (as its supervisor would start it) and the retried deploys land
        with started(gunicorn(port), env, tmp_path / "web2.log"):
            wait_for("gunicorn again", lambda: http_ok(base + "/healthz"), 30, 0.2)
            headers = {"Authorization": f"Bearer {TOKEN}"}
            shown = httpx.get(base + "/api/v1/models", headers=headers, params={"page_size": 200})
            assert shown.status_code == 200
            for name in names:
                if ManagedSpec.objects.filter(model__name=name).exists():
                    continue
                model = Model.objects.filter(name=name).first()
                if model is None:
                    retry: dict[str, str] = {}
                    deploy(base, name, port_of(name), retry)
                    assert retry[name] in ("spec 200", "spec 201"), retry
                else:
                    row = next(m for m in shown.json()["results"] if m["name"] == name)
                    assert row["managed"] is False  # the half-done deploy is visible as such
                    spec = {"partition": "debug", "serving_port": port_of(name),
                            "health_path": "/health", "launch_command": "true",
                            "target_replicas": 1}  # fmt: skip
                    put = httpx.put(f"{base}/api/v1/models/{model.pk}/managed", json=spec,
                                    headers=headers)  # fmt: skip
                    assert put.status_code in (200, 201), put.text
            assert ManagedSpec.objects.filter(model__name__in=names).count() == len(names)

            def all_submitted() -> bool:
                got = set(Replica.objects.filter(model_name__in=names).values_list("model_name"))
                return len(got) == len(names)

            wait_for("the loop to launch every deployed model", all_submitted, 60, 0.5)
        assert loop.poll() is None
