"""The issue's scenario in a real browser on the REAL local Slurm: an operator opens a model's
page and, without reloading, watches its replica start (with its probe outcome: refused, then
loading), become healthy, get ``scancel``-ed from the shell, show the loss with Slurm's state and
its replacement; then opens the lost replica's job log. Screenshots in var/screenshots/.

Real: chromium (Playwright), Django's live server, slurmrestd, the jobs and the test engine
(``--slow-start``/``--loading`` so the starting states last long enough to be seen). The test
thread runs the provisioner's passes, as the provisioner process would."""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from obleth.core.models import Replica
from provisioner.reconcile import run_pass
from tests.browser.conftest import browser_page, shot  # noqa: F401  (the fixture)
from tests.e2e.conftest import ProvisionerEnv
from tests.plugins.real_slurm import scancel

expect = pytest.importorskip("playwright.sync_api").expect

pytestmark = [pytest.mark.slurm, pytest.mark.e2e, pytest.mark.timeout(300)]

ROWS_JS = """() => Array.from(document.querySelectorAll('#ck-replicas tr[data-replica]')).map(
  tr => ({id: tr.dataset.replica, state: tr.dataset.state, text: tr.innerText}))"""


def test_operator_watches_a_real_replica_live_in_the_browser(
    provisioner_env: ProvisionerEnv,
    live_server: Any,
    browser_page: Any,  # noqa: F811
    settings: Any,
) -> None:
    env = provisioner_env
    settings.OBLETH_COCKPIT_REFRESH_SECS = 1
    settings.OBLETH_JOB_LOGS_READABLE = [env.log_dir]
    user = get_user_model().objects.create_user("e2e-browser", password="pw-e2e-1", is_staff=True)
    user.groups.add(Group.objects.get(name="operator"))
    model = env.deploy("e2e-live", replicas=1, flags=("--slow-start", "3", "--loading", "3"))

    page = browser_page
    change = f"/admin/core/model/{model.pk}/change/"
    page.goto(f"{live_server.url}/admin/login/?next={change}")
    page.fill("#id_username", "e2e-browser")
    page.fill("#id_password", "pw-e2e-1")
    page.click("input[type=submit]")
    page.wait_for_url(f"**{change}")
    page.evaluate("window.__sameDocument = 'yes'")

    seen: dict[str, str] = {}  # state -> the row's text when first seen in the page

    def watch(until: Any, what: str, timeout: float = 120) -> list[dict[str, str]]:
        deadline = time.monotonic() + timeout
        while True:
            run_pass(dispatch="inline")
            page.wait_for_timeout(1300)  # the page refreshes by itself (1 s)
            rows: list[dict[str, str]] = page.evaluate(ROWS_JS)
            for row in rows:
                if row["state"] not in seen:
                    seen[row["state"]] = row["text"]
                    shot(page, f"e2e-{len(seen)}-{row['state']}")
            if until(rows):
                return rows
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}: {rows!r}, seen {seen!r}")

    watch(lambda rows: any(r["state"] == "healthy" for r in rows), "healthy")
    assert "starting" in seen, seen
    starting = seen["starting"]
    assert "Nothing listens" in starting or "still loading" in starting, starting
    first = Replica.objects.get(model_id=model.pk, state="healthy")

    scancel(int(first.job_id))  # from the shell, as an operator would

    def loss_and_replacement(rows: list[dict[str, str]]) -> bool:
        lost = [r for r in rows if r["id"] == str(first.pk) and r["state"] == "lost"]
        return bool(lost and "CANCELLED" in lost[0]["text"] and len(rows) >= 2)

    watch(loss_and_replacement, "the loss and a replacement")
    shot(page, "e2e-lost-and-replaced")
    assert page.evaluate("window.__sameDocument") == "yes"  # never reloaded

    lost_row = page.locator(f'#ck-replicas tr[data-replica="{first.pk}"]')
    lost_row.locator("button.ck-log-open").first.click()
    expect(page.locator("#ck-log-text")).to_contain_text("replica of e2e-live on")
    shot(page, "e2e-lost-replica-log")
