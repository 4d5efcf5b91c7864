"""The fault matrix, slurmrestd side: down, slow, 5xx, HTML instead of JSON, a wrong API version,
an expired token. For each: every pass during the fault holds (nothing cancelled, submitted,
deleted or marked lost), the reason is shown (the pass status the admin and the API show, and
the held alert), the gateway keeps routing to the replicas that serve, and once the fault ends
the next pass is ok and acts again (a scale-up is carried out) without anyone's hand.

"Down" uses the REAL slurmrestd (``scripts/slurm-local rest-stop``/``rest-start``) with a real
job running the test engine; the others use the fake slurmrestd (provisioner/slurm/fake.py)
because a real one cannot be made slow, bare-500, HTML or expired on demand; the engines are
real (see conftest.py). Durations are scaled down: a 20 s answer against the default 30 s
timeout is the same case as a 1 s answer against a 1.5 s timeout (the pass waits and succeeds),
and an answer slower than the timeout holds the pass whether it is 2 s or 40 s.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jwt as pyjwt
import pytest

from obleth.core.models import Alert, ManagedSpec, SlurmSettings
from provisioner.reconcile import run_pass
from provisioner.status import HELD_ALERT_KEY, describe_status
from tests.faults.conftest import TOKEN, Serving
from tests.plugins.gateway_client import GatewayClient

ROOT = Path(__file__).resolve().parents[2]


def chat(model: str) -> int:
    """One request through the gateway service (in this process: tests/plugins/gateway_client.py)
    with the routing table read now."""
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    gateway = GatewayClient()
    try:
        return gateway.post("/v1/chat/completions", json.dumps(body)).status_code
    finally:
        gateway.close()


def expired_token() -> str:
    past = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    return pyjwt.encode({"sun": "obleth", "exp": int(past.timestamp())}, "k" * 32, "HS256")


def _slow_past_timeout(env: Serving, settings: Any) -> Callable[[], None]:
    settings.OBLETH_SLURM_TIMEOUT_SECS = 1
    env.fake.slow_seconds = 2.0
    return lambda: setattr(env.fake, "slow_seconds", 0.0)


def _bare_500(env: Serving, settings: Any) -> Callable[[], None]:
    env.fake.raw_answer = (500, "text/plain", b"Internal Server Error")
    return lambda: setattr(env.fake, "raw_answer", None)


def _503(env: Serving, settings: Any) -> Callable[[], None]:
    env.fake.raw_answer = (503, "text/plain", b"Service Unavailable")
    return lambda: setattr(env.fake, "raw_answer", None)


def _html_200(env: Serving, settings: Any) -> Callable[[], None]:
    page = b"<!DOCTYPE html><html><body><form>Please log in</form></body></html>"
    env.fake.raw_answer = (200, "text/html", page)
    return lambda: setattr(env.fake, "raw_answer", None)


def _html_502(env: Serving, settings: Any) -> Callable[[], None]:
    env.fake.html_502 = True
    return lambda: setattr(env.fake, "html_502", False)


def _wrong_version(env: Serving, settings: Any) -> Callable[[], None]:
    """A pinned version the server does not serve (an upgrade dropped its plugin). The fault
    ends when the server serves it again: here, the pin is put back as the server's upgrade
    would make it valid (the fake serves only v0.0.38)."""
    SlurmSettings.objects.filter(pk=1).update(api_version="v0.0.37")
    return lambda: SlurmSettings.objects.filter(pk=1).update(api_version="v0.0.38")


def _expired_token(env: Serving, settings: Any) -> Callable[[], None]:
    """The stored JWT expired (the server knows it: only the expiry is wrong). The fault ends
    when a fresh token is stored (the operator's token refresh; nothing else changes)."""
    token = expired_token()
    env.fake.add_token(token, "obleth")
    slurm = SlurmSettings.load()
    slurm.jwt = token
    slurm.save()

    def end() -> None:
        fresh = SlurmSettings.load()
        fresh.jwt = TOKEN
        fresh.save()

    return end


FAULTS = {
    "slow-past-timeout": (_slow_past_timeout, "holding"),
    "bare-500": (_bare_500, "holding"),
    "503": (_503, "holding"),
    "html-200": (_html_200, "holding"),
    "html-502": (_html_502, "holding"),
    "wrong-api-version": (_wrong_version, "v0.0.37"),
    "expired-token": (_expired_token, "expired"),
}


def hold_then_recover(env: Serving, words: str, end: Callable[[], None]) -> None:
    before = env.snapshot()
    details = []
    for _ in range(3):
        report = run_pass(dispatch="inline")
        assert report.status == "error", report.as_dict()
        assert report.results == [] and report.planned == []
        details.append(report.detail)
        time.sleep(0.6)
    assert env.snapshot() == before, "a pass during the fault changed replicas, endpoints or jobs"
    assert any(words in d for d in details), details
    shown = describe_status()
    assert shown["last_pass_status"] == "error", shown
    assert words in shown["last_pass_detail"], shown
    assert shown["held_alert_active"] is True, shown
    assert Alert.objects.filter(key=HELD_ALERT_KEY).exists()
    assert chat(env.model.name) == 200, "the gateway must keep routing to serving replicas"

    end()
    report = run_pass(dispatch="inline")
    assert report.status == "ok", report.as_dict()
    after = env.snapshot()
    assert after["replicas"] == before["replicas"] and after["live_jobs"] == before["live_jobs"]
    assert describe_status()["held_alert_active"] is False
    ManagedSpec.objects.filter(model=env.model).update(target_replicas=3)
    env.passes_until_serving(3)
    assert chat(env.model.name) == 200


@pytest.mark.parametrize("fault", list(FAULTS), ids=list(FAULTS))
def test_slurmrestd_fault_holds_shows_why_and_recovers(
    serving: Serving, settings: Any, fault: str
) -> None:
    make, words = FAULTS[fault]
    end = make(serving, settings)
    hold_then_recover(serving, words, end)


def test_slow_answer_within_the_timeout_is_waited_for(serving: Serving, settings: Any) -> None:
    """The 20 s answer under the 30 s default timeout, scaled: slow passes, nothing held."""
    settings.OBLETH_SLURM_TIMEOUT_SECS = 1.5
    serving.fake.slow_seconds = 1.0
    before = serving.snapshot()
    report = run_pass(dispatch="inline")
    assert report.status == "ok", report.as_dict()
    assert report.duration_ms >= 1000
    assert serving.snapshot()["replicas"] == before["replicas"]
    ManagedSpec.objects.filter(model=serving.model).update(target_replicas=3)
    serving.passes_until_serving(3, limit=20)
    serving.fake.slow_seconds = 0.0
