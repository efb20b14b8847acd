"""The display monitor in chromium (experiment_ui/static/js/display_monitor.js, server/paradigms/display_monitor.py):
a worker at 1366x657 in an ACR rating study whose zoom changes mid-trial (an emulated devicePixelRatio) sees the
trial paused: an overlay, no pointer or key input reaching the scale; setting the zoom back resumes it, and the
pause is logged and counted (once, a reload while paused included). The window moved to another screen pauses the next trial, whose response time then
leaves the pause out. A third change (the window made smaller than the study needs) is one past the study's
max_display_changes = 2: the worker is turned away.

The page's clock is Playwright's (page.clock), paused and run by the test: no real sleeps.
Screenshots go to $PERCEPTLAB_SCREENSHOTS (the screenshot fixture).
"""
from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest
from playwright.sync_api import expect
from sqlalchemy import select

from server.models import DisplayEvent, Worker
from server.services import app_services
from tests.browser._rating_support import (RatingWalker, assignment_of, create_rating_study, option, pressed_values,
                                           stored_ratings, trial_facts)
from tests.browser.conftest import pause_page_clock, tick_until

pytestmark = pytest.mark.timeout(240)

LAPTOP = {"width": 1366, "height": 657}
PAUSED_MS = 6000
# Screenshots only when asked for (the screenshot fixture's folder).
SHOTS = Path(os.environ["PERCEPTLAB_SCREENSHOTS"]) if os.environ.get("PERCEPTLAB_SCREENSHOTS") else None


def _start(page) -> None:
    expect(page.locator("main#consent")).to_be_visible()
    page.check("#agree")
    page.click("#btn-consent")
    expect(page.locator("main#instructions")).to_be_visible()
    page.click("#btn-start")


def _events(app, assignment_id: int) -> list[tuple]:
    with app_services(app).sessions() as session:
        return [(e.event, e.change, e.paused_ms) for e in session.scalars(
            select(DisplayEvent).where(DisplayEvent.assignment_id == assignment_id).order_by(DisplayEvent.id))]


def _worker(app, external_id: str) -> Worker:
    with app_services(app).sessions() as session:
        worker = session.scalar(select(Worker).where(Worker.external_id == external_id))
        session.expunge(worker)
        return worker


def _overlay(page) -> dict:
    return page.evaluate("""() => {
      const o = document.querySelector('.display-paused');
      return o ? {shown: !o.hidden, change: o.dataset.change, text: o.innerText} : {shown: false};
    }""")


def _metrics(cdp, width: int, height: int, dpr: float, screen=(LAPTOP["width"], LAPTOP["height"])) -> None:
    """The window (CSS px), devicePixelRatio and screen (Playwright's own viewport changes move the emulated
    screen too, which is a change of screen)."""
    cdp.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": dpr,
                                                   "mobile": False, "screenWidth": screen[0],
                                                   "screenHeight": screen[1]})


def _rate_on_screen(page, app, walker) -> tuple[str, float]:
    """Choose a fitting answer for the trial on screen and send it: its ID and the page time of the click."""
    trial_id = page.locator("#trial").get_attribute("data-trial-id")
    option(page, int(walker.pick(trial_facts(app, trial_id)))).click()
    answered_at = page.evaluate("performance.now()")
    page.click("#rating-next")
    return trial_id, answered_at


def test_display_changes_pause_the_trial_and_past_the_limit_turn_the_worker_away(
        browser, app, live_server, demo_stimuli, tmp_path):
    slug = create_rating_study(app, demo_stimuli, tmp_path, "monitored", "acr", viewing={"max_display_changes": 2})
    context = browser.new_context(viewport=LAPTOP)
    page = context.new_page()
    page.set_default_timeout(15_000)
    page.clock.install()
    page.goto(f"{live_server}/s/{slug}?participant=WZOOM")
    _start(page)
    walker = RatingWalker(page, app, "acr", [1, 3, 5, 2, 4])
    assert walker.status() == "trial"
    assignment_id = assignment_of(app, "WZOOM").id
    box = option(page, 3).bounding_box()  # where the scale is (the zoomed page hides it: rating's own window rule)
    pause_page_clock(page)
    cdp = context.new_cdp_session(page)

    # The zoom to 125 %: devicePixelRatio up, the window fewer CSS px, the same screen.
    _metrics(cdp, 1093, 526, 1.25)
    overlay = tick_until(page, lambda: (o := _overlay(page))["shown"] and o)
    assert overlay["change"] == "zoom" and "zoom" in overlay["text"]
    assert "Display changes so far: 1 (at most 2" in tick_until(page, lambda: "1 (" in _overlay(page)["text"]
                                                                and _overlay(page))["text"]
    if SHOTS:  # through the DevTools session: Playwright's page.screenshot would reset the emulated scale factor
        (SHOTS / "monitor39-paused-trial.png").write_bytes(
            base64.b64decode(cdp.send("Page.captureScreenshot", {"format": "png"})["data"]))
    assert page.evaluate("devicePixelRatio") == 1.25
    # No input reaches the paused trial: a click where the scale is lands on the overlay; keys stop at the monitor.
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.keyboard.press("3")
    page.keyboard.press("Enter")
    assert pressed_values(page) == [] and stored_ratings(app, assignment_id) == {}
    # A reload neither takes the zoomed display as the new start nor counts the pause again.
    page.reload()
    assert tick_until(page, lambda: _overlay(page)["shown"] and _overlay(page)["change"]) == "zoom"
    page.clock.run_for(PAUSED_MS)
    assert _events(app, assignment_id) == [("paused", "zoom", 0)]
    # The zoom set back: the trial resumes by itself.
    _metrics(cdp, LAPTOP["width"], LAPTOP["height"], 1)
    tick_until(page, lambda: not _overlay(page)["shown"])
    events = tick_until(page, lambda: len(e := _events(app, assignment_id)) == 2 and e)
    assert events[0] == ("paused", "zoom", 0) and events[1][:2] == ("resumed", None)
    assert PAUSED_MS <= events[1][2] <= PAUSED_MS + 5000
    page.clock.run_for(500)
    first, _ = _rate_on_screen(page, app, walker)
    tick_until(page, lambda: first in stored_ratings(app, assignment_id) and page.evaluate(
        "(first) => { const t = document.querySelector('#trial'); "
        "return !t.hidden && t.dataset.trialId !== first && t.dataset.accepting === 'true'; }", first))
    worker = _worker(app, "WZOOM")
    assert (worker.display_changes, worker.paused_ms, worker.status) == (1, events[1][2], "active")

    # The window dragged to a larger monitor: the trial stays laid out under the overlay, and its pause is no
    # response time.
    shown_at = page.evaluate("window.assignmentDriver.plugin.t0")
    _metrics(cdp, LAPTOP["width"], LAPTOP["height"], 1, screen=(1920, 1080))
    assert tick_until(page, lambda: _overlay(page)["shown"] and _overlay(page)["change"]) == "screen"
    page.clock.run_for(PAUSED_MS)
    _metrics(cdp, LAPTOP["width"], LAPTOP["height"], 1)
    tick_until(page, lambda: not _overlay(page)["shown"])
    page.clock.run_for(800)
    second, answered_at = _rate_on_screen(page, app, walker)
    stored = tick_until(page, lambda: stored_ratings(app, assignment_id).get(second))
    paused_ms = _events(app, assignment_id)[-1][2]
    assert paused_ms >= PAUSED_MS
    assert stored.rt_ms == pytest.approx(answered_at - shown_at - paused_ms, abs=5)
    assert stored.rt_ms < answered_at - shown_at - PAUSED_MS

    # A third change, the window below the study's need (ACR: 898 x 560 at the least), is one too many.
    _metrics(cdp, 700, 500, 1)
    tick_until(page, lambda: page.locator("main#stopped").count() > 0)
    expect(page.locator("main#stopped")).to_contain_text("changed during the task more often")
    assert _events(app, assignment_id)[-1] == ("paused", "window", 0)
    worker = _worker(app, "WZOOM")
    assert (worker.display_changes, worker.status) == (3, "stopped")
    context.close()


def test_the_rule_names_each_change_and_leaves_out_windows_that_follow_the_screen(page, live_server):
    """display_monitor.js's displayChange, the pure rule: a new ratio on the same screen (CSS px as Chromium, or
    device px as Firefox reports it) is a zoom, on another screen a screen change; another screen at the same
    ratio is a screen change unless the "screen" follows the window (an emulated device); a window below the need
    counts only if the start met it."""
    page.goto(f"{live_server}/healthz")
    cases = page.evaluate("""async () => {
      const { displayChange } = await import('/static/js/display_monitor.js');
      const d = (width, height, dpr, sw, sh) => ({ width, height, dpr,
        screen: { width: sw, height: sh, availWidth: sw, availHeight: sh } });
      const start = d(1366, 657, 1, 1366, 768);
      const need = { width: 898, height: 560 };
      return [
        displayChange(start, d(1200, 600, 1, 1366, 768), need),        // smaller, still enough
        displayChange(start, d(1093, 526, 1.25, 1366, 768), need),     // Chromium's zoom
        displayChange(start, d(1093, 526, 1.25, 1093, 614), need),     // Firefox's zoom (screen in CSS px)
        displayChange(start, d(1366, 657, 2, 1280, 800), need),        // a denser monitor
        displayChange(start, d(1366, 657, 1, 1920, 1080), need),       // a larger monitor, same ratio
        displayChange(start, d(800, 500, 1, 1366, 768), need),         // too small
        displayChange(start, d(800, 500, 1, 1366, 768), need, false),  // too small from the start
        displayChange(d(1366, 657, 1, 1366, 657), d(800, 500, 1, 800, 500), need),  // an emulated device shrunk
      ];
    }""")
    assert cases == [None, "zoom", "zoom", "screen", "screen", "window", None, "window"]
