"""The waiting room: a new worker arriving while the server admits others at its admission rate sees
a page that fits a small laptop window, counts down and lets itself in (page clock and server clock
moved by the test: nothing sleeps)."""
from __future__ import annotations

import urllib.request

import pytest
from playwright.sync_api import expect

from server.services import app_services
from tests.browser.conftest import pause_page_clock
from tests.server.conftest import create_test_study, make_test_app

ENTRY_RULES = {"pages": {"pairs_per_page": 6, "min_pages": 1, "max_pages": 2}}


@pytest.fixture
def app(database_url, tmp_path, clock):
    """One new worker per second, one at a time (overrides the shared app fixture for live_server)."""
    app = make_test_app(database_url, tmp_path / "instance", clock=clock, admission_rate=1.0, admission_burst=1.0)
    yield app
    app_services(app).engine.dispose()


def test_deferred_worker_waits_then_enters_by_itself(browser, live_server, app, clock, demo_stimuli, tmp_path,
                                                     screenshot):
    slug = create_test_study(app, demo_stimuli, tmp_path, "waiting", **ENTRY_RULES)
    with urllib.request.urlopen(f"{live_server}/s/{slug}?participant=FIRST") as first:  # takes the only slot
        assert first.status == 200 and "/w/" in first.url
    context = browser.new_context(viewport={"width": 1280, "height": 600})
    page = context.new_page()
    try:
        # The page's countdown runs on a paused fake clock: it moves only when the test says.
        page.clock.install()
        pause_page_clock(page)
        response = page.goto(f"{live_server}/s/{slug}?participant=SECOND")
        assert response.status == 429
        room = page.locator("main#waiting")
        expect(room).to_be_visible()
        assert "let in a few at a time" in room.inner_text()
        expect(page.locator("#waiting-seconds")).to_have_text("1")
        screenshot(page, "waiting")
        box = page.locator("#btn-try-now").bounding_box()
        assert box is not None and box["y"] + box["height"] <= 600, box  # in view without scrolling
        assert page.evaluate("document.documentElement.scrollWidth") <= 1280

        page.clock.run_for(900)  # still waiting: the page has not given up nor reloaded early
        expect(room).to_be_visible()
        clock.advance(seconds=2)  # the server's slot is free again
        page.clock.run_for(400)  # the countdown (1 s and up to 0.25 s of jitter) ends: the page asks again
        expect(page.locator("main#consent")).to_be_visible()
        assert "/w/" in page.url
    finally:
        context.close()


def test_try_now_asks_again_at_once(browser, live_server, app, clock, demo_stimuli, tmp_path):
    slug = create_test_study(app, demo_stimuli, tmp_path, "waiting-now", **ENTRY_RULES)
    urllib.request.urlopen(f"{live_server}/s/{slug}?participant=FIRST").close()
    page = browser.new_page(viewport={"width": 1366, "height": 657})
    try:
        page.clock.install()
        page.goto(f"{live_server}/s/{slug}?participant=SECOND")
        expect(page.locator("main#waiting")).to_be_visible()
        page.click("#btn-try-now")  # too early: still waiting, on the same address
        expect(page.locator("main#waiting")).to_be_visible()
        assert "participant=SECOND" in page.url
        clock.advance(seconds=3)
        page.click("#btn-try-now")
        expect(page.locator("main#consent")).to_be_visible()
    finally:
        page.close()
