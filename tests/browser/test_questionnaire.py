"""A worker clicks through a study's pre-task and post-task questionnaire in chromium at 1366x657
(server/paradigms/questionnaire.py): a refused submit shows each field's problem and stores nothing, the answers
are stored once, the work between them is done over the API, and the completion code is the one the work
earned. Both parts fit 1366x657 and 1280x600 without scrolling."""
from __future__ import annotations

import pytest
from playwright.sync_api import expect
from sqlalchemy import select

from server.models import QuestionnaireResponse
from server.services import app_services
from tests.browser._worker_support import _assignment
from tests.server.conftest import WorkerClient, write_study_file

pytestmark = pytest.mark.timeout(120)

SANDBOX = "https://workersandbox.mturk.com"
SMALL = {"pages": {"pairs_per_page": 6, "min_pages": 1, "max_pages": 1, "reward_per_page": "0.50",
                   "bonus_per_page": "0.40"},
         "quality": {"quiz_size": 0, "gold_rate": 0.0}}


def _study(app, demo_stimuli, tmp_path) -> str:
    from server.paradigms import create_study, read_study_file

    path = write_study_file(tmp_path, demo_stimuli, "asked", **SMALL,
                            questionnaire={"pre": ["demographics"], "post": ["viewing", "comments"]})
    with app_services(app).sessions() as session:
        study = create_study(session, read_study_file(path))
        session.commit()
        return study.slug


def _fits(page, width: int, height: int) -> None:
    """The whole part shows in a ``width`` x ``height`` window: nothing wider, the button in view unscrolled."""
    page.set_viewport_size({"width": width, "height": height})
    page.evaluate("window.scrollTo(0, 0)")
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    box = page.locator("#btn-questionnaire").bounding_box()
    assert box["y"] + box["height"] <= height, (width, height, box)


def _work_over_the_api(app, client, token: str, assignment_id: int) -> None:
    """The trials in between, answered over the worker API (the trial pages have browser tests of their own)."""
    worker = WorkerClient.__new__(WorkerClient)
    worker.client, worker.token, worker.assignment_id = client, token, str(assignment_id)
    assert worker.action("instructions_done").status_code == 200
    worker.answer_page(lambda trial: "left")
    assert worker.action("finish").json["stage"] == "completed"


def test_a_worker_answers_both_parts_of_the_questionnaire(app, demo_stimuli, tmp_path, live_server, page,
                                                          screenshot):
    slug = _study(app, demo_stimuli, tmp_path)
    page.clock.install()
    page.set_viewport_size({"width": 1366, "height": 657})
    page.goto(f"{live_server}/s/{slug}?assignmentId=AQ1&hitId=HIT1&workerId=WQ1&turkSubmitTo={SANDBOX}")
    page.check("#agree")
    page.click("#btn-consent")
    form = page.locator("main#questionnaire[data-part=pre]")
    expect(form).to_be_visible()
    _fits(page, 1366, 657)
    _fits(page, 1280, 600)
    page.set_viewport_size({"width": 1366, "height": 657})
    screenshot(page, "pre")
    # Submitted empty: the required questions are marked, nothing is stored.
    page.click("#btn-questionnaire")
    expect(page.locator("#questionnaire-errors")).to_be_visible()
    expect(page.locator("#q-age .q-problem")).to_have_text("Please answer this question.")
    expect(page.locator("#q-vision")).to_have_class("q-item q-invalid")
    expect(page.locator("#q-gender .q-problem")).to_have_count(0)  # optional
    screenshot(page, "pre-refused")
    page.fill("#q-age input", "34")
    page.check("#q-vision input[value=corrected]")
    page.check("#q-gender input[value=not_said]")
    page.click("#btn-questionnaire")
    expect(page.locator("main#instructions")).to_be_visible()

    assignment = _assignment(app, "AQ1")
    token = page.url.rstrip("/").rsplit("/", 1)[-1]
    _work_over_the_api(app, app.test_client(), token, assignment.id)
    code = _assignment(app, "AQ1").completion_code
    assert code  # earned by the work, before any post-task answer

    page.reload()
    expect(page.locator("main#questionnaire[data-part=post]")).to_be_visible()
    _fits(page, 1366, 657)
    _fits(page, 1280, 600)
    page.set_viewport_size({"width": 1366, "height": 657})
    screenshot(page, "post")
    page.fill("#q-distance_cm input", "500")  # out of bounds: refused with the range
    page.check("#q-device input[value=laptop]")
    page.fill("#q-comments textarea", "The third page was slow to load.")
    page.click("#btn-questionnaire")
    expect(page.locator("#q-distance_cm .q-problem")).to_contain_text("10 to 300")
    expect(page.locator("#q-comments textarea")).to_have_value("The third page was slow to load.")  # kept
    page.fill("#q-distance_cm input", "60")
    page.click("#btn-questionnaire")
    expect(page.locator("main#done")).to_be_visible()
    screenshot(page, "done")

    with app_services(app).sessions() as session:
        stored = {row.part: row.answers for row in session.scalars(select(QuestionnaireResponse))}
    assert stored == {
        "pre": {"age": 34, "gender": "not_said", "vision": "corrected", "colour_vision": None},
        "post": {"device": "laptop", "screen_inches": None, "distance_cm": 60, "lighting": None,
                 "comments": "The third page was slow to load."}}
    assert _assignment(app, "AQ1").completion_code == code
