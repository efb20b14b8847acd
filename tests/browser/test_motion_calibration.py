"""The calibration page of motion studies (experiment_ui/static/js/calibration.js) in chromium.

The harness runs the page without a server; ``page.route`` plays the server's
POST /calibration and records what the page sent. Checked: the card follows the arrow
keys and the corner handle (shape kept unless unticked), px/mm and the viewing distance
shown are right for a known card size, the refresh estimate uses at least 60 rAF
intervals and shows their median as Hz, the POST body is the contract's, and a
disqualified worker sees the server's reason.
"""
from __future__ import annotations

import json
import math
import statistics

import pytest

from tests.browser._motion_support import open_harness

pytestmark = pytest.mark.timeout(90)

RATIO = 53.98 / 85.6
BODY_KEYS = {"card_width_px", "card_height_px", "refresh_intervals_ms", "fullscreen", "device_pixel_ratio",
             "screen_width", "screen_height", "window_width", "window_height"}


def open_calibration(page, answer: dict) -> list[dict]:
    """Harness in calibration mode; returns the list the fake server appends request bodies to."""
    posted: list[dict] = []

    def calibration(route, request):
        assert request.method == "POST"
        posted.append(json.loads(request.post_data))
        route.fulfill(status=200, body=json.dumps(answer), headers={"Content-Type": "application/json"})

    open_harness(page, {"mode": "calibration", "assignmentId": "H1", "params": {"refresh_samples": 60}},
                 extra={"/api/v1/assignments/H1/calibration": calibration})
    page.wait_for_selector("#calib-card")
    return posted


def card(page) -> tuple[float, float]:
    box = page.eval_on_selector("#calib-card", "e => [parseFloat(e.dataset.width), parseFloat(e.dataset.height)]")
    return box[0], box[1]


def figures(width: float, height: float) -> tuple[float, float]:
    px_per_mm = (width / 85.6 + height / 53.98) / 2
    return px_per_mm, (50 / px_per_mm / 10) / (2 * math.tan(math.radians(0.5)))


ACCEPTED = {"px_per_mm": 4.0, "viewing_distance_cm": 71.6, "refresh_hz": 60.0, "refresh_irregular_fraction": 0.0,
            "accepted": True, "reason": None, "stage": "rdk"}


def test_arrow_keys_and_handle_resize_the_card(page):
    open_calibration(page, ACCEPTED)
    w0, h0 = card(page)
    assert w0 == pytest.approx(323.5) and h0 == pytest.approx(323.5 * RATIO, abs=0.01)
    page.keyboard.press("ArrowRight")
    assert card(page) == pytest.approx((w0 + 1, (w0 + 1) * RATIO), abs=0.01)
    page.keyboard.press("Shift+ArrowUp")
    assert card(page) == pytest.approx((w0 + 11, (w0 + 11) * RATIO), abs=0.01)
    page.keyboard.press("ArrowDown")
    assert card(page)[0] == pytest.approx(w0 + 10, abs=0.01)
    # The on-screen size follows.
    box = page.locator("#calib-card").bounding_box()
    assert box["width"] == pytest.approx(w0 + 10, abs=0.6)

    # Drag the corner handle 40 px right (shape kept: the height follows the width).
    handle = page.locator("#calib-handle").bounding_box()
    x, y = handle["x"] + handle["width"] / 2, handle["y"] + handle["height"] / 2
    page.mouse.move(x, y)
    page.mouse.down()
    page.mouse.move(x + 20, y + 90, steps=3)
    page.mouse.move(x + 40, y + 5, steps=3)
    page.mouse.up()
    w1, h1 = card(page)
    assert w1 == pytest.approx(w0 + 50, abs=0.01) and h1 == pytest.approx(w1 * RATIO, abs=0.01)

    # Untick "keep the shape": Left/Right change only the width, Up/Down only the height.
    page.uncheck("#calib-lock")
    page.keyboard.press("Shift+ArrowUp")
    assert card(page) == pytest.approx((w1, h1 + 10), abs=0.01)
    page.keyboard.press("ArrowLeft")
    assert card(page) == pytest.approx((w1 - 1, h1 + 10), abs=0.01)


@pytest.mark.parametrize("size", [(1366, 657), (1280, 600)])
def test_card_is_drawn_at_the_size_it_reports_up_to_where_it_stops(page, size):
    """Issue 39: the card's column once capped it at 448 px (5.23 px/mm) while the figures kept growing.
    Now, however large the card is set, the drawn box is px/mm x 85.6 mm wide; the keys stop where the
    column ends, far above the px/mm of a 1366 x 768 11.6-inch laptop (5.3), and nothing scrolls."""
    page.set_viewport_size({"width": size[0], "height": size[1]})
    open_calibration(page, ACCEPTED)
    assert page.evaluate("document.documentElement.scrollHeight") <= size[1]  # fits as it starts
    previous = None
    while card(page)[0] != previous:
        previous = card(page)[0]
        page.keyboard.press("Shift+ArrowRight")
        px_per_mm = float(page.get_attribute("#calib-size", "data-px-per-mm"))
        box = page.locator("#calib-card").bounding_box()
        assert box["width"] == pytest.approx(px_per_mm * 85.6, abs=1)
        assert box["height"] == pytest.approx(px_per_mm * 53.98, abs=1)
    assert px_per_mm > 8  # a 1920 px wide 13.3-inch screen at 100 % is 6.5 px/mm
    stage = page.locator(".calib-stage").bounding_box()
    assert box["x"] >= stage["x"] - 0.5 and box["x"] + box["width"] <= stage["x"] + stage["width"] + 0.5
    assert page.evaluate("document.documentElement.scrollWidth") <= size[0]


def test_px_per_mm_distance_refresh_and_post_body(page):
    posted = open_calibration(page, ACCEPTED)
    # Make the card about 400 x 250 px: shape kept to 400 px wide, then the height set separately.
    w0, _ = card(page)
    for _ in range(int((400 - w0) // 10)):
        page.keyboard.press("Shift+ArrowRight")
    while card(page)[0] < 400 - 1e-6:
        page.keyboard.press("ArrowRight")
    page.uncheck("#calib-lock")
    while card(page)[1] > 250.5:
        page.keyboard.press("ArrowDown")
    width, height = card(page)
    assert width == pytest.approx(400, abs=1) and height == pytest.approx(250, abs=1)
    px_per_mm, distance = figures(width, height)
    assert float(page.get_attribute("#calib-size", "data-px-per-mm")) == pytest.approx(px_per_mm, abs=1e-3)
    assert float(page.get_attribute("#calib-distance", "data-cm")) == pytest.approx(distance, abs=0.01)
    assert f"about {round(distance)} cm" in page.text_content("#calib-distance")
    assert f"{px_per_mm:.2f} pixels per mm" in page.text_content("#calib-size")

    page.wait_for_selector("#calibration[data-refresh-done='true']")
    page.click("#calib-continue")
    page.wait_for_function("window.harness.done === true")
    assert len(posted) == 1
    body = posted[0]
    assert set(body) == BODY_KEYS
    assert body["card_width_px"] == pytest.approx(width, abs=0.05)
    assert body["card_height_px"] == pytest.approx(height, abs=0.05)
    intervals = body["refresh_intervals_ms"]
    assert len(intervals) >= 60 and all(i > 0 for i in intervals)
    assert body["fullscreen"] is False            # never requested
    assert body["window_width"] == 1366 and body["window_height"] == 768
    assert body["device_pixel_ratio"] == 1
    # The rate shown is the median of the intervals sent (headless chromium runs near 60 Hz).
    shown = float(page.get_attribute("#calib-refresh", "data-hz"))
    assert shown == pytest.approx(1000 / statistics.median(intervals), rel=1e-3)
    assert 30 < shown < 130
    assert page.get_attribute("#calibration", "data-outcome") == "accepted"
    assert page.evaluate("window.harness.calibrationResult.stage") == "rdk"


def test_disqualification_reason_is_shown(page):
    reason = "Your screen refreshes 30 times per second; this study needs at least 55."
    answer = {**ACCEPTED, "refresh_hz": 30.0, "accepted": False, "reason": reason, "stage": "disqualified"}
    posted = open_calibration(page, answer)
    page.wait_for_selector("#calibration[data-refresh-done='true']")
    page.click("#calib-continue")
    page.wait_for_selector("#calib-message:not([hidden])")
    assert page.text_content("#calib-message") == reason
    assert page.get_attribute("#calibration", "data-outcome") == "disqualified"
    assert len(posted) == 1


def test_fullscreen_request_is_recorded(page):
    posted = open_calibration(page, ACCEPTED)
    page.click("#calib-fullscreen")
    page.wait_for_selector("#calib-fullscreen-status[data-fullscreen]")
    granted = page.get_attribute("#calib-fullscreen-status", "data-fullscreen") == "true"
    page.wait_for_selector("#calibration[data-refresh-done='true']")
    page.click("#calib-continue")
    page.wait_for_function("window.harness.done === true")
    # Whatever headless chromium decided, the body says whether the page was in fullscreen.
    in_fullscreen = page.evaluate("Boolean(document.fullscreenElement)")
    assert posted[0]["fullscreen"] is (granted and in_fullscreen)
