"""The consent page with the default text filled in (researcher, contact, pay, time) for both paradigms:
it fits a 1280x600 window with the Continue button in view, and Continue leads to the instructions."""
from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import expect

from tests.server.conftest import create_test_study
from tests.server.motion_support import create_motion_study

TEXTS = {"researcher": "Dr A. Lee, Vision Lab, University of X", "contact": "a.lee@x.example"}


@pytest.mark.parametrize("kind", ["pc", "motion"])
def test_consent_names_researcher_contact_pay_and_time(kind, browser, live_server, app, demo_stimuli, motion_clips,
                                                       tmp_path, screenshot):
    if kind == "pc":
        slug = create_test_study(app, demo_stimuli, tmp_path, "consent-pc", texts=TEXTS,
                                 pages={"min_pages": 1, "max_pages": 5, "reward_per_page": "0.50",
                                        "bonus_per_page": "0.40"})
        pay = "$0.50 for 1 page, and a bonus of $0.40 for each further page up to 5 pages in all"
    else:
        slug = create_motion_study(app, motion_clips, tmp_path, "consent-motion", texts=TEXTS)
        pay = "$2.10 for 1 session"
    # A 1920x1080 screen: a window too small for a study can be made larger (the entry check says so).
    context = browser.new_context(viewport={"width": 1280, "height": 600}, screen={"width": 1920, "height": 1080})
    page = context.new_page()
    try:
        page.goto(f"{live_server}/s/{slug}?participant=CONSENT1")
        need = json.loads(page.locator("#device-check").get_attribute("data-requirement"))["min_window"]
        if need[0] > 1280 or need[1] > 600:
            # A study whose pages need more than this window says so before consent, and lets the
            # worker go on once the window is large enough.
            expect(page.locator("#device-check")).to_have_attribute("data-device", "window_too_small")
            expect(page.locator("#btn-consent")).to_be_hidden()
            screenshot(page, f"{kind}-window-too-small")
            page.set_viewport_size({"width": max(need[0], 1280), "height": max(need[1], 600)})
        expect(page.locator("#device-check")).to_have_attribute("data-device", "ok")
        width, height = page.viewport_size["width"], page.viewport_size["height"]
        consent = page.locator("main#consent")
        expect(consent).to_be_visible()
        text = consent.inner_text()
        assert TEXTS["researcher"] in text and TEXTS["contact"] in text and pay in text
        assert "It takes about" in text and not re.search(r"\{\w+\}", text)
        screenshot(page, kind)
        box = page.locator("#btn-consent").bounding_box()
        assert box is not None and box["y"] + box["height"] <= height, box   # in view without scrolling
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        page.check("#agree")
        page.click("#btn-consent")
        expect(page.locator("main#instructions")).to_be_visible()
    finally:
        context.close()
