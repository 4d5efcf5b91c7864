"""The /v1 data plane against real local HTTP servers (the test engine and a stdlib recorder).

Requests go through the gateway service's ASGI application in this process (the ``gateway``
fixture, tests/plugins/gateway_client.py, says what differs from its own process), its upstream
client and real TCP connections on 127.0.0.1. Nothing is mocked.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from django.test.utils import override_settings

from obleth.core.choices import HealthStatus, ModelType
from obleth.core.models import Endpoint, SlurmSettings
from tests.gateway.conftest import Engine, Recorder, Script
from tests.plugins.factories import make_endpoint, make_model, make_slurm_model
from tests.plugins.gateway_client import GatewayClient

pytestmark = pytest.mark.django_db

CHAT = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 3}


def post(gateway: GatewayClient, path: str, body: dict[str, Any], **headers: Any) -> Any:
    return gateway.post(path, data=json.dumps(body), content_type="application/json", **headers)


def error_of(response: Any) -> dict[str, Any]:
    payload = json.loads(response.content)
    assert set(payload) == {"error"}
    assert {"message", "type", "param", "code"} <= set(payload["error"])
    return dict(payload["error"])


# ----------------------------------------------------------------------------- models list


def test_models_lists_enabled_models_in_openai_shape(gateway: GatewayClient) -> None:
    make_model(name="alpha")
    make_model(name="beta", upstream_model="beta-upstream")
    make_model(name="gamma", enabled=False)
    response = gateway.get("/v1/models")
    assert response.status_code == 200
    payload = response.json()
    assert payload["object"] == "list"
    assert [m["id"] for m in payload["data"]] == ["alpha", "beta"]
    assert all(m["object"] == "model" and isinstance(m["created"], int) for m in payload["data"])
    assert gateway.get("/v1/models/alpha").json()["id"] == "alpha"
    assert gateway.get("/v1/models/gamma").status_code == 404


# ----------------------------------------------------------------------------- errors


def test_unknown_model_is_404_openai_error(gateway: GatewayClient) -> None:
    response = post(gateway, "/v1/chat/completions", {"model": "nope", **CHAT})
    assert response.status_code == 404
    error = error_of(response)
    assert error["code"] == "model_not_found"
    assert error["param"] == "model"
    assert "nope" in error["message"]


def test_disabled_model_is_503_disabled_even_with_endpoints(
    gateway: GatewayClient, engine: Engine
) -> None:
    """Not routed, not listed, not retrievable; a request is told it is disabled (no retry)."""
    model = make_model(name="off", enabled=False)
    make_endpoint(model, api_base=engine.api_base)
    response = post(gateway, "/v1/chat/completions", {"model": "off", **CHAT})
    assert response.status_code == 503
    assert error_of(response)["code"] == "model_disabled"
    assert "retry-after" not in response.headers
    assert gateway.get("/v1/models/off").status_code == 404
    assert engine.inference_count("/v1/chat/completions") == 0


def test_model_without_enabled_endpoint_is_503_no_replica_ready(
    gateway: GatewayClient, engine: Engine
) -> None:
    SlurmSettings.load()
    SlurmSettings.objects.filter(pk=1).update(enabled=True)
    model = make_slurm_model(name="booting")
    make_endpoint(model, api_base=engine.api_base, enabled=False)
    response = post(gateway, "/v1/chat/completions", {"model": "booting", **CHAT})
    assert response.status_code == 503
    error = error_of(response)
    assert error["code"] == "no_replica_ready"
    assert "no replica ready yet" in error["message"]
    assert response["Retry-After"] == "30"
    assert engine.inference_count("/v1/chat/completions") == 0


def test_bad_requests_name_the_problem(gateway: GatewayClient) -> None:
    make_model(name="m")
    missing = post(gateway, "/v1/chat/completions", CHAT)
    assert missing.status_code == 400
    assert error_of(missing)["param"] == "model"
    bad_json = gateway.post("/v1/completions", data="{not json", content_type="application/json")
    assert bad_json.status_code == 400
    assert "JSON" in error_of(bad_json)["message"]
    wrong_method = gateway.get("/v1/chat/completions")
    assert wrong_method.status_code == 405
    assert wrong_method["Allow"] == "POST"
    assert gateway.post("/v1/models", data={}).status_code == 405


# ----------------------------------------------------------------------------- auth


def test_open_gateway_takes_requests_without_a_key(gateway: GatewayClient, engine: Engine) -> None:
    make_endpoint(make_model(name="open"), api_base=engine.api_base)  # OPEN=1 (conftest)
    assert post(gateway, "/v1/chat/completions", {"model": "open", **CHAT}).status_code == 200


def test_no_keys_configured_means_closed(
    gateway: GatewayClient, engine: Engine, settings: Any
) -> None:
    settings.OBLETH_GATEWAY_OPEN = False
    settings.OBLETH_GATEWAY_API_KEYS = []
    make_endpoint(make_model(name="shut"), api_base=engine.api_base)
    response = post(gateway, "/v1/chat/completions", {"model": "shut", **CHAT})
    assert response.status_code == 401
    assert error_of(response)["code"] == "no_gateway_keys"
    assert engine.inference_count("/v1/chat/completions") == 0


def test_configured_keys_are_required(
    gateway: GatewayClient, engine: Engine, settings: Any
) -> None:
    settings.OBLETH_GATEWAY_OPEN = False
    settings.OBLETH_GATEWAY_API_KEYS = ["key-one-123456", "key-two-654321"]
    make_endpoint(make_model(name="guarded"), api_base=engine.api_base)
    body = {"model": "guarded", **CHAT}
    assert post(gateway, "/v1/chat/completions", body).status_code == 401
    wrong = post(gateway, "/v1/chat/completions", body, HTTP_AUTHORIZATION="Bearer key-three")
    assert wrong.status_code == 401
    assert error_of(wrong)["code"] == "invalid_api_key"
    assert "key-one" not in wrong.content.decode()
    assert gateway.get("/v1/models").status_code == 401
    ok = post(gateway, "/v1/chat/completions", body, HTTP_AUTHORIZATION="Bearer key-two-654321")
    assert ok.status_code == 200
    assert gateway.get("/v1/models", HTTP_AUTHORIZATION="Bearer key-one-123456").status_code == 200
    assert engine.inference_count("/v1/chat/completions") == 1


def test_keys_from_setting_win_over_environment(gateway: GatewayClient, monkeypatch: Any) -> None:
    monkeypatch.setenv("OBLETH_GATEWAY_API_KEYS", "env-key-123456")
    with override_settings(
        OBLETH_GATEWAY_API_KEYS=["setting-key-123456"], OBLETH_GATEWAY_OPEN=False
    ):
        assert (
            gateway.get("/v1/models", HTTP_AUTHORIZATION="Bearer env-key-123456").status_code == 401
        )
        ok = gateway.get("/v1/models", HTTP_AUTHORIZATION="Bearer setting-key-123456")
        assert ok.status_code == 200


# ----------------------------------------------------------------------------- forwarding


def test_chat_completion_through_the_test_engine(gateway: GatewayClient, engine: Engine) -> None:
    make_endpoint(make_model(name="chatty", upstream_model="test-engine"), api_base=engine.api_base)
    response = post(gateway, "/v1/chat/completions", {"model": "chatty", **CHAT})
    assert response.status_code == 200
    payload = response.json()
    assert payload["object"] == "chat.completion"
    assert payload["choices"][0]["message"]["content"] == "this is the"
    assert payload["model"] == "chatty"  # the client's name, not the upstream id
    assert engine.inference_count("/v1/chat/completions") == 1


def test_completions_and_embeddings_through_the_test_engine(
    gateway: GatewayClient, engine: Engine
) -> None:
    make_endpoint(
        make_model(name="comp", model_type=ModelType.COMPLETION), api_base=engine.api_base
    )
    make_endpoint(make_model(name="emb", model_type=ModelType.EMBEDDING), api_base=engine.api_base)
    comp = post(gateway, "/v1/completions", {"model": "comp", "prompt": "hi", "max_tokens": 2})
    assert comp.status_code == 200
    assert comp.json()["choices"][0]["text"] == "this is"
    emb = post(gateway, "/v1/embeddings", {"model": "emb", "input": ["a", "b"]})
    assert emb.status_code == 200
    assert [d["index"] for d in emb.json()["data"]] == [0, 1]
    assert emb.json()["model"] == "emb"
    assert engine.inference_count("/v1/completions") == 1
    assert engine.inference_count("/v1/embeddings") == 1


def test_model_is_renamed_upstream_and_endpoint_key_replaces_client_key(
    gateway: GatewayClient, recorder: Recorder, monkeypatch: Any
) -> None:
    monkeypatch.setenv("OBLETH_GATEWAY_API_KEYS", "client-key-abcdef")
    model = make_model(name="friendly-name", upstream_model="org/Real-Model-7B")
    make_endpoint(model, api_base=recorder.api_base, api_key="sk-endpoint-secret-9876")
    body = {"model": "friendly-name", **CHAT, "temperature": 0.5}
    response = post(
        gateway, "/v1/chat/completions", body, HTTP_AUTHORIZATION="Bearer client-key-abcdef"
    )
    assert response.status_code == 200
    (seen,) = recorder.inference_requests()
    assert seen.path == "/v1/chat/completions"
    assert seen.body == {**body, "model": "org/Real-Model-7B"}
    assert seen.headers["authorization"] == "Bearer sk-endpoint-secret-9876"
    assert "client-key-abcdef" not in json.dumps(seen.headers)
    assert response.json()["model"] == "friendly-name"


def test_upstream_client_errors_pass_through_without_failover(
    gateway: GatewayClient, recorder_factory: Any
) -> None:
    first, second = recorder_factory(), recorder_factory()
    first.script = Script(status=400, body={"error": {"message": "max_tokens too large"}})
    model = make_model(name="strict")
    make_endpoint(model, api_base=first.api_base, priority=1)
    make_endpoint(model, api_base=second.api_base, priority=2)
    response = post(gateway, "/v1/chat/completions", {"model": "strict", **CHAT})
    assert response.status_code == 400
    assert response.json() == {"error": {"message": "max_tokens too large"}}
    assert len(first.inference_requests()) == 1
    assert second.inference_requests() == []


# ----------------------------------------------------------------------------- endpoint choice


def test_lower_priority_number_wins(gateway: GatewayClient, recorder_factory: Any) -> None:
    preferred, backup = recorder_factory(), recorder_factory()
    model = make_model(name="prio")
    make_endpoint(model, api_base=backup.api_base, priority=20, weight=1000)
    make_endpoint(model, api_base=preferred.api_base, priority=10, weight=1)
    for _ in range(5):
        assert post(gateway, "/v1/chat/completions", {"model": "prio", **CHAT}).status_code == 200
    assert len(preferred.inference_requests()) == 5
    assert backup.inference_requests() == []


def test_unhealthy_endpoints_are_skipped_unless_all_are(
    gateway: GatewayClient, recorder_factory: Any
) -> None:
    sick, well = recorder_factory(), recorder_factory()
    model = make_model(name="sickbay")
    sick_ep = make_endpoint(model, api_base=sick.api_base, priority=1)
    well_ep = make_endpoint(model, api_base=well.api_base, priority=2)
    Endpoint.objects.filter(pk=sick_ep.pk).update(health_status=HealthStatus.UNHEALTHY)
    assert post(gateway, "/v1/chat/completions", {"model": "sickbay", **CHAT}).status_code == 200
    assert sick.inference_requests() == [] and len(well.inference_requests()) == 1
    Endpoint.objects.filter(pk=well_ep.pk).update(health_status=HealthStatus.UNHEALTHY)
    assert post(gateway, "/v1/chat/completions", {"model": "sickbay", **CHAT}).status_code == 200
    assert len(sick.inference_requests()) == 1  # all unhealthy: try them anyway, by priority


def test_failover_when_first_endpoint_refuses_connections(
    gateway: GatewayClient, engine: Engine, closed_port_base: str
) -> None:
    model = make_model(name="fo")
    make_endpoint(model, api_base=closed_port_base, priority=1)
    make_endpoint(model, api_base=engine.api_base, priority=2)
    response = post(gateway, "/v1/chat/completions", {"model": "fo", **CHAT})
    assert response.status_code == 200
    assert engine.inference_count("/v1/chat/completions") == 1


def test_failover_on_5xx_and_at_most_three_tries(
    gateway: GatewayClient, recorder_factory: Any, engine: Engine
) -> None:
    broken = [recorder_factory() for _ in range(3)]
    for rec in broken:
        rec.script = Script(status=500, body={"error": {"message": "boom"}})
    model = make_model(name="flaky")
    make_endpoint(model, api_base=broken[0].api_base, priority=1)
    make_endpoint(model, api_base=engine.api_base, priority=2)
    response = post(gateway, "/v1/chat/completions", {"model": "flaky", **CHAT})
    assert response.status_code == 200
    assert len(broken[0].inference_requests()) == 1

    model2 = make_model(name="all-broken")
    for i, rec in enumerate(broken):
        make_endpoint(model2, api_base=rec.api_base, priority=i + 1)
    make_endpoint(model2, api_base=engine.api_base, priority=9)  # a 4th: never reached
    before = engine.inference_count("/v1/chat/completions")
    response = post(gateway, "/v1/chat/completions", {"model": "all-broken", **CHAT})
    assert response.status_code == 500  # the last try's answer is passed through
    assert [len(rec.inference_requests()) for rec in broken] == [2, 1, 1]
    assert engine.inference_count("/v1/chat/completions") == before


def test_all_endpoints_unreachable_is_502_without_addresses(
    gateway: GatewayClient, closed_port_base: str
) -> None:
    make_endpoint(make_model(name="gone"), api_base=closed_port_base)
    response = post(gateway, "/v1/chat/completions", {"model": "gone", **CHAT})
    assert response.status_code == 502
    assert error_of(response)["code"] == "upstream_unreachable"
    assert "127.0.0.1" not in response.content.decode()


# ----------------------------------------------------------------------------- streaming


def test_streaming_through_the_test_engine(gateway: GatewayClient, engine: Engine) -> None:
    make_endpoint(make_model(name="streamer"), api_base=engine.api_base)
    response = post(
        gateway,
        "/v1/chat/completions",
        {"model": "streamer", **CHAT, "max_tokens": 4, "stream": True},
        stream=True,
    )
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/event-stream")
    assert "content-length" not in response.headers  # relayed as it comes, not buffered
    text = b"".join(response.iter_chunks()).decode()
    events = [line[6:] for line in text.split("\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["model"] == "streamer" for c in chunks)
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert content == "this is the obleth"


def test_stream_chunks_reach_the_client_before_upstream_finishes(
    gateway: GatewayClient, recorder: Recorder
) -> None:
    """The recorder sends its second chunk only after the test released it; a buffering
    gateway would hand over nothing until the recorder gave up waiting (released False)."""
    hold = threading.Event()
    recorder.script = Script(
        stream=[b'data: {"n": 1, "model": "up"}\n\n', b'data: {"n": 2}\n\n', b"data: [DONE]\n\n"],
        hold=hold,
    )
    make_endpoint(make_model(name="live"), api_base=recorder.api_base)
    response = post(
        gateway, "/v1/chat/completions", {"model": "live", **CHAT, "stream": True}, stream=True
    )
    chunks = response.iter_chunks()
    first = next(chunks)
    hold.set()
    rest = b"".join(chunks)
    assert first == b'data: {"n": 1, "model": "live"}\n\n'
    assert recorder.released is True
    assert rest == b'data: {"n": 2}\n\ndata: [DONE]\n\n'


def test_node_identity_is_not_leaked(
    gateway: GatewayClient, engine: Engine, recorder: Recorder
) -> None:
    recorder.script = Script(
        headers={
            "Server": "vllm on gpu-node-17",
            "Via": "1.1 gpu-node-17",
            "X-Node": "gpu-node-17",
            "X-Backend-Host": f"127.0.0.1:{recorder.port}",
            "X-Ratelimit-Remaining-Requests": "41",
            "Connection": "keep-alive",
        }
    )
    make_endpoint(make_model(name="eng"), api_base=engine.api_base)
    make_endpoint(make_model(name="rec"), api_base=recorder.api_base)
    for name, port in (("eng", engine.port), ("rec", recorder.port)):
        for body in ({"model": name, **CHAT}, {"model": name, **CHAT, "stream": True}):
            response = post(gateway, "/v1/chat/completions", body)
            assert response.status_code == 200
            headers = {k.lower(): v for k, v in response.items()}
            for banned in ("server", "via", "x-node", "x-backend-host", "x-obleth-test-engine"):
                assert banned not in headers
            assert "connection" not in headers and "transfer-encoding" not in headers
            flat = json.dumps(headers).lower()
            assert "gpu-node" not in flat and str(port) not in flat and "127.0.0.1" not in flat
            assert "obleth-test-engine" not in flat
    assert headers["x-ratelimit-remaining-requests"] == "41"


# ----------------------------------------------------------------------------- no query


def test_a_request_costs_no_query(
    gateway: GatewayClient, recorder: Recorder, django_assert_num_queries: Any
) -> None:
    """The routing table is in memory: with it loaded, a request reads nothing (open gateway)."""
    make_endpoint(make_model(name="noq"), api_base=recorder.api_base)
    gateway.reload()
    gateway.auto_reload = False
    with django_assert_num_queries(0):
        response = post(gateway, "/v1/chat/completions", {"model": "noq", **CHAT})
    assert response.status_code == 200


# ----------------------------------------------------------------------------- client goes away


def test_upstream_is_closed_when_the_client_goes_away(
    gateway: GatewayClient, recorder: Recorder
) -> None:
    """The recorder streams forever; once the client went away, the gateway must close the
    upstream connection, which the recorder notices as a failed write."""
    recorder.script = Script(endless=True)
    make_endpoint(make_model(name="forever"), api_base=recorder.api_base)
    body = {"model": "forever", **CHAT, "stream": True}
    response = post(gateway, "/v1/chat/completions", body, stream=True)
    assert response.status_code == 200
    first = next(response.iter_chunks())
    assert b'data: {"n": 1}' in first
    response.close()
    assert recorder.client_gone.wait(30)
    assert gateway.service.in_flight == 0


def test_error_bodies_do_not_name_the_node() -> None:
    from obleth.gateway.proxy import scrub_upstream_address

    body = b'{"error": "Traceback ... connect 10.1.2.3:8000 refused on node 10.1.2.3"}'
    scrubbed = scrub_upstream_address(body, "http://10.1.2.3:8000/v1")
    assert b"10.1.2.3" not in scrubbed and b"upstream" in scrubbed
