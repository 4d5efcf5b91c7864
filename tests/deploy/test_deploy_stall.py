"""A slurmrestd that accepts connections and never answers: the review still answers.

Real sockets: a local listener (port 0) that accepts and holds every connection silent. The
review's discovery reads with a short timeout (deploy_reads.REVIEW_READ_TIMEOUT) and says
"not checked" with the reason instead of hanging or failing.
"""

from __future__ import annotations

import datetime as dt
import socket
import threading
from collections.abc import Iterator

import pytest
from rest_framework.test import APIClient

from obleth.core.models import SlurmSettings
from recipes.deploy import reads as deploy_reads
from tests.api.conftest import make_jwt
from tests.plugins.factories import ADMIN_TOKEN

pytestmark = pytest.mark.django_db


@pytest.fixture
def silent_server() -> Iterator[str]:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            held.append(conn)  # read nothing, answer nothing

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(2)
        for conn in held:
            conn.close()
        listener.close()


@pytest.mark.timeout(120)
def test_a_stalled_slurmrestd_gives_not_checked(
    silent_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(deploy_reads, "REVIEW_READ_TIMEOUT", 0.5)
    slurm = SlurmSettings.load()
    slurm.enabled, slurm.slurmrestd_url, slurm.user = True, silent_server, "obleth"
    slurm.api_version = "v0.0.40"
    slurm.jwt = make_jwt(exp=dt.datetime.now(dt.UTC) + dt.timedelta(hours=1))
    slurm.save()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {ADMIN_TOKEN}")
    answer = client.post(
        "/api/v1/deployments",
        {"library": "test-engine", "name": "x", "dry_run": True, "overrides": {"partition": "p"}},
        format="json",
    )
    assert answer.status_code == 200, answer.json()
    data = answer.json()
    assert data["checks"][0]["status"] == "not checked"
    assert "timed out" in data["checks"][0]["message"].lower(), data["checks"][0]
    assert data["slurm"]["body"]["job"]["partition"] == "p"  # the body is still shown
