"""The [viewing] checks in chromium (experiment_ui/static/js/viewing_checks.js, server/paradigms/viewing.py):
each check passed and failed at 1366 x 657, and the checks a phone can take (brightness, colour) on a 390 x 844
touch phone. The distance and acuity checks start with the credit-card match (85.6 mm: wider than a phone's
screen) and the blind spot needs a key pressed at the dot's vanishing, so phones are not offered them
(docs/viewing.md). The page's clock is Playwright's (the blind spot's dot and the refresh measure run on it).

Screenshots of each check go to $PERCEPTLAB_SCREENSHOTS when it is set (tests/browser/conftest.py).
"""
from __future__ import annotations

import math
import re

import pytest
from playwright.sync_api import expect
from sqlalchemy import select

from server.models import Study, ViewingResult, Worker
from server.paradigms import viewing
from server.paradigms.core import spec_for
from server.paradigms.screen import BLIND_SPOT_DEG
from server.services import app_services
from tests.server.conftest import SMALL_STUDY, WorkerClient, create_test_study

from .conftest import tick_until

LAPTOP = {"viewport": {"width": 1366, "height": 657}}
PHONE = {"viewport": {"width": 390, "height": 844}, "is_mobile": True, "has_touch": True, "device_scale_factor": 3}
# A study a phone may take (the one device rule, display.WindowRequirement.devices): the demo's images at a fifth.
PHONE_STUDY = {"min_window_width": 360, "min_window_height": 560, "min_image_scale": 0.2}
ARROW = {"up": "↑", "right": "→", "down": "↓", "left": "←"}


@pytest.fixture
def context_page(browser):
    contexts = []

    def make(options):
        context = browser.new_context(**options)
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(20_000)
        page.clock.install()
        return page

    yield make
    for context in contexts:
        context.close()


def _enter(app, live_server, page, demo_stimuli, tmp_path, display=None, **keys):
    """A study with ``[viewing]`` ``keys`` (and a ``[display]``), one worker entered; the page at their first page
    (the checks)."""
    slug = create_test_study(app, demo_stimuli, tmp_path, slug="viewing", **SMALL_STUDY, viewing=keys,
                             **({"display": display} if display else {}))
    worker = WorkerClient(app.test_client(), slug)
    page.goto(f"{live_server}/w/{worker.token}/")
    expect(page.locator("#viewing")).to_be_visible()
    return worker


def _truth(app, worker, check):
    with app_services(app).sessions() as session:
        row = session.execute(select(Worker.id, Worker.study_id).where(Worker.external_id == worker.worker_id)).one()
        study = session.get(Study, row.study_id)
        return viewing.expected(app.config["SECRET_KEY"], study, row.id, check, spec_for(session, study.id))


def _results(app, worker):
    with app_services(app).sessions() as session:
        rows = session.scalars(select(ViewingResult).join(Worker, Worker.id == ViewingResult.worker_id)
                               .where(Worker.external_id == worker.worker_id)).all()
        return {r.check: (r.passed, r.errors, dict(r.measures or {})) for r in rows}


def _press(page, locator, touch):
    (locator.tap if touch else locator.click)()


def _shot(page, name):
    import os
    from pathlib import Path

    folder = os.environ.get("PERCEPTLAB_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / f"viewing-{name}.png"))


def _fits(page):
    """Nothing wider than the window (no sideways scrolling)."""
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")


def _brightness(page, counts, touch=False, shot=None):
    expect(page.locator("#viewing-brightness img").nth(1)).to_have_js_property("complete", True)
    for index, count in enumerate(counts):
        _press(page, page.locator(f"#viewing-count-{index} button[data-value='{count}']"), touch)
    _fits(page)
    if shot:
        _shot(page, shot)
    _press(page, page.locator("#viewing-next"), touch)


def _colour(page, digits, touch=False, shot=None):
    for k, digit in enumerate(digits):
        expect(page.locator("#viewing-colour p").first).to_contain_text(f"Plate {k + 1} of")
        expect(page.locator("#viewing-plate")).to_have_js_property("complete", True)
        if shot and k == 0:
            _fits(page)
            _shot(page, shot)
        button = page.locator("#viewing-no-digit") if digit is None else \
            page.locator(f"#viewing-digits button[data-value='{digit}']")
        _press(page, button, touch)


def _card(page, distance_cm=None, shot=None):
    """The card left at its size (323.5 x 204 px: 3.78 px/mm), the refresh measured on the page's clock; with
    ``distance_cm``, blind-spot sweeps stopped where that distance puts the blind spot."""
    tick_until(page, lambda: page.locator("#calib-continue").is_enabled())
    if shot:
        _shot(page, shot)
    page.locator("#calib-continue").click()
    if distance_cm is None:
        return
    px_per_mm = float(page.locator("#calib-card").get_attribute("data-width")) / 85.6
    start_mm, speed_mm_s = 10, 25
    travel_mm = math.tan(math.radians(BLIND_SPOT_DEG)) * distance_cm * 10 - start_mm
    for _ in range(5):
        page.locator("#bs-start").click()
        page.clock.run_for(int(travel_mm / speed_mm_s * 1000))
        page.keyboard.press(" ")
    measured = float(page.locator("#blind-spot").get_attribute("data-distance-cm"))
    assert measured == pytest.approx(distance_cm, rel=0.03) and px_per_mm == pytest.approx(3.78, abs=0.01)
    page.locator("#calib-continue").click()


def _acuity(page, directions, shot=None):
    for k, direction in enumerate(directions):
        expect(page.locator("#viewing-acuity p").first).to_contain_text(f"Ring {k + 1} of")
        expect(page.locator("#viewing-ring")).to_have_attribute("data-loaded", "true")
        if shot and k == 0:
            _fits(page)
            _shot(page, shot)
        if k % 2:
            page.keyboard.press({"up": "ArrowUp", "right": "ArrowRight", "down": "ArrowDown", "left": "ArrowLeft"}
                                [direction])
        else:
            page.locator(f"#viewing-directions button[data-value='{direction}']").click()


def _wrong(direction):
    return viewing.GAP_DIRECTIONS[(viewing.GAP_DIRECTIONS.index(direction) + 2) % 4]


def test_every_check_passed_at_a_laptop_then_consent(app, live_server, context_page, demo_stimuli, tmp_path):
    page = context_page(LAPTOP)
    worker = _enter(app, live_server, page, demo_stimuli, tmp_path, checks=list(viewing.VIEWING_CHECKS))
    _brightness(page, _truth(app, worker, "brightness"), shot="brightness-laptop")
    _colour(page, _truth(app, worker, "colour"), shot="colour-laptop")
    _card(page, distance_cm=60, shot="card-laptop")
    truth = _truth(app, worker, "acuity")
    # The C is drawn one image pixel per device pixel, at the size the card gives.
    _acuity(page, truth, shot="acuity-laptop")
    expect(page.locator("#viewing-root")).to_have_attribute("data-outcome", "passed")
    _shot(page, "passed-laptop")
    page.locator("#viewing-continue").click()
    expect(page.locator("input[name=agree], #consent").first).to_be_attached()
    results = _results(app, worker)
    assert {c: r[:2] for c, r in results.items()} == {c: (True, 0) for c in ("brightness", "colour", "screen",
                                                                                "distance", "acuity")}
    assert results["distance"][2]["distance_cm"] == pytest.approx(60, rel=0.03)
    assert results["acuity"][2]["gap_device_px"] == 2.0  # 0.3 logMAR at 60 cm is 1.3 px at 3.78 px/mm: drawn at 2


@pytest.mark.parametrize("check", ["brightness", "colour", "distance", "acuity"])
def test_each_check_failed_at_a_laptop_says_why(app, live_server, context_page, demo_stimuli, tmp_path, check):
    page = context_page(LAPTOP)
    worker = _enter(app, live_server, page, demo_stimuli, tmp_path, checks=[check])
    if check == "brightness":
        counts = _truth(app, worker, "brightness")
        _brightness(page, [counts[0], counts[1] % 6 + 1])
        why = "count the faint shapes"
    elif check == "colour":
        _colour(page, [None] * 2)
        why = "numbers in the coloured dots"
    elif check == "distance":
        _card(page, distance_cm=100)
        # The sweeps stop within a frame of where 100 cm puts the blind spot: the server's figure is 99-101 cm.
        why = re.compile(r"about (99|100|101) cm from the screen")
    else:
        _card(page)
        _acuity(page, [_wrong(d) for d in _truth(app, worker, "acuity")])
        why = "gaps of the small rings"
    expect(page.locator("#viewing-outcome")).to_have_attribute("data-outcome", "failed")
    expect(page.locator("#viewing-message")).to_contain_text(why)
    _shot(page, f"failed-{check}-laptop")
    page.locator("#viewing-leave").click()
    expect(page.locator("main#stopped")).to_contain_text(why)
    assert _results(app, worker)[check][0] is False


def test_brightness_and_colour_passed_on_a_phone(app, live_server, context_page, demo_stimuli, tmp_path):
    page = context_page(PHONE)
    worker = _enter(app, live_server, page, demo_stimuli, tmp_path, PHONE_STUDY, checks=["brightness", "colour"])
    _brightness(page, _truth(app, worker, "brightness"), touch=True, shot="brightness-phone")
    _colour(page, _truth(app, worker, "colour"), touch=True, shot="colour-phone")
    expect(page.locator("#viewing-root")).to_have_attribute("data-outcome", "passed")
    _press(page, page.locator("#viewing-continue"), True)
    expect(page.locator("#viewing")).to_have_count(0)
    assert all(passed for passed, _, _ in _results(app, worker).values())


@pytest.mark.parametrize("check", ["brightness", "colour"])
def test_brightness_and_colour_failed_on_a_phone(app, live_server, context_page, demo_stimuli, tmp_path, check):
    page = context_page(PHONE)
    worker = _enter(app, live_server, page, demo_stimuli, tmp_path, PHONE_STUDY, checks=[check])
    if check == "brightness":
        _brightness(page, [0, 0], touch=True)
    else:
        truth = _truth(app, worker, "colour")
        _colour(page, [(d + 1) % 10 for d in truth], touch=True)
    expect(page.locator("#viewing-outcome")).to_have_attribute("data-outcome", "failed")
    _fits(page)
    _shot(page, f"failed-{check}-phone")
    assert _results(app, worker)[check][0] is False


@pytest.mark.parametrize("check", ["distance", "acuity"])
def test_a_phone_is_told_at_once_that_a_card_check_needs_a_larger_screen(app, live_server, context_page, demo_stimuli,
                                                                        tmp_path, check):
    """A check that draws the card at its real size (85.6 mm) keeps phones out of a study whose window fits one:
    the device check on the checks' page says so before any card, and the checks stay hidden."""
    page = context_page(PHONE)
    _enter(app, live_server, page, demo_stimuli, tmp_path, PHONE_STUDY, checks=["brightness", check])
    expect(page.locator("#device-check")).to_have_attribute("data-device", "phone")
    expect(page.locator("#device-check .device-problem")).to_contain_text("phone")
    expect(page.locator("#viewing-root")).to_be_hidden()
    _fits(page)


def test_checks_after_the_instructions_lead_to_the_task(app, live_server, context_page, demo_stimuli, tmp_path):
    page = context_page(LAPTOP)
    slug = create_test_study(app, demo_stimuli, tmp_path, slug="later", **SMALL_STUDY,
                             viewing={"checks": ["colour"], "when": "after_instructions"})
    worker = WorkerClient(app.test_client(), slug)
    assert worker.action("consent").status_code == 200
    page.goto(f"{live_server}/w/{worker.token}/")
    page.locator("#btn-start").click()
    _colour(page, _truth(app, worker, "colour"))
    page.locator("#viewing-continue").click()
    expect(page.locator("#viewing")).to_have_count(0)
    assert worker.state()["stage"] == "quiz"


SMALL_LAPTOP = {"viewport": {"width": 1280, "height": 600}}


def _controls_in_view(page, selectors):
    """At 1280 x 600, with the page not scrolled: nothing wider than the window, and every element of ``selectors``
    (what the worker looks at and the controls they answer with) wholly inside the window."""
    _fits(page)
    assert page.evaluate("window.scrollY") == 0
    for selector in selectors:
        boxes = page.evaluate("""s => [...document.querySelectorAll(s)].filter(e => e.offsetParent !== null)
            .map(e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; })""",
                              selector)
        assert boxes, f"{selector}: nothing shown"
        for left, top, right, bottom in boxes:
            assert left >= 0 and top >= 0 and right <= 1280 + 0.5 and bottom <= 600 + 0.5, (selector, boxes)


def test_every_check_fits_1280_by_600(app, live_server, context_page, demo_stimuli, tmp_path):
    """Each check's page at 1280 x 600: the stimulus and every control to answer it are in view without scrolling."""
    page = context_page(SMALL_LAPTOP)
    worker = _enter(app, live_server, page, demo_stimuli, tmp_path, checks=list(viewing.VIEWING_CHECKS))
    expect(page.locator("#viewing-brightness img").nth(1)).to_have_js_property("complete", True)
    _shot(page, "brightness-1280x600")
    _controls_in_view(page, ["#viewing-brightness img", "#viewing-count-0 button", "#viewing-count-1 button",
                             "#viewing-next"])
    _brightness(page, _truth(app, worker, "brightness"))
    expect(page.locator("#viewing-plate")).to_have_js_property("complete", True)
    _shot(page, "colour-1280x600")
    _controls_in_view(page, ["#viewing-plate", "#viewing-digits button", "#viewing-no-digit"])
    _colour(page, _truth(app, worker, "colour"))
    tick_until(page, lambda: page.locator("#calib-continue").is_enabled())
    _shot(page, "card-1280x600")
    _controls_in_view(page, ["#calib-card", "#calib-continue", ".calib-handle"])
    page.locator("#calib-continue").click()
    expect(page.locator("#bs-start")).to_be_visible()
    _shot(page, "blind-spot-1280x600")
    _controls_in_view(page, ["#bs-start", "#bs-stage", "#bs-square", "#calib-continue"])
    # The sweeps, then the acuity check.
    px_per_mm = float(page.locator("#calib-card").get_attribute("data-width")) / 85.6
    travel_mm = math.tan(math.radians(BLIND_SPOT_DEG)) * 600 - 10
    for _ in range(5):
        page.locator("#bs-start").click()
        page.clock.run_for(int(travel_mm / 25 * 1000))
        page.keyboard.press(" ")
    assert px_per_mm > 0
    page.locator("#calib-continue").click()
    expect(page.locator("#viewing-ring")).to_have_attribute("data-loaded", "true")
    _shot(page, "acuity-1280x600")
    _controls_in_view(page, ["#viewing-ring", "#viewing-directions button"])
