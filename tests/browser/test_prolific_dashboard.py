"""The experimenter's Prolific page in chromium, against the fake Prolific (tests/server/prolific_fake.py) injected
with ``PROLIFIC_CLIENT_FACTORY``: create a draft, publish, add places, fetch submissions, approve those whose codes
check, reject one with a reason, pay bonuses through a lost answer (paid once), stop twice."""
from __future__ import annotations

import pytest
from playwright.sync_api import expect
from sqlalchemy import select

from server.services import app_services
from server import auth
from server.models import ProlificBonus
from server.prolific import ProlificClient
from tests.server.conftest import SMALL_STUDY, create_test_study
from tests.server.prolific_fake import (BASE_URL, COMPLETION_CODE, PROLIFIC_ENTRY, TOKEN, FaultyTransport,
                                        completed_participant, make_fake)

PASSWORD = "correct horse battery"
HOST = "https://lab.example.org"
PIDS = [f"{i:024x}" for i in range(1, 5)]
REASON = ("The completion code you entered is not the one this study gave: the study's records show no finished "
          "session for your Prolific ID.")


@pytest.fixture
def fake(app):
    fake_app, state = make_fake()
    transport = FaultyTransport(fake_app)
    app.config["PROLIFIC_CLIENT_FACTORY"] = lambda: ProlificClient(TOKEN, base_url=BASE_URL, transport=transport,
                                                                   sleep=lambda s: None)
    return state, transport


@pytest.fixture
def pro(app, demo_stimuli, tmp_path) -> str:
    slug = create_test_study(app, demo_stimuli, tmp_path, slug="pro", entry=PROLIFIC_ENTRY, **SMALL_STUDY)
    for pid, pages in zip(PIDS, [3, 3, 1, 3]):
        completed_participant(app, slug, pid, pages)
    with app_services(app).sessions() as db:
        auth.create_user(db, "alice", PASSWORD)
        db.commit()
    return slug


def _row(page, table: str, participant: str):
    return page.locator(f"#{table} tbody tr[data-participant='{participant}']")


def test_create_publish_review_and_pay_in_the_browser(page, app, live_server, pro, fake, screenshot):
    state, transport = fake
    page.goto(f"{live_server}/admin/login")
    page.fill("#username", "alice")
    page.fill("#password", PASSWORD)
    page.click("button[type=submit]")
    expect(page).to_have_url(f"{live_server}/admin/")
    page.goto(f"{live_server}/admin/studies/{pro}")
    page.click("#prolific-link")
    expect(page).to_have_url(f"{live_server}/admin/prolific/studies/{pro}")
    expect(page.locator("#mode-banner")).to_contain_text("Real money")
    expect(page.locator("#create-form")).to_be_visible()

    page.fill("#places", "5")
    page.fill("#url", HOST)
    page.click("#create-draft")
    expect(page.locator("#message")).to_contain_text("Draft study")
    expect(page.locator("#prolific-status")).to_have_text("UNPUBLISHED")
    expect(page.locator("#fact-devices")).to_contain_text("desktop")
    prolific_id = next(iter(state.studies))
    assert state.studies[prolific_id]["completion_codes"][0]["code"] == COMPLETION_CODE

    page.click("#publish")
    expect(page.locator("#message")).to_have_text("Prolific study: publishing")  # Prolific publishes asynchronously
    state.settle()
    page.fill("#more", "2")
    page.click("#add-places")
    expect(page.locator("#message")).to_have_text("7 place(s) in all")
    expect(page.locator("#fact-places")).to_have_text("7")

    for pid in PIDS:
        state.add_submission(prolific_id, pid, code="WRONG" if pid == PIDS[3] else COMPLETION_CODE)
    page.click("#reconcile")
    expect(page.locator("#message")).to_have_text("4 submission(s) (4 new)")
    expect(page.locator("#submissions tbody tr")).to_have_count(4)
    expect(_row(page, "submissions", PIDS[3]).locator(".check")).to_contain_text("wrong code")
    screenshot(page, "submissions")

    page.click("#approve-checked")
    expect(page.locator("#message")).to_have_text("approval asked for 3 submission(s) (Prolific approves them "
                                                  "shortly; reconcile to see); 1 left for you to review")
    expect(_row(page, "submissions", PIDS[0]).locator(".status")).to_have_text("AWAITING REVIEW")
    expect(_row(page, "submissions", PIDS[0]).locator(".check")).to_have_text(
        "approval asked for; not shown approved by Prolific yet")
    state.settle()  # Prolific carries out the bulk approval
    page.click("#reconcile")
    expect(_row(page, "submissions", PIDS[0]).locator(".status")).to_have_text("APPROVED")
    wrong = _row(page, "submissions", PIDS[3])
    wrong.locator("select[name=category]").select_option("BAD_CODE")
    wrong.locator("textarea[name=message]").fill(REASON)
    wrong.locator("button.reject").click()
    expect(page.locator("#message")).to_contain_text("rejected")
    expect(_row(page, "submissions", PIDS[3]).locator(".status")).to_have_text("REJECTED")

    transport.inject("POST", "/pay/", "timeout")  # Prolific pays, the answer is lost
    page.click("#pay-bonuses")
    expect(page.locator("#message")).to_contain_text("2 pay call(s) without an answer")
    expect(page.locator("#message")).not_to_contain_text("wait for their submission")  # the rejected one earns none
    expect(_row(page, "ledger", PIDS[0]).locator(".state")).to_have_text("paying")
    screenshot(page, "paying")
    page.click("#pay-bonuses")
    expect(page.locator("#message")).to_contain_text("2 earlier pay call(s) confirmed on Prolific")
    expect(_row(page, "ledger", PIDS[0]).locator(".state")).to_have_text("paid")
    assert state.served("POST", "/pay/") == 1
    assert [state.paid_to(pid) for pid in PIDS] == [80, 80, 0, 0]
    with app_services(app).sessions() as db:
        assert sorted(db.scalars(select(ProlificBonus.status))) == ["paid", "paid"]

    page.click("#stop")
    expect(page.locator("#message")).to_have_text("Prolific study: awaiting review")
    page.click("#stop")
    expect(page.locator("#message")).to_have_text("Prolific study: already awaiting review")
    screenshot(page, "stopped")
