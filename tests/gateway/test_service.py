"""The /v1 gateway service end to end: a real uvicorn process, real upstream servers on
127.0.0.1, the real test database (committed rows: the service is another process).

Nothing is faked but the upstreams' behaviour: the test engine (an OpenAI-compatible server that
is not a model), a recorder that answers what the test scripts, and a server that accepts
connections and never answers (a hung replica).
"""

from __future__ import annotations

import json
import signal
import socket
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from obleth.core.choices import ModelType
from obleth.core.models import Endpoint
from tests.gateway.conftest import Engine, Recorder, Script
from tests.gateway.service_fixtures import GatewayProcess, HungUpstream
from tests.plugins.factories import make_endpoint, make_model

pytestmark = pytest.mark.django_db(transaction=True)

CHAT = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 3}


def read_answer(s: socket.socket) -> bytes:
    """One whole HTTP answer with a Content-Length from a raw socket."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += s.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    while len(body) < length:
        body += s.recv(65536)
    return head + b"\r\n\r\n" + body


def chat(gw: GatewayProcess, model: str, timeout: float = 30, **extra: Any) -> httpx.Response:
    return httpx.post(
        gw.url + "/v1/chat/completions", json={**CHAT, "model": model, **extra}, timeout=timeout
    )


def test_relays_answers_and_streams_renaming_the_model(
    gateway_factory: Any, engine: Engine
) -> None:
    model = make_model(name="alpha", upstream_model="alpha-upstream")
    make_endpoint(model, api_base=engine.api_base)
    gw = gateway_factory()
    gw.settle()

    listed = httpx.get(gw.url + "/v1/models", timeout=5).json()
    assert [m["id"] for m in listed["data"]] == ["alpha"]

    r = chat(gw, "alpha")
    assert r.status_code == 200, r.text
    assert r.json()["model"] == "alpha"
    assert r.headers["x-request-id"]
    assert "Python" not in r.headers.get("server", "")  # the engine's own header stays behind

    with httpx.stream(
        "POST",
        gw.url + "/v1/chat/completions",
        json={**CHAT, "model": "alpha", "stream": True},
        timeout=30,
    ) as s:
        assert s.status_code == 200
        assert s.headers["content-type"].startswith("text/event-stream")
        events = [line for line in s.iter_lines() if line.startswith("data: {")]
    assert events
    assert all(json.loads(e[6:])["model"] == "alpha" for e in events)
    assert engine.inference_count("/v1/chat/completions") == 2


def test_unknown_model_missing_model_and_bad_json_are_openai_errors(
    gateway_factory: Any,
) -> None:
    gw = gateway_factory()
    gw.settle()
    r = chat(gw, "nope")
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    r = httpx.post(gw.url + "/v1/chat/completions", json={"messages": []}, timeout=5)
    assert r.status_code == 400 and r.json()["error"]["param"] == "model"
    r = httpx.post(gw.url + "/v1/chat/completions", content=b"{not json", timeout=5)
    assert r.status_code == 400
    r = httpx.post(gw.url + "/v1/chat/completions", content=b"[1,2]", timeout=5)
    assert r.status_code == 400
    r = httpx.post(gw.url + "/v1/chat/completions", content=b"[" * 100_000, timeout=5)
    assert r.status_code in (400, 413)
    r = httpx.get(gw.url + "/v1/chat/completions", timeout=5)
    assert r.status_code == 405 and r.headers["allow"] == "POST"


def test_hung_replica_costs_only_its_requests_and_they_fail_over_after_ttfb(
    gateway_factory: Any, hung_upstream: HungUpstream, engine_factory: Any
) -> None:
    """64 callers to a model whose first-choice replica accepts and never answers: the gateway's
    /healthz and another model's requests keep answering within 1 s throughout, and every
    caller of the hung model gets its answer from the healthy replica after the TTFB timeout."""
    healthy = engine_factory()
    other_engine = engine_factory()
    stuck = make_model(name="stuck")
    make_endpoint(stuck, api_base=hung_upstream.api_base, priority=10)
    make_endpoint(stuck, api_base=healthy.api_base, priority=20)
    other = make_model(name="other")
    make_endpoint(other, api_base=other_engine.api_base)
    gw = gateway_factory(OBLETH_GATEWAY_TTFB_TIMEOUT_SECS="2", OBLETH_GATEWAY_COOLDOWN_AFTER="0")
    gw.settle()

    results: list[int] = []
    probe_times: list[float] = []
    other_status: list[int] = []
    stop = threading.Event()

    # Clients made up front: making one per call costs an SSL context each, which 64 threads
    # in this process would queue on the GIL for seconds (the client's delay, not the gateway's).
    callers = httpx.Client(timeout=60, limits=httpx.Limits(max_connections=100))
    probe = httpx.Client(timeout=5)

    def caller() -> None:
        r = callers.post(gw.url + "/v1/chat/completions", json={**CHAT, "model": "stuck"})
        results.append(r.status_code)

    def prober() -> None:
        while not stop.is_set():
            t0 = time.monotonic()
            assert probe.get(gw.url + "/healthz").status_code == 200
            r = probe.post(gw.url + "/v1/chat/completions", json={**CHAT, "model": "other"})
            other_status.append(r.status_code)
            probe_times.append(time.monotonic() - t0)
            time.sleep(0.1)

    probe_thread = threading.Thread(target=prober)
    probe_thread.start()
    with ThreadPoolExecutor(64) as pool:
        for f in [pool.submit(caller) for _ in range(64)]:
            f.result()
    stop.set()
    probe_thread.join()
    callers.close()
    probe.close()

    assert results == [200] * 64
    assert hung_upstream.accepted >= 1  # the hung replica was tried first
    assert healthy.inference_count("/v1/chat/completions") == 64
    assert other_status and set(other_status) == {200}
    # /healthz + one request of another model, each round well under a second.
    assert max(probe_times) < 1.0, probe_times


def test_passive_cooldown_skips_a_failing_endpoint(
    gateway_factory: Any, engine: Engine, closed_port_base: str
) -> None:
    model = make_model(name="flaky")
    make_endpoint(model, api_base=closed_port_base, priority=10)
    make_endpoint(model, api_base=engine.api_base, priority=20)
    gw = gateway_factory(OBLETH_GATEWAY_COOLDOWN_AFTER="2", OBLETH_GATEWAY_COOLDOWN_SECS="60")
    gw.settle()
    for _ in range(6):
        assert chat(gw, "flaky").status_code == 200
    text = httpx.get(gw.url + "/metrics", timeout=5).text
    tries = [
        line
        for line in text.splitlines()
        if line.startswith("obleth_gateway_upstream_errors_total{")
        and 'kind="connect"' in line
        and 'model="flaky"' in line
    ]
    # Two connection errors put it in cooldown; the next four requests did not try it.
    assert tries and float(tries[0].rsplit(" ", 1)[1]) == 2.0
    assert "obleth_gateway_cooldowns_total" in text
    assert "cooled down" in gw.log()


def test_body_over_the_limit_is_refused_before_it_is_read(gateway_factory: Any) -> None:
    """A 50 MB Content-Length gets 413 at once: the gateway answers before the body is sent
    (the client sends only the head and a few bytes, then waits for the answer)."""
    gw = gateway_factory(OBLETH_GATEWAY_MAX_BODY_BYTES=str(4 * 1024 * 1024))
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as s:
        s.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b'Content-Length: 52428800\r\n\r\n{"model":'
        )
        answer = read_answer(s)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"OBLETH_GATEWAY_MAX_BODY_BYTES" in answer

    # Without a Content-Length (chunked), the count stops at the limit too.
    def chunks() -> Any:
        for _ in range(200):
            yield b"x" * 65536

    r = httpx.post(gw.url + "/v1/chat/completions", content=chunks(), timeout=30)
    assert r.status_code == 413


def test_slow_loris_connections_do_not_delay_a_normal_request(
    gateway_factory: Any, engine: Engine
) -> None:
    """500 connections that send half a request head: a normal request's latency stays within
    100 ms of what it was before (medians of 20), and the server closes those connections once
    the header timeout passes."""
    model = make_model(name="normal")
    make_endpoint(model, api_base=engine.api_base)
    gw = gateway_factory(OBLETH_GATEWAY_HEADER_TIMEOUT_SECS="3")
    gw.settle()

    def median_latency() -> float:
        times = []
        with httpx.Client(timeout=10) as client:
            for _ in range(20):
                t0 = time.monotonic()
                r = client.post(gw.url + "/v1/chat/completions", json={**CHAT, "model": "normal"})
                assert r.status_code == 200
                times.append(time.monotonic() - t0)
        return statistics.median(times)

    before = median_latency()
    loris = []
    for _ in range(500):
        s = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-")
        loris.append(s)
    try:
        during = median_latency()
        assert during - before < 0.1, (before, during)
        time.sleep(3.5)
        closed = 0
        for s in loris:
            s.settimeout(2)
            try:
                if s.recv(1024) == b"":
                    closed += 1
            except (TimeoutError, ConnectionResetError):
                pass
        assert closed == 500
    finally:
        for s in loris:
            s.close()


def test_slow_body_is_cut_off_by_the_body_timeout(gateway_factory: Any) -> None:
    gw = gateway_factory(OBLETH_GATEWAY_BODY_TIMEOUT_SECS="2")
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        t0 = time.monotonic()
        answer = read_answer(s)
        waited = time.monotonic() - t0
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert 1.5 < waited < 10


def test_client_going_away_closes_the_upstream_stream(
    gateway_factory: Any, recorder: Recorder
) -> None:
    recorder.script = Script(endless=True)
    model = make_model(name="endless")
    make_endpoint(model, api_base=recorder.api_base)
    gw = gateway_factory()
    gw.settle()
    with httpx.stream(
        "POST",
        gw.url + "/v1/chat/completions",
        json={**CHAT, "model": "endless", "stream": True},
        timeout=30,
    ) as s:
        for got, _ in enumerate(s.iter_raw(), start=1):
            if got >= 3:
                break
    closed_at = time.monotonic()
    assert recorder.client_gone.wait(5), "the upstream stream was never closed"
    assert time.monotonic() - closed_at < 5
    time.sleep(0.3)
    assert httpx.get(gw.url + "/healthz", timeout=5).json()["in_flight"] == 0


def test_stream_silent_too_long_ends_with_an_error_event(
    gateway_factory: Any, recorder: Recorder
) -> None:
    hold = threading.Event()
    recorder.script = Script(
        stream=[b'data: {"n": 1}\n\n', b'data: {"n": 2}\n\n'], hold=hold, hold_secs=20
    )
    model = make_model(name="silent")
    make_endpoint(model, api_base=recorder.api_base)
    gw = gateway_factory(OBLETH_GATEWAY_STREAM_IDLE_TIMEOUT_SECS="2")
    gw.settle()
    t0 = time.monotonic()
    r = httpx.post(
        gw.url + "/v1/chat/completions",
        json={**CHAT, "model": "silent", "stream": True},
        timeout=30,
    )
    hold.set()
    assert r.status_code == 200
    assert '"n": 1' in r.text
    assert "upstream_stream_broken" in r.text
    assert time.monotonic() - t0 < 15


def test_per_endpoint_concurrency_limit_queues_then_429(
    gateway_factory: Any, recorder: Recorder
) -> None:
    hold = threading.Event()
    recorder.script = Script(stream=[b"data: 1\n\n", b"data: 2\n\n"], hold=hold, hold_secs=20)
    model = make_model(name="busy")
    make_endpoint(model, api_base=recorder.api_base)
    gw = gateway_factory(
        OBLETH_GATEWAY_ENDPOINT_MAX_CONCURRENCY="1", OBLETH_GATEWAY_QUEUE_TIMEOUT_SECS="1"
    )
    gw.settle()
    first: dict[str, Any] = {}

    def hold_one() -> None:
        first["r"] = httpx.post(
            gw.url + "/v1/chat/completions",
            json={**CHAT, "model": "busy", "stream": True},
            timeout=30,
        )

    t = threading.Thread(target=hold_one)
    t.start()
    deadline = time.monotonic() + 10
    while not recorder.inference_requests() and time.monotonic() < deadline:
        time.sleep(0.05)
    r = chat(gw, "busy")
    assert r.status_code == 429
    assert r.headers["retry-after"] == "1"
    hold.set()
    t.join()
    assert first["r"].status_code == 200


def test_embeddings_and_metrics(gateway_factory: Any, engine: Engine) -> None:
    model = make_model(name="emb", model_type=ModelType.EMBEDDING)
    make_endpoint(model, api_base=engine.api_base)
    gw = gateway_factory()
    gw.settle()
    r = httpx.post(gw.url + "/v1/embeddings", json={"model": "emb", "input": "hi"}, timeout=10)
    assert r.status_code == 200, r.text
    text = httpx.get(gw.url + "/metrics", timeout=5).text
    assert 'obleth_gateway_requests_total{endpoint="' in text
    assert 'model="emb",status="200"' in text
    assert "obleth_gateway_time_to_first_byte_seconds_bucket" in text


def test_new_endpoint_is_routable_without_a_restart(gateway_factory: Any, engine: Engine) -> None:
    model = make_model(name="late")
    gw = gateway_factory(OBLETH_GATEWAY_RELOAD_SECS="60")  # only change notices can help
    r = chat(gw, "late")
    assert r.status_code == 503
    make_endpoint(model, api_base=engine.api_base)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        r = chat(gw, "late")
        if r.status_code == 200:
            break
        time.sleep(0.05)
    assert r.status_code == 200, "the change notice did not reach the gateway"


def test_a_change_without_a_notice_is_routable_within_the_reload_timer(
    gateway_factory: Any, recorder: Recorder, engine: Engine
) -> None:
    """``QuerySet.update`` sends no signal, so no notice: the periodic reload
    (OBLETH_GATEWAY_RELOAD_SECS) picks such a change up within its period."""
    model = make_model(name="out-of-band")
    ep = make_endpoint(model, api_base=recorder.api_base)
    gw = gateway_factory(OBLETH_GATEWAY_RELOAD_SECS="1")
    gw.settle()
    assert chat(gw, "out-of-band").status_code == 200
    Endpoint.objects.filter(pk=ep.pk).update(api_base=engine.api_base)
    changed = time.monotonic()
    while engine.inference_count("/v1/chat/completions") == 0 and time.monotonic() - changed < 10:
        assert chat(gw, "out-of-band").status_code == 200
        time.sleep(0.1)
    assert engine.inference_count("/v1/chat/completions") >= 1
    assert time.monotonic() - changed < 3, "not within the 1 s reload period"
    assert len(recorder.inference_requests()) >= 1


def test_sigterm_lets_a_stream_in_flight_finish(gateway_factory: Any, recorder: Recorder) -> None:
    hold = threading.Event()
    recorder.script = Script(
        stream=[b'data: {"n": 1}\n\n', b'data: {"n": 2}\n\n'], hold=hold, hold_secs=20
    )
    model = make_model(name="draining")
    make_endpoint(model, api_base=recorder.api_base)
    gw = gateway_factory()
    gw.settle()
    out: dict[str, Any] = {}

    def stream() -> None:
        out["r"] = httpx.post(
            gw.url + "/v1/chat/completions",
            json={**CHAT, "model": "draining", "stream": True},
            timeout=30,
        )

    t = threading.Thread(target=stream)
    t.start()
    deadline = time.monotonic() + 10
    while not recorder.inference_requests() and time.monotonic() < deadline:
        time.sleep(0.05)
    gw.process.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    with pytest.raises(httpx.ConnectError):  # no longer accepting
        httpx.get(gw.url + "/healthz", timeout=2)
    hold.set()
    t.join()
    assert out["r"].status_code == 200
    assert '"n": 2' in out["r"].text
    # uvicorn re-raises SIGTERM after its graceful shutdown, so the exit is "killed by SIGTERM".
    assert gw.process.wait(timeout=10) in (0, -signal.SIGTERM)


def test_closed_by_default_and_keys_checked_by_the_shared_decision(
    gateway_factory: Any, engine: Engine
) -> None:
    """The same decision as everywhere (obleth.gateway.auth.check_credentials): no key yet ->
    401 saying how to make one; a key -> its models only; a key in the URL -> 400."""
    from obleth.gateway import keys

    alpha = make_model(name="alpha")
    make_model(name="beta")
    make_endpoint(alpha, api_base=engine.api_base)
    gw = gateway_factory(OBLETH_GATEWAY_OPEN="0")
    gw.settle()
    r = chat(gw, "alpha")
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "no_gateway_keys"
    assert "create_gateway_key" in r.json()["error"]["message"]

    secret = keys.create_key("team", models=[alpha]).secret
    gw.settle()
    auth = {"Authorization": f"Bearer {secret}"}
    r = httpx.post(
        gw.url + "/v1/chat/completions", json={**CHAT, "model": "alpha"}, headers=auth, timeout=10
    )
    assert r.status_code == 200, r.text
    listed = httpx.get(gw.url + "/v1/models", headers=auth, timeout=5).json()["data"]
    assert [m["id"] for m in listed] == ["alpha"]
    r = httpx.post(
        gw.url + "/v1/chat/completions", json={**CHAT, "model": "beta"}, headers=auth, timeout=10
    )
    assert r.status_code == 403 and r.json()["error"]["code"] == "model_not_allowed"
    r = httpx.post(gw.url + "/v1/chat/completions", json={**CHAT, "model": "alpha"}, timeout=10)
    assert r.status_code == 401
    r = httpx.get(gw.url + f"/v1/models?api_key={secret}", timeout=5)
    assert r.status_code == 400 and r.json()["error"]["code"] == "api_key_in_query"
    assert secret not in gw.log()
    for bad in ("Bearer \x00x", "Bearer " + "é" * 10, "Bearer " + "x" * 100_000):
        try:
            r = httpx.get(gw.url + "/v1/models", headers={"Authorization": bad}, timeout=5)
        except (httpx.LocalProtocolError, UnicodeEncodeError):
            continue  # the client itself refused to send it
        assert r.status_code in (400, 401, 431), (bad[:20], r.status_code)


def test_metrics_answer_this_machine_or_the_token(gateway_factory: Any) -> None:
    gw = gateway_factory(OBLETH_METRICS_TOKEN="scrape-token-0123456789")
    assert httpx.get(gw.url + "/metrics", timeout=5).status_code == 401
    r = httpx.get(
        gw.url + "/metrics", headers={"Authorization": "Bearer scrape-token-0123456789"}, timeout=5
    )
    assert r.status_code == 200 and "obleth_gateway_table_reloads_total" in r.text
