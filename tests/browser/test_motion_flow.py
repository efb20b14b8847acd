"""A motion-matching study end to end in chromium, on the live server (SQLite).

An MTurk worker opens the HIT and goes through consent, instructions, the calibration
page, the RDK screening (practice: the first answer is wrong and the trial is repeated;
then the test trials answered from the dots' true motion), the main practice and a full
main session, to the completed page with MTurk's submit form (a small study, and the default
one with its full 80-trial session). ``page.clock`` is installed and paused, so a trial's
3 x 3 s cycles run in a fraction of a second: the
test advances the fake clock itself. Then the database must hold one response per
trial shown, the calibration, and the raw frame logs.
"""
from __future__ import annotations

import re

import pytest
from sqlalchemy import func, select

from server.models import Assignment
from server.paradigms.motion.models import Calibration, FrameLog, MotionResponse, MotionTrial
from server.services import app_services
from tests.browser._motion_support import cursor_for, run_trial, status, to_calibration, true_vector
from tests.browser.conftest import tick_until
from tests.server.motion_support import SMALL, create_motion_study

pytestmark = pytest.mark.timeout(400)

SANDBOX = "https://workersandbox.mturk.com"
# The smallest window the studies admit (the default study's 600 px panel and RDK aperture with a 200 px text
# column on either side, motion.study.min_window): every trial page is drawn full-window on each refresh, and
# the 102 trials of the default session draw about 57,000 of them; at 1000 x 600 they cost 57 % of the
# pixels of 1366 x 768.
VIEW_W, VIEW_H = 1000, 600
def saving_until_the_answer_arrives(page, held: list) -> None:
    """A feedback trial waits for the server's answer (it carries the truth), saying so when slow."""
    for _ in range(100):
        if held:
            break
        page.clock.run_for(50)
    assert held, "the response was not sent"
    page.clock.run_for(700)
    assert page.text_content("#motion-app-status") == "Saving your answer…"
    assert page.locator(".motion-feedback").count() == 0
    held[0].continue_()


def go_through_study(page, app, live_server, slug: str, assignment: str, screenshot) -> tuple[list[dict], list[str]]:
    """An MTurk worker from the HIT URL to the end: the first RDK practice answer is wrong, every
    other answer is the true motion (read from the database: the page has no truth before the
    answer) or a guess on main test trials. Returns the trials shown, in order (with the dot
    movies the page fetched), and the intro cards seen."""
    dots_fetched: list[int] = []
    page.on("request", lambda request: dots_fetched.append(int(request.url.split("/")[-2]))
            if request.url.endswith("/dots") else None)
    held: list = []

    def hold(route, request):  # the first response is held back, as on a slow connection
        if request.method == "POST" and not held:
            held.append(route)
        else:
            route.continue_()

    page.set_viewport_size({"width": VIEW_W, "height": VIEW_H})
    page.clock.install(time=1_000_000)
    page.clock.pause_at(1_001_000)
    page.goto(f"{live_server}/s/{slug}?assignmentId={assignment}&hitId=H1&workerId=W{assignment}"
              f"&turkSubmitTo={SANDBOX}")

    to_calibration(page)

    # Calibration: the refresh measurement runs on the (fake, 16 ms) rAF clock.
    page.keyboard.press("Shift+ArrowRight")
    while page.get_attribute("#calibration", "data-refresh-done") != "true":
        page.clock.run_for(500)
    screenshot(page, "calibration")
    page.click("#calib-continue")

    shown: list[dict] = []
    parts: list[str] = []
    wrong_done = False
    for _ in range(1000):
        state = status(page)
        if state in ("done", "stopped"):
            break
        if state == "intro":
            parts.append(page.get_attribute("#motion-intro", "data-part"))
            page.click("#motion-intro-start")
        elif state == "feedback":
            text = page.text_content(".motion-feedback")
            assert "Direction error" in text
            shown[-1]["feedback_text"] = text
            page.keyboard.press("Space")
        elif state == "trial:ready":
            trial = page.evaluate("window.assignmentDriver.plugin.current.trial")
            assert not {"gt", "direction_deg", "speed_ppf", "seed"} & (set(trial) | set(trial.get("rdk", {})))
            u, v = true_vector(app, trial["trial_id"]) if trial["kind"] == "rdk" or trial["practice"] else (2.0, -1.0)
            if trial["kind"] == "rdk" and trial["practice"] and not wrong_done:
                u, v, wrong_done = -u, -v, True   # opposite direction: this practice trial fails
            if len(shown) == 1:
                screenshot(page, "rdk-trial")
            if not shown:
                page.route("**/motion-responses", hold)
            run_trial(page, cursor_for(u, v, centre=(VIEW_W / 2, VIEW_H / 2)))
            shown.append(trial)
            if len(shown) == 1:
                saving_until_the_answer_arrives(page, held)
                page.unroute("**/motion-responses", hold)
        else:
            page.clock.run_for(100)
    else:
        raise AssertionError(f"the study did not end; last status {status(page)!r}")
    assert status(page) == "done", page.text_content("body")
    # Every RDK trial drew the dots the server rendered; main trials fetched none.
    assert {t["trial_id"] for t in shown if t["kind"] == "rdk"} <= set(dots_fetched)
    assert not {t["trial_id"] for t in shown if t["kind"] == "main"} & set(dots_fetched)
    screenshot(page, "done")
    return shown, parts


def check_study_record(app, page, assignment_external_id: str, shown: list[dict], session_trials: int,
                       spec: dict) -> None:
    """What the worker saw is what the database holds: blocks in order, the failed practice trial
    repeated at once, one response (with its frame log) per trial shown, the calibration."""
    form = page.locator("form#mturk-submit")
    assert form.get_attribute("action") == f"{SANDBOX}/mturk/externalSubmit"
    assert page.locator("form#mturk-submit input[name=assignmentId]").get_attribute("value") == assignment_external_id

    # The failed RDK practice trial came back next (same dots), after a "will be repeated" verdict.
    first, second = shown[0], shown[1]
    assert first["practice"] and "will be repeated" in first["feedback_text"]
    assert second["trial_id"] != first["trial_id"]
    with app_services(app).sessions() as session:
        params = dict(session.execute(select(MotionTrial.id, MotionTrial.params).where(
            MotionTrial.id.in_((first["trial_id"], second["trial_id"])))).all())
    assert {k: params[second["trial_id"]][k] for k in ("direction_deg", "speed_ppf", "seed")} == {
        k: params[first["trial_id"]][k] for k in ("direction_deg", "speed_ppf", "seed")}
    practice = [t for t in shown if t["kind"] == "rdk" and t["practice"]]
    assert all("Well done" in t["feedback_text"] for t in practice[1:])
    # RDK test trials show the truth too (HuPerFlow); main test trials never do.
    assert all("feedback_text" in t for t in shown if t["kind"] == "rdk")
    assert all("feedback_text" not in t and "gt" not in t for t in shown if t["kind"] == "main" and not t["practice"])
    kinds = [(t["kind"], t["practice"]) for t in shown]
    assert kinds.count(("rdk", True)) == spec["rdk_practice"] + 1
    assert kinds.count(("rdk", False)) == spec["rdk_trials"]
    assert kinds.count(("main", True)) == spec["practice_needed"]
    assert kinds.count(("main", False)) >= session_trials   # + timing repeats if the study repeats drops
    order = [k for i, k in enumerate(kinds) if i == 0 or kinds[i - 1] != k]
    assert order == [("rdk", True), ("rdk", False), ("main", True), ("main", False)]

    with app_services(app).sessions() as session:
        assignment = session.scalar(select(Assignment).where(Assignment.external_id == assignment_external_id))
        assert assignment.stage == "completed"
        responses = session.scalars(select(MotionResponse).where(MotionResponse.assignment_id == assignment.id)).all()
        assert sorted(r.trial_id for r in responses) == sorted(t["trial_id"] for t in shown)
        assert all(r.cycles >= 3 for r in responses)
        calibration = session.scalar(select(Calibration).where(Calibration.assignment_id == assignment.id))
        assert calibration.accepted and calibration.refresh_hz == pytest.approx(62.5, abs=0.5)
        assert len(calibration.refresh_intervals["ms"]) >= 60
        assert session.scalar(select(func.count()).select_from(FrameLog).join(MotionResponse).where(
            MotionResponse.assignment_id == assignment.id)) == len(responses)
        open_trials = session.scalar(select(func.count()).select_from(MotionTrial).where(
            MotionTrial.assignment_id == assignment.id, ~MotionTrial.answered))
        assert open_trials == 0
    # Nothing left in the browser's queue (it deletes its storage key once every response is delivered).
    assert page.evaluate("Object.keys(localStorage).filter((k) => k.startsWith('perceptlab.responses.'))") == []


def test_motion_study_end_to_end(page, app, live_server, motion_clips, tmp_path, screenshot):
    slug = create_motion_study(app, motion_clips, tmp_path, **SMALL)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    shown, parts = go_through_study(page, app, live_server, slug, "AMOTION1", screenshot)
    assert parts == ["rdk:practice", "rdk:test", "main:practice", "main:test"]
    spec = {**SMALL["screening"], **SMALL["practice"]}
    check_study_record(app, page, "AMOTION1", shown, 2 * SMALL["session"]["probes_per_clip"]
                       * SMALL["session"]["repetitions"], spec)
    assert not errors, errors


@pytest.mark.slow  # 102 trials in the browser: the longest test of the suite
def test_default_study_full_session(page, app, live_server, motion_clips, tmp_path, screenshot):
    """The main session as `perceptlab study template --motion` makes it: 6 practice and a full main
    session of 80 trials (2 clips x 10 probes x 4 repetitions), all in the browser, after an RDK
    screening of 6 practice and 10 test trials. (The template's 80 RDK test trials are the same
    trial 80 times in the browser; test_motion_api walks the whole default study through the API.)
    Four clips (``four.json``): the demo's clips have only the 10 probes a session tests, so the
    practice takes the probes of the two clips the session does not show (never its own)."""
    slug = create_motion_study(app, motion_clips.parent / "four.json", tmp_path, slug="motion-default",
                               screening={"rdk_practice": 6, "rdk_trials": 10})
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    shown, _ = go_through_study(page, app, live_server, slug, "AFULL1", screenshot)
    check_study_record(app, page, "AFULL1", shown, 80, {"rdk_practice": 6, "rdk_trials": 10, "practice_needed": 6})
    main = [t for t in shown if t["kind"] == "main" and not t["practice"]]
    assert len({t["clip"]["clip_id"] for t in main}) == 2
    practice = [t for t in shown if t["kind"] == "main" and t["practice"]]
    assert practice and not {t["clip"]["clip_id"] for t in practice} & {t["clip"]["clip_id"] for t in main}
    assert sorted({(t["clip"]["clip_id"], t["probe"]["probe_id"], t["repetition"]) for t in main}) == sorted(
        (c, p, r) for c in {t["clip"]["clip_id"] for t in main} for p in {t["probe"]["probe_id"] for t in main
                                                                          if t["clip"]["clip_id"] == c}
        for r in (1, 2, 3, 4))
    assert not errors, errors


def test_preview_and_a_refused_display(page, app, live_server, motion_clips, tmp_path, screenshot):
    """The HIT preview of a motion study shows what the task needs and a frame of a clip; a worker
    whose display refreshes too slowly for the study is told so after the calibration."""
    slug = create_motion_study(app, motion_clips, tmp_path, slug="motion-fast", timing={"min_refresh_hz": 100.0})
    page.set_viewport_size({"width": VIEW_W, "height": VIEW_H})
    page.goto(f"{live_server}/s/{slug}?assignmentId=ASSIGNMENT_ID_NOT_AVAILABLE&hitId=H1")
    preview = page.text_content("main#preview")
    assert "video clips" in preview and "credit card" in preview and "100 Hz" in preview
    # The time it takes, from the session's trials (each its 3 cycles of 3 s + 2 s) and the setup.
    assert re.search(r"takes about \d+ minutes in all", preview), preview
    assert page.evaluate("document.querySelector('main#preview img').naturalWidth") > 0
    screenshot(page, "preview")

    page.clock.install(time=1_000_000)
    page.clock.pause_at(1_001_000)
    page.goto(f"{live_server}/s/{slug}?assignmentId=ASLOW1&hitId=H1&workerId=WSLOW1&turkSubmitTo={SANDBOX}")
    to_calibration(page)
    while page.get_attribute("#calibration", "data-refresh-done") != "true":
        page.clock.run_for(500)
    page.click("#calib-continue")
    # The calibration POST, then the app shows the stop page (slow on a loaded machine).
    tick_until(page, lambda: status(page) != "calibration")
    assert status(page) == "stopped"
    text = page.text_content("main#stopped")
    assert "refreshes 62 times a second" in text and "at least 100" in text, text
    screenshot(page, "refused")
    with app_services(app).sessions() as session:
        assignment = session.scalar(select(Assignment).where(Assignment.external_id == "ASLOW1"))
        assert assignment.stage == "disqualified"
        assert not session.scalar(select(Calibration).where(Calibration.assignment_id == assignment.id)).accepted
