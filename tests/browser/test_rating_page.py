"""The rating trial page (rating_trial.js in the assignment driver) against the harness: the worker
API of one assignment played by tests/browser/_rating_support.py, so each behaviour of the page is
checked alone -- layout and labels of ACR, DCR and CCR, choosing never sends, keys, focus, the
window, the slider, practice feedback, retries. The walk through a real study is in
test_rating_flow.py.
"""
from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser._rating_support import (RatingHarness, fits_without_scrolling, option, pressed_values, queued, rate,
                                           status)

pytestmark = pytest.mark.timeout(120)

LAPTOP = {"width": 1366, "height": 657}
SMALL_LAPTOP = {"width": 1280, "height": 600}


@pytest.fixture
def open_page(browser):
    """``open_page(harness, viewport=..., **context)`` -> a page showing the harness's first trial."""
    contexts = []

    def opened(harness: RatingHarness, viewport=LAPTOP, **options):
        context = browser.new_context(viewport=viewport, **options)
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(15_000)
        harness.open(page)
        assert status(page) == "trial"
        return page

    yield opened
    for context in contexts:
        context.close()


def _focus_in_trial(page) -> bool:
    return page.evaluate("document.activeElement !== document.body"
                         " && document.querySelector('#trial').contains(document.activeElement)")


def test_dcr_shows_reference_left_test_right_and_sends_only_with_next(open_page, screenshot):
    harness = RatingHarness(method="dcr")
    page = open_page(harness)
    figures = page.locator("#trial .rating-figure")
    expect(figures).to_have_count(2)
    assert figures.nth(0).get_attribute("data-role") == "reference"
    expect(figures.nth(0).locator(".rating-label")).to_have_text("Reference")
    expect(figures.nth(1).locator(".rating-label")).to_have_text("Test")
    left, right = (figures.nth(i).locator("img").bounding_box() for i in (0, 1))
    assert left["x"] + left["width"] <= right["x"]  # side by side, the reference on the left
    expect(page.locator("#rating-question")).to_have_text("How does the second image compare with the reference?")
    expect(page.locator("#progress")).to_have_text("Trial 1 of 3 · page 1")
    labels = page.locator("#trial .rating-option").all_inner_texts()
    assert [text.split("\n")[-1] for text in labels] == ["Imperceptible", "Perceptible but not annoying",
                                                          "Slightly annoying", "Annoying", "Very annoying"]
    assert page.locator("#trial .rating-option").evaluate_all("(bs) => bs.every((b) => b.tagName === 'BUTTON')")

    # Nothing chosen: Next is disabled. Choosing marks the button and enables Next; it sends nothing.
    expect(page.locator("#rating-next")).to_be_disabled()
    option(page, 4).click()
    assert pressed_values(page) == ["4"]
    expect(page.locator("#rating-next")).to_be_enabled()
    # A chosen rating can be changed before Next.
    option(page, 2).click()
    assert pressed_values(page) == ["2"]
    assert queued(page) == 0 and harness.posts == 0
    assert not _focus_in_trial(page)  # a click does not leave the focus on a scale button
    screenshot(page, "dcr-chosen")

    first = page.locator("#trial").get_attribute("data-trial-id")
    page.click("#rating-next")
    # The next trial appears at once (the queue sends in the background), with nothing chosen.
    assert status(page, [first]) == "trial"
    assert pressed_values(page) == []
    expect(page.locator("#rating-next")).to_be_disabled()
    expect(page.locator("#progress")).to_have_text("Trial 2 of 3 · page 1")
    page.wait_for_function("window.assignmentDriver.queue.pending === 0")
    assert [(r["trial_id"], r["rating"]) for r in harness.stored] == [(int(first), 2)]
    assert isinstance(harness.stored[0]["rt_ms"], int) and harness.stored[0]["rt_ms"] >= 0


def test_acr_shows_one_image_without_a_label(open_page):
    page = open_page(RatingHarness(method="acr"))
    expect(page.locator("#trial .rating-figure")).to_have_count(1)
    expect(page.locator("#trial .rating-label")).to_have_count(0)
    labels = page.locator("#trial .rating-option-label").all_inner_texts()
    assert labels == ["Excellent", "Good", "Fair", "Poor", "Bad"]


def test_ccr_labels_first_and_second_and_digits_choose_by_place(open_page):
    harness = RatingHarness(method="ccr")
    page = open_page(harness)
    expect(page.locator("#trial .rating-label")).to_have_text(["First", "Second"])
    expect(page.locator("#rating-question")).to_have_text("How does the second image compare with the first?")
    # -3..3 has no digit keys of its own: key k chooses the k-th button from the left.
    keys = page.locator("#trial .rating-option").evaluate_all("(bs) => bs.map((b) => b.getAttribute('aria-keyshortcuts'))")
    assert keys == ["1", "2", "3", "4", "5", "6", "7"]
    page.keyboard.press("6")
    assert pressed_values(page) == ["2"]
    page.keyboard.press("1")
    assert pressed_values(page) == ["-3"]
    assert queued(page) == 0
    page.keyboard.press("Enter")
    page.wait_for_function("window.assignmentDriver.queue.pending === 0")
    assert [r["rating"] for r in harness.stored] == [-3]


def test_keys_choose_without_sending_and_enter_sends_only_when_pressed_afresh(open_page):
    harness = RatingHarness(method="dcr")
    page = open_page(harness)
    first = page.locator("#trial").get_attribute("data-trial-id")
    # Enter and Space with nothing chosen do nothing.
    page.keyboard.press("Enter")
    page.keyboard.press("Space")
    # ACR/DCR digits are the values themselves: 3 is "Slightly annoying".
    page.keyboard.press("3")
    assert pressed_values(page) == ["3"]
    assert queued(page) == 0 and harness.posts == 0
    page.keyboard.press("5")
    assert pressed_values(page) == ["5"]
    assert queued(page) == 0 and harness.posts == 0
    # Tab never moves the focus onto a scale button or Next (a focused one would act on Space).
    for _ in range(6):
        page.keyboard.press("Tab")
        assert not _focus_in_trial(page)
    assert queued(page) == 0 and harness.posts == 0
    # Enter held down sends once; its auto-repeat does not send the next trial's rating.
    page.keyboard.down("Enter")
    assert status(page, [first]) == "trial"
    second = page.locator("#trial").get_attribute("data-trial-id")
    page.keyboard.press("1")
    page.keyboard.down("Enter")  # a repeat of the held key
    assert pressed_values(page) == ["1"]
    # Nothing was handed to the queue for the trial on screen (a send does that synchronously).
    assert page.evaluate("[...window.assignmentDriver.answered].map(String)") == [first]
    assert page.locator("#trial").get_attribute("data-trial-id") == second
    page.keyboard.up("Enter")
    page.keyboard.press("Enter")
    assert status(page, [first, second]) == "trial"
    page.wait_for_function("window.assignmentDriver.queue.pending === 0")
    assert [(str(r["trial_id"]), r["rating"]) for r in harness.stored] == [(first, 5), (second, 1)]


@pytest.mark.parametrize("method,slider", [("acr", False), ("dcr", False), ("ccr", False), ("dcr", True)])
def test_fits_a_small_laptop_window_without_scrolling(open_page, screenshot, method, slider):
    page = open_page(RatingHarness(method=method, slider=slider), viewport=SMALL_LAPTOP)
    extent = fits_without_scrolling(page)
    assert extent["scrollWidth"] <= extent["innerWidth"] and extent["scrollHeight"] <= extent["innerHeight"]
    assert extent["nextBottom"] <= extent["innerHeight"] and extent["nextRight"] <= extent["innerWidth"]
    assert 0.5 <= extent["scale"] <= 1  # fit: between min_image_scale and 1
    screenshot(page, f"{method}{'-slider' if slider else ''}-1280x600")


def test_too_small_window_hides_the_trial_until_it_is_enlarged(open_page):
    page = open_page(RatingHarness(method="dcr"), viewport=SMALL_LAPTOP)
    page.set_viewport_size({"width": 960, "height": 560})  # below the study's floor (1000 x 600)
    expect(page.locator("#window-too-small")).to_be_visible()
    expect(page.locator("#trial")).to_be_hidden()
    expect(page.locator(".pc-size-numbers")).to_contain_text("needed at least 1000 × 600")
    page.keyboard.press("4")
    page.set_viewport_size(SMALL_LAPTOP)
    assert status(page) == "trial"
    assert pressed_values(page) == []  # a key pressed while the images were hidden chose nothing


def test_pixel_exact_shows_one_image_pixel_per_device_pixel(open_page):
    harness = RatingHarness(method="dcr", image_size=(400, 300),
                            display={"policy": "pixel_exact", "min_image_scale": 1.0, "floor": [0, 0]})
    page = open_page(harness, device_scale_factor=2)
    boxes = [page.locator("#trial img").nth(i).bounding_box() for i in (0, 1)]
    assert [(b["width"], b["height"]) for b in boxes] == [(200, 150), (200, 150)]
    expect(page.locator("#trial")).to_have_attribute("data-policy", "pixel_exact")


def test_slider_chooses_a_continuous_value_and_digits_move_to_ticks(open_page, screenshot):
    harness = RatingHarness(method="acr", slider=True)
    page = open_page(harness)
    slider = page.locator("#rating-slider")
    expect(slider).to_have_attribute("data-untouched", "true")  # no thumb suggests an answer
    expect(page.locator("#rating-next")).to_be_disabled()
    expect(page.locator("#trial .rating-tick")).to_have_text(
        ["5 Excellent", "4 Good", "3 Fair", "2 Poor", "1 Bad"], use_inner_text=True)
    box = slider.bounding_box()
    page.mouse.click(box["x"] + 0.37 * box["width"], box["y"] + box["height"] / 2)
    expect(slider).to_have_attribute("data-untouched", "false")
    expect(page.locator("#rating-next")).to_be_enabled()
    chosen = float(page.locator("#trial").get_attribute("data-rating"))
    assert 1 < chosen < 5 and chosen != round(chosen)  # between the ticks, not snapped to one
    assert queued(page) == 0 and harness.posts == 0
    screenshot(page, "acr-slider")
    first = page.locator("#trial").get_attribute("data-trial-id")
    page.click("#rating-next")
    assert status(page, [first]) == "trial"
    expect(slider).to_have_attribute("data-untouched", "true")  # the next trial starts untouched
    # The digit of a tick moves the thumb there (4 = Good); the arrow keys move a focused slider.
    page.keyboard.press("4")
    assert float(page.locator("#trial").get_attribute("data-rating")) == 4
    slider.focus()
    page.keyboard.press("ArrowRight")
    assert float(page.locator("#trial").get_attribute("data-rating")) < 4
    assert queued(page) == 0
    page.keyboard.press("Enter")
    page.wait_for_function("window.assignmentDriver.queue.pending === 0")
    ratings = [r["rating"] for r in harness.stored]
    assert ratings[0] == pytest.approx(chosen, abs=1e-3)
    assert 1 <= ratings[1] < 4


def test_practice_feedback_then_trials(open_page):
    harness = RatingHarness(method="acr", quiz_trials=2, quiz_correct=(4, 5))
    page = open_page(harness)
    expect(page.locator("#progress")).to_have_text("Practice 1 of 2")
    expect(page.locator("#trial")).to_have_attribute("data-page-kind", "quiz")
    first = rate(page, 5)
    expect(page.locator("#feedback")).to_have_text("Correct")
    assert status(page, [first]) == "trial"
    second = rate(page, 1, how="keys")
    expect(page.locator("#feedback")).to_have_attribute("data-kind", "wrong")
    assert status(page, [first, second]) == "trial"
    expect(page.locator("#trial")).to_have_attribute("data-page-kind", "trials")
    expect(page.locator("#progress")).to_have_text("Trial 1 of 3 · page 1")
    assert [(r["stage"], r["rating"]) for r in harness.stored] == [("quiz", 5), ("quiz", 1)]


def test_a_failing_server_shows_retrying_while_the_next_trials_appear_at_once(open_page):
    harness = RatingHarness(method="acr", fail_ratings=2)
    page = open_page(harness)
    answered = [rate(page, 3)]
    assert status(page, answered) == "trial"  # not held up by the failing upload
    expect(page.locator("#pending")).to_have_attribute("data-retrying", "true")
    expect(page.locator("#pending")).to_contain_text("retrying")
    answered.append(rate(page, 2))
    assert status(page, answered) == "trial"
    expect(page.locator("#pending")).to_have_text("✓ All answers saved")
    assert [r["rating"] for r in harness.stored] == [3, 2]
    assert harness.posts == 4  # two refused attempts, then each rating once


def test_pages_continue_and_finish(open_page):
    harness = RatingHarness(method="dcr", trials_per_page=2, max_pages=2)
    page = open_page(harness)
    answered: list[str] = []
    for _ in range(2):
        answered.append(rate(page, 4))
        status(page, answered)
    assert status(page, answered) == "page_done"
    page.click("#btn-continue")
    expect(page.locator("#page-done")).to_be_hidden()
    for _ in range(2):
        assert status(page, answered) == "trial"
        expect(page.locator("#progress")).to_contain_text("page 2")
        answered.append(rate(page, 3, how="keys"))
    assert status(page, answered) == "page_done"
    page.click("#btn-finish")
    expect(page.locator("main#done")).to_be_visible()  # the server's end page
    assert [r["rating"] for r in harness.stored] == [4, 4, 3, 3]
    assert len({r["rating_id"] for r in harness.stored}) == 4


def test_the_page_computes_the_servers_window(open_page):
    """rating_trial.js's ratingWindowNeeded (the trial page hides a trial below it) and the server's
    window_for (the entry pages' device check, `study create`) give the same window for the same images."""
    from types import SimpleNamespace

    from server.paradigms.rating.study import window_for

    page = open_page(RatingHarness(method="acr"))
    for method, n in (("acr", 1), ("dcr", 2), ("ccr", 2)):
        for policy, scale in (("fit", 0.5), ("fit", 0.37), ("pixel_exact", 1.0)):
            for floor in ((1, 1), (1000, 600)):
                for size in ((512, 512), (1920, 1080), (333, 250)):
                    spec = SimpleNamespace(method=method, policy=policy, min_image_scale=scale,
                                           min_window_width=floor[0], min_window_height=floor[1],
                                           needs_card=lambda: False)  # no [viewing] card check
                    server = window_for(spec, [size]).min_window
                    browser = page.evaluate("""async ([sizes, policy, scale, floor]) => {
                      const { ratingWindowNeeded } = await import('/static/js/rating_trial.js');
                      const { policyFactor } = await import('/static/js/display.js');
                      return ratingWindowNeeded(sizes, policyFactor(policy, scale, 1), floor);
                    }""", [[list(size)] * n, policy, scale, list(floor)])
                    assert (browser["width"], browser["height"]) == tuple(server), (method, policy, scale, floor, size)


def test_image_scale_fits_the_window_and_never_goes_below_zero(open_page):
    """display.js's imageScale, with which both trial pages (rating_trial.js, pc_trial.js) scale their
    images: the largest scale up to 1 that fits the window beside the chrome and a notice that shows,
    never below 0; one image pixel per device pixel under pixel_exact."""
    page = open_page(RatingHarness(method="acr"), viewport={"width": 1000, "height": 600})

    def scale(policy, dpr, content, chrome, notice=None):
        return page.evaluate("""async ([policy, dpr, content, chrome, notice]) => {
          const { imageScale } = await import('/static/js/display.js');
          let element = null;
          if (notice) {
            element = document.createElement('div');
            element.style.height = '100px';
            element.hidden = notice === 'hidden';
            document.body.append(element);
          }
          try { return imageScale(policy, dpr, content, chrome, element); } finally { if (element) element.remove(); }
        }""", [policy, dpr, content, chrome, notice])

    chrome = {"width": 100, "height": 200}  # leaves 900 x 400 of the 1000 x 600 window
    assert scale("fit", 1, [450, 200], chrome) == 1  # fits at full size: never enlarged
    assert scale("fit", 1, [1800, 200], chrome) == 0.5  # the width limits
    assert scale("fit", 1, [450, 800], chrome) == 0.5  # the height limits
    assert scale("fit", 1, [450, 800], chrome, "shown") == 300 / 800  # a notice takes 100 px while it shows
    assert scale("fit", 1, [450, 800], chrome, "hidden") == 0.5
    assert scale("fit", 1, [450, 800], {"width": 1200, "height": 0}) == 0  # a window narrower than the chrome
    assert scale("pixel_exact", 1.25, [5000, 5000], chrome) == 0.8
