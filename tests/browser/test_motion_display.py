"""The motion study on laptop windows: 1366 x 657 and 1280 x 600 (the inner windows of 1366 x 768 and
1280 x 720 screens) walk from the card calibration into the trials with nothing blocked, the clip, the
control panel and the matching aperture whole in the viewport and the text beside the panel; and a
change of devicePixelRatio (the page zoom) during the blocks measures the card again, keeping the
answers. The page's clock is paused (installed at a fixed time): the test moves it.
"""
from __future__ import annotations

import base64
import math
import os
from pathlib import Path

import pytest
from playwright.sync_api import expect
from sqlalchemy import select, update

from server.models import Assignment, Worker
from server.paradigms.motion.models import Calibration, MotionResponse
from server.services import app_services
from tests.browser._motion_support import cursor_for, run_trial, status, to_calibration, true_vector
from tests.browser.conftest import tick_until
from tests.server.motion_support import SMALL, create_motion_study

pytestmark = pytest.mark.timeout(400)

# Where the trial is drawn and what lies around it, read off the running MotionTrial.
GEOMETRY_JS = """() => {
  const t = window.assignmentDriver.plugin.current;
  const box = (el) => {
    if (!el || el.hidden || !el.textContent) return null;
    const r = el.getBoundingClientRect();
    return { x: r.left, y: r.top, w: r.width, h: r.height };
  };
  const p = t.params;
  return {
    W: innerWidth, H: innerHeight, cx: t.cx, cy: t.cy, panel: p.panel_diameter_px / 2, kind: t.trial.kind,
    px: t.px, py: t.py, reach: Math.max(p.aperture_px / 2, p.cue_diameter_px / 2,
                                        p.placeholder_offset_px + p.placeholder_diameter_px / 2),
    clip: t.trial.kind === 'main' ? { x: t.imgX, y: t.imgY, w: t.trial.clip.width, h: t.trial.clip.height } : null,
    rdk: t.trial.kind === 'rdk' ? t.assets.dots.aperture / 2 : null,
    canvas: box(t.canvas) || (() => { const r = t.canvas.getBoundingClientRect();
                                      return { x: r.left, y: r.top, w: r.width, h: r.height }; })(),
    canvasHidden: t.canvas.hidden, tooSmall: !t.tooSmallEl.hidden,
    text: [box(t.statusEl), box(document.querySelector('#motion-progress'))].filter(Boolean),
    scroll: [document.documentElement.scrollWidth, document.documentElement.scrollHeight],
    min: [p.min_window_width, p.min_window_height],
  };
}"""


def _inside(rect, width, height) -> bool:
    return rect["x"] >= 0 and rect["y"] >= 0 and rect["x"] + rect["w"] <= width and rect["y"] + rect["h"] <= height


def _assert_trial_fits(page, width: int, height: int) -> dict:
    """Nothing hidden, nothing scaled, nothing outside the viewport; the text off the control panel."""
    g = page.evaluate(GEOMETRY_JS)
    assert (g["W"], g["H"]) == (width, height)
    assert not g["tooSmall"] and not g["canvasHidden"], g
    assert g["min"][0] <= width and g["min"][1] <= height, g
    assert g["canvas"] == {"x": 0, "y": 0, "w": width, "h": height}
    assert g["scroll"] == [width, height], g  # no scroll bars
    r, cx, cy = g["panel"], g["cx"], g["cy"]
    assert _inside({"x": cx - r, "y": cy - r, "w": 2 * r, "h": 2 * r}, width, height), g  # the whole panel
    reach = g["reach"]  # the matching aperture, cue and placeholders around the probe
    assert _inside({"x": g["px"] - reach, "y": g["py"] - reach, "w": 2 * reach, "h": 2 * reach}, width, height), g
    if g["clip"]:
        assert _inside(g["clip"], width, height), g  # the whole clip, one image pixel per CSS pixel
    if g["rdk"]:
        assert _inside({"x": cx - g["rdk"], "y": cy - g["rdk"], "w": 2 * g["rdk"], "h": 2 * g["rdk"]}, width, height)
    assert g["text"], g
    for box in g["text"]:
        assert _inside(box, width, height), (box, g)
        nearest_x = min(max(cx, box["x"]), box["x"] + box["w"])
        nearest_y = min(max(cy, box["y"]), box["y"] + box["h"])
        assert math.hypot(nearest_x - cx, nearest_y - cy) >= r, (box, g)  # beside the panel, not over it
    return g


def _enter(page, live_server: str, slug: str, participant: str, width: int, height: int) -> None:
    page.set_viewport_size({"width": width, "height": height})
    page.clock.install(time=1_000_000)
    page.clock.pause_at(1_001_000)  # 1000 s after the install: ahead of the page's clock on any machine
    page.goto(f"{live_server}/s/{slug}?participant={participant}")
    to_calibration(page)


def _calibrate(page, width: int, height: int) -> None:
    """The card page fits the window (its Continue button without scrolling), and is sent."""
    while page.get_attribute("#calibration", "data-refresh-done") != "true":
        page.clock.run_for(500)
    for selector in ("#calib-card", "#calib-handle", "#calib-continue"):
        box = page.locator(selector).bounding_box()
        assert box and _inside({"x": box["x"], "y": box["y"], "w": box["width"], "h": box["height"]}, width, height), \
            (selector, box)
    page.click("#calib-continue")


def _to_trial(page) -> str:
    """Through the part's intro card (or a feedback screen) to a trial waiting for its start click."""
    def ready() -> bool:
        state = status(page)
        if state == "intro":
            page.click("#motion-intro-start")
        elif state == "feedback":
            page.keyboard.press("Space")
        return state == "trial:ready"
    tick_until(page, ready)
    return status(page)


def _shot_path(name: str) -> Path:
    folder = Path(os.environ.get("PERCEPTLAB_MOTION_SHOTS", "/tmp/shots"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder / name


@pytest.mark.parametrize("size", [(1366, 657), (1280, 600)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_laptop_window_walks_from_calibration_into_the_movies(page, app, live_server, motion_clips, tmp_path,
                                                               screenshot, size):
    width, height = size
    slug = create_motion_study(app, motion_clips, tmp_path, slug="motion-laptop", **SMALL)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    _enter(page, live_server, slug, "PLAPTOP", width, height)
    screenshot(page, f"calibration-{width}x{height}")
    with app_services(app).sessions() as session:  # passed the motion test before: movies next
        session.execute(update(Worker).where(Worker.external_id == "PLAPTOP").values(screening_passed=True))
        session.commit()
    _calibrate(page, width, height)

    answered = []
    for n in range(2):  # a practice movie (with its feedback) and the next one
        assert _to_trial(page) == "trial:ready"
        g = _assert_trial_fits(page, width, height)
        assert g["kind"] == "main"
        if n == 0 and size == (1366, 657):
            screenshot(page, "first-movie")
        trial = run_trial(page, cursor_for(*true_vector(app, page.evaluate(
            "window.assignmentDriver.plugin.current.trial.trial_id")), centre=(g["cx"], g["cy"])))
        answered.append(trial["trial_id"])
        if n == 0:
            assert tick_until(page, lambda: status(page) == "feedback")
            box = page.locator(".motion-feedback").bounding_box()
            assert box["x"] + box["width"] <= g["cx"] - g["panel"], box  # beside the panel
            screenshot(page, f"feedback-{width}x{height}")
    with app_services(app).sessions() as session:
        sizes = {(r.window_width, r.window_height) for r in session.scalars(select(MotionResponse))}
        assert sizes == {(width, height)}
        assert session.scalar(select(Assignment.stage).where(Assignment.worker_id == select(Worker.id).where(
            Worker.external_id == "PLAPTOP").scalar_subquery())) == "main"
    assert not errors, errors


def test_a_zoom_change_measures_the_card_again_and_keeps_the_answers(page, app, live_server, motion_clips, tmp_path):
    width, height = 1366, 657
    slug = create_motion_study(app, motion_clips, tmp_path, slug="motion-zoom", **SMALL)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    _enter(page, live_server, slug, "PZOOM", width, height)
    _calibrate(page, width, height)

    # One RDK practice trial answered at the calibrated zoom.
    assert _to_trial(page) == "trial:ready"
    _assert_trial_fits(page, width, height)
    first = page.evaluate("window.assignmentDriver.plugin.current.trial.trial_id")
    run_trial(page, cursor_for(*true_vector(app, first), centre=(width / 2, height / 2)))
    assert _to_trial(page) == "trial:ready"
    second = page.evaluate("window.assignmentDriver.plugin.current.trial.trial_id")
    assert second != first

    # The worker zooms out to 90 % (the old page's advice for a small window) while the next trial waits
    # for its start: devicePixelRatio 1 -> 0.9 and the window is 1366 / 0.9 x 657 / 0.9 CSS pixels. The
    # trial goes, the card page comes back, saying why, with the card at the size the first measurement
    # gives at the new zoom.
    zoom = 0.9
    width, height = round(width / zoom), round(height / zoom)
    cdp = page.context.new_cdp_session(page)
    cdp.send("Emulation.setDeviceMetricsOverride",
             {"width": width, "height": height, "deviceScaleFactor": zoom, "mobile": False})
    assert tick_until(page, lambda: status(page) == "calibration")
    expect(page.locator("#calibration")).to_have_attribute("data-recalibration", "true")
    expect(page.locator("#calib-recalibration")).to_contain_text("zoom changed (100 % to 90 %")
    expect(page.locator("#calib-recalibration")).to_contain_text("your answers so far are kept")
    assert "zoom out" not in page.text_content("body")
    assert float(page.get_attribute("#calib-card", "data-width")) == pytest.approx(323.5 / zoom, abs=0.01)
    # Through the same DevTools session: Playwright's page.screenshot resets the emulated scale factor.
    shot = cdp.send("Page.captureScreenshot", {"format": "png"})["data"]
    _shot_path("motion_recalibration.png").write_bytes(base64.b64decode(shot))
    assert page.evaluate("devicePixelRatio") == pytest.approx(zoom)
    page.keyboard.press("ArrowLeft")  # the worker matches the card (one pixel narrower)
    _calibrate(page, width, height)

    # Back to the same open trial; the answered one stays answered; the new measurement is stored.
    assert _to_trial(page) == "trial:ready"
    assert page.evaluate("window.assignmentDriver.plugin.current.trial.trial_id") == second
    assert page.evaluate("devicePixelRatio") == pytest.approx(zoom)
    _assert_trial_fits(page, width, height)
    with app_services(app).sessions() as session:
        stored = session.scalar(select(Calibration))
        assert stored.device_pixel_ratio == pytest.approx(zoom) and stored.accepted
        assert stored.card_width_px == pytest.approx(323.5 / zoom - 1, abs=0.1)
        assert [e["device_pixel_ratio"] for e in stored.refresh_intervals["earlier"]] == [1]
        assert [r.trial_id for r in session.scalars(select(MotionResponse))] == [int(first)]
        assert session.scalar(select(Assignment.stage)) == "rdk"
    run_trial(page, cursor_for(*true_vector(app, second), centre=(width / 2, height / 2)))

    def responses() -> list[tuple[int, float]]:
        with app_services(app).sessions() as session:
            return [(r.trial_id, r.device_pixel_ratio)
                    for r in session.scalars(select(MotionResponse).order_by(MotionResponse.id))]
    assert tick_until(page, lambda: len(responses()) == 2)
    assert responses() == [(int(first), 1), (int(second), pytest.approx(zoom))]
    assert not errors, errors
