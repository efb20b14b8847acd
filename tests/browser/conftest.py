"""Browser fixtures: Debian's chromium driven by Playwright (never `playwright install`).

Screenshots go to ``$PERCEPTLAB_SCREENSHOTS``, when it names a folder, so that people can look at
the pages the tests clicked through (without it none are taken).
"""
from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from tests.server.conftest import (SMALL_STUDY, app, clock, create_test_study,  # noqa: F401
                                   live_server, sqlite_template, sqlite_url, study)

T = TypeVar("T")

CHROMIUM = os.environ.get("PERCEPTLAB_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


@pytest.fixture
def database_url(sqlite_url):  # noqa: F811 - overrides the server tests' two-database fixture
    """Browser tests run on the default SQLite database; the API tests cover PostgreSQL."""
    return sqlite_url


# Playwright's assertions wait 5 s for their condition by default: on a busy machine a page that answers
# right may take longer (a server round trip, a render). They wait for a condition, so a longer wait costs
# time only when something is wrong.
ASSERTION_TIMEOUT_MS = 30_000


@pytest.fixture(scope="session")
def browser():
    if not shutil.which(CHROMIUM) and not Path(CHROMIUM).exists():
        message = f"{CHROMIUM} not found: install Debian's chromium (make test does it with apt-get)"
        if os.environ.get("PERCEPTLAB_REQUIRE_BROWSER") == "1":
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    from playwright.sync_api import expect

    expect.set_options(timeout=ASSERTION_TIMEOUT_MS)
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
def screenshot(request):
    """``screenshot(page, name)`` saves a full-page PNG in ``$PERCEPTLAB_SCREENSHOTS`` and returns its path;
    without that variable it takes none and returns None. (A full-page capture costs chromium about 0.2 s of
    CPU, and the suite's walks take over a hundred; no test asserts on them: one that checks what a page
    drew takes its own ``page.screenshot()``.)"""
    folder = os.environ.get("PERCEPTLAB_SCREENSHOTS")

    def take(page, name: str) -> Path | None:
        if not folder:
            return None
        path = Path(folder) / f"{request.node.name}-{name}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(path), full_page=True)
        return path
    return take


@pytest.fixture
def gold_answer_key(app):
    """Nothing on the page tells a gold pair or its better image (neither is the reference's file),
    so the walker asks the database, as the server does when it judges a vote. Modules that walk
    paired-comparison pages use it for every test: ``pytest.mark.usefixtures("gold_answer_key")``."""
    from ._worker_support import answer_key

    answer_key["app"] = app
    yield
    answer_key.clear()


def pause_page_clock(page, lead_ms: int = 1000) -> int:
    """Pause the page's fake clock (``page.clock.install()`` before) ``lead_ms`` of page time from now.

    ``page.clock.pause_at`` needs a time still ahead of the installed clock, which flows with real time
    until paused; on a busy machine the moment the page's time is read and the moment the pause arrives
    may be seconds apart ("Clock.pause_at: Cannot fast-forward to the past"). Then the time is read
    again and the pause asked again, so it holds however slow the machine is. Returns the page time
    (ms since the epoch) the clock stands at.
    """
    from playwright.sync_api import Error as PlaywrightError

    while True:
        target = int(page.evaluate("Date.now()")) + lead_ms
        try:
            page.clock.pause_at(target / 1000)  # seconds in the Python API
        except PlaywrightError as error:
            if "past" not in str(error):
                raise
            continue
        return target


def tick_until(page, ready: Callable[[], T], *, step_ms: int = 100, timeout_s: float = 120.0) -> T:
    """Call ``ready()`` until it returns a true value, running the page's paused clock ``step_ms`` and
    waiting a little real time (for the network, the server and image decoding) between calls.

    For pages whose clock is paused, where Playwright's own waiting (which polls on animation frames)
    stands still. The test waits for the condition, not for a number of steps: ``timeout_s`` of real
    time only turns a page that never gets there into a failure. Returns ``ready()``'s last value.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value = ready()
        if value or time.monotonic() > deadline:
            return value
        page.clock.run_for(step_ms)
        page.wait_for_timeout(20)
