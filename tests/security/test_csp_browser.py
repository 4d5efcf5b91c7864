"""The admin and Swagger UI work in a real browser under the Content-Security-Policy.

Headless Chromium (Debian's ``chromium`` package, driven by Playwright for Python; no browser
download) loads pages from pytest-django's live server, which runs the full middleware stack
(django-csp included) on the test database. Every ``securitypolicyviolation`` event and every
console message about the policy is collected; a control case injects an inline script to prove
violations are seen. Screenshots go to ``var/screenshots/`` for a person to look at.

Skipped when Playwright or ``/usr/bin/chromium`` is missing (``apt-get install chromium``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

playwright_sync = pytest.importorskip("playwright.sync_api", reason="playwright (dev requirement)")

CHROMIUM = Path("/usr/bin/chromium")
if not CHROMIUM.exists():
    pytest.skip("no /usr/bin/chromium (apt-get install chromium)", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "var" / "screenshots"
PASSWORD = "browser-Admin-passw0rd"

COLLECT_VIOLATIONS = """
window.__csp = [];
document.addEventListener('securitypolicyviolation', (e) => {
  window.__csp.push(`${e.violatedDirective} ${e.blockedURI} ${e.sourceFile}:${e.lineNumber}`);
});
"""


@pytest.fixture
def site(live_server: Any, django_user_model: Any) -> str:
    from obleth.core.models import Replica
    from tests.plugins.factories import make_endpoint, make_slurm_model

    django_user_model.objects.create_superuser("browser-admin", "b@example.org", PASSWORD)
    model = make_slurm_model(name="csp-demo")
    make_endpoint(model, api_key="sk-browser")
    # Replica rows show coloured state badges (inline style attributes, allowed by the policy).
    Replica.objects.create(
        model_id=model.pk, model_name=model.name, job_name="obleth-csp", job_id="7", state="healthy"
    )
    return str(live_server.url)


@pytest.fixture
def browser() -> Iterator[Any]:
    with playwright_sync.sync_playwright() as pw:
        chromium = pw.chromium.launch(
            executable_path=str(CHROMIUM),
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        try:
            yield chromium
        finally:
            chromium.close()


class Watched:
    def __init__(self, page: Any) -> None:
        self.page = page
        self.console: list[str] = []
        self.failed: list[str] = []
        page.add_init_script(COLLECT_VIOLATIONS)
        page.on("console", lambda msg: self.console.append(f"{msg.type}: {msg.text}"))
        page.on(
            "response",
            lambda r: self.failed.append(f"{r.status} {r.url}") if r.status >= 400 else None,
        )

    def visit(self, url: str, shot: str) -> list[str]:
        self.page.goto(url)
        self.page.wait_for_load_state("networkidle")
        SHOTS.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(SHOTS / f"{shot}.png"), full_page=True)
        return self.violations()

    def violations(self) -> list[str]:
        seen: list[str] = self.page.evaluate("window.__csp || []")
        policy = [c for c in self.console if "Content Security Policy" in c]
        return seen + policy


def test_admin_pages_render_without_csp_violations(site: str, browser: Any) -> None:
    page = browser.new_page()
    watched = Watched(page)
    assert watched.visit(f"{site}/admin/login/", "admin-login") == []
    page.fill("#id_username", "browser-admin")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_load_state("networkidle")
    assert page.url.endswith("/admin/"), page.url
    for path, name in (
        ("/admin/", "admin-index"),
        ("/admin/core/model/", "admin-models"),
        ("/admin/core/model/add/", "admin-model-add"),
        ("/admin/core/replica/", "admin-replicas"),
        ("/admin/core/endpoint/", "admin-endpoints"),
        ("/admin/core/slurmsettings/", "admin-slurm-settings"),
        ("/admin/auth/user/", "admin-users"),
    ):
        assert watched.visit(f"{site}{path}", name) == [], path
        assert page.locator("#content").count() == 1, path
    badge = page.locator(".obleth-badge").first
    page.goto(f"{site}/admin/core/replica/")
    # The badge's inline style applied (its background is not the page's).
    background = badge.evaluate("e => getComputedStyle(e).backgroundColor")
    assert background not in ("rgba(0, 0, 0, 0)", "transparent"), background
    # The admin's JavaScript ran (the sidebar filter is added by nav_sidebar.js).
    page.goto(f"{site}/admin/core/model/")
    assert page.locator("#nav-filter").count() == 1
    # The changelist's search/action JavaScript works: selecting all checks every row.
    page.check("#action-toggle")
    assert page.locator("input.action-select:checked").count() >= 1
    assert watched.violations() == []
    assert not [f for f in watched.failed if "/static/" in f], watched.failed


def test_swagger_ui_renders_without_csp_violations(site: str, browser: Any) -> None:
    page = browser.new_page()
    watched = Watched(page)
    page.goto(f"{site}/admin/login/")
    page.fill("#id_username", "browser-admin")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_load_state("networkidle")
    page.goto(f"{site}/api/docs/")
    page.wait_for_selector(".swagger-ui .info .title", timeout=30_000)
    assert "obleth Management API" in page.inner_text(".swagger-ui .info .title")
    operation = page.locator(".opblock-summary").first
    operation.click()  # expands: Swagger UI's React code runs under the policy
    page.wait_for_selector(".opblock-body", timeout=10_000)
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "api-docs.png"))
    assert watched.violations() == []
    assert not [f for f in watched.failed if "/static/" in f], watched.failed


def test_browsable_api_renders_without_csp_violations(site: str, browser: Any) -> None:
    page = browser.new_page()
    watched = Watched(page)
    page.goto(f"{site}/admin/login/")
    page.fill("#id_username", "browser-admin")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_load_state("networkidle")
    assert watched.visit(f"{site}/api/v1/models", "browsable-api") == []
    assert "csp-demo" in page.content()
    assert not [f for f in watched.failed if "/static/" in f], watched.failed


def test_the_429_page_of_a_blocked_login(site: str, browser: Any, settings: Any) -> None:
    settings.OBLETH_AUTH_MAX_FAILURES = 2
    page = browser.new_page()
    watched = Watched(page)
    for attempt in range(3):
        page.goto(f"{site}/admin/login/")
        page.fill("#id_username", "browser-admin")
        page.fill("#id_password", PASSWORD if attempt == 2 else "wrong")
        with page.expect_response(lambda r: r.request.method == "POST") as answer:
            page.click("input[type=submit]")
        page.wait_for_load_state("networkidle")
    assert answer.value.status == 429
    assert int(answer.value.headers["retry-after"]) > 0
    assert "Too many failed logins" in page.inner_text("h1")
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "admin-login-429.png"))
    assert watched.violations() == []


def test_control_an_inline_script_is_blocked_and_seen(site: str, browser: Any) -> None:
    page = browser.new_page()
    watched = Watched(page)
    page.goto(f"{site}/admin/login/")
    page.evaluate(
        "() => { const s = document.createElement('script');"
        " s.textContent = 'window.__ran = 1'; document.body.appendChild(s); }"
    )
    page.wait_for_timeout(200)
    assert page.evaluate("window.__ran === undefined")  # the inline script did not run
    assert any("script-src" in v for v in watched.violations()), watched.violations()
