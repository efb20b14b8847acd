"""The experimenter's MTurk page in chromium: balance, a launch through the confirmation step, a reconcile
and an approval, against a Stubber-backed boto3 client injected with ``MTURK_CLIENT_FACTORY``."""
from __future__ import annotations

import datetime as dt
import re

import pytest
from botocore.stub import ANY, Stubber
from playwright.sync_api import expect
from sqlalchemy import select

from server import auth
from server.models import Assignment, MTurkHit, Study
from server.mturk import EXTERNAL_QUESTION_NS, make_client
from server.services import app_services
from tests.server.conftest import WorkerClient

PASSWORD = "correct horse battery"
HOST = "https://lab.example.org"
NOW = dt.datetime(2026, 11, 21, 12, 0, tzinfo=dt.UTC)


@pytest.fixture
def mturk(app):
    client = make_client(aws_access_key_id="AKIDTEST", aws_secret_access_key="secret")
    with Stubber(client) as stubber:
        app.config["MTURK_CLIENT_FACTORY"] = lambda live: client
        yield stubber
        stubber.assert_no_pending_responses()


def _completed_worker(app, study: str) -> tuple[str, str]:
    """A worker who started the study through MTurk and completed it: (assignment ID, worker ID)."""
    worker = WorkerClient(app.test_client(), study)
    with app_services(app).sessions() as db:
        study_id = db.scalar(select(Study.id).where(Study.slug == study))
        row = db.scalar(select(Assignment).where(Assignment.study_id == study_id))
        row.stage, row.pages_completed = "completed", 2
        auth.create_user(db, "alice", PASSWORD)
        db.commit()
        return row.external_id, worker.worker_id


def _expect_calls(stubber, study: str, assignment_id: str, worker_id: str) -> None:
    """Every MTurk request of the test, in order (the browser only clicks)."""
    balance = ("get_account_balance", {"AvailableBalance": "10000.00"}, {})
    stubber.add_response(*balance)                                   # the page
    # Launch, once confirmed: the "took part" type, the HIT type, one HIT of 2 assignments.
    stubber.add_response("create_qualification_type", {"QualificationType": {"QualificationTypeId": "QT1"}},
                         {"Name": "perceptlab: took part", "Keywords": "perceptlab", "Description": ANY,
                          "QualificationTypeStatus": "Active"})
    stubber.add_response("create_hit_type", {"HITTypeId": "HT1"},
                         {"AutoApprovalDelayInSeconds": ANY, "AssignmentDurationInSeconds": ANY, "Reward": "0.50",
                          "Title": ANY, "Keywords": ANY, "Description": ANY, "QualificationRequirements": ANY})
    question = (f'<ExternalQuestion xmlns="{EXTERNAL_QUESTION_NS}"><ExternalURL>{HOST}/s/{study}</ExternalURL>'
                "<FrameHeight>0</FrameHeight></ExternalQuestion>")
    hit = {"HITId": "HITB1", "HITTypeId": "HT1", "MaxAssignments": 2, "HITStatus": "Assignable",
           "Expiration": NOW + dt.timedelta(days=3)}
    stubber.add_response("create_hit_with_hit_type", {"HIT": hit},
                         {"HITTypeId": "HT1", "MaxAssignments": 2, "LifetimeInSeconds": 3 * 86400,
                          "Question": question, "RequesterAnnotation": ANY, "UniqueRequestToken": ANY})
    stubber.add_response(*balance)                                   # back on the page
    # Reconcile: the HIT, its one submitted assignment, whose worker gets the "took part" qualification.
    stubber.add_response("get_hit", {"HIT": hit}, {"HITId": "HITB1"})
    stubber.add_response("list_assignments_for_hit", {"Assignments": [
        {"AssignmentId": assignment_id, "WorkerId": worker_id, "HITId": "HITB1", "AssignmentStatus": "Submitted",
         "SubmitTime": NOW}]}, {"HITId": "HITB1", "MaxResults": 100,
                                "AssignmentStatuses": ["Submitted", "Approved", "Rejected"]})
    stubber.add_response("associate_qualification_with_worker", {},
                         {"QualificationTypeId": "QT1", "WorkerId": worker_id, "IntegerValue": 1,
                          "SendNotification": False})
    stubber.add_response(*balance)
    # Approve.
    stubber.add_response("get_assignment", {"Assignment": {"AssignmentId": assignment_id,
                                                           "AssignmentStatus": "Submitted"}},
                         {"AssignmentId": assignment_id})
    stubber.add_response("approve_assignment", {}, {"AssignmentId": assignment_id})
    stubber.add_response(*balance)


def test_launch_reconcile_and_approve_in_the_browser(page, app, live_server, study, mturk, screenshot):
    assignment_id, worker_id = _completed_worker(app, study)
    _expect_calls(mturk, study, assignment_id, worker_id)

    page.goto(f"{live_server}/admin/login")
    page.fill("#username", "alice")
    page.fill("#password", PASSWORD)
    page.click("button[type=submit]")
    expect(page).to_have_url(f"{live_server}/admin/")
    page.goto(f"{live_server}/admin/studies/{study}")
    page.click("#mturk-link")
    expect(page).to_have_url(f"{live_server}/admin/mturk/studies/{study}")
    expect(page.locator("#mode-banner")).to_contain_text("Sandbox")
    expect(page.locator("#balance")).to_have_text("$10000.00")
    expect(page.locator("#per_hit")).to_have_value("9")
    expect(page.locator("#url")).to_have_value("")  # served over http: the https URL must be typed
    screenshot(page, "page")

    page.fill("#assignments", "2")
    page.fill("#days", "3")
    page.fill("#url", HOST)
    page.click("#launch-review")
    expect(page.locator("#launch-confirm")).to_be_visible()
    expect(page.locator("#confirm-mode")).to_have_text("sandbox (no money)")
    expect(page.locator("#launch-total")).to_have_text("$1.20")  # $0.50 x 2 x 1.2
    expect(page.locator("#launch-form")).to_have_count(0)
    with app_services(app).sessions() as db:
        assert db.scalar(select(MTurkHit)) is None  # nothing posted yet
    launch_id = page.get_attribute("#confirm-form input[name=launch_id]", "value")
    screenshot(page, "confirm")

    page.click("#confirm-launch")
    expect(page).to_have_url(f"{live_server}/admin/mturk/studies/{study}")
    expect(page.locator("#message")).to_contain_text("1 HIT(s) posted on the sandbox marketplace")
    expect(page.locator("#hits tbody tr")).to_have_count(1)
    expect(page.locator("#hits")).to_contain_text("HITB1")
    with app_services(app).sessions() as db:
        assert db.scalar(select(MTurkHit.unique_request_token)) == f"{study}-0-{launch_id}"
    screenshot(page, "launched")

    page.click("#reconcile")
    expect(page.locator("#message")).to_contain_text("1 HIT(s), 1 assignment(s) (1 new)")
    row = page.locator("#plan tbody tr", has_text=assignment_id)
    expect(row).to_contain_text("Submitted")
    screenshot(page, "reconciled")

    row.get_by_role("button", name="Approve", exact=True).click()
    expect(page.locator("#message")).to_contain_text("1 assignment(s) approved")
    expect(page.locator("#plan tbody tr", has_text=assignment_id)).to_contain_text("Approved")
    expect(page.locator("#mturk-assignments")).to_contain_text(re.compile(r"Approved"))
    screenshot(page, "approved")
