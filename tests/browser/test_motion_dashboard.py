"""The experimenter's page of a motion-matching study in chromium: log in, open the study, see the
workers with calibration, screening and timing figures, download the motion exports."""
from __future__ import annotations

import re
from pathlib import Path

from playwright.sync_api import expect

from server import auth, exports
from server.services import app_services
from tests.server.motion_support import MotionWorker, create_motion_study

PASSWORD = "correct horse battery"
SMALL = {"session": {"probes_per_clip": 2, "repetitions": 1},
         "practice": {"practice_needed": 1, "practice_max": 3},
         "screening": {"rdk_practice": 1, "rdk_trials": 4}}


def _add_user(app) -> None:
    with app_services(app).sessions() as session:
        auth.create_user(session, "alice", PASSWORD)
        session.commit()


def test_experimenter_opens_the_motion_study(page, app, live_server, motion_clips, tmp_path,
                                             screenshot):
    slug = create_motion_study(app, motion_clips, tmp_path, slug="motion-dash", **SMALL)
    worker = MotionWorker(app, slug, worker_id="BROWSERM1")
    worker.start()
    worker.calibrate()
    worker.answer_block()  # RDK screening
    worker.answer_block()  # main session
    slow = MotionWorker(app, slug, worker_id="BROWSERM2")
    slow.start()
    slow.calibrate(interval_ms=1000 / 30)
    _add_user(app)

    page.goto(f"{live_server}/admin/studies/{slug}")
    expect(page).to_have_url(re.compile(r"/admin/login"))
    page.fill("#username", "alice")
    page.fill("#password", PASSWORD)
    page.click("button[type=submit]")
    expect(page).to_have_url(f"{live_server}/admin/studies/{slug}")
    expect(page.locator("h1")).to_contain_text("Motion test")
    expect(page.locator("#clips-table tbody tr")).to_have_count(2)
    expect(page.locator("#sessions-done")).to_have_text("1")   # one session (of 2 clips), not 2
    expect(page.locator("#clip-sessions-done")).to_have_text("2")
    expect(page.locator("#n-workers")).to_have_text("2")
    rows = page.locator("#workers-table tbody tr")
    expect(rows).to_have_count(2)
    pseudonym = exports.pseudonym(exports.study_salt("test-secret", slug), "BROWSERM1")
    expect(rows.nth(0)).to_contain_text(pseudonym)
    expect(rows.nth(0)).to_contain_text("completed")
    expect(rows.nth(0)).to_contain_text("passed")
    expect(rows.nth(1)).to_contain_text("(refused)")
    assert "BROWSERM1" not in page.locator("#workers-table").inner_text()
    # Pay and time: the finished session earned its reward; its wage is the reward per active hour.
    expect(page.locator("#n-paid")).to_have_text("1")
    expect(page.locator("#pay-total")).to_have_text("$2.10")
    expect(page.locator("#median-wage")).to_contain_text("/h")
    page.click("#pay-workers summary")
    expect(page.locator("#pay-table tbody tr")).to_have_count(2)
    expect(page.locator("#pay-table tbody tr").nth(0)).to_contain_text(pseudonym)
    screenshot(page, "motion-study")

    with page.expect_download() as download:
        page.click("#download-motion")
    lines = Path(download.value.path()).read_text().splitlines()
    assert lines[0].startswith("worker_id,clip_id,probe_id,repetition") and len(lines) == 1 + 4
    page.click("#pause-form button")
    expect(page.locator("#study-status")).to_have_text("paused")
