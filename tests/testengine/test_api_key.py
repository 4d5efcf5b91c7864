"""The test engine's API key (``--api-key`` / ``$OBLETH_REPLICA_API_KEY``): /v1 refuses requests
without the right bearer token, /health stays open (as vLLM does), so the provisioner's probe can
prove a port is its own replica. Real engine processes, as in test_server.py."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from provisioner.testengine.server import ConfigError, parse_config
from tests.testengine.test_server import Engine, start  # noqa: F401 - the fixture

KEY = "obr_replica-key-for-the-engine-test-0123456789"


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_v1_needs_the_key_and_health_stays_open(start: Callable[..., Engine]) -> None:  # noqa: F811
    engine = start("--api-key", KEY, "--model", "m")
    assert engine.get("/health").status_code == 200
    assert engine.get("/v1/health").status_code == 200
    refused = engine.get("/v1/models")
    assert refused.status_code == 401
    assert refused.headers["WWW-Authenticate"] == "Bearer"
    assert refused.json()["error"]["code"] == "invalid_api_key"
    assert engine.get("/v1/models", headers=_auth("wrong")).status_code == 401
    assert engine.get("/v1/models", headers={"Authorization": KEY}).status_code == 401  # no scheme
    assert engine.get("/v1/models", headers=_auth(KEY)).status_code == 200
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    assert engine.post("/v1/chat/completions", chat).status_code == 401
    assert engine.post("/v1/chat/completions", chat, headers=_auth(KEY)).status_code == 200
    stats = engine.stats()
    assert stats["api_key_required"] is True and stats["unauthorized"] == 4
    assert KEY not in engine.log()  # never printed


def test_the_replica_key_comes_from_the_job_environment(start: Callable[..., Engine]) -> None:  # noqa: F811
    engine = start(env={"OBLETH_REPLICA_API_KEY": KEY})
    assert engine.get("/v1/models").status_code == 401
    assert engine.get("/v1/models", headers=_auth(KEY)).status_code == 200


def test_no_key_no_check(start: Callable[..., Engine]) -> None:  # noqa: F811
    engine = start()
    assert engine.get("/v1/models").status_code == 200
    assert engine.stats()["api_key_required"] is False


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        (["--port", "1", "--api-key", "flag"], {"OBLETH_REPLICA_API_KEY": "env"}, "flag"),
        (["--port", "1"], {"OBLETH_REPLICA_API_KEY": "env"}, "env"),
        (["--port", "1"], {"OBLETH_TESTENGINE_API_KEY": "other"}, "other"),
        (["--port", "1"], {}, ""),
        (["--port", "1", "--api-key", ""], {"OBLETH_REPLICA_API_KEY": "env"}, ""),
    ],
)
def test_key_sources(argv: list[str], env: dict[str, str], expected: str) -> None:
    assert parse_config(argv, env).api_key == expected


@pytest.mark.parametrize("bad", ["with space", "tab\tkey", "nl\nkey", "caf\u00e9", "nul\x00"])
def test_a_key_that_is_not_a_header_value_is_refused(bad: str) -> None:
    with pytest.raises(ConfigError, match="--api-key"):
        parse_config(["--port", "1", "--api-key", bad], {})


def test_the_key_is_not_in_the_config_repr() -> None:
    assert KEY not in repr(parse_config(["--port", "1", "--api-key", KEY], {}))
