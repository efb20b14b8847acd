"""A rating study a phone may take part in (issue 39, "a study that fits a phone may admit phones"): an ACR study
with ``[display] min_window_width = 360`` needs the stacked layout's window (the image above, the answers and
Next below: rating/study.py RATING_CHROME_STACKED), which fits the phone class's least window, so the one device
rule (display.py ``WindowRequirement.devices``) admits phones; a worker on a 390x844 touch phone (a mobile user
agent, touch only) walks the whole study by tapping, from the entry page to the completion code, every page
without sideways scrolling, every answer a touch target of 44 px or more.

Screenshots go to $PERCEPTLAB_SCREENSHOTS (the screenshot fixture).
"""
from __future__ import annotations

import pytest
from playwright.sync_api import expect

from server.paradigms import paradigm_for
from server.paradigms.display import PHONE_WINDOW
from server.paradigms.rating.study import RATING_CHROME, RATING_CHROME_STACKED, rating_chrome, side_by_side_width
from server.services import app_services
from tests.browser._rating_support import (RatingWalker, assignment_of, create_rating_study, stored_ratings,
                                           trial_facts)

pytestmark = pytest.mark.timeout(240)

PHONE = {"viewport": {"width": 390, "height": 844}, "is_mobile": True, "has_touch": True, "device_scale_factor": 3,
         "user_agent": "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like "
                       "Gecko) Version/17.0 Mobile/15E148 Safari/604.1"}
PHONE_DISPLAY = {"min_window_width": 360, "min_window_height": 480}

# The trial on screen: its layout, whether it fits the window without scrolling sideways, its touch targets.
TRIAL_JS = """() => {
  const trial = document.querySelector('#trial');
  const box = (e) => e.getBoundingClientRect();
  const targets = [...trial.querySelectorAll('.rating-option'), document.querySelector('#rating-next')].map(box);
  const image = box(trial.querySelector('img'));
  const options = box(trial.querySelector('.rating-options'));
  return {layout: trial.dataset.layout, scrollWidth: document.scrollingElement.scrollWidth, innerWidth,
          innerHeight, nextBottom: box(document.querySelector('#rating-next')).bottom,
          smallest: Math.min(...targets.map((b) => Math.min(b.width, b.height))),
          imageAboveScale: image.bottom <= options.top, imageRight: image.right};
}"""


def _requirement(app, slug):
    from server.exports import find_study

    with app_services(app).sessions() as session:
        study = find_study(session, slug)
        return paradigm_for(study).window_requirement(session, study)


def test_the_stacked_layout_is_the_window_of_a_study_that_accepts_narrow_windows():
    assert side_by_side_width() == 898
    assert rating_chrome(360) is RATING_CHROME_STACKED and rating_chrome(898) is RATING_CHROME
    # Seven answers (CCR) of 44 px, 4 px apart, fit its row; the row and the padding fit a phone.
    assert 7 * 44 + 6 * 4 <= RATING_CHROME_STACKED["scale_width"]
    assert side_by_side_width(RATING_CHROME_STACKED) <= PHONE_WINDOW[0]


def test_a_phone_walks_a_whole_acr_study_by_touch(browser, app, live_server, demo_stimuli, tmp_path, screenshot):
    slug = create_rating_study(app, demo_stimuli, tmp_path, "phone-acr", "acr", display=PHONE_DISPLAY)
    requirement = _requirement(app, slug)
    assert requirement.fits(PHONE_WINDOW) and requirement.devices() == ("desktop", "tablet", "phone")
    wide = create_rating_study(app, demo_stimuli, tmp_path, "laptop-acr", "acr")
    assert "phone" not in _requirement(app, wide).devices()  # the default floor (1000 x 600) keeps phones out

    context = browser.new_context(**PHONE)
    page = context.new_page()
    page.set_default_timeout(15_000)
    page.goto(f"{live_server}/s/{slug}?participant=PHONE1")
    expect(page.locator("main#consent")).to_be_visible()
    expect(page.locator("[data-needs-device]").first).to_be_visible()  # the device check admits the phone
    screenshot(page, "consent")
    assert page.evaluate("document.scrollingElement.scrollWidth") <= PHONE["viewport"]["width"]
    page.locator("#agree").tap()
    page.locator("#btn-consent").tap()
    expect(page.locator("main#instructions")).to_be_visible()
    page.locator("#btn-start").tap()

    walker = RatingWalker(page, app, "acr", [4, 2, 5, 1, 3])
    shot = None
    while (current := walker.status()) != "done":
        if current == "page_done":
            assert page.evaluate("document.scrollingElement.scrollWidth") <= PHONE["viewport"]["width"]
            screenshot(page, "page-done")
            page.locator("#btn-continue").tap()
            expect(page.locator("#page-done")).to_be_hidden()
            continue
        assert current == "trial"
        trial = page.evaluate(TRIAL_JS)
        assert trial["layout"] == "stacked" and trial["imageAboveScale"]
        assert trial["scrollWidth"] <= trial["innerWidth"] and trial["imageRight"] <= trial["innerWidth"]
        assert trial["nextBottom"] <= trial["innerHeight"]  # Next in view without scrolling
        assert trial["smallest"] >= 44
        if shot is None:
            shot = screenshot(page, "trial")
        trial_id = page.locator("#trial").get_attribute("data-trial-id")
        facts = walker.facts[trial_id] = trial_facts(app, trial_id)
        value = int(walker.pick(facts))
        page.locator(f"#trial .rating-option[data-value='{value}']").tap()
        page.locator("#rating-next").tap()
        walker.choices[trial_id] = value
    expect(page.locator("main#done")).to_be_visible()
    screenshot(page, "done")
    assignment = assignment_of(app, "PHONE1")
    assert assignment.stage == "completed" and assignment.pages_completed == 2
    stored = stored_ratings(app, assignment.id)
    assert {trial_id: r.raw_rating for trial_id, r in stored.items()} == walker.choices
    assert assignment.environment["window"]["width"] == 390
    context.close()
