"""SlurmClient behaviour that does not depend on a Slurm version's shapes.

slurmrestd is faked here with ``httpx.MockTransport`` (hand-made answers) to test the client's
own rules: headers, no redirects, token hygiene, request counting, version detection, ping,
one-request listing, discovery. The real server is exercised in test_contract_live.py and
test_real_slurm.py.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from provisioner.slurm.client import SlurmClient
from provisioner.slurm.errors import (
    SlurmAuthError,
    SlurmConfigError,
    SlurmUncertain,
)

TOKEN = "eyJhbGciOiJIUzI1NiJ9.eyJzdW4iOiJvYmxldGgifQ.c2lnbmF0dXJlLXNlY3JldA"
URL = "http://127.0.0.1:6820"

Handler = Callable[[httpx.Request], httpx.Response]


class Recorder:
    def __init__(self, routes: dict[tuple[str, str], Any]) -> None:
        self.routes = routes
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.routes.get((request.method, request.url.path))
        if answer is None:
            return httpx.Response(404, text="Unable find requested URL.")
        if isinstance(answer, Exception):
            raise answer
        if callable(answer):
            result: httpx.Response = answer(request)
            return result
        status, body = answer
        content = body if isinstance(body, str) else json.dumps(body)
        return httpx.Response(status, content=content.encode())


def make(
    routes: dict[tuple[str, str], Any], version: str | None = "v0.0.38", **kw: Any
) -> tuple[SlurmClient, Recorder]:
    recorder = Recorder(routes)
    client = SlurmClient(
        URL, "obleth", TOKEN, version, transport=httpx.MockTransport(recorder), **kw
    )
    return client, recorder


def doc(*versions: str) -> dict[str, Any]:
    paths = {}
    for v in versions:
        paths[f"/slurm/{v}/ping"] = {}
        paths[f"/slurm/{v}/job/{{job_id}}"] = {}
        paths[f"/slurmdb/{v}/jobs"] = {}
    return {"openapi": "3.0.2", "paths": paths}


JOBS = {
    "jobs": [
        {"job_id": 1, "name": "obleth-a", "job_state": "RUNNING", "nodes": "n1"},
        {"job_id": 2, "name": "obleth-b", "job_state": "PENDING", "nodes": ""},
        {"job_id": 3, "name": "someone", "job_state": "WEIRD_NEW_STATE"},
        {"name": "no-id-foreign", "job_state": "RUNNING"},
    ],
    "errors": [],
}


def test_sends_the_auth_headers_and_default_timeouts() -> None:
    client, rec = make({("GET", "/slurm/v0.0.38/jobs"): (200, {"jobs": []})})
    with client:
        assert client.list_jobs() == []
        timeout = client._http.timeout
    request = rec.requests[0]
    assert request.headers["X-SLURM-USER-NAME"] == "obleth"
    assert request.headers["X-SLURM-USER-TOKEN"] == TOKEN
    assert (timeout.read, timeout.connect) == (30.0, 5.0)


def test_redirects_are_not_followed_so_the_token_cannot_leak() -> None:
    def redirect(request: httpx.Request) -> httpx.Response:
        return httpx.Response(302, headers={"Location": "http://127.0.0.1:9/steal"})

    client, rec = make({("GET", "/slurm/v0.0.38/job/5"): redirect})
    with client, pytest.raises(SlurmUncertain) as caught:
        client.get_job("5")
    assert [r.url.path for r in rec.requests] == ["/slurm/v0.0.38/job/5"]
    assert "302" in str(caught.value)


def test_token_never_appears_in_repr_errors_or_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    echo = {"errors": [{"error_code": 2000, "error": f"bad partition {TOKEN}"}]}
    client, _ = make(
        {
            ("POST", "/slurm/v0.0.38/job/submit"): (500, echo),
            ("GET", "/slurm/v0.0.38/job/5"): (502, f"<html>proxy saw token {TOKEN}</html>"),
            ("GET", "/slurm/v0.0.38/jobs"): httpx.ConnectError(f"refused {TOKEN}"),
        }
    )
    from provisioner.slurm.types import JobSubmission

    texts = [repr(client), str(client.__dict__.get("url"))]
    with client:
        for call in (
            lambda: client.submit(JobSubmission(name="x", script="#!/bin/bash\n")),
            lambda: client.get_job("5"),
            lambda: client.list_jobs(),
        ):
            with pytest.raises(Exception) as caught:  # noqa: PT011 - any Slurm error
                call()
            texts += [str(caught.value), repr(caught.value), getattr(caught.value, "detail", "")]
            texts.append(getattr(caught.value, "reason", ""))
        texts.append(client.ping().detail)
    texts.append(caplog.text)
    for text in texts:
        assert TOKEN not in text


def test_request_count_counts_every_request_even_failed_ones() -> None:
    client, _ = make(
        {
            ("GET", "/slurm/v0.0.38/jobs"): (200, {"jobs": []}),
            ("GET", "/slurm/v0.0.38/nodes"): httpx.ReadTimeout("slow"),
        }
    )
    with client:
        assert client.request_count == 0
        client.list_jobs()
        with pytest.raises(SlurmUncertain, match="timed out"):
            client.nodes()
        assert client.request_count == 2


# ---- version detection ---------------------------------------------------------------------


def test_detects_the_newest_served_version_with_an_adapter_and_caches_it() -> None:
    client, rec = make(
        {("GET", "/openapi/v3"): (200, doc("v0.0.36", "v0.0.37", "v0.0.38"))}, version=None
    )
    with client:
        assert client.api_version is None
        assert client.detect_version() == "v0.0.38"
        assert client.detect_version() == "v0.0.38"
    assert len(rec.requests) == 1


def test_detection_skips_versions_without_an_adapter() -> None:
    client, _ = make(
        {("GET", "/openapi/v3"): (200, doc("v0.0.40", "v0.0.41", "v0.0.99"))}, version=None
    )
    with client:
        assert client.detect_version() == "v0.0.41"


def test_detection_falls_back_to_openapi_and_explicit_version_wins() -> None:
    client, rec = make({("GET", "/openapi"): (200, doc("v0.0.39"))}, version=None)
    with client:
        assert client.detect_version() == "v0.0.39"
    assert [r.url.path for r in rec.requests] == ["/openapi/v3", "/openapi"]
    pinned, rec2 = make({}, version="0.0.40")
    with pinned:
        assert pinned.detect_version() == "v0.0.40"
    assert rec2.requests == []


def test_detection_failures() -> None:
    unsupported, _ = make({("GET", "/openapi/v3"): (200, doc("v0.0.35"))}, version=None)
    with unsupported, pytest.raises(SlurmConfigError, match="supports"):
        unsupported.detect_version()
    unauthorized, _ = make({("GET", "/openapi/v3"): (401, "Authentication failure")}, version=None)
    with unauthorized, pytest.raises(SlurmAuthError, match="scontrol token"):
        unauthorized.detect_version()
    broken, _ = make({}, version=None)
    with broken, pytest.raises(SlurmUncertain, match="OpenAPI document"):
        broken.detect_version()


def test_unknown_api_version_is_a_config_error_naming_the_supported_ones() -> None:
    with pytest.raises(SlurmConfigError, match=r"v0\.0\.38.*v0\.0\.45"):
        SlurmClient(URL, "obleth", TOKEN, "v0.0.99")


@pytest.mark.parametrize(
    ("url", "user", "token", "field"),
    [
        ("127.0.0.1:6820", "obleth", TOKEN, "url"),
        ("ftp://127.0.0.1", "obleth", TOKEN, "url"),
        (URL, "", TOKEN, "user"),
        (URL, "two words", TOKEN, "user"),
        (URL, "obleth", "", "token"),
        (URL, "obleth", "line\nbreak", "token"),
    ],
)
def test_bad_settings_are_config_errors_naming_the_field(
    url: str, user: str, token: str, field: str
) -> None:
    with pytest.raises(SlurmConfigError, match=field):
        SlurmClient(url, user, token)


def test_job_ids_are_validated_before_any_request() -> None:
    client, rec = make({})
    with client, pytest.raises(SlurmConfigError, match="job_id"):
        client.get_job("../ping")
    assert rec.requests == []


# ---- ping ---------------------------------------------------------------------------------


def test_ping_reports_release_and_never_raises() -> None:
    ok = {
        "meta": {"Slurm": {"release": "22.05.8"}},
        "pings": [{"hostname": "ctl", "ping": "UP", "mode": "primary"}],
        "errors": [],
    }
    client, _ = make({("GET", "/slurm/v0.0.38/ping"): (200, ok)})
    with client:
        result = client.ping()
    assert result.ok and result.slurm_release == "22.05.8" and result.api_version == "v0.0.38"
    assert "ctl UP (primary)" in result.detail and result.latency_ms >= 0

    down = {"pings": [{"hostname": "ctl", "ping": "DOWN"}], "errors": []}
    for routes in (
        {("GET", "/slurm/v0.0.38/ping"): (200, down)},
        {("GET", "/slurm/v0.0.38/ping"): httpx.ConnectError("refused")},
        {
            ("GET", "/slurm/v0.0.38/ping"): (
                500,
                {"errors": [{"error_number": -1, "error": "Unspecified error"}]},
            )
        },
        {("GET", "/slurm/v0.0.38/ping"): (502, "<html>bad gateway</html>")},
    ):
        client, _ = make(routes)
        with client:
            result = client.ping()
        assert result.ok is False and result.detail
    unknown, _ = make({("GET", "/openapi/v3"): httpx.ConnectError("refused")}, version=None)
    with unknown:
        result = unknown.ping()
    assert result.ok is False and "refused" in result.detail


def test_ping_understands_newer_ping_shapes() -> None:
    v45 = {
        "pings": [{"hostname": "ctl", "responding": True, "primary": True}],
        "errors": [],
        "meta": {"slurm": {"release": "26.05.2"}},
    }
    client, _ = make({("GET", "/slurm/v0.0.45/ping/"): (200, v45)}, version="v0.0.45")
    with client:
        result = client.ping()
    assert result.ok and result.slurm_release == "26.05.2"


# ---- listing, memory, discovery -----------------------------------------------------------


def test_list_jobs_is_one_request_filtered_by_prefix() -> None:
    client, rec = make({("GET", "/slurm/v0.0.38/jobs"): (200, JOBS)})
    with client:
        jobs = client.list_jobs("obleth-")
    assert [(j.job_id, j.state) for j in jobs] == [("1", "RUNNING"), ("2", "PENDING")]
    assert len(rec.requests) == 1


def test_list_jobs_raises_on_doubt_about_our_own_jobs() -> None:
    odd = {"jobs": [{"job_id": 9, "name": "obleth-x", "job_state": "NEW_STATE"}]}
    for body in (odd, {"jobs": [{"name": "obleth-x", "job_state": "RUNNING"}]}, {"errors": []}):
        client, _ = make({("GET", "/slurm/v0.0.38/jobs"): (200, body)})
        with client, pytest.raises(SlurmUncertain):
            client.list_jobs("obleth-")


def test_v0_0_40_uses_the_documented_trailing_slash_paths() -> None:
    client, rec = make({("GET", "/slurm/v0.0.40/jobs/"): (200, {"jobs": []})}, "v0.0.40")
    with client:
        assert client.list_jobs() == []
    assert rec.requests[0].url.path == "/slurm/v0.0.40/jobs/"


NODES = {
    "nodes": [
        {"name": "a", "real_memory": 515000, "specialized_memory": 2048, "partitions": ["gpu"]},
        {"name": "b", "real_memory": 257000, "partitions": ["gpu", "debug"]},
        {"name": "c", "real_memory": 128000, "partitions": ["debug"]},
        {"name": "d", "partitions": ["gpu"]},
    ],
    "errors": [],
}


def test_whole_node_memory_is_the_smallest_node_minus_memspeclimit() -> None:
    client, _ = make({("GET", "/slurm/v0.0.38/nodes"): (200, NODES)})
    with client:
        assert client.whole_node_memory_mb("gpu") == 257000
        assert client.whole_node_memory_mb("debug") == 128000
        assert client.whole_node_memory_mb("nosuch") is None
        assert client.whole_node_memory_mb("") is None
    only_spec = {
        "nodes": [
            {"name": "a", "real_memory": 515000, "specialized_memory": 2048, "partitions": ["gpu"]}
        ]
    }
    client, _ = make({("GET", "/slurm/v0.0.38/nodes"): (200, only_spec)})
    with client:
        assert client.whole_node_memory_mb("gpu") == 512952


def test_slurmdb_not_served_is_a_reason_not_an_error() -> None:
    client, _ = make({})
    with client:
        result = client.associations()
    assert result.items == () and not result.available
    assert "not served" in result.unavailable_reason


def test_discover_is_best_effort_per_part() -> None:
    client, _ = make(
        {
            ("GET", "/slurm/v0.0.38/partitions"): (
                200,
                {"partitions": [{"name": "gpu", "nodes": "a,b", "flags": ["default"]}]},
            ),
            ("GET", "/slurm/v0.0.38/nodes"): (
                500,
                {"errors": [{"error_code": 1800, "error": "Unable to contact slurm controller"}]},
            ),
            ("GET", "/slurmdb/v0.0.38/qos"): (200, {"qos": [{"name": "normal"}]}),
        }
    )
    with client:
        resources = client.discover()
    assert [p.name for p in resources.partitions] == ["gpu"] and resources.nodes == ()
    assert "1800" in resources.errors["nodes"]
    assert resources.qos == ("normal",)
    assert "not served" in resources.errors["accounts"]
    assert set(resources.errors) == {"nodes", "accounts", "associations"}
    down, _ = make({("GET", "/openapi/v3"): httpx.ConnectError("refused")}, version=None)
    with down:
        nothing = down.discover()
    assert nothing.partitions == () and set(nothing.errors) == {
        "partitions",
        "nodes",
        "accounts",
        "qos",
        "associations",
    }
