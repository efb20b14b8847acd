"""The page a participant sees over the per-address entry limit: it says when to try again and, for
whoever runs the study (a lab session behind one address), which setting lifts the limit; it fits
a small laptop window."""
from __future__ import annotations

import urllib.request

import pytest
from playwright.sync_api import expect

from server.services import app_services
from tests.server.conftest import create_test_study, make_test_app


@pytest.fixture
def app(database_url, tmp_path, clock):
    """One new participant per address and 10 minutes (overrides the shared app fixture for live_server)."""
    app = make_test_app(database_url, tmp_path / "instance", clock=clock, entry_limit=1, entry_window_seconds=600)
    yield app
    app_services(app).engine.dispose()


def test_the_limit_page_names_the_setting_and_fits(browser, live_server, app, demo_stimuli, tmp_path, screenshot):
    slug = create_test_study(app, demo_stimuli, tmp_path, "lab", pages={"pairs_per_page": 6, "max_pages": 2})
    with urllib.request.urlopen(f"{live_server}/s/{slug}?participant=FIRST") as first:  # the address's one entry
        assert "/w/" in first.url
    page = browser.new_page(viewport={"width": 1280, "height": 600})
    try:
        response = page.goto(f"{live_server}/s/{slug}?participant=SECOND")
        assert response.status == 429 and response.headers["retry-after"] == "600"
        expect(page.locator("main#error")).to_contain_text("Please try again in 10 minutes")
        setting = page.locator("#setting")
        expect(setting).to_contain_text("[entry] entry_limit")
        expect(setting).to_contain_text("signed_links")
        screenshot(page, "entry-limit")
        box = setting.bounding_box()
        assert box is not None and box["y"] + box["height"] <= 600, box  # in view without scrolling
        assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    finally:
        page.close()
