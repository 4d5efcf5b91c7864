"""A real browser for the admin pages: Debian's headless chromium driven by Playwright.

No browser is downloaded: Playwright launches /usr/bin/chromium. Tests are skipped when it or
Playwright is missing. Screenshots go to var/screenshots/ (gitignored), or to the folder a test
names (the deploy page's: tests/browser/artifacts/deploy/, gitignored too).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "var" / "screenshots"
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"


@pytest.fixture
def browser_page() -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api")
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install -y chromium)")
    # Playwright's sync API runs an event loop in this thread; the ORM calls the test makes
    # between browser steps are ordinary synchronous ones.
    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        page = context.new_page()
        page.set_default_timeout(15_000)
        try:
            yield page
        finally:
            context.close()
            browser.close()


def shot(page: Any, name: str, panel: str = "#obleth-cockpit", folder: Path | None = None) -> Path:
    """The whole page, and the panel alone (``<name>-panel.png``) to read it closely."""
    where = folder or SCREENSHOTS
    where.mkdir(parents=True, exist_ok=True)
    path = where / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    if panel and page.locator(panel).count():
        page.locator(panel).first.screenshot(path=str(where / f"{name}-panel.png"))
    return path
