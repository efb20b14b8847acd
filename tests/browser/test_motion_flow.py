"""A motion-matching study end to end in chromium, on the live server (SQLite).

An MTurk worker opens the HIT and goes through consent, instructions, the calibration
page, the RDK screening (practice: the first answer is wrong and the trial is repeated;
then the test trials answered from the dots' true motion), the main practice and a full
(small) main session, to the completed page with MTurk's submit form. ``page.clock`` is
installed and paused, so a trial's 3 x 3 s cycles run in a fraction of a second: the
test advances the fake clock itself. Then the database must hold one response per
trial shown, the calibration, and the raw frame logs.
"""
from __future__ import annotations

import math

import pytest
from sqlalchemy import func, select

from server.models import Assignment, Calibration, FrameLog, MotionResponse, MotionTrial
from tests.server.test_motion_api import SMALL, create_motion_study, motion_clips  # noqa: F401

pytestmark = pytest.mark.timeout(400)

SANDBOX = "https://workersandbox.mturk.com"
VIEW_W, VIEW_H = 1366, 768
CX, CY = VIEW_W / 2, VIEW_H / 2

STATUS_JS = """() => {
  for (const id of ['consent', 'instructions', 'done', 'stopped']) if (document.querySelector('main#' + id)) return id;
  if (document.querySelector('#calibration')) return 'calibration';
  if (document.querySelector('.motion-feedback')) return 'feedback';
  if (document.querySelector('#motion-intro')) return 'intro';
  const app = window.motionApp;
  if (app && app.current && app.current.state) return 'trial:' + app.current.state;
  return '';
}"""


def cursor_for(u: float, v: float) -> tuple[float, float]:
    """Screen point the control panel maps to the vector (u, v) (image coordinates, v down)."""
    speed = min(math.hypot(u, v), 20.0)
    d = 300 * math.log2(speed + 1) / math.log2(21)
    angle = math.atan2(-v, u)
    return CX + d * math.cos(angle), CY - d * math.sin(angle)


def status(page) -> str:
    for _ in range(50):
        value = page.evaluate(STATUS_JS)
        if value and value != "trial:loading":
            return value
        page.clock.run_for(100)  # let the app's own timers (saving indicator, retries) run
        page.wait_for_timeout(30)
    return value


def run_trial(page, target: tuple[float, float]) -> dict:
    """Start the trial on screen, watch 3 cycles with the cursor at `target`, click."""
    trial = page.evaluate("window.motionApp.current.trial")
    page.mouse.click(*target)                     # starts the movie (and sets the cursor value)
    while page.evaluate("window.motionApp.current && window.motionApp.current.T0 === null"):
        page.clock.run_for(16)
    for _ in range(40):
        if page.evaluate("window.motionApp.current.cyclesCompleted >= 3"):
            break
        page.clock.run_for(500)
    page.mouse.move(*target)
    page.mouse.click(*target)
    return trial


def test_motion_study_end_to_end(page, app, live_server, motion_clips, tmp_path, screenshot):  # noqa: F811
    slug = create_motion_study(app, motion_clips, tmp_path, **SMALL)
    page.set_viewport_size({"width": VIEW_W, "height": VIEW_H})
    page.clock.install(time=1_000_000)
    page.clock.pause_at(1_001_000)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(f"{live_server}/s/{slug}?assignmentId=AMOTION1&hitId=H1&workerId=WMOTION1&turkSubmitTo={SANDBOX}")

    assert status(page) == "consent"
    page.check("#agree")
    page.click("#btn-consent")
    assert status(page) == "instructions"
    page.click("#btn-start")

    # Calibration: the refresh measurement runs on the (fake, 16 ms) rAF clock.
    assert status(page) == "calibration"
    page.keyboard.press("Shift+ArrowRight")
    while page.get_attribute("#calibration", "data-refresh-done") != "true":
        page.clock.run_for(500)
    screenshot(page, "calibration")
    page.click("#calib-continue")

    shown: list[dict] = []
    parts: list[str] = []
    wrong_done = False
    for _ in range(200):
        state = status(page)
        if state in ("done", "stopped"):
            break
        if state == "intro":
            parts.append(page.get_attribute("#motion-intro", "data-part"))
            page.click("#motion-intro-start")
        elif state == "feedback":
            text = page.text_content(".motion-feedback")
            assert "Direction error" in text
            shown[-1]["feedback"] = text
            page.keyboard.press("Space")
        elif state == "trial:ready":
            trial = page.evaluate("window.motionApp.current.trial")
            if trial["kind"] == "rdk":
                rad = math.radians(trial["rdk"]["direction_deg"])
                u, v = trial["rdk"]["speed_ppf"] * math.cos(rad), -trial["rdk"]["speed_ppf"] * math.sin(rad)
            else:
                u, v = (trial["gt"]["u"], trial["gt"]["v"]) if "gt" in trial else (2.0, -1.0)
            if trial["kind"] == "rdk" and trial["practice"] and not wrong_done:
                u, v, wrong_done = -u, -v, True   # opposite direction: this practice trial fails
            if len(shown) == 1:
                screenshot(page, "rdk-trial")
            run_trial(page, cursor_for(u, v))
            shown.append(trial)
        else:
            page.clock.run_for(100)
    else:
        raise AssertionError(f"the study did not end; last status {status(page)!r}")

    assert status(page) == "done", page.text_content("body")
    screenshot(page, "done")
    form = page.locator("form#mturk-submit")
    assert form.get_attribute("action") == f"{SANDBOX}/mturk/externalSubmit"
    assert page.locator("form#mturk-submit input[name=assignmentId]").get_attribute("value") == "AMOTION1"
    assert parts == ["rdk:practice", "rdk:test", "main:practice", "main:test"]

    # The failed RDK practice trial was shown again (same dots; the server appends the repeat to
    # the practice trials), after a "will be repeated" verdict; no other practice answer failed.
    first = shown[0]
    practice = [t for t in shown if t["kind"] == "rdk" and t["practice"]]
    assert practice[0] is first and "will be repeated" in first["feedback"]
    repeats = [t for t in practice[1:] if t["rdk"] == first["rdk"]]
    assert len(repeats) == 1 and repeats[0]["trial_id"] != first["trial_id"]
    assert all("will be repeated" not in t["feedback"] for t in practice[1:])
    assert all("Well done" in t["feedback"] for t in practice[1:])
    kinds = [(t["kind"], t["practice"]) for t in shown]
    n_rdk_practice = kinds.count(("rdk", True))
    assert n_rdk_practice == SMALL["screening"]["rdk_practice"] + 1
    assert kinds.count(("rdk", False)) == SMALL["screening"]["rdk_trials"]
    assert kinds.count(("main", True)) == SMALL["practice"]["practice_needed"]
    session_trials = 2 * SMALL["session"]["probes_per_clip"] * SMALL["session"]["repetitions"]
    assert kinds.count(("main", False)) >= session_trials   # + timing repeats if the study repeats drops
    # Blocks in order: RDK practice, RDK test, main practice, main test.
    order = [k for i, k in enumerate(kinds) if i == 0 or kinds[i - 1] != k]
    assert order == [("rdk", True), ("rdk", False), ("main", True), ("main", False)]

    with app.extensions["perceptlab.sessions"]() as session:
        assignment = session.scalar(select(Assignment).where(Assignment.external_id == "AMOTION1"))
        assert assignment.stage == "completed"
        responses = session.scalars(select(MotionResponse).where(MotionResponse.assignment_id == assignment.id)).all()
        assert sorted(r.trial_id for r in responses) == sorted(t["trial_id"] for t in shown)
        assert all(r.cycles >= 3 for r in responses)
        calibration = session.scalar(select(Calibration).where(Calibration.assignment_id == assignment.id))
        assert calibration.accepted and calibration.refresh_hz == pytest.approx(62.5, abs=0.5)
        assert len(calibration.refresh_intervals["ms"]) >= 60
        assert session.scalar(select(func.count()).select_from(FrameLog)) == len(responses)
        open_trials = session.scalar(select(func.count()).select_from(MotionTrial).where(
            MotionTrial.assignment_id == assignment.id, ~MotionTrial.answered))
        assert open_trials == 0
    # Nothing left in the browser's queue, and no script error on the way.
    assert page.evaluate("window.motionApp.queue.pending") == 0
    assert not errors, errors
