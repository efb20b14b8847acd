"""Issue 15's motion pages in chromium, each at 1280 x 600 (screenshots in $PERCEPTLAB_SCREENSHOTS):

- the experimenter's motion study page refreshes itself (``page.clock`` drives its timer) with the right
  headline ("1 / 4" sessions after one session of two clips, not "2 / 8") and a progress badge per worker;
- the blind-spot viewing distance of the calibration page (harness, fake clock): Space counts only while
  the dot moves, stray keys and a held Space record nothing, an implausible distance is measured again,
  and the sweeps go with the calibration body;
- a worker who passes the RDK screening is told so on the next card (nothing about the answers), and the
  progress badge names the part about to start without covering the card;
- the completion page shows the assignment's earnings and copies the completion code.
"""
from __future__ import annotations

import json
import math
import re

import pytest
from playwright.sync_api import expect
from sqlalchemy import select

from server import auth, exports
from server.models import Assignment
from server.paradigms.motion.models import Calibration
from server.paradigms.motion.paradigm import blind_spot_distance
from server.services import app_services
from tests.browser._motion_support import cursor_for, open_harness, run_trial, status, to_calibration, true_vector
from tests.server.conftest import WorkerClient
from tests.server.motion_support import MotionWorker, create_motion_study

pytestmark = pytest.mark.timeout(180)

PASSWORD = "correct horse battery"
SMALL = {"session": {"probes_per_clip": 2, "repetitions": 1},
         "practice": {"practice_needed": 1, "practice_max": 3},
         "screening": {"rdk_practice": 1, "rdk_trials": 4}}
CARD_PX_PER_MM = (323.5 / 85.6 + 323.5 * 53.98 / 85.6 / 53.98) / 2   # the card as the page first draws it
SPEED_PX_MS = 25 * CARD_PX_PER_MM / 1000                            # blind_spot_speed_mm_s = 25
START_PX = 10 * CARD_PX_PER_MM                                       # blind_spot_start_mm = 10
SIZES = ((1280, 600), (1366, 657))


def _log_in(page, app, url: str) -> None:
    with app_services(app).sessions() as session:
        auth.create_user(session, "alice", PASSWORD)
        session.commit()
    page.goto(url)
    page.fill("#username", "alice")
    page.fill("#password", PASSWORD)
    page.click("button[type=submit]")
    expect(page).to_have_url(url)


def _finish(app, slug: str, worker_id: str) -> MotionWorker:
    worker = MotionWorker(app, slug, worker_id=worker_id)
    worker.start()
    worker.calibrate()
    worker.answer_block()
    worker.answer_block()
    return worker


def _fits(page, width: int, height: int | None = None) -> None:
    """Nothing to scroll sideways (nor down, given ``height``)."""
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    if height is not None:
        assert page.evaluate("document.documentElement.scrollHeight") <= height


def _apart(page, a: str, b: str) -> None:
    """The boxes of selectors ``a`` and ``b`` do not overlap."""
    one, two = page.locator(a).bounding_box(), page.locator(b).bounding_box()
    assert one and two, (a, b)
    overlap = (one["x"] < two["x"] + two["width"] and two["x"] < one["x"] + one["width"]
               and one["y"] < two["y"] + two["height"] and two["y"] < one["y"] + one["height"])
    assert not overlap, (a, one, b, two)


# ---------------------------------------------------------------- the experimenter's page

def test_motion_study_page_refreshes_itself(page, app, live_server, motion_clips, tmp_path, screenshot):
    slug = create_motion_study(app, motion_clips, tmp_path, slug="motion-live", **SMALL)
    salt = exports.study_salt("test-secret", slug)
    _finish(app, slug, "WFIRST")
    page.set_viewport_size({"width": 1280, "height": 600})
    page.clock.install(time=1_000_000)
    page.clock.pause_at(1_001_000)
    _log_in(page, app, f"{live_server}/admin/studies/{slug}")
    # One session of 2 clips: 1 of 4 sessions (2 clips x 4 observers / 2 per session), 2 of 8 clip viewings.
    expect(page.locator("#sessions-done")).to_have_text("1")
    expect(page.locator("#sessions-target")).to_have_text("4")
    expect(page.locator("#clip-sessions-done")).to_have_text("2")
    first = page.locator(f'#workers-table tr[data-worker="{exports.pseudonym(salt, "WFIRST")}"] .stage-badge')
    expect(first).to_have_text("completed")
    page.evaluate("window.notReloaded = true")

    # Meanwhile: a second session completes, a third worker is in the screening, a fourth calibrates.
    _finish(app, slug, "WSECOND")
    screening = MotionWorker(app, slug, worker_id="WTHIRD")
    screening.start()
    screening.calibrate()
    for _ in range(2):  # the practice trial, then the first test trial
        screening.answer(screening.state()["trials"][0])
    MotionWorker(app, slug, worker_id="WFOURTH").start()
    expect(page.locator("#sessions-done")).to_have_text("1")   # nothing changes before the timer fires
    page.clock.run_for(5_100)                                   # dashboard_refresh_seconds = 5
    expect(page.locator("#sessions-done")).to_have_text("2")
    expect(page.locator("#clip-sessions-done")).to_have_text("4")
    expect(page.locator("#n-workers")).to_have_text("4")
    expect(page.locator("#n-screened")).to_have_text("2")
    expect(page.locator("#clips-table tbody tr")).to_have_count(2)
    expect(page.locator("#clips-table tbody tr").first.locator("td").nth(3)).to_have_text("2")
    badge = {name: page.locator(f'#workers-table tr[data-worker="{exports.pseudonym(salt, name)}"] .stage-badge')
             for name in ("WSECOND", "WTHIRD", "WFOURTH")}
    expect(badge["WSECOND"]).to_have_text("completed")
    expect(badge["WTHIRD"]).to_have_text("screening 1/4")
    expect(badge["WFOURTH"]).to_have_text("calibration")
    expect(page.locator("#refresh-status")).to_contain_text("refreshes every 5 s")
    assert page.evaluate("window.notReloaded") is True
    assert "WTHIRD" not in page.locator("#workers-table").inner_text()
    _fits(page, 1280)
    screenshot(page, "motion-dashboard")

    # Pausing shows at once; a refresh keeps the paused state.
    page.click("#pause-form button")
    expect(page.locator("#study-status")).to_have_text("paused")
    page.clock.run_for(5_100)
    expect(page.locator("#resume-form")).to_be_visible()


# ---------------------------------------------------------------- blind spot (harness)

def _calibration_harness(page, repetitions: int = 5) -> list[dict]:
    posted: list[dict] = []

    def calibration(route, request):
        posted.append(json.loads(request.post_data))
        answer = {"px_per_mm": 3.78, "viewing_distance_cm": 75.8, "measured_distance_cm": 60.0, "refresh_hz": 60.0,
                  "refresh_irregular_fraction": 0.0, "accepted": True, "reason": None, "stage": "rdk"}
        route.fulfill(status=200, body=json.dumps(answer), headers={"Content-Type": "application/json"})

    page.clock.install(time=1_000_000)
    page.clock.pause_at(1_001_000)
    open_harness(page, {"mode": "calibration", "assignmentId": "H1",
                        "params": {"refresh_samples": 60, "blind_spot": True, "blind_spot_repetitions": repetitions}},
                 extra={"/api/v1/assignments/H1/calibration": calibration})
    while page.get_attribute("#calibration", "data-refresh-done") != "true":
        page.clock.run_for(500)
    return posted


def _sweep(page, ms: int) -> None:
    page.click("#bs-start")
    page.clock.run_for(ms)
    page.keyboard.press("Space")


def _done(page) -> int:
    return int(page.get_attribute("#bs-count", "data-done"))


def test_blind_spot_measures_the_viewing_distance(page, screenshot):
    page.set_viewport_size({"width": 1280, "height": 600})
    posted = _calibration_harness(page)
    card_cm = page.get_attribute("#calib-distance", "data-cm")
    stated = f"about {round(float(card_cm))} cm ({round(float(card_cm) / 2.54)} inches)"
    expect(page.locator("#calib-distance")).to_contain_text(stated)
    page.click("#calib-continue")                       # the card is set: on to the blind spot
    expect(page.locator("#blind-spot")).to_be_visible()
    # One viewing distance: the blind-spot step states the card step's (issue 39: 65 cm, then 55 cm).
    assert page.get_attribute("#bs-target", "data-cm") == card_cm
    expect(page.locator("#bs-target")).to_contain_text(stated)
    expect(page.locator("#calib-card-page")).to_be_hidden()
    expect(page.locator("#calib-continue")).to_be_disabled()
    width = page.evaluate("document.getElementById('calib-card').dataset.width")
    page.keyboard.press("ArrowRight")                    # the card's keys are off now
    assert page.evaluate("document.getElementById('calib-card').dataset.width") == width

    # Space before a sweep, other keys during one, and a held Space's repeats record nothing.
    page.keyboard.press("Space")
    assert _done(page) == 0 and page.locator("#bs-dot").is_hidden()
    page.keyboard.down("Space")                          # held from before the sweep ...
    page.click("#bs-start")
    page.clock.run_for(1_000)
    page.keyboard.down("Space")                          # ... its auto-repeat is no answer
    page.keyboard.press("KeyX")
    page.keyboard.press("Enter")
    assert _done(page) == 0 and page.get_attribute("#blind-spot", "data-moving") == "true"
    _fits(page, 1280, 600)
    screenshot(page, "blind-spot")
    page.keyboard.up("Space")
    page.clock.run_for(4_300)
    page.keyboard.press("Space")                         # after ~5.3 s: the first sweep
    assert _done(page) == 1 and page.locator("#bs-dot").is_hidden()
    page.keyboard.press("Space")                         # the dot stopped: nothing more
    assert _done(page) == 1

    # A sweep nobody answers ends at the left edge and is not counted.
    page.click("#bs-start")
    page.clock.run_for(20_000)
    expect(page.locator("#bs-message")).to_contain_text("reached the edge")
    assert _done(page) == 1
    durations = [5_200, 5_400, 5_250, 5_350]
    for ms in durations:
        _sweep(page, ms)
    assert _done(page) == 5
    expect(page.locator("#calib-continue")).to_be_enabled()
    shown = float(page.get_attribute("#blind-spot", "data-distance-cm"))
    expect(page.locator("#bs-message")).to_contain_text(f"about {round(shown)} cm")
    # ~60 cm measured where the card asks for ~76: the worker is told the one distance and which way to move.
    expect(page.locator("#bs-message")).to_contain_text(f"the study needs {stated}")
    expect(page.locator("#bs-message")).to_contain_text(f"move about {round(float(card_cm) - shown)} cm farther back")
    assert page.get_attribute("#blind-spot", "data-distance-ok") == "false"
    page.click("#calib-continue")
    page.wait_for_function("window.harness.done === true")
    body = posted[0]
    sweeps = body["blind_spot_px"]
    assert len(sweeps) == 5
    # Each sweep: start offset + speed x time, to within a frame of the fake 60 Hz rAF clock.
    for got, ms in zip(sweeps, [5_300, *durations]):
        assert got == pytest.approx(START_PX + SPEED_PX_MS * ms, abs=2 * SPEED_PX_MS * 17)
    px_per_mm = (body["card_width_px"] / 85.6 + body["card_height_px"] / 53.98) / 2
    assert shown == pytest.approx(blind_spot_distance(sweeps, px_per_mm), abs=0.05)  # the server's formula
    assert 55 < shown < 65
    assert math.isclose(px_per_mm, CARD_PX_PER_MM, abs_tol=0.01)


def test_an_implausible_distance_is_measured_again(page, screenshot):
    page.set_viewport_size({"width": 1280, "height": 600})
    posted = _calibration_harness(page, repetitions=2)
    page.click("#calib-continue")
    _sweep(page, 100)                                    # Space far too early: a few cm
    _sweep(page, 150)
    expect(page.locator("#bs-message")).to_contain_text("cannot be right")
    assert _done(page) == 0
    expect(page.locator("#calib-continue")).to_be_disabled()
    _fits(page, 1280)
    screenshot(page, "blind-spot-retry")
    _sweep(page, 5_000)
    _sweep(page, 5_100)
    page.click("#calib-continue")
    page.wait_for_function("window.harness.done === true")
    assert len(posted) == 1 and len(posted[0]["blind_spot_px"]) == 2


# ---------------------------------------------------------------- the worker: blind spot, screening, badge

def test_worker_measures_distance_passes_screening_and_is_told(page, app, live_server, motion_clips, tmp_path,
                                                               screenshot):
    slug = create_motion_study(app, motion_clips, tmp_path, slug="motion-told",
                               calibration={"blind_spot": True, "blind_spot_repetitions": 2}, **SMALL)
    page.set_viewport_size({"width": 1366, "height": 768})
    page.clock.install(time=1_000_000)
    page.clock.pause_at(1_001_000)
    page.goto(f"{live_server}/s/{slug}?participant=PTOLD1")
    to_calibration(page)
    while page.get_attribute("#calibration", "data-refresh-done") != "true":
        page.clock.run_for(500)
    page.click("#calib-continue")
    page.set_viewport_size({"width": 1280, "height": 600})
    _sweep(page, 5_300)
    expect(page.locator("#calibration h2")).to_have_text("Screen calibration: viewing distance")
    _fits(page, 1280, 600)
    screenshot(page, "blind-spot-step")
    _sweep(page, 5_300)
    page.set_viewport_size({"width": 1366, "height": 768})
    page.click("#calib-continue")

    progress: list[str] = []
    for _ in range(200):
        state = status(page)
        if state == "intro":
            part = page.get_attribute("#motion-intro", "data-part")
            progress.append(page.text_content("#motion-progress") or "")
            if part.startswith("main"):
                break
            assert page.locator("#motion-screening-passed").count() == 0
            page.click("#motion-intro-start")
        elif state == "feedback":
            page.keyboard.press("Space")
        elif state == "trial:ready":
            trial = page.evaluate("window.assignmentDriver.plugin.current.trial")
            run_trial(page, cursor_for(*true_vector(app, trial["trial_id"])))
        else:
            page.clock.run_for(100)
    else:
        raise AssertionError(f"no main intro; last status {status(page)!r}")

    # The first card after the screening says it was passed, and nothing about the answers or the score.
    note = page.locator("#motion-screening-passed")
    expect(note).to_have_text("✓ You passed the motion test. Next come the movies.")
    assert not re.search(r"\d", note.inner_text())
    # The badge names the part each card starts (it said "Moving dots · trial 4 of 4" here before).
    assert progress[0].startswith("Moving dots · practice") and progress[1].startswith("Moving dots · trial 1 of 4")
    expect(page.locator("#motion-progress")).to_have_text("Movies · practice 1 · passed 0 of 1")
    for width, height in SIZES:
        page.set_viewport_size({"width": width, "height": height})
        _apart(page, "#motion-progress", "#motion-intro")
        _fits(page, width, height)
        assert page.locator("#motion-intro-start").bounding_box()["y"] + 40 < height
    page.set_viewport_size({"width": 1280, "height": 600})
    screenshot(page, "screening-passed")
    with app_services(app).sessions() as session:
        assignment = session.scalar(select(Assignment).where(Assignment.study_id.is_not(None)))
        calibration = session.scalar(select(Calibration).where(Calibration.assignment_id == assignment.id))
        assert assignment.stage == "main" and 55 < calibration.measured_distance_cm < 65
        assert len(calibration.blind_spot_px["px"]) == 2


# ---------------------------------------------------------------- the completion page

def _completed_link_worker(app, study: str, pages: int) -> str:
    with app.test_client() as http:
        worker = WorkerClient(http, study, platform="link")
    with app_services(app).sessions() as session:
        row = session.scalar(select(Assignment).where(Assignment.id == int(worker.assignment_id)))
        row.stage, row.pages_completed, row.completion_code = "completed", pages, "7F3A9C21BE"
        session.commit()
    return worker.token


def test_completion_page_shows_earnings_and_copies_the_code(browser, app, live_server, study, screenshot):
    token = _completed_link_worker(app, study, pages=3)
    context = browser.new_context(viewport={"width": 1280, "height": 600})
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server)
    page = context.new_page()
    page.goto(f"{live_server}/w/{token}/")
    # SMALL_STUDY pays 0.50 for the required page and 0.40 for each of 2 extra pages.
    expect(page.locator("#earnings-total")).to_have_text("$1.30")
    expect(page.locator("#earnings-detail")).to_have_text(re.compile(r"\$0\.50 for 1 page \+ \$0\.80 bonus for 2 extra"))
    page.click("#btn-copy-code")
    expect(page.locator("#btn-copy-code")).to_have_text(re.compile("Copied"))
    assert page.evaluate("navigator.clipboard.readText()") == "7F3A9C21BE"
    _fits(page, 1280, 600)
    screenshot(page, "done")
    context.close()


def test_copy_falls_back_to_selecting_the_code(page, app, live_server, study):
    token = _completed_link_worker(app, study, pages=1)
    # No clipboard access (an http page, a refused permission): the code is selected for Ctrl+C instead.
    page.add_init_script("navigator.clipboard.writeText = () => Promise.reject(new Error('denied'));")
    page.set_viewport_size({"width": 1280, "height": 600})
    page.goto(f"{live_server}/w/{token}/")
    expect(page.locator("#earnings-total")).to_have_text("$0.50")
    expect(page.locator("#earnings-detail")).not_to_contain_text("bonus")
    page.click("#btn-copy-code")
    expect(page.locator("#btn-copy-code")).to_contain_text("Ctrl+C")
    assert page.evaluate("window.getSelection().toString().trim()") == "7F3A9C21BE"


def test_motion_completion_page_shows_the_session_reward(page, app, live_server, motion_clips, tmp_path):
    slug = create_motion_study(app, motion_clips, tmp_path, slug="motion-paid",
                               **{**SMALL, "session": {**SMALL["session"], "reward_per_session": "2.40"}})
    worker = _finish(app, slug, "WPAID")
    page.set_viewport_size({"width": 1280, "height": 600})
    page.goto(f"{live_server}/w/{worker.token}/")
    expect(page.locator("#earnings-total")).to_have_text("$2.40")
    expect(page.locator("#earnings-detail")).to_have_text("($2.40 for 1 session)")
    expect(page.locator("#completion-code")).to_have_text(re.compile(r"^[0-9A-F]{10}$"))
