"""The model page in a real browser: an operator logs in, opens a model, watches the replica
panel refresh by itself while the replica's row changes in the database, and opens a job log.

Real: Django's live server, the admin login form, the static JavaScript, chromium. The
replica rows are written by the test (standing in for the provisioner's passes) so each state
is seen for sure; the full scenario against the real Slurm is in tests/e2e/test_cockpit_e2e.py.
"""

from __future__ import annotations

import datetime as dt
import uuid
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.utils import timezone

from obleth.core.models import Endpoint, Launch, Replica
from tests.browser.conftest import shot
from tests.plugins.factories import make_slurm_model

expect = pytest.importorskip("playwright.sync_api").expect

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def test_operator_watches_the_replica_panel_refresh_and_reads_a_log(
    live_server: Any, browser_page: Any, settings: Any, tmp_path: Path
) -> None:
    settings.OBLETH_COCKPIT_REFRESH_SECS = 1
    settings.OBLETH_JOB_LOGS_READABLE = [str(tmp_path)]
    user = get_user_model().objects.create_user("op-browser", password="op-pass-123", is_staff=True)
    user.groups.add(Group.objects.get(name="operator"))
    model = make_slurm_model(name="browser-model", spec={"target_replicas": 1})
    replica = Replica.objects.create(
        model_id=model.pk,
        model_name=model.name,
        job_name="obt-browser",
        job_id="3141",
        port_base=18000,
        slurm_state="PENDING",
        slurm_reason="Resources",
        last_message="PENDING \u2014 Resources",
        submitted_at=timezone.now() - dt.timedelta(seconds=40),
    )
    Launch.objects.create(
        id=replica.pk,
        model_id=model.pk,
        model_name=model.name,
        job_id="3141",
        job_name="obt-browser",
        stdout_path=f"{tmp_path}/%x-%j.out",
        stderr_path=f"{tmp_path}/%x-%j.err",
    )
    (tmp_path / "obt-browser-3141.out").write_text(
        "replica of browser-model on node1 port 18000\n<script id='xss2'></script>\n"
        "loading weights 42%\n"
    )

    page = browser_page
    console: list[str] = []
    page.on("console", lambda message: console.append(f"{message.type}: {message.text}"))
    change = f"/admin/core/model/{model.pk}/change/"
    page.goto(f"{live_server.url}/admin/login/?next={change}")
    page.fill("#id_username", "op-browser")
    page.fill("#id_password", "op-pass-123")
    page.click("input[type=submit]")
    page.wait_for_url(f"**{change}")
    row = page.locator(f'#ck-replicas tr[data-replica="{replica.pk}"]')
    row.wait_for()
    assert row.get_attribute("data-state") == "pending"
    assert "Waiting for resources" in row.inner_text()
    page.evaluate("window.__sameDocument = 'yes'")
    shot(page, "cockpit-1-pending")

    # The provisioner's next pass: the job runs, the probe is refused on every port.
    Replica.objects.filter(pk=replica.pk).update(
        state="starting",
        nodes="node1",
        slurm_state="RUNNING",
        slurm_reason="",
        started_at=timezone.now(),
        last_probe='connection refused on all 8 ports (18000-18007) <img id="xss" src="x">',
        last_probe_at=timezone.now(),
    )
    page.wait_for_selector(f'#ck-replicas tr[data-replica="{replica.pk}"][data-state="starting"]')
    assert "Nothing listens" in row.inner_text()
    assert '<img id="xss"' in row.inner_text()  # shown as text ...
    assert page.locator("#xss").count() == 0  # ... never as markup
    assert "node1" in row.inner_text()
    shot(page, "cockpit-2-starting")

    # Promoted: healthy with its endpoint.
    endpoint = Endpoint.objects.create(
        model=model,
        name=f"slurm-{uuid.uuid4().hex[:6]}",
        api_base="http://10.0.0.5:18000/v1",
        replica_id=replica.pk,
        health_status="healthy",
    )
    Replica.objects.filter(pk=replica.pk).update(
        state="healthy",
        port=18000,
        endpoint_id=endpoint.pk,
        healthy_at=timezone.now(),
        last_probe="ready on port 18000",
        last_message="serving on node1:18000",
    )
    page.wait_for_selector(f'#ck-replicas tr[data-replica="{replica.pk}"][data-state="healthy"]')
    assert "http://10.0.0.5:18000/v1" in row.inner_text()
    assert page.evaluate("window.__sameDocument") == "yes"  # refreshed without a reload

    # Open the job log; follow picks up what the job writes next.
    row.locator("button.ck-log-open").first.click()
    expect(page.locator("#ck-log-text")).to_contain_text("loading weights 42%")
    assert page.locator("#xss2").count() == 0
    with (tmp_path / "obt-browser-3141.out").open("a") as handle:
        handle.write("model loaded; serving\n")
    expect(page.locator("#ck-log-text")).to_contain_text("model loaded; serving")
    assert page.locator("#ck-log-download").get_attribute("href").endswith("download=1")
    shot(page, "cockpit-3-healthy-log")

    # Scale from the page: the spec changes, the page says so.
    page.fill("#ck-scale-count", "2")
    page.click("button[data-action=scale]")
    page.wait_for_selector("#ck-message:not([hidden])")
    assert "Scaled to 2" in page.inner_text("#ck-message")
    assert model.managed_spec.__class__.objects.get(pk=model.pk).target_replicas == 2
    shot(page, "cockpit-4-scaled")
    # Under the site's Content-Security-Policy nothing of the panel was blocked.
    assert not [line for line in console if "Content Security Policy" in line], console
