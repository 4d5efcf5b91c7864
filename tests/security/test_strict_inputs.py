"""Strict inputs: every field that reaches Slurm, a shell or an HTTP header is validated on every
write path (API, admin, management commands, recipe deploy) by one validator per field, and no
input makes a route answer 500.

Covers each case of issue 7's "Accepted silently" and "Crashes (500)" lists, then NUL, CR/LF,
huge values and unknown fields on every write route. Nothing is faked: requests go through the
real URLconf, serializers, services and PostgreSQL.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import CommandError
from rest_framework.test import APIClient

from obleth.core import validators as v
from obleth.core.models import Endpoint, ManagedSpec, Model, Recipe, SlurmSettings
from tests.plugins.factories import make_endpoint, make_model, make_slurm_model

pytestmark = pytest.mark.django_db

API = "/api/v1"
MB = 1024 * 1024
DEMO_RECIPE = Path(django_settings.BASE_DIR) / "recipes" / "library" / "test-engine.recipe"
GOOD_RECIPE = "---\nname: tiny\nengine: custom\nport: 8000\n---\n#!/bin/bash\necho hi\n"
SPEC = {
    "partition": "debug",
    "serving_port": 18000,
    "launch_command": "python3 -m http.server $OBLETH_SERVING_PORT",
    "target_replicas": 1,
}


def refused(response: Any, field: str) -> str:
    """The response is a 400 naming ``field``; returns its message."""
    body = response.json()
    assert response.status_code == 400, body
    assert field in body["fields"], body
    message = " ".join(str(m) for m in body["fields"][field])
    assert body["error"].startswith(f"{field}: "), body["error"]
    return message


def messages_of(validator: Any, value: Any) -> str:
    with pytest.raises(ValidationError) as caught:
        validator(value)
    return " ".join(caught.value.messages)


# ======================================================================= validators, one per field

HOSTILE_NAMES = ["gpu;touch x", "$(touch x)", "gpu a", "gpu\nb", "`id`", "gpu|x", "a\x00b"]


@pytest.mark.parametrize("value", HOSTILE_NAMES)
@pytest.mark.parametrize(
    ("validator", "field"),
    [(v.validate_partition, "partition"), (v.validate_account, "account"), (v.validate_qos, "qos")],
)
def test_slurm_names_take_slurm_characters_only(validator: Any, field: str, value: str) -> None:
    text = messages_of(validator, value)
    assert text.startswith(field)
    assert "letters, digits" in text or "one line" in text


@pytest.mark.parametrize("value", ["gpu", "debug-1", "a.b_c+d", "GPU2"])
def test_slurm_names_accept_real_names(value: str) -> None:
    v.validate_partition(value)
    v.validate_account(value)
    v.validate_qos(value)


@pytest.mark.parametrize(
    "value",
    [
        "99999999:00:00",
        "1:99:99",
        "10:60",
        "1:00:60",
        "1-24",
        "1-00:60",
        "366-00:00",
        "600000",
        "4h",
        "1:2:3:4",
        "1-00:00\n",
        "1;2",
    ],
)
def test_time_limits_outside_slurm_forms_or_bounds_are_refused(value: str) -> None:
    text = messages_of(v.validate_time_limit, value)
    assert text.startswith("time_limit")
    assert "minutes (120)" in text or "one line" in text  # the forms Slurm accepts


@pytest.mark.parametrize(
    "value",
    [
        "30",
        "30:00",
        "4:00:00",
        "48:00:00",
        "1-00",
        "1-12:30",
        "0-04:00:00",
        "365-00:00:00",
        "UNLIMITED",
    ],
)
def test_time_limits_in_slurm_forms_are_accepted(value: str) -> None:
    v.validate_time_limit(value)


@pytest.mark.parametrize("value", ["1P", "-1G", "99999T", "64G;x", "64 G", "1e9"])
def test_memory_outside_its_form_or_bound_is_refused(value: str) -> None:
    assert messages_of(v.validate_memory, value).startswith("mem")


@pytest.mark.parametrize("value", ["0", "4096", "64G", "2TB", "512M"])
def test_memory_in_its_form_is_accepted(value: str) -> None:
    v.validate_memory(value)


@pytest.mark.parametrize(
    "value",
    [
        "gpu:-1",
        "gpu:0",
        "gpu:99999",
        "gpu:a100:-2",
        "gpu;x",
        "gpu:1\nx",
        "gpu:a:b:c",
        ":1",
        "gpu:$(x)",
    ],
)
def test_gres_needs_a_count_of_one_or_more(value: str) -> None:
    text = messages_of(v.validate_gres, value)
    assert text.startswith("gres")


@pytest.mark.parametrize(
    "value",
    ["gpu", "gpu:1", "gpu:a100:2", "gpu:3g.20gb:1", "gres/gpu:1", "gpu:1,nvme:1", "gpu:a100"],
)
def test_gres_in_its_forms_is_accepted(value: str) -> None:
    v.validate_gres(value)


@pytest.mark.parametrize("value", [0, 10**9, v.MAX_NODES + 1])
def test_nodes_are_bounded(value: int) -> None:
    assert messages_of(v.validate_nodes, value).startswith("nodes")


@pytest.mark.parametrize("value", ["gpu[1-", "gpu01\nx", "gpu[1-99999999]", "gpu;x", "$(x)"])
def test_exclude_is_a_node_list(value: str) -> None:
    assert messages_of(v.validate_exclude, value).startswith("exclude")


@pytest.mark.parametrize("value", ["gpu01,gpu[03-05]", "gpu01, gpu02", "node-1"])
def test_exclude_accepts_hostlists(value: str) -> None:
    v.validate_exclude(value)


@pytest.mark.parametrize(
    "value", ["$(touch x)", "a100\nb", "a100;rm", "a&&b", "(a|b", "a&", "a b", "a)", "`id`"]
)
def test_constraints_follow_slurms_grammar_only(value: str) -> None:
    assert messages_of(v.validate_constraints, value).startswith("constraints")


@pytest.mark.parametrize(
    "value", ["a100", "a100&ib", "[rack1|rack2]", "(a|b)&c", "a100*2", "intel,ib", "gpu_type:a100"]
)
def test_constraints_in_slurms_grammar_are_accepted(value: str) -> None:
    v.validate_constraints(value)


@pytest.mark.parametrize(
    "value",
    ["$(touch x)", "/tmp/a\nb", "/tmp/`id`", "relative/logs", "/tmp/a b", "/tmp/a;b", "/t/\x00"],
)
def test_log_output_dir_is_an_absolute_path_without_shell_characters(value: str) -> None:
    assert messages_of(v.validate_log_output_dir, value).startswith("log_output_dir")


@pytest.mark.parametrize("value", ["cache", "./cache", "~/cache", "$HOME/cache"])
def test_a_relative_cache_dir_is_refused(value: str) -> None:
    assert messages_of(v.validate_cache_dir, value).startswith("cache_dir")


def test_absolute_paths_are_accepted() -> None:
    v.validate_log_output_dir("/scratch/%u/obleth-logs")
    v.validate_cache_dir("/scratch/hf-cache")


BAD_URLS = [
    "http://h:6820\r\nX-Injected: 1",
    "http://h:6820/\nx",
    "http://[::1/v1",
    "ftp://h/v1",
    "http://",
    "http://h:99999",
    "http://h:0",
    "http://a b/v1",
    "http://user:pw@h/v1",
    "http://h/v1?x=1",
    "http://h/v1#f",
    "http://bad_host!/v1",
    "http://xn--caf-dma.é/v1",
    "javascript:alert(1)",
]


@pytest.mark.parametrize("value", BAD_URLS)
@pytest.mark.parametrize(
    ("validator", "field"),
    [(v.validate_slurmrestd_url, "slurmrestd_url"), (v.validate_api_base, "api_base")],
)
def test_urls_are_http_with_a_valid_host_on_one_line(
    validator: Any, field: str, value: str
) -> None:
    text = messages_of(validator, value)
    assert text.startswith(field)
    assert "pw" not in text  # a credential in the URL is never echoed


@pytest.mark.parametrize(
    "value",
    [
        "http://169.254.169.254/v1",
        "http://169.254.1.1:8000/v1",
        "http://[fe80::1]/v1",
        "http://[::ffff:169.254.169.254]/v1",
        "http://metadata.google.internal/computeMetadata/v1",
        "http://METADATA.GOOGLE.INTERNAL./v1",
        "http://100.100.100.200/v1",
        "http://[fd00:ec2::254]/v1",
        "http://2852039166/v1",
        "http://0xA9FEA9FE/v1",
        "http://169.254.43518/v1",
    ],
)
def test_api_base_refuses_link_local_and_cloud_metadata_hosts(value: str) -> None:
    assert messages_of(v.validate_api_base, value).startswith("api_base")


@pytest.mark.parametrize(
    "value",
    ["http://127.0.0.1:8000/v1", "http://[::1]:8000/v1", "https://gpu-node-01:8000/v1", "http://h"],
)
def test_good_urls_are_accepted(value: str) -> None:
    v.validate_api_base(value)
    v.validate_slurmrestd_url(value)


SECRET = "s3cr3t-VALUE"


@pytest.mark.parametrize(
    ("validator", "field", "value"),
    [
        (v.validate_slurm_user, "user", "obleth\r\nX-Injected: 1"),
        (v.validate_slurm_user, "user", "ob leth"),
        (v.validate_jwt, "jwt", f"{SECRET}\r\nX: 1"),
        (v.validate_jwt, "jwt", SECRET + "x" * MB),
        (v.validate_jwt, "jwt", f"{SECRET}é"),
        (v.validate_api_key, "api_key", f"{SECRET}\nX: 1"),
        (v.validate_api_key, "api_key", f"{SECRET}\x00"),
        (v.validate_api_key, "api_key", SECRET + "k" * 5000),
        (v.validate_hf_token, "hf_token", f"{SECRET}\n"),
    ],
)
def test_header_values_are_printable_ascii_bounded_and_never_echoed(
    validator: Any, field: str, value: str
) -> None:
    text = messages_of(validator, value)
    assert text.startswith(field)
    assert SECRET not in text


def test_port_windows_must_fit_below_65536() -> None:
    from obleth.core.ports import window_range_error

    problem = window_range_error(65530, 2, 8)
    assert problem is not None and "serving_port 65530" in problem and "65520" in problem
    assert window_range_error(65520, 2, 8) is None


@pytest.mark.parametrize(
    ("validator", "value", "where"),
    [
        (v.validate_images, {"vllm": "/images/vllm\x00.sif"}, "images.vllm"),
        (v.validate_images, {"vl\x00lm": "/images/vllm.sif"}, "images"),
        (v.validate_launcher_spec, {"inputs": {"x": ["a", "b\x00"]}}, "inputs.x[1]"),
    ],
)
def test_json_fields_refuse_nul(validator: Any, value: Any, where: str) -> None:
    text = messages_of(validator, value)
    assert "NUL" in text and where in text


# ====================================================================== the lists, by API


@pytest.fixture
def slurm_model() -> Model:
    return make_slurm_model(name="strict-slurm")


def managed_url(model: Model) -> str:
    return f"{API}/models/{model.pk}/managed"


@pytest.mark.parametrize("value", HOSTILE_NAMES[:-1])
@pytest.mark.parametrize("method", ["put", "patch"])
def test_api_partition_goes_through_its_validator(
    api_client: APIClient, slurm_model: Model, method: str, value: str
) -> None:
    body = {**SPEC, "partition": value} if method == "put" else {"partition": value}
    response = getattr(api_client, method)(managed_url(slurm_model), body, format="json")
    assert "Slurm name" in refused(response, "partition") or "one line" in response.json()["error"]
    assert ManagedSpec.objects.get(model=slurm_model).partition == "debug"


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"serving_port": 65530, "target_replicas": 2}, "serving_port", "65535"),
        ({"serving_port": 70000}, "serving_port", "1 to 65535"),
        ({"nodes": 10**9}, "nodes", "at most"),
        ({"cpus_per_task": 10**10}, "cpus_per_task", "at most"),
        ({"max_job_failures": 10**12}, "max_job_failures", "at most"),
        ({"min_replicas": 10**12}, "min_replicas", "at most"),
        ({"time_limit": "99999999:00:00"}, "time_limit", "365 days"),
        ({"time_limit": "1:99:99"}, "time_limit", "0-59"),
        ({"gres": "gpu:-1"}, "gres", "count"),
        ({"constraints": "$(touch /tmp/x)"}, "constraints", "Slurm constraint"),
        ({"constraints": "a100\n#SBATCH --nodes=4"}, "constraints", "one line"),
        ({"log_output_dir": "/tmp/$(touch x)"}, "log_output_dir", "shell"),
        ({"log_output_dir": "/tmp/logs\nrm -rf /"}, "log_output_dir", "one line"),
        ({"log_output_dir": "logs"}, "log_output_dir", "relative"),
        ({"exclude": "gpu[1-99999999]"}, "exclude", "node list"),
        ({"image": "/images/x.sif; touch y"}, "image", "shell"),
        ({"mem": "64G\n#SBATCH --nodes=4"}, "mem", "mem"),
    ],
)
def test_api_spec_values_accepted_silently_before_are_refused(
    api_client: APIClient, slurm_model: Model, body: dict[str, Any], field: str, words: str
) -> None:
    before = ManagedSpec.objects.get(model=slurm_model)
    response = api_client.patch(managed_url(slurm_model), body, format="json")
    assert words in refused(response, field)
    after = ManagedSpec.objects.get(model=slurm_model)
    assert (after.serving_port, after.nodes, after.time_limit) == (
        before.serving_port,
        before.nodes,
        before.time_limit,
    )


def test_api_spec_accepts_good_values(api_client: APIClient, slurm_model: Model) -> None:
    response = api_client.patch(
        managed_url(slurm_model),
        {
            "time_limit": "1-12:30",
            "gres": "gpu:a100:2",
            "nodes": 2,
            "constraints": "[rack1|rack2]&ib",
            "log_output_dir": "/scratch/obleth/logs",
            "mem": "64G",
            "exclude": "gpu01, gpu[03-05]",
            "serving_port": 65520,
            "target_replicas": 2,
        },
        format="json",
    )
    assert response.status_code == 200, response.json()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"user": "obleth\r\nX-Injected: 1"}, "user"),
        ({"slurmrestd_url": "http://h:6820\r\nX-Injected: 1"}, "slurmrestd_url"),
        ({"slurmrestd_url": "http://[::1/v1"}, "slurmrestd_url"),
        ({"jwt": "x" * MB}, "jwt"),
        ({"jwt": "abc\r\ndef"}, "jwt"),
        ({"hf_token": "hf_\r\nabc"}, "hf_token"),
        ({"cache_dir": "relative/cache"}, "cache_dir"),
        ({"cache_dir": "/scratch/$(touch x)"}, "cache_dir"),
        ({"log_dir": "logs"}, "log_dir"),
        ({"images": {"vllm": "/images/vllm.sif\nrm -rf /"}}, "images"),
        ({"images": {"vllm; rm": "/images/vllm.sif"}}, "images"),
    ],
)
def test_api_settings_values_accepted_silently_before_are_refused(
    api_client: APIClient, body: dict[str, Any], field: str
) -> None:
    response = api_client.patch(f"{API}/settings/slurm", body, format="json")
    refused(response, field)
    stored = SlurmSettings.load()
    assert (stored.user, stored.jwt, stored.cache_dir) == ("", "", "")


def test_api_a_1mb_jwt_is_refused_without_echoing_it(api_client: APIClient) -> None:
    token = "eyJ" + "A" * MB
    response = api_client.patch(f"{API}/settings/slurm", {"jwt": token}, format="json")
    message = refused(response, "jwt")
    assert "at most" in message and "A" * 64 not in response.content.decode()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"api_base": "http://127.0.0.1:8000/v1\r\nX-Injected: 1"}, "api_base"),
        ({"api_base": "http://[::1/v1"}, "api_base"),
        ({"api_base": "http://169.254.169.254/latest"}, "api_base"),
        ({"api_base": "http://metadata.google.internal/v1"}, "api_base"),
        ({"api_key": "sk-abc\r\nX-Injected: 1"}, "api_key"),
        ({"api_key": "sk-clé"}, "api_key"),
        ({"name": "ep\nx"}, "name"),
    ],
)
def test_api_endpoint_values_are_refused(
    api_client: APIClient, body: dict[str, Any], field: str
) -> None:
    model = make_model(name="strict-static")
    url = f"{API}/models/{model.pk}/endpoints"
    created = api_client.post(url, {"name": "ep", "api_base": "http://127.0.0.1:8000/v1", **body})
    refused(created, field)
    endpoint = make_endpoint(model, name="ep2", api_base="http://127.0.0.1:8000/v1")
    changed = api_client.patch(f"{url}/{endpoint.pk}", body, format="json")
    refused(changed, field)
    endpoint.refresh_from_db()
    assert endpoint.api_base == "http://127.0.0.1:8000/v1" and endpoint.api_key == ""


def test_api_unknown_fields_are_a_400_naming_them(
    api_client: APIClient, slurm_model: Model
) -> None:
    response = api_client.patch(managed_url(slurm_model), {"replica": 3}, format="json")
    message = refused(response, "replica")
    assert "Did you mean" in message and "ignored" in message
    assert ManagedSpec.objects.get(model=slurm_model).target_replicas == 1


def test_api_options_answers_on_every_route_that_crashed(
    api_client: APIClient, slurm_model: Model
) -> None:
    for url in (f"{API}/settings/slurm", managed_url(slurm_model), managed_url(make_model())):
        response = api_client.options(url)
        assert response.status_code == 200, (url, response.content[:300])
        assert "name" in response.json()


@pytest.mark.parametrize(
    "body",
    [
        {"images": {"vllm": "/images/vllm\u0000.sif"}},
        {"images": {"vl\u0000lm": "/images/vllm.sif"}},
        {"setup": "module load x\u0000"},
    ],
)
def test_api_nul_in_settings_json_is_a_400(api_client: APIClient, body: dict[str, Any]) -> None:
    response = api_client.patch(f"{API}/settings/slurm", body, format="json")
    assert response.status_code == 400, response.content
    assert "NUL" in response.json()["error"]


def test_api_nul_in_launcher_spec_is_a_400(api_client: APIClient, slurm_model: Model) -> None:
    body = {"launcher_spec": {"inputs": {"model": "x\u0000"}}}
    response = api_client.patch(managed_url(slurm_model), body, format="json")
    assert response.status_code == 400
    assert "launcher_spec.inputs.model" in response.json()["error"]


def test_api_get_managed_of_an_unmanaged_model_is_a_404_not_null(api_client: APIClient) -> None:
    model = make_model(name="not-managed")
    response = api_client.get(managed_url(model))
    assert response.status_code == 404
    assert "no managed spec" in response.json()["error"]


def test_the_schema_documents_the_error_answers(api_client: APIClient) -> None:
    schema = api_client.get("/api/schema/?format=json").json()
    assert "Error" in schema["components"]["schemas"]
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            codes = set(operation["responses"])
            assert {"401", "403"} <= codes, (method, path)
            if "{" in path:
                assert "404" in codes, (method, path)
            if method in ("post", "put", "patch"):
                assert "400" in codes, (method, path)
    managed = schema["paths"]["/api/v1/models/{model_id}/managed"]["get"]["responses"]
    assert "null" not in json.dumps(managed["200"])


# ===================================================== every write route: NUL, CR/LF, huge, unknown


def _write_routes() -> list[tuple[str, str, str, dict[str, Any]]]:
    """(method, url, text field, a valid body) for every API route that takes a body."""
    static = make_model(name="route-static")
    slurm = make_slurm_model(name="route-slurm")
    endpoint = make_endpoint(static, name="route-ep", api_base="http://127.0.0.1:8000/v1")
    recipe = Recipe.objects.create(name="route-recipe", body=GOOD_RECIPE)
    ep_body = {"name": "ep-x", "api_base": "http://127.0.0.1:8001/v1"}
    return [
        ("post", f"{API}/models", "name", {"name": "new-model"}),
        ("put", f"{API}/models/{static.pk}", "name", {"name": "renamed"}),
        ("patch", f"{API}/models/{static.pk}", "upstream_model", {}),
        ("post", f"{API}/models/{static.pk}/endpoints", "name", ep_body),
        ("put", f"{API}/models/{static.pk}/endpoints/{endpoint.pk}", "name", ep_body),
        ("patch", f"{API}/models/{static.pk}/endpoints/{endpoint.pk}", "name", {}),
        ("put", f"{API}/models/{slurm.pk}/managed", "partition", dict(SPEC)),
        ("patch", f"{API}/models/{slurm.pk}/managed", "account", {}),
        ("patch", f"{API}/models/{slurm.pk}/managed/provision-error", "", {"error": "x"}),
        ("post", f"{API}/recipes", "name", {"name": "new-recipe", "body": GOOD_RECIPE}),
        ("put", f"{API}/recipes/{recipe.pk}", "name", {"name": "r2", "body": GOOD_RECIPE}),
        ("patch", f"{API}/recipes/{recipe.pk}", "author", {}),
        ("put", f"{API}/settings/slurm", "user", {}),
        ("patch", f"{API}/settings/slurm", "user", {}),
    ]


ROUTE_IDS = [
    "post-models",
    "put-model",
    "patch-model",
    "post-endpoints",
    "put-endpoint",
    "patch-endpoint",
    "put-managed",
    "patch-managed",
    "patch-provision-error",
    "post-recipes",
    "put-recipe",
    "patch-recipe",
    "put-settings",
    "patch-settings",
]


@pytest.mark.parametrize("index", range(len(ROUTE_IDS)), ids=ROUTE_IDS)
def test_every_write_route_refuses_nul_crlf_huge_and_unknown_fields(
    api_client: APIClient, index: int
) -> None:
    method, url, field, body = _write_routes()[index]
    send = getattr(api_client, method)

    unknown = send(url, {**body, "no_such_field": 1}, format="json")
    assert "no_such_field" in refused(unknown, "no_such_field")

    nul = send(
        url, {**body, **({field: "a\u0000b"} if field else {"error": "a\u0000b"})}, format="json"
    )
    assert nul.status_code == 400 and "NUL" in nul.json()["error"], nul.content[:300]

    raw_nul = send(url, b'{"x": "\x00"}', content_type="application/json")
    assert raw_nul.status_code == 400, raw_nul.content[:300]

    not_an_object = send(url, [1, 2], format="json")
    assert not_an_object.status_code == 400

    if field:
        crlf = send(url, {**body, field: "a\r\nX-Injected: 1"}, format="json")
        refused(crlf, field)
        huge = send(url, {**body, field: "h" * MB}, format="json")
        refused(huge, field)
    else:
        huge = send(url, {"error": "h" * MB}, format="json")
        refused(huge, "error")


# ============================================================== the admin and the commands too


def test_admin_spec_form_runs_the_partition_validator(
    admin_client: Any, slurm_model: Model
) -> None:
    spec = ManagedSpec.objects.get(model=slurm_model)
    url = f"/admin/core/managedspec/{spec.pk}/change/"
    page = admin_client.get(url)
    assert page.status_code == 200
    data = {
        "enabled": "on",
        "partition": "gpu;touch x",
        "gres": "gpu:-1",
        "nodes": "1000000000",
        "time_limit": "1:99:99",
        "constraints": "$(id)",
        "log_output_dir": "relative",
        "serving_port": "65530",
        "health_path": "/health",
        "target_replicas": "2",
        "min_replicas": "1",
        "max_job_failures": "0",
        "launch_command": "x",
        "launcher_spec": '{"a": "b\\u0000"}',
    }
    response = admin_client.post(url, data)
    assert response.status_code == 200  # the form again, with errors; not a 500, not saved
    errors = response.context["adminform"].form.errors
    for field in (
        "partition",
        "gres",
        "nodes",
        "time_limit",
        "constraints",
        "log_output_dir",
        "serving_port",
        "launcher_spec",
    ):
        assert field in errors, (field, errors)
    assert ManagedSpec.objects.get(pk=spec.pk).partition == "debug"


def test_admin_settings_form_refuses_hostile_values(admin_client: Any) -> None:
    SlurmSettings.load()
    response = admin_client.post(
        "/admin/core/slurmsettings/1/change/",
        {
            "slurmrestd_url": "http://[::1/v1",
            "user": "ob leth",
            "cache_dir": "cache",
            "images": '{"vllm": "/x\\u0000"}',
            "node_addresses": "{}",
            "new_jwt": "a\r\nb",
        },
    )
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    for field in ("slurmrestd_url", "user", "cache_dir", "images", "new_jwt"):
        assert field in errors, (field, errors)


def test_admin_endpoint_form_refuses_a_metadata_api_base(admin_client: Any) -> None:
    model = make_model(name="admin-static")
    response = admin_client.post(
        "/admin/core/endpoint/add/",
        {
            "model": str(model.pk),
            "name": "ep",
            "api_base": "http://169.254.169.254/latest/v1",
            "priority": "100",
            "weight": "100",
            "enabled": "on",
            "new_api_key": "sk-\u00e9",
        },
    )
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert "api_base" in errors and "new_api_key" in errors
    assert not Endpoint.objects.filter(model=model).exists()


def _run(*args: str) -> str:
    err = io.StringIO()
    call_command(*args, stdout=io.StringIO(), stderr=err)
    return err.getvalue()


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("--partition", "gpu;touch x"), "partition"),
        (("--set", "time_limit=99999999:00:00"), "time_limit"),
        (("--set", "gres=gpu:-1"), "gres"),
        (("--set", "constraints=$(id)"), "constraints"),
        (("--set", "log_output_dir=/tmp/a\nb"), "log_output_dir"),
        (("--set", "nodes=1000000000"), "nodes"),
    ],
)
def test_deploy_recipe_command_runs_the_same_validators(args: tuple[str, ...], field: str) -> None:
    with pytest.raises(CommandError) as caught:
        _run("deploy_recipe", str(DEMO_RECIPE), "--name", "cmd-strict", *args)
    assert f"{field}:" in str(caught.value)
    assert not Model.objects.filter(name="cmd-strict").exists()


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("--url", "http://h:6820\r\nX: 1", "--user", "obleth"), "slurmrestd_url"),
        (("--url", "http://[::1/v1", "--user", "obleth"), "slurmrestd_url"),
        (("--url", "http://h:6820", "--user", "ob\nleth"), "user"),
        (("--url", "http://h:6820", "--user", "obleth", "--log-dir", "logs"), "log_dir"),
    ],
)
def test_configure_slurm_command_runs_the_same_validators(
    args: tuple[str, ...], field: str
) -> None:
    with pytest.raises(CommandError) as caught:
        _run("configure_slurm", *args)
    assert f"{field}:" in str(caught.value)


def test_a_staff_session_gets_the_same_answers(db: Any, slurm_model: Model) -> None:
    """Session authentication goes through the same parsers and serializers."""
    user = get_user_model().objects.create_superuser("strict-admin", password="x")
    client = APIClient(enforce_csrf_checks=False)
    client.force_login(user)
    response = client.patch(managed_url(slurm_model), {"partition": "a b"}, format="json")
    refused(response, "partition")


def test_a_body_over_the_upload_limit_is_a_json_400(api_client: APIClient) -> None:
    model = make_model(name="big-body")
    response = api_client.patch(
        f"{API}/models/{model.pk}", {"upstream_model": "x" * (3 * MB)}, format="json"
    )
    assert response.status_code == 400
    assert "larger than" in response.json()["error"]


def test_a_body_that_is_not_json_is_a_400_in_the_error_shape(api_client: APIClient) -> None:
    model = make_model(name="bad-json")
    response = api_client.generic(
        "PATCH", f"{API}/models/{model.pk}", b"\xff\xfe{", content_type="application/json"
    )
    assert response.status_code == 400
    assert set(response.json()) == {"error"} and "JSON parse error" in response.json()["error"]


def test_an_unknown_api_url_is_json_401_without_credentials_and_404_with() -> None:
    anonymous = APIClient()
    response = anonymous.get(f"{API}/models/not-a-uuid")
    assert response.status_code == 401 and "error" in response.json()
    assert response["WWW-Authenticate"].startswith("Bearer")
    from django.conf import settings

    anonymous.credentials(HTTP_AUTHORIZATION=f"Bearer {settings.OBLETH_ADMIN_TOKEN}")
    response = anonymous.get(f"{API}/models/not-a-uuid")
    assert response.status_code == 404 and "No such route" in response.json()["error"]


def test_actions_without_a_body_refuse_fields(api_client: APIClient) -> None:
    from obleth.core.models import Replica

    model = make_slurm_model(name="no-body")
    replica = Replica.objects.create(model_id=model.pk, model_name=model.name, job_name="j")
    for url in (
        f"{API}/replicas/{replica.pk}/restart",
        f"{API}/models/{model.pk}/replicas/clear-lost",
        f"{API}/settings/slurm/test",
    ):
        response = api_client.post(url, {"force": True}, format="json")
        assert "takes no fields" in refused(response, "force"), url
    replica.refresh_from_db()
    assert replica.cancel_requested is False
    assert api_client.post(f"{API}/replicas/{replica.pk}/restart").status_code == 200
