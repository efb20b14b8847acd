"""Recruiters in chromium: a Prolific participant from Prolific's link to Prolific's completion URL (intercepted:
no network), and the dashboard's participants and codes page."""
from __future__ import annotations

import pytest
from playwright.sync_api import expect
from sqlalchemy import select

from server import auth
from server.models import Assignment
from server.services import app_services
from tests.browser.conftest import pause_page_clock
from tests.browser._worker_support import Walker, _any_side, _mouse_start, _page_action, correct_side
from tests.server.conftest import SMALL_STUDY, WorkerClient, create_test_study

pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("gold_answer_key")]

PID = "5f3a9c0e1d2b3a4c5d6e7f80"
CODE = "C1PL4ABC"
PROLIFIC_DONE = f"https://app.prolific.com/submissions/complete?cc={CODE}"
PASSWORD = "correct horse battery"


def _prolific_study(app, demo_stimuli, tmp_path) -> str:
    return create_test_study(app, demo_stimuli, tmp_path, slug="prolific",
                             entry={"recruiter": "prolific", "completion_code": CODE}, **SMALL_STUDY)


def _fits(page, width: int = 1280) -> None:
    assert page.evaluate("document.documentElement.scrollWidth") <= width, "the page scrolls sideways"


def test_a_prolific_participant_from_the_link_to_the_redirect(page, app, live_server, demo_stimuli, tmp_path,
                                                              screenshot):
    slug = _prolific_study(app, demo_stimuli, tmp_path)
    reached: list[str] = []

    def prolific(route):  # Prolific's side, without the network
        reached.append(route.request.url)
        route.fulfill(status=200, content_type="text/html",
                      body="<!doctype html><title>Prolific</title><h1 id='prolific'>Submission received</h1>")

    page.route("https://app.prolific.com/**", prolific)
    page.set_viewport_size({"width": 1280, "height": 600})
    page.goto(f"{live_server}/s/{slug}?PROLIFIC_PID={PID}&STUDY_ID=64aa00bb11cc&SESSION_ID=5e5f6a7b8c9d0e1f2a3b4c5d")
    expect(page.locator("body")).not_to_contain_text(CODE)
    _mouse_start(page)

    walker = Walker(page)
    for _ in range(3):  # the quiz
        assert walker.status() == "trial"
        walker.answer(lambda p: correct_side(p))
    assert walker.run(_any_side, kind="trials") == "page_done"
    expect(page.locator("body")).not_to_contain_text(CODE)
    # From here the page's timers run on a paused fake clock (also on the next page: Playwright replays
    # it there), so the countdown moves only when the test says, however slow the machine is.
    page.clock.install()
    pause_page_clock(page)
    _page_action(page, "btn-finish")

    expect(page.locator("main#done")).to_be_visible()
    expect(page.locator("#completion-code")).to_have_text(CODE)
    link = page.locator("#btn-redirect")
    expect(link).to_have_attribute("href", PROLIFIC_DONE)
    expect(link).to_have_text("Continue to Prolific")
    expect(page.locator("#redirect-note")).to_contain_text("Taking you back to Prolific in 5 seconds")
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server)
    page.click("#btn-copy-code")
    expect(page.locator("#btn-copy-code")).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == CODE
    _fits(page)
    screenshot(page, "done-prolific")
    page.clock.run_for(2000)
    expect(page.locator("#redirect-seconds")).to_have_text("3")
    assert reached == []
    page.clock.run_for(3000)
    expect(page.locator("#prolific")).to_be_visible()
    assert reached == [PROLIFIC_DONE]

    with app_services(app).sessions() as session:
        assignment = session.scalar(select(Assignment))
        assert assignment.stage == "completed" and assignment.worker.external_id == PID
        assert assignment.entry_params == {"STUDY_ID": "64aa00bb11cc", "SESSION_ID": "5e5f6a7b8c9d0e1f2a3b4c5d"}


def test_the_dashboard_checks_submitted_codes(page, app, live_server, demo_stimuli, tmp_path, screenshot):
    slug = _prolific_study(app, demo_stimuli, tmp_path)
    done = WorkerClient(app.test_client(), slug, worker_id=PID, platform="link")
    app.test_client().get(f"/s/{slug}?PROLIFIC_PID={PID}&STUDY_ID=64aa00bb11cc&SESSION_ID=5e5f6a7b8c9d0e1f2a3b4c5d")
    done.start()
    done.answer_page(done.correct_side)
    done.answer_page(done.correct_side)
    assert done.action("finish").json["stage"] == "completed"
    WorkerClient(app.test_client(), slug, worker_id="60aa00bb11cc22dd33ee44ff", platform="link").start()
    with app_services(app).sessions() as session:
        auth.create_user(session, "alice", PASSWORD)
        session.commit()

    page.set_viewport_size({"width": 1280, "height": 600})
    page.goto(f"{live_server}/admin/studies/{slug}")
    page.fill("#username", "alice")
    page.fill("#password", PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("#recruiter-rule")).to_contain_text("Recruiter Prolific")
    _fits(page)
    screenshot(page, "study-page")
    page.click("#participants-link")

    expect(page.locator("h1")).to_have_text("Participants and completion codes")
    rows = page.locator("#participants-table tbody tr")
    expect(rows).to_have_count(2)
    expect(page.locator("#participants-table tr[data-status=completed] .completion")).to_have_text(CODE)
    expect(page.locator("#participants-table")).not_to_contain_text(PID)  # pseudonyms until asked
    page.click("#show-raw")
    expect(page.locator("#participants-table tr[data-status=completed]")).to_contain_text(PID)
    expect(page.locator("#participants-table tr[data-status=completed]")).to_contain_text("5e5f6a7b8c9d0e1f2a3b4c5d")
    expect(page.locator("#participants-table tr[data-status=started]")).to_contain_text("started")
    _fits(page)

    submitted = ("Submission id,Participant id,Status,Completion code\n"
                 f"s1,{PID},AWAITING REVIEW,{CODE}\n"
                 "s2,60aa00bb11cc22dd33ee44ff,AWAITING REVIEW,C1PL4ABC\n"
                 "s3,6000000000000000000000ff,RETURNED,\n")
    page.set_input_files("#codes-file", files=[{"name": "prolific_export.csv", "mimeType": "text/csv",
                                                "buffer": submitted.encode()}])
    page.click("#check-button")
    expect(page.locator("#check-summary")).to_have_text("3 rows: 1 valid, 1 unknown participant, 1 not completed")
    results = page.locator("#check-table tbody tr")
    expect(results).to_have_count(3)
    expect(results.nth(0)).to_have_attribute("data-result", "valid")
    expect(results.nth(1)).to_have_attribute("data-result", "not completed")
    expect(results.nth(2)).to_have_attribute("data-result", "unknown participant")
    expect(results.nth(0)).to_contain_text("AWAITING REVIEW")
    _fits(page)
    screenshot(page, "codes-check")

    page.set_input_files("#codes-file", files=[{"name": "photo.csv", "mimeType": "text/csv",
                                                "buffer": b"\x89PNG\r\n\x1a\n\0\0\0"}])
    page.click("#check-button")
    expect(page.locator("#check-error")).to_contain_text("photo.csv: line 3: NUL byte")
