"""A worker who arrives when every page is taken: told the study is full (return the HIT), no submit
form, a page that fits laptop windows, and "Try again" that works once abandoned pages lapse."""
from __future__ import annotations

from sqlalchemy import select

from server.models import Assignment
from server.services import app_services
from tests.server.conftest import WorkerClient, create_test_study

SANDBOX = "https://workersandbox.mturk.com"
FULL = {"design": {"degree": 2, "votes_per_pair": 1},  # 44 pairs, one vote each: four pages of 11
        "pages": {"pairs_per_page": 11, "min_pages": 1, "max_pages": 3},
        "quality": {"quiz_size": 0, "gold_rate": 0.0, "reservation_minutes": 5}}


def _fits(page) -> bool:
    return page.evaluate("() => document.documentElement.scrollHeight <= innerHeight"
                         " && document.documentElement.scrollWidth <= innerWidth")


def test_full_study_page_and_try_again(app, live_server, demo_stimuli, tmp_path, clock, page, screenshot):
    slug = create_test_study(app, demo_stimuli, tmp_path, slug="full", **FULL)
    client = app.test_client()
    for _ in range(4):  # scripted clients take every page and walk away
        holder = WorkerClient(client, slug)
        holder.action("consent")
        assert holder.action("instructions_done").json["stage"] == "trials"
    page.goto(f"{live_server}/s/{slug}?assignmentId=AFULL1&hitId=H1&workerId=WFULL1&turkSubmitTo={SANDBOX}")
    assert page.locator("h1").inner_text() == "This study is full"
    assert "return the HIT" in page.locator("#full-return").inner_text()
    assert page.locator("#mturk-submit").count() == 0 and page.locator("#completion-code").count() == 0
    for width, height in ((1366, 657), (1280, 600)):
        page.set_viewport_size({"width": width, "height": height})
        assert _fits(page), (width, height)
    screenshot(page, "full")
    page.click("#btn-retry")  # still full: the same page again
    assert page.locator("h1").inner_text() == "This study is full"
    clock.advance(minutes=6)  # the abandoned pages' reservations lapse
    page.click("#btn-retry")
    page.wait_for_selector("#consent")
    page.check("#agree")
    page.click("#btn-consent")
    page.click("#btn-start")  # the instructions, then a page of trials: the worker is in
    page.wait_for_url(f"{live_server}/w/**")
    with app_services(app).sessions() as session:
        assert session.scalar(select(Assignment.stage).where(Assignment.external_id == "AFULL1")) == "trials"
