"""The New deployment page in a real browser (Debian's chromium driven by Playwright, Django's
live server). Screenshots of every step go to tests/browser/artifacts/deploy/ (gitignored).

1. ``test_the_form_follows_the_partition_and_marks_changes``: the page's own JavaScript, on a
   cluster with accounts (faked discovery: the lab's Slurm 22.05 serves no slurmdbd data, so
   its account field is free text): the account list follows the partition, a changed field's
   source turns "you", Edit as YAML round-trips, Review, Launch opens the model's page.
2. ``test_an_operator_deploys_llamacpp_and_watches_its_replicas_become_healthy``: the issue's
   scenario on the REAL local Slurm: log in as an operator, New deployment from the Models
   list, pick the llama.cpp library recipe, change the replica count (1 -> 2) and an input
   (context 2048 -> 1024), Review (the rendered script and the JSON for slurmrestd), Launch,
   and the model's page shows its two replicas becoming healthy; then a real answer through
   the gateway. Nothing is faked: real slurmrestd, real jobs, the real llama-server built by
   ``scripts/real-engines install llamacpp`` in /opt/obleth-engines. The test thread runs the
   provisioner's passes, as the provisioner process would. When that engine is not built, the
   llama.cpp recipe is still reviewed in the browser, and the Launch step is done with the
   test-engine library recipe (recipes/library/test-engine.recipe) instead, on the same real Slurm.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.cache import cache

from obleth.core.models import Endpoint, ManagedSpec, Model, SlurmSettings
from tests.browser.conftest import ARTIFACTS, shot
from tests.deploy.conftest import cluster
from tests.e2e.conftest import provisioner_env  # noqa: F401  (the real-Slurm fixture)
from tests.plugins.gateway_client import GatewayClient

expect = pytest.importorskip("playwright.sync_api").expect

SHOTS = ARTIFACTS / "deploy"
ENGINES_DIR = "/opt/obleth-engines"
ROOT = Path(__file__).resolve().parents[2]


def _llamacpp_built() -> bool:
    """``scripts/real-engines status llamacpp``: the engine is installed and runs (a venv
    alone, as a build in progress leaves it, is not enough)."""
    status = subprocess.run(
        [str(ROOT / "scripts" / "real-engines"), "status", "llamacpp"],
        capture_output=True,
        check=False,
        env={"OBLETH_ENGINES_DIR": ENGINES_DIR, "PATH": "/usr/bin:/bin"},
    )
    return status.returncode == 0


def _job_logs(model: Model) -> str:
    """The stderr of the model's launches, to say why a launch failed."""
    from obleth.core.models import Launch

    out = []
    for launch in Launch.objects.filter(model_id=model.pk).order_by("submitted_at"):
        path = Path(launch.stderr_path.replace("%x", launch.job_name).replace("%j", launch.job_id))
        text = path.read_text(errors="replace")[-800:] if path.is_file() else "(no log)"
        out.append(f"job {launch.job_id} {launch.end_state}: {text.strip()}")
    return "\n".join(out)


PASSWORD = "op-deploy-pass-1"
ROWS_JS = """() => Array.from(document.querySelectorAll('#ck-replicas tr[data-replica]')).map(
  tr => ({id: tr.dataset.replica, state: tr.dataset.state, text: tr.innerText}))"""


def operator_user(name: str) -> None:
    user = get_user_model().objects.create_user(name, password=PASSWORD, is_staff=True)
    user.groups.add(Group.objects.get(name="operator"))


def log_in(page: Any, base: str, name: str, then: str) -> None:
    page.goto(f"{base}/admin/login/?next={then}")
    page.fill("#id_username", name)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(f"**{then}")


def clear_shots(prefix: str) -> None:
    """Old screenshots of this test go, so the folder shows this run only."""
    for old in SHOTS.glob(f"{prefix}-*"):
        old.unlink()


def csp_problems(console: list[str]) -> list[str]:
    return [line for line in console if "Content Security Policy" in line]


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(180)
def test_the_form_follows_the_partition_and_marks_changes(
    live_server: Any, browser_page: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Discovery is faked (tests.deploy.conftest.cluster(): partitions with AllowAccounts and
    DenyAccounts); slurmrestd is never called (the launch only writes the model)."""
    slurm = SlurmSettings.load()
    slurm.enabled = True
    slurm.slurmrestd_url = "http://slurm.invalid:6820"
    slurm.user = "obleth"
    slurm.api_version = "v0.0.40"
    slurm.log_dir = "/scratch/logs"
    slurm.save()
    data = cluster()
    data["partitions"][1]["is_default"] = True
    monkeypatch.setattr("obleth.core.services.discover_resources", lambda s, **kw: data)
    cache.clear()
    clear_shots("form")
    operator_user("op-form")
    page = browser_page
    console: list[str] = []
    page.on("console", lambda message: console.append(f"{message.type}: {message.text}"))
    log_in(page, live_server.url, "op-form", "/admin/core/model/deploy/")
    shot(page, "form-1-chooser", panel="", folder=SHOTS)

    page.select_option("#dp-recipe", "library:test-engine")
    page.click("#dp-load")
    page.wait_for_selector("#dp-form")
    # test-engine names partition 'debug', which this cluster lacks: the select says so.
    assert "debug — not on the cluster" in page.inner_text("#dp-ov-partition")
    page.select_option("#dp-ov-partition", "gpu")
    expect(page.locator("#dp-partition-fit")).to_contain_text("A replica fits on 2 nodes of 'gpu'")
    accounts = page.eval_on_selector_all("#dp-ov-account-list option", "os => os.map(o => o.value)")
    assert accounts == ["", "ml", "ops"]  # gpu takes only ml and ops
    assert page.locator("#dp-ov-account-list").is_visible()
    page.select_option("#dp-ov-account-list", "ml")
    page.select_option("#dp-ov-partition", "tiny")
    accounts = page.eval_on_selector_all("#dp-ov-account-list option", "os => os.map(o => o.value)")
    assert accounts == ["", "guests", "ml", "ops"]
    assert page.input_value("#dp-ov-account-list") == "ml"  # kept: tiny takes it too
    page.select_option("#dp-ov-partition", "gpu")
    badge = page.locator("#dp-ov-partition ~ .dp-src")
    assert badge.inner_text() == "you"
    page.fill("#dp-ov-replicas", "1")
    assert page.locator("#dp-ov-replicas ~ .dp-src").inner_text() == "you"
    page.fill("#dp-ov-mem", "256M")  # back to the recipe's value
    assert page.locator("#dp-ov-mem ~ .dp-src").inner_text() == "recipe"
    page.fill("#dp-ov-time_limit", "2:00:00")
    page.fill("#dp-name", "browser-demo")
    shot(page, "form-2-changed", panel="#dp-form", folder=SHOTS)

    page.click("#dp-to-yaml")
    page.wait_for_selector("#dp-yaml")
    document = page.input_value("#dp-yaml")
    assert "partition: gpu" in document and "account: ml" in document
    shot(page, "form-3-yaml", panel="#dp-form", folder=SHOTS)
    assert "\n  replicas: 1\n" in document
    page.fill("#dp-yaml", document.replace("\n  replicas: 1\n", "\n  replicas: 2\n"))
    page.click("#dp-to-form")
    page.wait_for_selector("#dp-ov-replicas")
    assert page.input_value("#dp-ov-replicas") == "2"
    assert page.input_value("#dp-ov-account-list") == "ml"

    # Over gpu's MaxTime: refused, named on the review and on the field; Launch is not offered.
    page.fill("#dp-ov-time_limit", "3-00:00:00")
    page.click("#dp-review-button")
    page.wait_for_selector("#dp-review")
    expect(page.locator("#dp-refusals")).to_contain_text("Walltime (time_limit): Walltime")
    expect(page.locator('ul.errorlist[data-field="ov.time_limit"]')).to_contain_text("MaxTime")
    assert page.locator("#dp-launch").is_disabled()
    shot(page, "form-4-refused", panel="#dp-review", folder=SHOTS)
    page.fill("#dp-ov-time_limit", "2:00:00")
    page.keyboard.press("Enter")  # Enter reviews (the form's first button), never launches
    page.wait_for_selector("#dp-review.dp-review-ok")
    assert not Model.objects.exists()
    assert "ready to launch" in page.inner_text("#dp-review")
    body = json.loads(page.inner_text("#dp-json"))
    assert body["job"]["partition"] == "gpu" and body["job"]["account"] == "ml"
    assert body["script"] == page.inner_text("#dp-script-out")
    shot(page, "form-5-review", panel="#dp-review", folder=SHOTS)
    page.click("#dp-launch")
    page.wait_for_url("**/admin/core/model/*/change/")
    model = Model.objects.get(name="browser-demo")
    spec = ManagedSpec.objects.get(model=model)
    assert (spec.partition, spec.account, spec.target_replicas) == ("gpu", "ml", 2)
    assert "Deployed browser-demo" in page.inner_text("#content-start, .messagelist")
    page.wait_for_selector("#ck-replicas")
    shot(page, "form-6-model-page", panel="", folder=SHOTS)
    assert not csp_problems(console), console


# ----------------------------------------------------------------------------- real Slurm


@pytest.mark.slurm
@pytest.mark.e2e
@pytest.mark.timeout(20 * 60)
def test_an_operator_deploys_llamacpp_and_watches_its_replicas_become_healthy(
    provisioner_env: Any,  # noqa: F811
    live_server: Any,
    browser_page: Any,
    settings: Any,
) -> None:

    from obleth.gateway import keys
    from provisioner.reconcile import run_pass

    built = _llamacpp_built()  # provisioner_env: Slurm settings, job prefix, log folder
    settings.OBLETH_COCKPIT_REFRESH_SECS = 1
    cache.clear()
    clear_shots("real")
    operator_user("op-deploy")
    # This helper's ports are 22000-22999: two replicas need two 8-port windows.
    port = 22100 + 16 * (uuid.uuid4().int % 50)
    name = f"smol-{uuid.uuid4().hex[:5]}"
    page = browser_page
    console: list[str] = []
    page.on("console", lambda message: console.append(f"{message.type}: {message.text}"))

    log_in(page, live_server.url, "op-deploy", "/admin/core/model/")
    page.click("a.obleth-deploy-link")  # New deployment, from the Models list
    page.wait_for_selector("#dp-recipe")
    shot(page, "real-1-chooser", panel="", folder=SHOTS)
    page.select_option("#dp-recipe", "library:llamacpp-smollm2")
    page.click("#dp-load")
    page.wait_for_selector("#dp-form")
    assert page.input_value("#dp-ov-replicas") == "1"
    assert page.locator("#dp-ov-replicas ~ .dp-src").inner_text() == "recipe"
    assert page.input_value("#dp-in-context") == "2048"
    # The real cluster: its default partition, with the fit of one replica.
    assert page.input_value("#dp-ov-partition") == "debug"
    assert page.locator("#dp-ov-partition ~ .dp-src").inner_text() == "cluster default"
    expect(page.locator("#dp-partition-fit")).to_contain_text("A replica fits on 1 node of 'debug'")
    shot(page, "real-2-form", panel="#dp-form", folder=SHOTS)

    page.fill("#dp-name", name)
    page.fill("#dp-ov-replicas", "2")
    page.fill("#dp-in-context", "1024")
    page.fill("#dp-in-engines_dir", ENGINES_DIR)
    page.fill("#dp-ov-time_limit", "30")
    page.fill("#dp-ov-serving_port", str(port))
    assert page.locator("#dp-ov-replicas ~ .dp-src").inner_text() == "you"
    assert page.locator("#dp-in-context ~ .dp-src").inner_text() == "you"
    shot(page, "real-3-changed", panel="#dp-form", folder=SHOTS)

    page.click("#dp-review-button")
    page.wait_for_selector("#dp-review")
    review = page.inner_text("#dp-review")
    assert "ready to launch" in review, review
    script = page.inner_text("#dp-script-out")
    assert "-c 1024" in script and f'ENGINES="{ENGINES_DIR}"' in script
    body = json.loads(page.inner_text("#dp-json"))
    assert body["script"] == script
    assert body["job"]["partition"] == "debug" and body["job"]["time_limit"] == 30
    assert "v0.0.38" in review  # the body's shape is the real slurmrestd's
    shot(page, "real-4-review", panel="#dp-review", folder=SHOTS)
    page.locator(".dp-side").screenshot(path=str(SHOTS / "real-4-review-side-by-side.png"))

    replicas = 2
    if not built:  # see the module docstring: launch the test engine instead
        page.goto(f"{live_server.url}/admin/core/model/deploy/?recipe=library:test-engine")
        page.fill("#dp-name", name)
        page.fill("#dp-ov-replicas", str(replicas))
        page.fill("#dp-ov-mem", "128M")
        page.fill("#dp-ov-time_limit", "30")
        page.fill("#dp-ov-serving_port", str(port))
        page.click("#dp-review-button")
        page.wait_for_selector("#dp-review")
        assert "ready to launch" in page.inner_text("#dp-review")
    page.click("#dp-launch")
    page.wait_for_url("**/admin/core/model/*/change/")
    model = Model.objects.get(name=name)
    spec = ManagedSpec.objects.get(model=model)
    assert spec.target_replicas == replicas
    assert spec.launcher_spec["recipe"]["library"] == (
        "llamacpp-smollm2" if built else "test-engine"
    )
    page.wait_for_selector("#ck-replicas")
    page.evaluate("window.__sameDocument = 'yes'")
    shot(page, "real-5-launched", folder=SHOTS)

    seen: dict[str, str] = {}
    deadline = time.monotonic() + 600
    rows: list[dict[str, str]] = []
    while True:
        run_pass(dispatch="inline")
        page.wait_for_timeout(1300)  # the panel refreshes itself every second
        rows = page.evaluate(ROWS_JS)
        for row in rows:
            if row["state"] not in seen:
                seen[row["state"]] = row["text"]
                shot(page, f"real-6-{len(seen)}-{row['state']}", folder=SHOTS)
        healthy = [r for r in rows if r["state"] == "healthy"]
        if len(healthy) == replicas:
            break
        spec.refresh_from_db()
        if spec.breaker_message or time.monotonic() > deadline:
            raise AssertionError(
                f"no {replicas} healthy replicas: {spec.breaker_message or 'timed out'}; "
                f"rows {rows!r}, seen {seen!r}; logs:\n{_job_logs(model)}"
            )
    shot(page, "real-7-healthy", folder=SHOTS)
    assert page.evaluate("window.__sameDocument") == "yes"  # the panel refreshed by itself
    assert "starting" in seen or "pending" in seen, seen
    endpoints = Endpoint.objects.filter(model=model)
    assert endpoints.count() == replicas
    assert all(re.search(r":22[0-9]{3}/v1$", e.api_base) for e in endpoints), endpoints

    # A real answer through obleth's gateway (closed: a gateway key).
    # The gateway service, in this process (tests/plugins/gateway_client.py).
    question = "What is the capital of France? Answer in one sentence."
    with GatewayClient(HTTP_AUTHORIZATION=f"Bearer {keys.create_key('browser-e2e').secret}") as gw:
        answer = gw.post(
            "/v1/chat/completions",
            data=json.dumps(
                {"model": name, "messages": [{"role": "user", "content": question}]}
                | {"max_tokens": 16}
            ),
        )
    assert answer.status_code == 200, answer.content
    content = answer.json()["choices"][0]["message"]["content"]
    if built:
        assert "Paris" in content, content
    Path(SHOTS / "real-answer.txt").write_text(content)
    assert not csp_problems(console), console
