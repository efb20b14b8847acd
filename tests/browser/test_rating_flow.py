"""A worker's way through a rating study in chromium, against the real app over HTTP (SQLite):
consent, instructions, the training, pages of ratings, the page-done panel and the completion code,
with the mouse and with the keyboard; then what the database holds: every Next is exactly one stored
rating, equal to the button clicked (CCR: turned as the hidden order of the images requires), and a
choice alone stores nothing.

The studies are small (tests/browser/_rating_support.py ``rating_study_file``): training of 2
quality checks, pages of 6 ratings, at most 2 pages. Quality checks get answers in their known
range (read from the database, as the server judges them); real trials cycle through the scale.
"""
from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser._rating_support import (RatingWalker, assignment_of, create_rating_study, fits_without_scrolling,
                                           option, pressed_values, queued, status, stored_ratings, trial_facts)

pytestmark = pytest.mark.timeout(180)

LAPTOP = {"width": 1366, "height": 657}
SMALL_LAPTOP = {"width": 1280, "height": 600}


@pytest.fixture
def worker_page(browser):
    """``worker_page(viewport)`` -> a fresh page of that inner window size."""
    contexts = []

    def opened(viewport=LAPTOP):
        context = browser.new_context(viewport=viewport)
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(15_000)
        return page

    yield opened
    for context in contexts:
        context.close()


def _start(page, screenshot=None, keyboard: bool = False) -> None:
    """Consent and instructions (mouse, or Tab / Space / Enter)."""
    expect(page.locator("main#consent")).to_be_visible()
    if screenshot:
        screenshot(page, "consent")
    if keyboard:
        page.locator("#agree").focus()
        page.keyboard.press("Space")
        page.locator("#btn-consent").focus()
        page.keyboard.press("Enter")
    else:
        page.check("#agree")
        page.click("#btn-consent")
    expect(page.locator("main#instructions")).to_be_visible()
    if screenshot:
        screenshot(page, "instructions")
    if keyboard:
        page.locator("#btn-start").focus()
        page.keyboard.press("Enter")
    else:
        page.click("#btn-start")


def _walk_study(page, app, live_server, slug, method, answers, participant, screenshot, how="mouse"):
    """Consent to completion code; returns the walker and the completed assignment."""
    page.goto(f"{live_server}/s/{slug}?participant={participant}")
    _start(page, screenshot, keyboard=how == "keys")
    walker = RatingWalker(page, app, method, answers, how)
    # The training: quality checks, each answered in range ("Correct").
    for _ in range(2):
        assert walker.status() == "trial"
        expect(page.locator("#trial")).to_have_attribute("data-page-kind", "quiz")
        expect(page.locator("#progress")).to_contain_text("Practice")
        if screenshot and not walker.choices:
            screenshot(page, "training")
        walker.answer()
        expect(page.locator("#feedback")).to_have_attribute("data-kind", "correct")
    assert walker.run(kind="trials") == "page_done"
    if screenshot:
        screenshot(page, "page-done")
    page.click("#btn-continue")
    expect(page.locator("#page-done")).to_be_hidden()
    assert walker.status() in ("trial", "done")
    final = walker.run(kind="trials")
    assert final == "done"  # the second page is the last (max_pages 2): the study ends by itself
    expect(page.locator("main#done")).to_be_visible()
    code = page.locator("#completion-code")
    expect(code).to_be_visible()
    if screenshot:
        screenshot(page, "done")
    assignment = assignment_of(app, participant)
    assert assignment.stage == "completed" and assignment.pages_completed == 2
    assert code.inner_text().strip() == assignment.completion_code
    return walker, assignment


def _assert_stored_as_clicked(app, walker, assignment, method):
    stored = stored_ratings(app, assignment.id)
    assert set(stored) == set(walker.choices)
    # quiz and two pages of 6; an ACR page also carries the hidden reference of each of its scenes the worker
    # has not rated yet (ACR-HR allocation, server/paradigms/rating/allocation.py), one more per scene at most
    extra = len(stored) - (2 + 2 * 6)
    assert extra == 0 if method != "acr" else 0 <= extra <= 2, len(stored)
    for trial_id, response in stored.items():
        clicked = walker.choices[trial_id]
        assert response.raw_rating == clicked
        facts = walker.facts[trial_id]
        expected = clicked if method != "ccr" or facts["reference_first"] else -clicked
        assert response.rating == expected
        assert response.rt_ms >= 0


def test_dcr_study_by_mouse(worker_page, app, live_server, demo_stimuli, tmp_path, screenshot):
    slug = create_rating_study(app, demo_stimuli, tmp_path, "dcr-mouse", "dcr")
    page = worker_page(LAPTOP)
    walker, assignment = _walk_study(page, app, live_server, slug, "dcr", [5, 3, 1, 4, 2], "P1", screenshot)
    _assert_stored_as_clicked(app, walker, assignment, "dcr")
    assert {tuple(labels) for labels in walker.labels.values()} == {("Reference", "Test")}


def test_acr_study_by_keyboard(worker_page, app, live_server, demo_stimuli, tmp_path, screenshot):
    slug = create_rating_study(app, demo_stimuli, tmp_path, "acr-keys", "acr")
    page = worker_page(LAPTOP)
    walker, assignment = _walk_study(page, app, live_server, slug, "acr", [4, 2, 5, 1, 3], "P2", screenshot,
                                     how="keys")
    _assert_stored_as_clicked(app, walker, assignment, "acr")
    assert {tuple(labels) for labels in walker.labels.values()} == {()}  # one image, no label


def test_ccr_stores_the_sign_turned_by_the_hidden_order(worker_page, app, live_server, demo_stimuli, tmp_path):
    slug = create_rating_study(app, demo_stimuli, tmp_path, "ccr", "ccr")
    page = worker_page(LAPTOP)
    walker, assignment = _walk_study(page, app, live_server, slug, "ccr", [3, -2, 1, -3, 2], "P3", None)
    _assert_stored_as_clicked(app, walker, assignment, "ccr")
    # Both orders were shown (the server draws it per trial), and the page never said which.
    assert {walker.facts[t]["reference_first"] for t in walker.choices} == {True, False}
    assert {tuple(labels) for labels in walker.labels.values()} == {("First", "Second")}


def test_a_digit_key_alone_stores_nothing(worker_page, app, live_server, demo_stimuli, tmp_path):
    slug = create_rating_study(app, demo_stimuli, tmp_path, "keys", "dcr", quality={"quiz_size": 0})
    page = worker_page(LAPTOP)
    page.goto(f"{live_server}/s/{slug}?participant=P4")
    _start(page)
    assert status(page) == "trial"
    assignment = assignment_of(app, "P4")
    for key in ("4", "2", "Space"):
        page.keyboard.press(key)
    assert pressed_values(page) == ["2"]
    # The choice was never handed to the queue; the server holds nothing either.
    assert queued(page) == 0
    assert stored_ratings(app, assignment.id) == {}
    trial_id = page.locator("#trial").get_attribute("data-trial-id")
    page.keyboard.press("Enter")
    assert status(page, [trial_id]) == "trial"
    expect(page.locator("#pending")).to_have_attribute("data-pending", "0")
    stored = stored_ratings(app, assignment.id)
    assert list(stored) == [trial_id] and stored[trial_id].raw_rating == 2


def test_the_page_fits_a_small_laptop_window(worker_page, app, live_server, demo_stimuli, tmp_path, screenshot):
    slug = create_rating_study(app, demo_stimuli, tmp_path, "small", "dcr", quality={"quiz_size": 0})
    page = worker_page(SMALL_LAPTOP)
    page.goto(f"{live_server}/s/{slug}?participant=P5")
    _start(page)
    assert status(page) == "trial"
    expect(page.locator("#trial .rating-label")).to_have_text(["Reference", "Test"])
    extent = fits_without_scrolling(page)
    assert extent["scrollWidth"] <= extent["innerWidth"] and extent["scrollHeight"] <= extent["innerHeight"]
    assert extent["nextBottom"] <= extent["innerHeight"]
    assert 0.5 <= extent["scale"] <= 1
    screenshot(page, "dcr-1280x600")


def test_the_slider_stores_a_continuous_value(worker_page, app, live_server, demo_stimuli, tmp_path, screenshot):
    slug = create_rating_study(app, demo_stimuli, tmp_path, "slider", "acr", slider=True, quality={"quiz_size": 0})
    page = worker_page(LAPTOP)
    page.goto(f"{live_server}/s/{slug}?participant=P6")
    _start(page)
    assert status(page) == "trial"
    assignment = assignment_of(app, "P6")
    slider = page.locator("#rating-slider")
    expect(page.locator("#rating-next")).to_be_disabled()
    box = slider.bounding_box()
    page.mouse.click(box["x"] + 0.63 * box["width"], box["y"] + box["height"] / 2)
    chosen = float(page.locator("#trial").get_attribute("data-rating"))
    assert 1 < chosen < 5 and chosen != round(chosen)
    screenshot(page, "slider")
    trial_id = page.locator("#trial").get_attribute("data-trial-id")
    page.click("#rating-next")
    assert status(page, [trial_id]) == "trial"
    expect(page.locator("#pending")).to_have_attribute("data-pending", "0")
    stored = stored_ratings(app, assignment.id)
    assert stored[trial_id].raw_rating == pytest.approx(chosen, abs=1e-9)
    assert stored[trial_id].rating == stored[trial_id].raw_rating
    assert option(page, 1).count() == 0  # a slider study shows no buttons


def test_a_failed_training_says_so_and_ends_on_the_servers_page(worker_page, app, live_server, demo_stimuli,
                                                                  tmp_path, screenshot):
    from server.paradigms.rating.quality import KNOWN_RANGES

    slug = create_rating_study(app, demo_stimuli, tmp_path, "failed", "dcr")
    page = worker_page(LAPTOP)
    page.goto(f"{live_server}/s/{slug}?participant=P7")
    _start(page)
    walker = RatingWalker(page, app, "dcr", [3])
    for _ in range(2):
        assert walker.status() == "trial"
        trial_id = page.locator("#trial").get_attribute("data-trial-id")
        low, high = KNOWN_RANGES["dcr"][trial_facts(app, trial_id)["role"]]
        wrong = 1 if low > 1 else 5  # outside the check's known range
        walker.choices[trial_id] = wrong
        option(page, wrong).click()
        page.click("#rating-next")
        expect(page.locator("#feedback")).to_have_attribute("data-kind", "wrong")
    expect(page.locator("main#stopped")).to_be_visible()
    screenshot(page, "disqualified")
    assert assignment_of(app, "P7").stage == "disqualified"
    assert {str(k): r.raw_rating for k, r in stored_ratings(app, assignment_of(app, "P7").id).items()} == walker.choices
