"""The admin's New deployment page through Django's test client: the recipe list, the form with
every value's source, Review (the service's dry run), Launch, YAML, permissions, hostile values.

What is faked: slurmrestd. Discovery answers from tests.deploy.conftest.cluster() (the shape
``discover_resources`` returns); the submit body is built by the real adapters, the page by
the real views, templates and deploy service. The real cluster and a real browser are in
tests/browser/test_deploy_browser.py.
"""

from __future__ import annotations

import html
import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.cache import cache
from django.test import Client
from django.urls import reverse

from obleth.core.models import Launch, ManagedSpec, Model, Recipe, SlurmSettings
from tests.deploy.conftest import cluster

pytestmark = pytest.mark.django_db
URL = "/admin/core/model/deploy/"
LLAMA = "library:llamacpp-smollm2"
LLAMA_TEXT = Path(settings.BASE_DIR, "recipes", "library", "llamacpp-smollm2.recipe").read_text()


@pytest.fixture(autouse=True)
def _fresh_discovery_cache() -> Iterator[None]:
    cache.clear()
    yield
    cache.clear()


def client_for(role: str | None) -> Client:
    user = get_user_model().objects.create_user(
        username=f"u-{role}-{uuid.uuid4().hex[:6]}", password="x", is_staff=True
    )
    if role:
        user.groups.add(Group.objects.get(name=role))
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def operator() -> Client:
    return client_for("operator")


@pytest.fixture
def admin_client() -> Client:
    return client_for("admin")


@pytest.fixture
def slurm_on(monkeypatch: pytest.MonkeyPatch) -> SlurmSettings:
    """Slurm enabled on v0.0.40, discovery answering cluster() with 'cpu' as the default."""
    slurm = SlurmSettings.load()
    slurm.enabled = True
    slurm.slurmrestd_url = "http://slurm.invalid:6820"
    slurm.user = "obleth"
    slurm.api_version = "v0.0.40"
    slurm.log_dir = "/scratch/logs"
    slurm.cache_dir = "/scratch/cache"
    slurm.save()
    data = cluster()
    data["partitions"][1]["is_default"] = True
    monkeypatch.setattr("obleth.core.services.discover_resources", lambda s, **kw: data)
    return slurm


# ----------------------------------------------------------------------------- helpers


def text(page: Any) -> str:
    """The page as text (tags dropped, entities decoded)."""
    body = page.content.decode()
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", body)))


def form_fields(page: Any) -> dict[str, str]:
    """What a browser would post from the deploy form: inputs, selects, textareas, checkboxes
    (checked ones only), disabled fields left out."""
    body = page.content.decode()
    form = body[body.index('id="dp-form"') :]
    form = form[: form.index("</form>")]
    fields: dict[str, str] = {}
    for tag in re.finditer(r"<input\b[^>]*>", form):
        attrs = dict(re.findall(r'(\w[\w-]*)="([^"]*)"', tag.group(0)))
        if "name" not in attrs or " disabled" in tag.group(0):
            continue
        if attrs.get("type") == "checkbox" and " checked" not in tag.group(0):
            continue
        fields[attrs["name"]] = html.unescape(attrs.get("value", ""))
    for tag in re.finditer(r"<textarea\b([^>]*)>(.*?)</textarea>", form, re.S):
        attrs = dict(re.findall(r'(\w[\w-]*)="([^"]*)"', tag.group(1)))
        fields[attrs["name"]] = html.unescape(tag.group(2))
    for tag in re.finditer(r"<select\b([^>]*)>(.*?)</select>", form, re.S):
        if " disabled" in tag.group(1):
            continue
        attrs = dict(re.findall(r'(\w[\w-]*)="([^"]*)"', tag.group(1)))
        chosen = re.search(r'<option value="([^"]*)"[^>]*\bselected', tag.group(2)) or re.search(
            r'<option value="([^"]*)"', tag.group(2)
        )
        fields[attrs["name"]] = html.unescape(chosen.group(1)) if chosen else ""
    fields.pop("action", None)
    fields.pop("csrfmiddlewaretoken", None)
    return fields


def source_of(page: Any, field: str) -> str:
    """The source badge shown next to a form field."""
    body = page.content.decode()
    at = body.index(f'name="{field}"')
    badge = re.search(r'class="dp-src" data-source="([^"]*)"', body[at:])
    assert badge, field
    return badge.group(1)


def field_errors(page: Any) -> dict[str, list[str]]:
    body = page.content.decode()
    out: dict[str, list[str]] = {}
    for match in re.finditer(r'<ul class="errorlist" data-field="([^"]+)">(.*?)</ul>', body, re.S):
        out[match.group(1)] = [
            html.unescape(m) for m in re.findall(r"<li>(.*?)</li>", match.group(2), re.S)
        ]
    return out


def start(client: Client, recipe: str = LLAMA, **query: str) -> tuple[Any, dict[str, str]]:
    page = client.get(URL, {"recipe": recipe, **query})
    assert page.status_code == 200, text(page)[:2000]
    return page, form_fields(page)


def post(client: Client, fields: dict[str, str], action: str = "review", **changes: str) -> Any:
    return client.post(URL, {**fields, **changes, "action": action})


# ----------------------------------------------------------------------------- links, list


def test_models_list_recipe_pages_and_library_link_to_the_deploy_page(operator: Client) -> None:
    models = operator.get(reverse("admin:core_model_changelist"))
    assert f'href="{URL}"' in models.content.decode()
    assert "New deployment" in text(models)
    saved = Recipe.objects.create(name="my smol", body=LLAMA_TEXT)
    recipe_page = operator.get(reverse("admin:core_recipe_change", args=[saved.pk]))
    assert f"{URL}?recipe=saved:{saved.pk}" in recipe_page.content.decode()
    recipes = operator.get(reverse("admin:core_recipe_changelist"))
    assert reverse("core_recipe_library") in recipes.content.decode()
    library = operator.get(reverse("core_recipe_library"))
    assert library.status_code == 200
    assert f"{URL}?recipe=library:llamacpp-smollm2" in library.content.decode()
    assert "llama.cpp SmolLM2-135M (CPU)" in text(library)


def test_a_viewer_sees_no_link_and_gets_403(operator: Client) -> None:
    viewer = client_for("viewer")
    assert "New deployment" not in text(viewer.get(reverse("admin:core_model_changelist")))
    assert viewer.get(URL).status_code == 403
    assert viewer.get(URL, {"recipe": LLAMA}).status_code == 403
    fields = start(operator)[1]
    assert post(viewer, fields).status_code == 403
    assert post(viewer, fields, "launch").status_code == 403
    assert not Model.objects.exists()
    library = viewer.get(reverse("core_recipe_library"))
    assert library.status_code == 200 and ">Deploy<" not in library.content.decode()
    assert client_for(None).get(URL).status_code == 403  # staff without a role
    anonymous = Client().get(URL)
    assert anonymous.status_code == 302 and "/admin/login/" in anonymous["Location"]


def test_the_list_holds_saved_and_library_recipes_each_marked(operator: Client) -> None:
    Recipe.objects.create(name="my smol", body=LLAMA_TEXT)
    page = operator.get(URL)
    assert page.status_code == 200
    body = page.content.decode()
    assert '<optgroup label="Saved recipes">' in body
    assert '<optgroup label="Library recipes">' in body
    shown = text(page)
    assert "my smol (saved, llamacpp)" in shown
    assert "llama.cpp SmolLM2-135M (CPU) (library, llamacpp)" in shown
    assert "Test engine (demo) (library, test)" in shown


# ----------------------------------------------------------------------------- the form


def test_the_form_has_every_field_with_its_source(
    operator: Client, slurm_on: SlurmSettings
) -> None:
    page, fields = start(operator)
    for key in (
        "partition", "account", "qos", "time_limit", "nodes", "gpus", "cpus", "mem",
        "constraints", "exclude", "log_output_dir", "replicas", "max_job_failures",
        "health_check", "env",
    ):  # fmt: skip
        assert f"ov.{key}" in fields, key
    assert {"in.engines_dir", "in.context", "in.extra"} <= set(fields)
    assert fields["name"] == "smollm2-135m-instruct"
    assert fields["ov.mem"] == "1G" and source_of(page, "ov.mem") == "recipe"
    assert fields["ov.cpus"] == "1" and source_of(page, "ov.cpus") == "recipe"  # its #SBATCH
    assert fields["ov.partition"] == "cpu"
    assert source_of(page, "ov.partition") == "cluster default"
    assert fields["ov.log_output_dir"] == "/scratch/logs"
    assert source_of(page, "ov.log_output_dir") == "cluster default"
    assert source_of(page, "ov.qos") == "not set"
    assert fields["in.context"] == "2048" and source_of(page, "in.context") == "recipe"
    assert fields["script"].startswith("#!/bin/bash -l\n#SBATCH --cpus-per-task=1")
    assert "{{context}}" in fields["script"]  # the recipe's script, tokens and all


def test_the_partition_field_shows_fit_and_idle_nodes(
    operator: Client, slurm_on: SlurmSettings
) -> None:
    page, _ = start(operator)
    shown = text(page)
    assert "cpu — fits on 2 nodes, 1 idle" in shown
    assert "gpu — fits on 2 nodes, 0 idle" in shown  # gpu02 is down: fits, not idle
    assert "A replica fits on 2 nodes of 'cpu'; 1 is idle now" in shown
    # Too big for the 2-CPU node of 'tiny' and for 'cpu': the labels say so.
    page, fields = start(operator)
    review = post(operator, fields, **{"ov.cpus": "20"})
    shown = text(review)
    assert "tiny — does not fit" in shown and "cpu — does not fit" in shown
    assert "gpu — fits on 2 nodes" in shown


def test_the_account_field_offers_only_what_the_partition_allows(
    operator: Client, slurm_on: SlurmSettings
) -> None:
    _, fields = start(operator)
    page = post(operator, fields, **{"ov.partition": "gpu"})
    body = page.content.decode()
    select = re.search(
        r'<select name="ov.account" id="dp-ov-account-list"[^>]*>(.*?)</select>', body, re.S
    )
    assert select, body
    offered = re.findall(r'<option value="([^"]*)"', select.group(1))
    assert offered == ["", "ml", "ops"]  # 'guests' exists but gpu takes only ml and ops
    # cpu denies guests: every other account is offered.
    page = post(operator, fields, **{"ov.partition": "cpu"})
    select = re.search(r'id="dp-ov-account-list"[^>]*>(.*?)</select>', page.content.decode(), re.S)
    assert select and re.findall(r'<option value="([^"]*)"', select.group(1)) == ["", "ml", "ops"]
    data = json.loads(re.search(r'id="dp-partitions"[^>]*>(.*?)</script>', body, re.S).group(1))
    assert data["gpu"]["accounts"] == ["ml", "ops"] and data["tiny"]["accounts"] == [
        "guests",
        "ml",
        "ops",
    ]


# ----------------------------------------------------------------------------- review


def test_review_shows_the_script_and_the_slurm_json_side_by_side(
    operator: Client, slurm_on: SlurmSettings
) -> None:
    _, fields = start(operator)
    page = post(operator, fields, **{"ov.replicas": "2", "in.context": "1024"})
    assert page.status_code == 200, field_errors(page)
    body = page.content.decode()
    script = html.unescape(
        re.search(r'<pre id="dp-script-out"[^>]*>(.*?)</pre>', body, re.S).group(1)
    )
    job_json = json.loads(
        html.unescape(re.search(r'<pre id="dp-json"[^>]*>(.*?)</pre>', body, re.S).group(1))
    )
    assert script.startswith("#!/bin/bash -l")
    assert "-c 1024" in script and "OBLETH_SERVING_PORT" in script
    assert job_json["script"] == script  # the JSON carries exactly the script shown
    assert job_json["job"]["partition"] == "cpu"
    assert "(v0.0.40, POST /slurm/v0.0.40/job/submit)" in text(page)
    assert "ready to launch" in text(page)
    assert source_of(page, "ov.replicas") == "you" and source_of(page, "in.context") == "you"
    assert source_of(page, "ov.mem") == "recipe"
    assert not Model.objects.exists()  # a review writes nothing
    # The same request through the API answers the same script and body (one service).
    api = client_for("operator")
    answer = api.post(
        "/api/v1/deployments",
        {
            "library": "llamacpp-smollm2",
            "name": fields["name"],
            "inputs": {"context": "1024"},
            "overrides": {"replicas": "2"},
            "dry_run": True,
        },
        content_type="application/json",
    ).json()
    assert answer["script"] == script
    assert answer["slurm"]["body"] == job_json


def test_refusals_name_their_field_on_the_review_and_the_form(
    operator: Client, slurm_on: SlurmSettings
) -> None:
    _, fields = start(operator)
    page = post(
        operator,
        fields,
        **{"ov.partition": "gpu", "ov.account": "guests", "ov.time_limit": "3-00:00:00"},
    )
    assert page.status_code == 200
    shown = text(page)
    assert "refused" in shown
    refusals = re.search(r'<ul id="dp-refusals">(.*?)</ul>', page.content.decode(), re.S)
    assert refusals, shown
    items = [
        html.unescape(re.sub(r"<[^>]+>", "", li))
        for li in re.findall(r"<li>(.*?)</li>", refusals.group(1), re.S)
    ]
    assert items == [
        "Account (account): Partition 'gpu' takes only accounts ml, ops (AllowAccounts), not "
        "'guests'. ",
        "Walltime (time_limit): Walltime 3-00:00:00 is over partition 'gpu''s limit of "
        "2-00:00:00 (MaxTime); give at most 2-00:00:00. ",
    ]
    errors = field_errors(page)
    assert any("AllowAccounts" in t for t in errors["ov.account"])
    assert any("MaxTime" in t for t in errors["ov.time_limit"])
    assert 'value="launch"' not in page.content.decode()  # no Launch while refused


def test_invalid_input_shows_the_field_error_and_loses_nothing(
    operator: Client, slurm_on: SlurmSettings
) -> None:
    _, fields = start(operator)
    changed = {
        "ov.replicas": "3",
        "in.context": "lots",
        "ov.env": "FOO=bar",
        "name": "my-smol",
        "in.extra": "--metrics",
    }
    page = post(operator, fields, **changed)
    assert page.status_code == 400
    assert field_errors(page)["in.context"] == ["Context length must be a number, not 'lots'."]
    kept = form_fields(page)
    for key, value in changed.items():
        assert kept[key] == value, key
    assert source_of(page, "ov.replicas") == "you"
    assert not Model.objects.exists()


# ----------------------------------------------------------------------------- launch


def test_launch_after_review_creates_the_model_and_opens_its_page(
    operator: Client, slurm_on: SlurmSettings
) -> None:
    _, fields = start(operator)
    review = post(operator, fields, **{"ov.replicas": "2", "in.context": "1024", "name": "smol"})
    assert "ready to launch" in text(review)
    launched = post(operator, form_fields(review), "launch")
    assert launched.status_code == 302
    model = Model.objects.get(name="smol")
    assert launched["Location"] == reverse("admin:core_model_change", args=[model.pk])
    spec = ManagedSpec.objects.get(model=model)
    assert spec.target_replicas == 2 and spec.partition == "cpu" and spec.mem == "1G"
    assert "-c 1024" in spec.script_body
    assert spec.launcher_spec["sources"]["target_replicas"] == "override"
    assert spec.launcher_spec["sources"]["mem"] == "recipe"  # unchanged: still the recipe's
    page = operator.get(launched["Location"])
    assert "Deployed smol from 'llama.cpp SmolLM2-135M (CPU)'" in text(page)
    assert 'id="obleth-cockpit"' in page.content.decode()  # the live replica panel


def test_launch_of_a_changed_form_reviews_it_first(
    operator: Client, slurm_on: SlurmSettings
) -> None:
    _, fields = start(operator)
    review = post(operator, fields, **{"name": "smol"})
    changed = {**form_fields(review), "ov.replicas": "4"}
    page = post(operator, changed, "launch")
    assert page.status_code == 200
    assert "The form changed since the last review" in text(page)
    assert not Model.objects.exists()
    assert post(operator, form_fields(page), "launch").status_code == 302
    assert ManagedSpec.objects.get(model__name="smol").target_replicas == 4


def test_a_taken_name_is_refused_on_the_name_field(
    operator: Client, slurm_on: SlurmSettings
) -> None:
    Model.objects.create(name="smol")
    _, fields = start(operator)
    page = post(operator, fields, name="smol")
    assert page.status_code == 400
    assert field_errors(page)["name"] == [
        "A model named 'smol' already exists; choose another name."
    ]


# ----------------------------------------------------------------------------- hostile values


HOSTILE = [
    ("in.extra", "--metrics\n#!/bin/sh reboot", "in.extra", "line break"),
    ("in.extra", "a\x00b", "in.extra", "NUL"),
    ("in.engines_dir", "/opt\r\nrm -rf /", "in.engines_dir", "line break"),
    ("in.context", "2048; rm -rf /", "in.context", "must be a number"),
    ("in.context", "$(reboot)", "in.context", "must be a number"),
    ("in.extra", "x" * 5000, "in.extra", "at most 4096"),
    ("in.extra", "--x #SBATCH --qos=high", "in.extra", "#SBATCH"),
    ("ov.partition", "cpu;reboot", "ov.partition", "partition"),
    ("ov.mem", "1G\n#SBATCH --exclusive", "ov.mem", "line break"),
    ("ov.account", "ml\x00", "ov.account", "NUL"),
    ("ov.replicas", "2`reboot`", "ov.replicas", "whole number"),
    ("ov.env", "PATH2=$(reboot)\nSLURM_JOB_ID=1", "ov.env", "SLURM_"),
    ("ov.env", "FOO=\x00", "ov.env", "NUL"),
    ("ov.env", "not a pair", "ov.env", "NAME=value"),
    ("name", "smol\nx", "name", "line break"),
    ("name", "y" * 300, "name", "200"),
    ("save_as_recipe", "s\x07", "save_as_recipe", "printable"),
]


@pytest.mark.parametrize(("field", "value", "error_field", "says"), HOSTILE)
@pytest.mark.parametrize("action", ["review", "launch"])
def test_hostile_values_are_refused_naming_the_field(
    admin_client: Client,
    slurm_on: SlurmSettings,
    field: str,
    value: str,
    error_field: str,
    says: str,
    action: str,
) -> None:
    _, fields = start(admin_client)
    page = post(admin_client, fields, action, **{field: value})
    assert page.status_code == 400, text(page)[:1500]
    errors = field_errors(page)
    assert error_field in errors, errors
    assert any(says.lower() in t.lower() for t in errors[error_field]), errors[error_field]
    assert not Model.objects.exists()
    assert not Recipe.objects.exists()


def test_shell_metacharacters_in_a_text_input_stay_data(
    operator: Client, slurm_on: SlurmSettings
) -> None:
    """A text input is free text: $(...), ;, | and quotes are taken, but land in the script as
    a single-quoted variable, never as code (recipes.shell)."""
    _, fields = start(operator)
    page = post(operator, fields, **{"in.extra": "--metrics; $(reboot) | `id` 'x'"})
    assert page.status_code == 200, field_errors(page)
    script = html.unescape(
        re.search(r'<pre id="dp-script-out"[^>]*>(.*?)</pre>', page.content.decode(), re.S).group(1)
    )
    assert "OBLETH_INPUT_extra=('--metrics;' '$(reboot)' '|' '`id`' x)" in script
    assert '"${OBLETH_INPUT_extra[@]}"' in script
    assert "\n$(reboot)" not in script and " $(reboot) " not in script


def test_a_huge_post_is_a_400_not_a_500(operator: Client, slurm_on: SlurmSettings) -> None:
    _, fields = start(operator)
    page = post(operator, fields, **{"in.extra": "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 10)})
    assert page.status_code == 400


@pytest.mark.parametrize(
    "changes",
    [
        {"source": "library:../../etc/passwd"},
        {"source": "saved:not-a-uuid"},
        {"source": f"saved:{uuid.uuid4()}"},
        {"source": ""},
        {"base": "{not json"},
        {"base": '{"inputs": {"context": "x"}, "overrides": 5, "input_types": []}'},
        {"mode": "yaml", "yaml": "!!python/object:os.system ['reboot']"},
        {"apply": "{not json"},
        {"apply": '{"partition": ["a", "b"]}'},
        {"action": "destroy"},
    ],
)
def test_tampered_hidden_fields_never_give_a_500(
    operator: Client, slurm_on: SlurmSettings, changes: dict[str, str]
) -> None:
    _, fields = start(operator)
    page = operator.post(URL, {**fields, "action": "review", **changes})
    assert page.status_code in (200, 400), page.status_code
    assert not Model.objects.exists()


# ----------------------------------------------------------------------------- YAML


def test_edit_as_yaml_round_trips_and_reviews(operator: Client, slurm_on: SlurmSettings) -> None:
    page, fields = start(operator)
    yaml_page = post(operator, {**fields, "ov.replicas": "2"}, "to_yaml")
    assert yaml_page.status_code == 200
    yaml_fields = form_fields(yaml_page)
    document = yaml_fields["yaml"]
    assert "name: smollm2-135m-instruct" in document
    assert "  replicas: 2\n" in document and "  mem: 1G\n" in document
    assert "  context: '2048'\n" in document
    assert "ov.replicas" not in yaml_fields  # the YAML replaces the fields
    # Back to the form: the same values, the same sources.
    back = post(operator, yaml_fields, "to_form")
    again = form_fields(back)
    for key, value in fields.items():
        if key not in ("mode", "ov.replicas"):
            assert again[key] == value, key
    assert again["ov.replicas"] == "2" and source_of(back, "ov.replicas") == "you"
    assert source_of(back, "ov.mem") == "recipe"
    # Edited YAML goes straight to Review.
    edited = document.replace("  mem: 1G\n", "  mem: 2G\n").replace("'2048'", "'512'")
    review = post(operator, {**yaml_fields, "yaml": edited})
    assert review.status_code == 200, field_errors(review)
    shown = text(review)
    assert "ready to launch" in shown and "-c 512" in shown
    launched = post(operator, form_fields(review), "launch")
    assert launched.status_code == 302
    spec = ManagedSpec.objects.get(model__name="smollm2-135m-instruct")
    assert (spec.mem, spec.target_replicas) == ("2G", 2)


@pytest.mark.parametrize(
    ("document", "says"),
    [
        ("name: [unclosed", "Not valid YAML"),
        ("- a list", "Give a mapping"),
        ("colour: red", "Unknown key 'colour'"),
        ("inputs: {nope: 1}", "inputs.nope is not an input of this recipe"),
        ("overrides: {gpu: 1}", "overrides.gpu is not a field here"),
        ("overrides: {partition: [a, b]}", "overrides.partition: give one value"),
        ("overrides: {env: [A]}", "overrides.env: give a mapping"),
        ("a: &x [1]\nb: *x", "anchors and aliases"),
    ],
)
def test_bad_yaml_is_refused_on_the_yaml_field_and_kept(
    operator: Client, slurm_on: SlurmSettings, document: str, says: str
) -> None:
    _, fields = start(operator)
    yaml_fields = form_fields(post(operator, fields, "to_yaml"))
    page = post(operator, {**yaml_fields, "yaml": document})
    assert page.status_code == 400
    assert any(says in t for t in field_errors(page)["yaml"]), field_errors(page)
    assert form_fields(page)["yaml"] == document


# ----------------------------------------------------------------------------- script, recipe


def test_an_operator_cannot_change_the_script_but_an_admin_can(
    operator: Client, admin_client: Client, slurm_on: SlurmSettings
) -> None:
    page, fields = start(operator)
    assert (
        'id="dp-script" rows="18" cols="100" class="dp-code-input" spellcheck="false" readonly'
        in (page.content.decode())
    )
    edited = fields["script"].replace("set -euo pipefail", "set -euo pipefail\necho edited")
    refused = post(operator, fields, script=edited)
    assert refused.status_code == 403
    assert "core.change_launch_script" in field_errors(refused)["script"][0]
    assert form_fields(refused)["script"] == edited  # kept, to undo by hand
    _, fields = start(admin_client)
    review = post(admin_client, fields, script=edited.replace("\n", "\r\n"))  # as browsers post
    assert review.status_code == 200, field_errors(review)
    assert "echo edited" in text(review)
    assert source_of(review, "script") == "you"


def test_also_save_as_recipe_saves_it_with_the_launch(
    admin_client: Client, operator: Client, slurm_on: SlurmSettings
) -> None:
    page, _ = start(operator)
    assert 'name="save_as_recipe"' not in page.content.decode()  # operators don't save recipes
    _, fields = start(admin_client)
    review = post(admin_client, fields, save_as_recipe="smol, 4 replicas", **{"ov.replicas": "4"})
    assert 'The recipe "Also save as recipe" writes: smol, 4 replicas' in text(review)
    launched = post(admin_client, form_fields(review), "launch")
    assert launched.status_code == 302
    saved = Recipe.objects.get(name="smol, 4 replicas")
    assert "target_replicas: 4" in saved.body
    assert ManagedSpec.objects.get(recipe=saved).target_replicas == 4
    # ...and it is in the list, marked saved, and deploys from its own page's link.
    page, fields = start(operator, f"saved:{saved.pk}")
    assert fields["ov.replicas"] == "4" and source_of(page, "ov.replicas") == "recipe"
    assert f"saved:{saved.pk}" in fields["source"]


# ----------------------------------------------------------------------------- learned, HF


def test_a_learned_suggestion_is_shown_and_applied_only_when_picked(
    operator: Client, slurm_on: SlurmSettings
) -> None:
    """Three of the recipe's last launches hit their 30-minute walltime (TIMEOUT)."""
    from django.utils import timezone

    from tests.plugins.factories import make_slurm_model

    old = make_slurm_model(
        name="old-smol", spec={"launcher_spec": {"recipe": {"library": "llamacpp-smollm2"}}}
    )
    now = timezone.now()
    for n in range(3):
        Launch.objects.create(
            id=uuid.uuid4(),
            model_id=old.pk,
            model_name=old.name,
            job_id=str(100 + n),
            job_name=f"j{n}",
            partition="cpu",
            time_limit="30",
            submitted_at=now,
            started_at=now,
            ended_at=now,
            end_state="TIMEOUT",
        )
    page, fields = start(operator)
    shown = text(page)
    assert "Learned from past launches" in shown and "hit" in shown
    assert fields["ov.time_limit"] == ""  # not applied until picked
    button = re.search(r'<button type="submit" name="apply" value="([^"]*)"', page.content.decode())
    assert button, shown
    picked = operator.post(URL, {**fields, "apply": html.unescape(button.group(1))})
    assert picked.status_code == 200
    assert (
        form_fields(picked)["ov.time_limit"]
        == json.loads(html.unescape(button.group(1)))["time_limit"]
    )
    assert source_of(picked, "ov.time_limit") == "you"


def test_a_hugging_face_repo_preselects_the_library_recipe(
    operator: Client, slurm_on: SlurmSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hub is faked with the recorded answer in tests/deploy/hub (not reachable here)."""
    from huggingface_hub import HfApi
    from huggingface_hub.hf_api import ModelInfo

    hub = Path(settings.BASE_DIR, "tests", "deploy", "hub")
    recorded = json.loads((hub / "HuggingFaceTB--SmolLM2-135M-Instruct.json").read_text())
    monkeypatch.setattr(HfApi, "model_info", lambda self, repo, **kw: ModelInfo(**recorded))
    page = operator.get(URL, {"hf_repo": "HuggingFaceTB/SmolLM2-135M-Instruct"})
    assert page.status_code == 200, text(page)[:1000]
    fields = form_fields(page)
    assert fields["source"] == "library:vllm"
    assert fields["hf_repo"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert fields["in.model"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert source_of(page, "in.model") == "hugging face"
    assert fields["name"] == "smollm2-135m-instruct"


def test_an_unreachable_hub_says_why_and_offers_the_list(
    operator: Client, slurm_on: SlurmSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import HfApi

    def down(self: Any, repo: str, **kw: Any) -> Any:
        raise ConnectionError("hub unreachable")

    monkeypatch.setattr(HfApi, "model_info", down)
    page = operator.get(URL, {"hf_repo": "HuggingFaceTB/SmolLM2-135M-Instruct"})
    assert page.status_code == 400
    shown = text(page)
    assert "could not be read (ConnectionError: hub unreachable)" in shown
    assert "Enter the engine by hand: pick a library recipe" in shown
    assert '<optgroup label="Library recipes">' in page.content.decode()
    assert 'value="HuggingFaceTB/SmolLM2-135M-Instruct"' in page.content.decode()  # kept


def test_a_recipe_that_needs_values_shows_them_marked(operator: Client) -> None:
    """vLLM needs a model and an image; with Slurm off nothing is discovered: the form still
    shows the recipe's values (header, #SBATCH) and marks what to fill in."""
    page, fields = start(operator, "library:vllm")
    errors = field_errors(page)
    assert errors["in.model"] == ["Hugging Face model is needed: enter a value."]
    assert "in.image" in errors
    assert fields["ov.replicas"] == "1" and source_of(page, "ov.replicas") == "recipe"
    assert "Fill in what is marked, then Review." in text(page)
