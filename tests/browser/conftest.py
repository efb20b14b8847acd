"""Browser fixtures: Debian's chromium driven by Playwright (never `playwright install`).

Screenshots go to ``$PERCEPTLAB_SCREENSHOTS`` (default: the test's tmp folder) so
that people can look at the pages the tests clicked through.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.server.conftest import (SMALL_STUDY, app, clock, create_test_study,  # noqa: F401
                                   live_server, sqlite_template, sqlite_url, study)

CHROMIUM = os.environ.get("PERCEPTLAB_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


@pytest.fixture
def database_url(sqlite_url):  # noqa: F811 - overrides the server tests' two-database fixture
    """Browser tests run on the default SQLite database; the API tests cover PostgreSQL."""
    return sqlite_url


@pytest.fixture(scope="session")
def browser():
    if not shutil.which(CHROMIUM) and not Path(CHROMIUM).exists():
        message = f"{CHROMIUM} not found: install Debian's chromium (make test does it with apt-get)"
        if os.environ.get("PERCEPTLAB_REQUIRE_BROWSER") == "1":
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1366, "height": 768})
    page = context.new_page()
    page.set_default_timeout(15_000)
    yield page
    context.close()


@pytest.fixture
def screenshot(tmp_path, request):
    """``screenshot(page, name)`` saves a PNG and returns its path."""
    folder = Path(os.environ.get("PERCEPTLAB_SCREENSHOTS", tmp_path))
    folder.mkdir(parents=True, exist_ok=True)

    def take(page, name: str) -> Path:
        path = folder / f"{request.node.name}-{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path
    return take
