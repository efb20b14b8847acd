"""A worker turned away in another HIT while a page of trials is open in the browser: the next click is refused
by the server (409 assignment_ended, nothing stored), quietly, and the page follows the server to the stop page."""
from __future__ import annotations

import pytest
from playwright.sync_api import expect
from sqlalchemy import func, select

from server.models import Assignment
from server.paradigms.paired.models import Vote
from server.paradigms.core import stop
from server.services import app_services
from tests.server.conftest import WorkerClient

pytestmark = pytest.mark.timeout(120)


def _votes(app) -> int:
    with app_services(app).sessions() as session:
        return int(session.scalar(select(func.count()).select_from(Vote)))


def test_a_click_after_a_stop_elsewhere_is_refused_quietly_and_the_stop_page_shows(page, app, live_server, study,
                                                                                  screenshot):
    client = app.test_client()
    here = WorkerClient(client, study, worker_id="WTWOHITS")
    elsewhere = WorkerClient(client, study, worker_id="WTWOHITS")  # the same worker's second HIT
    here.start()
    here.answer_page(here.correct_side)  # the quiz, over the API: a page of trials is next
    page.goto(live_server + here.entry["worker_url"])
    trial = page.locator("#trial")
    expect(trial).to_have_attribute("data-accepting", "true")
    with app_services(app).sessions() as session:  # stopped by a quality rule in the other HIT
        stop(session.get(Assignment, int(elsewhere.assignment_id)), "gold_accuracy", wrong=3, total=10)
        session.commit()
    # Whatever the trial page's notice shows is kept in sessionStorage (the stop page is a new document).
    page.evaluate("""() => {
      const notice = document.querySelector('#notice');
      new MutationObserver(() => { if (notice.textContent) sessionStorage.setItem('notice', notice.textContent); })
        .observe(notice, {childList: true, characterData: true, subtree: true, attributes: true});
    }""")
    before = _votes(app)
    page.click("#trial [data-side=left]")
    expect(page.locator("main#stopped")).to_be_visible()
    expect(page.locator("#stop-message")).to_contain_text("check questions")
    assert page.evaluate("() => sessionStorage.getItem('notice')") is None  # refused quietly: no "could not be saved"
    screenshot(page, "stopped-elsewhere")
    assert _votes(app) == before
    assert here.state()["stage"] == "stopped"
