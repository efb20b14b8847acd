"""Shared helpers of the motion browser tests and benchmarks/frame_timing.py.

The harness page (experiment_ui/static/harness/motion.html) and the ES modules are
served by Playwright's ``page.route`` from the working tree under a fake origin, so no
server is needed and module imports work (they do not from file:// URLs).
"""
from __future__ import annotations

import functools
import io
import json
import math
import mimetypes
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from server.services import app_services

REPO = Path(__file__).resolve().parents[2]
STATIC = REPO / "experiment_ui" / "static"
ORIGIN = "http://perceptlab.test"
HARNESS_URL = f"{ORIGIN}/static/harness/motion.html"
FRAME_MS = 1000 / 30


def serve_static(page, extra: dict[str, Any] | None = None) -> None:
    """Serve experiment_ui/static under ORIGIN/static; ``extra`` maps other URL paths to
    a handler ``(route, request) -> None`` (e.g. a fake API endpoint)."""
    extra = extra or {}

    def handle(route, request):
        path = request.url[len(ORIGIN):].split("?")[0].split("#")[0]
        if path in extra:
            return extra[path](route, request)
        if path == "/static/harness/noise.png":  # the harness's matching-noise texture (a study ships its own)
            return route.fulfill(status=200, body=noise_png(), headers={"Content-Type": "image/png"})
        if path == "/static/harness/rdk-dots.bin":  # a synthetic RDK trial's dots, by the server's renderer
            return route.fulfill(status=200, body=rdk_dots(urlsplit(request.url).query),
                                 headers={"Content-Type": "application/octet-stream"})
        if path.startswith("/static/"):
            file = (STATIC / path[len("/static/"):]).resolve()
            if STATIC in file.parents and file.is_file():
                kind = mimetypes.guess_type(file.name)[0] or "application/octet-stream"
                if file.suffix == ".js":
                    kind = "text/javascript"
                return route.fulfill(status=200, body=file.read_bytes(), headers={"Content-Type": kind})
        return route.fulfill(status=404, body="not found")

    page.route(f"{ORIGIN}/**", handle)


@functools.cache
def noise_png(size: int = 1024) -> bytes:
    """A seamless 1/f² texture as a grey PNG, made like a study's (stimuli.noise)."""
    from PIL import Image

    from stimuli.noise import brownian_noise

    buffer = io.BytesIO()
    Image.fromarray(brownian_noise(size, rng=0)).save(buffer, format="PNG")
    return buffer.getvalue()


@functools.cache
def rdk_dots(query: str) -> bytes:
    """The dot movie (as GET .../motion-trials/<id>/dots sends it) of the harness's query
    ``direction_deg, speed_ppf, seed, n_dots, aperture_px, n_frames``."""
    from stimuli.rdk import rdk_dot_movie

    q = {k: v[0] for k, v in parse_qs(query).items()}
    return rdk_dot_movie(int(q["n_dots"]), int(q["aperture_px"]), float(q["direction_deg"]), float(q["speed_ppf"]),
                         int(q["seed"]), int(q["n_frames"]))


def open_harness(page, spec: dict, *, extra: dict | None = None) -> None:
    """Load the harness with ``spec`` (install ``page.clock`` before calling this for fake time)."""
    serve_static(page, extra)
    page.add_init_script(f"window.__harness = {json.dumps(spec)};")
    page.goto(HARNESS_URL)
    page.wait_for_function("window.harness && window.harness.ready === true")


def main_trial(trial_id: int = 1, *, movie_frames: int = 15, probe=(300.0, 200.0), gt=(3.0, -2.0),
               practice: bool = False, feedback: bool = False) -> dict:
    """A main trial on a synthetic 768x432 clip (drawn by the harness)."""
    movie_ms = movie_frames * FRAME_MS
    return {"trial_id": trial_id, "kind": "main", "practice": practice, "feedback": feedback, "repetition": 1,
            "movie_frames": movie_frames, "movie_ms": movie_ms, "isi2_ms": 3000 - movie_ms - 1000 - 500,
            "clip": {"clip_id": "synthetic", "synthetic": True, "frames": [], "width": 768, "height": 432},
            "probe": {"probe_id": f"p{trial_id:02d}", "x": probe[0], "y": probe[1],
                      "frame_index": (movie_frames - 1) // 2},
            "gt": {"u": gt[0], "v": gt[1]}}


def rdk_trial(trial_id: int = 1, *, direction_deg: float = 37.5, speed_ppf: float = 8.2, seed: int = 123,
              n_dots: int = 5000, practice: bool = False, feedback: bool = False) -> dict:
    import math

    """An RDK trial as State sends it (no direction, speed or seed), plus the harness's "synthetic"
    parameters of its dot movie (served by :func:`rdk_dots`) and the true vector for feedback."""
    rad = math.radians(direction_deg)
    return {"trial_id": trial_id, "kind": "rdk", "practice": practice, "feedback": feedback, "repetition": 1,
            "movie_frames": 15, "movie_ms": 500, "isi2_ms": 1000,
            "rdk": {"n_dots": n_dots, "aperture_px": 600, "dot_px": 2},
            "synthetic": {"direction_deg": direction_deg, "speed_ppf": speed_ppf, "seed": seed},
            "gt": {"u": speed_ppf * math.cos(rad), "v": -speed_ppf * math.sin(rad)}}


# ---------------------------------------------------------------- walking a worker through the study page

STATUS_JS = """() => {
  for (const id of ['consent', 'instructions', 'done', 'stopped']) if (document.querySelector('main#' + id)) return id;
  if (document.querySelector('#calibration')) return 'calibration';
  if (document.querySelector('.motion-feedback')) return 'feedback';
  if (document.querySelector('#motion-intro')) return 'intro';
  const plugin = window.assignmentDriver && window.assignmentDriver.plugin;  // the motion-matching plugin
  if (plugin && plugin.current && plugin.current.state) return 'trial:' + plugin.current.state;
  return '';
}"""


def cursor_for(u: float, v: float, centre: tuple[float, float] = (683, 384), radius: float = 300) -> tuple[float, float]:
    """Screen point the control panel (``radius`` px around the viewport's ``centre``; 1366 x 768 by
    default) maps to the vector (u, v) (image coordinates, v down)."""
    speed = min(math.hypot(u, v), 20.0)
    d = radius * math.log2(speed + 1) / math.log2(21)
    angle = math.atan2(-v, u)
    return centre[0] + d * math.cos(angle), centre[1] - d * math.sin(angle)


def status(page, timeout_s: float = 120.0) -> str:
    """What the study page shows (STATUS_JS), once it shows something other than a loading trial.

    The page's clock is paused: its own timers (saving indicator, retries) run 100 ms per poll, and the
    poll goes on until the page is there, however slow the machine; ``timeout_s`` of real time only
    ends a wait for a page that never comes (the last value is returned, for the caller's assertion).
    """
    from playwright.sync_api import Error as PlaywrightError

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = page.evaluate(STATUS_JS)
        except PlaywrightError:  # the app hands over to a server page (the end, consent): ask again
            page.wait_for_load_state()
            value = ""
        if (value and value != "trial:loading") or time.monotonic() > deadline:
            return value
        page.clock.run_for(100)
        page.wait_for_timeout(30)


# Milliseconds of page time from now to the nominal end of the current trial's third cycle.
THIRD_CYCLE_END_JS = """() => {
  const trial = window.assignmentDriver.plugin.current;
  return Math.floor(trial.T0 + 3 * trial.schedule.cycleMs - performance.now());
}"""


def to_calibration(page) -> None:
    """From the consent page of a motion study (just opened) through the instructions to the calibration."""
    assert status(page) == "consent"
    page.check("#agree")
    page.click("#btn-consent")
    assert status(page) == "instructions"
    page.click("#btn-start")
    assert status(page) == "calibration"


def run_trial(page, target: tuple[float, float]) -> dict:
    """Start the trial on screen, watch 3 cycles with the cursor at `target`, click."""
    trial = page.evaluate("window.assignmentDriver.plugin.current.trial")
    page.mouse.click(*target)                     # starts the movie (and sets the cursor value)
    page.clock.run_for(50)                        # the 2 warm-up refreshes, then the first cycle begins
    while page.evaluate("window.assignmentDriver.plugin.current && window.assignmentDriver.plugin.current.T0 === null"):
        page.clock.run_for(16)
    # One run of the clock to 100 ms before the third cycle's nominal end, then small steps to it:
    # every frame is drawn either way, but a hundred trials of 500 ms steps cost thousands of round trips.
    page.clock.run_for(max(0, page.evaluate(THIRD_CYCLE_END_JS) - 100))
    for _ in range(40):
        page.clock.run_for(50)
        if page.evaluate("window.assignmentDriver.plugin.current.cyclesCompleted >= 3"):
            break
    page.mouse.move(*target)
    page.mouse.click(*target)
    return trial


def true_vector(app, trial_id: int) -> tuple[float, float]:
    """A trial's true vector, from the database: the page is never told it before the answer."""
    from sqlalchemy import select

    from server.models import MotionClip, MotionProbe, MotionTrial
    from server.paradigms.motion.paradigm import trial_gt

    with app_services(app).sessions() as session:
        return trial_gt(session.execute(
            select(MotionTrial.kind, MotionTrial.params, MotionProbe.gt_u, MotionProbe.gt_v, MotionClip.movie_frames)
            .outerjoin(MotionProbe, MotionTrial.probe_id == MotionProbe.id)
            .outerjoin(MotionClip, MotionProbe.clip_id == MotionClip.id).where(MotionTrial.id == trial_id)).one())
