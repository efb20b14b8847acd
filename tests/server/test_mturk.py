"""server/mturk.py against a real boto3 ``mturk`` client with botocore's Stubber: every request's
parameters are checked and the answers are canned (moto implements no MTurk at all)."""
from __future__ import annotations

import pytest
from botocore.stub import ANY
from sqlalchemy import func, select

from server.models import (
    Assignment,
    Bonus,
    MTurkAssignment,
    MTurkHit,
    MTurkQualification,
    Study,
)
from server.mturk import (
    EXTERNAL_QUESTION_NS,
    PAST,
    SANDBOX_ENDPOINT,
    MTurkError,
    MTurkService,
    make_client,
)
from server.services import app_services

from .conftest import WorkerClient
from .mturk_support import URL, _assignment, _create_params, _expect_hit_type, _hit


@pytest.fixture
def db(app):
    with app_services(app).sessions() as session:
        yield session


@pytest.fixture
def service(client, db):
    return MTurkService(client, db, sleep=lambda s: None)


def _study(db, slug):
    return db.scalar(select(Study).where(Study.slug == slug))


def test_make_client_uses_the_sandbox_unless_live():
    assert make_client(aws_access_key_id="a", aws_secret_access_key="b").meta.endpoint_url == SANDBOX_ENDPOINT
    live = make_client(live=True, aws_access_key_id="a", aws_secret_access_key="b")
    assert live.meta.endpoint_url == "https://mturk-requester.us-east-1.amazonaws.com"
    assert live.meta.config.retries["mode"] == "standard"


def test_external_question_needs_https():
    xml = MTurkService.external_question_xml("https://h/s/x?a=1&b=2")
    assert "<FrameHeight>0</FrameHeight>" in xml and "a=1&amp;b=2" in xml and EXTERNAL_QUESTION_NS in xml
    with pytest.raises(MTurkError, match="https"):
        MTurkService.external_question_xml("http://h/s/x")


def test_balance(client, service):
    client.stubber.add_response("get_account_balance", {"AvailableBalance": "10000.00"}, {})
    assert service.balance() == "10000.00"


def test_launch_posts_batches_of_nine_with_tokens_and_records_them(client, service, db, study):
    s = _study(db, study)
    _expect_hit_type(client.stubber)
    for i, n in enumerate([9, 9, 2]):
        token = f"{study}-{i}-L1"
        client.stubber.add_response("create_hit_with_hit_type", {"HIT": _hit(f"HIT{i}", token, n)},
                                    _create_params(token, n))
    hits = service.launch(s, assignments_total=20, url=URL, launch_id="L1")
    assert [(h.hit_id, h.max_assignments, h.status, h.reward) for h in hits] == [
        ("HIT0", 9, "Assignable", "0.50"), ("HIT1", 9, "Assignable", "0.50"), ("HIT2", 2, "Assignable", "0.50")]
    assert db.scalar(select(MTurkQualification.qualification_type_id)) == "QT-TOOK-PART"

    # Launching again with the same launch ID creates nothing (the HITs exist); the type is reused.
    _expect_hit_type(client.stubber, create_qual=False)
    assert [h.hit_id for h in service.launch(s, assignments_total=20, url=URL, launch_id="L1")] == [
        "HIT0", "HIT1", "HIT2"]
    assert db.scalar(select(func.count()).select_from(MTurkHit)) == 3


def test_throttling_is_retried_and_one_hit_results(client, service, db, study):
    s = _study(db, study)
    _expect_hit_type(client.stubber)
    token = f"{study}-0-L2"
    client.stubber.add_client_error("create_hit_with_hit_type", "ThrottlingException", "Rate exceeded",
                                    expected_params=_create_params(token, 3))
    client.stubber.add_response("create_hit_with_hit_type", {"HIT": _hit("HITX", token, 3)}, _create_params(token, 3))
    hits = service.launch(s, assignments_total=3, url=URL, launch_id="L2")
    assert [h.hit_id for h in hits] == ["HITX"]
    assert db.scalar(select(func.count()).select_from(MTurkHit)) == 1


def test_a_retried_create_finds_the_existing_hit(client, service, db, study):
    s = _study(db, study)
    token = f"{study}-0-L3"
    # A first run recorded the HIT ("creating") and died before MTurk's answer was stored.
    db.add(MTurkHit(study_id=s.id, unique_request_token=token, launch_id="L3", batch_index=0, max_assignments=9,
                    reward="0.50", hit_type_id="HT1", status="creating", sandbox=True))
    db.commit()
    _expect_hit_type(client.stubber)
    client.stubber.add_client_error("create_hit_with_hit_type", "RequestError",
                                    "There is already a HIT which exists with the same UniqueRequestToken.",
                                    expected_params=_create_params(token, 9))
    client.stubber.add_response("list_hits", {"HITs": [_hit("OTHER", "x-0-y")], "NextToken": "p2"},
                                {"MaxResults": 100})
    client.stubber.add_response("list_hits", {"HITs": [_hit("HITOLD", token)]}, {"MaxResults": 100, "NextToken": "p2"})
    hits = service.launch(s, assignments_total=9, url=URL, launch_id="L3")
    assert [(h.hit_id, h.status) for h in hits] == [("HITOLD", "Assignable")]
    assert db.scalar(select(func.count()).select_from(MTurkHit)) == 1


def test_reconcile_reads_every_page_of_a_250_assignment_hit(client, service, db, app, study):
    with app.test_client() as http:
        worker = WorkerClient(http, study)  # a perceptlab assignment whose AssignmentId MTurk will list
    s = _study(db, study)
    external = db.scalar(select(Assignment.external_id).where(Assignment.study_id == s.id))
    db.add(MTurkHit(study_id=s.id, hit_id="HIT1", unique_request_token="t-250", launch_id="L", batch_index=0,
                    max_assignments=250, reward="0.50", status="Assignable", sandbox=True))
    db.commit()
    items = [_assignment(i) for i in range(250)]
    items[7]["AssignmentId"], items[7]["WorkerId"] = external, worker.worker_id
    client.stubber.add_response("get_hit", {"HIT": _hit("HIT1", "t-250", 250, "Reviewable")}, {"HITId": "HIT1"})
    statuses = ["Submitted", "Approved", "Rejected"]
    for page, (start, token, next_token) in enumerate([(0, None, "n1"), (100, "n1", "n2"), (200, "n2", None)]):
        response = {"Assignments": items[start:start + 100], "NumResults": len(items[start:start + 100])}
        if next_token:
            response["NextToken"] = next_token
        params = {"HITId": "HIT1", "AssignmentStatuses": statuses, "MaxResults": 100}
        if token:
            params["NextToken"] = token
        client.stubber.add_response("list_assignments_for_hit", response, params)
    counts = service.reconcile(s)
    db.commit()
    assert counts == {"hits": 1, "assignments": 250, "new": 250}
    assert db.scalar(select(func.count()).select_from(MTurkAssignment)) == 250
    assert db.scalar(select(MTurkHit.status)) == "Reviewable"
    linked = db.scalar(select(MTurkAssignment).where(MTurkAssignment.assignment_id == external))
    assert linked.local_assignment_id is not None and linked.worker_id == worker.worker_id


def test_reconcile_qualifies_new_workers_once(client, service, db, study):
    s = _study(db, study)
    db.add(MTurkQualification(name="perceptlab: took part", qualification_type_id="QT9", sandbox=True))
    db.add(MTurkHit(study_id=s.id, hit_id="HIT1", unique_request_token="t-q", launch_id="L", batch_index=0,
                    max_assignments=9, reward="0.50", status="Assignable", sandbox=True))
    db.commit()
    for _ in range(2):
        client.stubber.add_response("get_hit", {"HIT": _hit("HIT1", "t-q")}, {"HITId": "HIT1"})
        client.stubber.add_response("list_assignments_for_hit", {"Assignments": [_assignment(1)]},
                                    {"HITId": "HIT1", "AssignmentStatuses": ANY, "MaxResults": 100})
        if _ == 0:
            client.stubber.add_response("associate_qualification_with_worker", {}, {
                "QualificationTypeId": "QT9", "WorkerId": "W0001", "IntegerValue": 1, "SendNotification": False})
        service.reconcile(s, qualify=True)
        db.commit()


def test_approve_reject_and_override(client, service, db, study):
    stub = client.stubber

    def status(assignment_id, value):
        stub.add_response("get_assignment", {"Assignment": {"AssignmentId": assignment_id, "AssignmentStatus": value}},
                          {"AssignmentId": assignment_id})

    status("A1", "Submitted")
    stub.add_response("approve_assignment", {}, {"AssignmentId": "A1"})
    assert service.approve("A1") == "approved"
    status("A2", "Approved")
    assert service.approve("A2") == "already approved"
    status("A3", "Rejected")
    with pytest.raises(MTurkError, match="Rejected, not Submitted.*override"):
        service.approve("A3")
    status("A6", "Approved")
    with pytest.raises(MTurkError, match="Approved, not Submitted: cannot reject"):
        service.reject("A6", "Too late.")
    status("A4", "Submitted")
    stub.add_response("reject_assignment", {}, {"AssignmentId": "A4", "RequesterFeedback": "Random answers."})
    assert service.reject("A4", "Random answers.") == "rejected"
    with pytest.raises(MTurkError, match="feedback"):
        service.reject("A5", " ")
    status("A3", "Rejected")
    stub.add_response("approve_assignment", {}, {"AssignmentId": "A3", "OverrideRejection": True,
                                                 "RequesterFeedback": "Sorry, our mistake."})
    assert service.override_rejection("A3", "Sorry, our mistake.") == "approved"


def test_approve_uses_the_database_when_it_knows_the_assignment_is_approved(service, db, study):
    s = _study(db, study)
    db.add(MTurkAssignment(study_id=s.id, assignment_id="A9", hit_id="H", worker_id="W", status="Approved"))
    db.flush()
    assert service.approve("A9") == "already approved"  # no request (the stubber has none queued)


def test_bonus_is_sent_once(client, service, db, study):
    s = _study(db, study)
    token = MTurkService.bonus_token("A1", "2 extra pages")
    client.stubber.add_response("send_bonus", {}, {"WorkerId": "W1", "BonusAmount": "0.80", "AssignmentId": "A1",
                                                   "Reason": "2 extra pages", "UniqueRequestToken": token})
    assert service.grant_bonus("W1", "A1", "0.8", "2 extra pages", study=s) == "sent"
    assert service.grant_bonus("W1", "A1", "0.80", "2 extra pages", study=s) == "already sent"  # no request
    bonus = db.scalar(select(Bonus))
    assert (bonus.status, bonus.amount, bonus.unique_request_token) == ("sent", "0.80", token)
    assert len(token) <= 64


def test_bonus_interrupted_after_the_call_is_not_paid_twice(client, service, db, study):
    s = _study(db, study)
    token = MTurkService.bonus_token("A2", "bonus")
    # The process died after send_bonus but before "sent" was stored: the row is pending.
    db.add(Bonus(study_id=s.id, assignment_id="A2", worker_id="W2", amount="1.20", reason="bonus",
                 unique_request_token=token, status="pending", sandbox=True))
    db.commit()
    client.stubber.add_client_error("send_bonus", "RequestError",
                                    "The value of UniqueRequestToken has already been used.",
                                    expected_params={"WorkerId": "W2", "BonusAmount": "1.20", "AssignmentId": "A2",
                                                     "Reason": "bonus", "UniqueRequestToken": token})
    assert service.grant_bonus("W2", "A2", "1.20", "bonus", study=s) == "sent"
    assert db.scalar(select(Bonus.status)) == "sent"
    with pytest.raises(MTurkError, match="same amount"):
        db.scalar(select(Bonus)).status = "pending"
        service.grant_bonus("W2", "A2", "5.00", "bonus", study=s)


def test_bonus_failure_stays_pending(client, service, db, study):
    client.stubber.add_client_error("send_bonus", "ServiceFault", "Internal error")
    with pytest.raises(MTurkError, match="stays pending"):
        service.grant_bonus("W3", "A3", "0.40", "bonus")
    assert db.scalar(select(Bonus.status)) == "pending"


def test_notify_sends_chunks_of_100(client, service):
    workers = [f"W{i}" for i in range(250)]
    for start in (0, 100, 200):
        client.stubber.add_response("notify_workers", {"NotifyWorkersFailureStatuses": []},
                                    {"Subject": "New HITs", "MessageText": "Hello",
                                     "WorkerIds": workers[start:start + 100]})
    assert service.notify(workers + workers[:5], "New HITs", "Hello") == []


def test_expire_and_delete_hit(client, service, db, study):
    s = _study(db, study)
    db.add(MTurkHit(study_id=s.id, hit_id="HIT5", unique_request_token="t5", launch_id="L", batch_index=0,
                    max_assignments=9, reward="0.50", status="Assignable", sandbox=True))
    db.flush()
    client.stubber.add_response("update_expiration_for_hit", {}, {"HITId": "HIT5", "ExpireAt": PAST})
    service.expire_hit("HIT5")
    client.stubber.add_client_error("delete_hit", "RequestError", "This HIT is currently in the state 'Unassignable'.",
                                    expected_params={"HITId": "HIT5"})
    with pytest.raises(MTurkError, match="cannot delete HIT HIT5"):
        service.delete_hit("HIT5")
    client.stubber.add_response("delete_hit", {}, {"HITId": "HIT5"})
    service.delete_hit("HIT5")
    assert db.scalar(select(MTurkHit.status)) == "deleted"


def test_qualify_and_existing_qualification_type(client, service, db, study):
    s = _study(db, study)
    client.stubber.add_client_error("create_qualification_type", "RequestError",
                                    "You have already created a QualificationType with this name.")
    client.stubber.add_response("list_qualification_types",
                                {"QualificationTypes": [{"QualificationTypeId": "QTOLD",
                                                         "Name": "perceptlab: took part"}]},
                                {"Query": "perceptlab: took part", "MustBeRequestable": False,
                                 "MustBeOwnedByCaller": True, "MaxResults": 100})
    client.stubber.add_response("associate_qualification_with_worker", {}, {
        "QualificationTypeId": "QTOLD", "WorkerId": "W7", "IntegerValue": 1, "SendNotification": False})
    service.qualify("W7", study=s)
    assert db.scalar(select(MTurkQualification.qualification_type_id)) == "QTOLD"


# ---------------------------------------------------------------- the CLI over the stubbed client

def _cli(monkeypatch, client, database_url, *args, input=None):
    from click.testing import CliRunner

    from server.cli import cli, cmd_mturk

    monkeypatch.setattr(cmd_mturk, "client_factory", lambda live: client)
    return CliRunner().invoke(cli, ["mturk", *args, "--database-url", database_url], input=input)


def test_cli_launch_in_the_sandbox_shows_the_cost_and_posts_hits(monkeypatch, client, database_url, study):
    _expect_hit_type(client.stubber)
    for i, n in enumerate([9, 1]):
        params = _create_params(ANY, n)
        params.update(RequesterAnnotation=ANY, UniqueRequestToken=ANY)
        client.stubber.add_response("create_hit_with_hit_type", {"HIT": _hit(f"HITC{i}", f"t{i}", n)}, params)
    result = _cli(monkeypatch, client, database_url, "launch", study, "--assignments", "10", "--url",
                  "https://lab.example.org")
    assert result.exit_code == 0, result.output
    assert "10 assignments in 2 HIT(s)" in result.output and "= $6.00" in result.output  # 5.00 + 20%
    assert "HITC0" in result.output and "HITC1" in result.output

    result = _cli(monkeypatch, client, database_url, "status", study)
    assert "HITC1" in result.output and "Assignable" in result.output


def test_cli_live_launch_asks_and_http_urls_fail(monkeypatch, client, database_url, study):
    result = _cli(monkeypatch, client, database_url, "launch", study, "--assignments", "9", "--url", "http://x")
    assert result.exit_code == 2 and "https" in result.output
    result = _cli(monkeypatch, client, database_url, "launch", study, "--assignments", "9", "--url",
                  "https://lab.example.org", "--live", input="n\n")
    assert result.exit_code == 1 and "LIVE marketplace for $5.40?" in result.output  # 9 x 0.50 + 20%


def test_cli_bonus_pays_approved_assignments_once(monkeypatch, client, app, database_url, study):
    with app.test_client() as http:
        worker = WorkerClient(http, study)
    with app_services(app).sessions() as db:
        s = _study(db, study)
        row = db.scalar(select(Assignment).where(Assignment.study_id == s.id))
        row.stage, row.pages_completed = "completed", 3
        db.add(MTurkAssignment(study_id=s.id, assignment_id=row.external_id, hit_id="H", worker_id=worker.worker_id,
                               status="Approved"))
        db.commit()
        external = row.external_id
    client.stubber.add_response("send_bonus", {}, {"WorkerId": worker.worker_id, "BonusAmount": "0.80",
                                                   "AssignmentId": external, "Reason": ANY, "UniqueRequestToken": ANY})
    result = _cli(monkeypatch, client, database_url, "bonus", study)
    assert result.exit_code == 0, result.output
    assert "$0.80 sent" in result.output
    result = _cli(monkeypatch, client, database_url, "bonus", study)  # nothing left: no request
    assert result.exit_code == 0 and "0 bonus(es)" in result.output


# ---------------------------------------------------------------- the dashboard page

def test_dashboard_shows_hits_and_plan_and_acts_with_csrf(client, app, study):
    from server import auth
    from server.views.admin_mturk import bp

    from .admin_support import PASSWORD, csrf_of, log_in

    if "admin_mturk" not in app.blueprints:  # until server/app.py registers it
        app.register_blueprint(bp)
    app.config["MTURK_CLIENT_FACTORY"] = lambda live: client
    with app.test_client() as http:
        worker = WorkerClient(http, study)
    with app_services(app).sessions() as db:
        auth.create_user(db, "alice", PASSWORD)
        s = _study(db, study)
        row = db.scalar(select(Assignment).where(Assignment.study_id == s.id))
        row.stage, row.pages_completed = "completed", 2
        db.add(MTurkHit(study_id=s.id, hit_id="HITD", unique_request_token="t-d", launch_id="L", batch_index=0,
                        max_assignments=9, reward="0.50", status="Assignable", sandbox=True))
        db.add(MTurkAssignment(study_id=s.id, assignment_id=row.external_id, hit_id="HITD", worker_id=worker.worker_id,
                               status="Submitted", local_assignment_id=row.id))
        db.commit()
        external = row.external_id

    http = app.test_client()
    path = f"/admin/mturk/studies/{study}"
    assert http.get(path).status_code == 302  # login first
    assert log_in(http).status_code == 303
    html = http.get(path).get_data(as_text=True)
    assert "HITD" in html and external in html and "$0.40" in html and "sandbox" in html
    token = csrf_of(http, path)
    assert http.post(f"{path}/approve", data={"assignment_id": external}).status_code == 400  # no CSRF token

    client.stubber.add_response("get_assignment", {"Assignment": {"AssignmentId": external,
                                                                  "AssignmentStatus": "Submitted"}},
                                {"AssignmentId": external})
    client.stubber.add_response("approve_assignment", {}, {"AssignmentId": external})
    response = http.post(f"{path}/approve", data={"assignment_id": external, "csrf_token": token})
    assert response.status_code == 302
    assert "1 assignment(s) approved" in http.get(response.location).get_data(as_text=True)

    client.stubber.add_response("send_bonus", {}, {"WorkerId": worker.worker_id, "BonusAmount": "0.40", "AssignmentId": external,
                                                   "Reason": ANY, "UniqueRequestToken": ANY})
    response = http.post(f"{path}/bonus", data={"csrf_token": token})
    assert "1 bonus(es) paid" in http.get(response.location).get_data(as_text=True)
    response = http.post(f"{path}/bonus", data={"csrf_token": token})  # paid already: no request
    assert "0 bonus(es) paid" in http.get(response.location).get_data(as_text=True)

    response = http.post(f"{path}/reject", data={"assignment_id": "UNKNOWN", "feedback": "x", "csrf_token": token})
    assert response.status_code == 404


def test_motion_study_reconcile_keeps_screened_workers_and_grants_their_score(client, service, db):
    """A motion study lets a worker do further sessions: only workers it turned away are blocked,
    and every screened worker gets the lab-wide screening score r x 100."""
    from server.models import Worker

    motion = Study(slug="flow", name="flow", seed=0, config={"kind": "motion"}, stimulus_root=".")
    db.add(motion)
    db.flush()
    db.add_all([Worker(study_id=motion.id, platform="mturk", external_id="W0001", screening_r=0.953,
                       screening_passed=True),
                Worker(study_id=motion.id, platform="mturk", external_id="W0002", status="disqualified",
                       screening_r=-0.2, screening_passed=False),
                Worker(study_id=motion.id, platform="mturk", external_id="W0003")])  # not screened yet
    db.add(MTurkQualification(name="perceptlab: took part", qualification_type_id="QT9", sandbox=True))
    db.add(MTurkHit(study_id=motion.id, hit_id="HIT1", unique_request_token="t-m", launch_id="L", batch_index=0,
                    max_assignments=9, reward="2.00", status="Assignable", sandbox=True))
    db.commit()
    stub = client.stubber
    stub.add_response("get_hit", {"HIT": _hit("HIT1", "t-m")}, {"HITId": "HIT1"})
    stub.add_response("list_assignments_for_hit", {"Assignments": [_assignment(1), _assignment(3)]},
                      {"HITId": "HIT1", "AssignmentStatuses": ANY, "MaxResults": 100})
    # No "took part" for the new workers W0001 and W0003; only the disqualified W0002 is blocked.
    stub.add_response("associate_qualification_with_worker", {}, {
        "QualificationTypeId": "QT9", "WorkerId": "W0002", "IntegerValue": 1, "SendNotification": False})
    stub.add_response("create_qualification_type", {"QualificationType": {"QualificationTypeId": "QT-SCREEN"}},
                      {"Name": "perceptlab: motion screening r x100", "Keywords": "perceptlab", "Description": ANY,
                       "QualificationTypeStatus": "Active"})
    for worker_id, score in (("W0001", 95), ("W0002", 0)):
        stub.add_response("associate_qualification_with_worker", {}, {
            "QualificationTypeId": "QT-SCREEN", "WorkerId": worker_id, "IntegerValue": score,
            "SendNotification": False})
    counts = service.reconcile(motion, qualify=True)
    stub.assert_no_pending_responses()
    assert counts["screened"] == 2 and counts["new"] == 2
    # HITs of a study that wants screened workers require the score.
    motion.config = {"kind": "motion", "mturk": {"require_screening": 90}}
    requirements = service.qualification_requirements(motion)
    assert {"QualificationTypeId": "QT-SCREEN", "Comparator": "GreaterThanOrEqualTo", "IntegerValues": [90],
            "ActionsGuarded": "DiscoverPreviewAndAccept"} in requirements


def test_cli_approve_all_submitted_pays_only_assignments_that_earned_it(monkeypatch, client, app, database_url, study):
    """A worker turned away (study full, no page done) or one who posted MTurk's submit form by hand
    can still submit on MTurk: "approve all" must leave them to the experimenter, not pay them."""
    with app.test_client() as http:
        workers = [WorkerClient(http, study) for _ in range(2)]
    with app_services(app).sessions() as db:
        s = _study(db, study)
        rows = {r.worker.external_id: r for r in db.scalars(select(Assignment).where(Assignment.study_id == s.id))}
        done, turned_away = rows[workers[0].worker_id], rows[workers[1].worker_id]
        done.stage, done.pages_completed = "completed", 1
        turned_away.stage = "full"
        for row, worker in ((done, workers[0]), (turned_away, workers[1])):
            db.add(MTurkAssignment(study_id=s.id, assignment_id=row.external_id, hit_id="HIT1",
                                   worker_id=worker.worker_id, status="Submitted", local_assignment_id=row.id))
        db.add(MTurkAssignment(study_id=s.id, assignment_id="AHANDMADE", hit_id="HIT1", worker_id="WSCRIPT",
                               status="Submitted"))
        db.commit()
        paid, not_paid = done.external_id, turned_away.external_id
    # Only the completed assignment may be approved: the Stubber fails on any other request.
    client.stubber.add_response("get_assignment", {"Assignment": {"AssignmentId": paid,
                                                                  "AssignmentStatus": "Submitted"}},
                                {"AssignmentId": paid})
    client.stubber.add_response("approve_assignment", {}, {"AssignmentId": paid})
    result = _cli(monkeypatch, client, database_url, "approve", study, "--all-submitted")
    assert result.exit_code == 0, result.output
    client.stubber.assert_no_pending_responses()
    assert f"{paid}: approved" in result.output
    for unpaid in (not_paid, "AHANDMADE"):
        assert f"{unpaid}: not approved" in result.output
    with app_services(app).sessions() as db:
        statuses = dict(db.execute(select(MTurkAssignment.assignment_id, MTurkAssignment.status)).all())
    assert statuses == {paid: "Approved", not_paid: "Submitted", "AHANDMADE": "Submitted"}


def test_expire_study_is_the_stop_rule_and_can_be_repeated(client, service, db, study):
    """Every open HIT is expired once; a HIT MTurk no longer has counts as expired; a second call expires
    nothing and fails on nothing (the same stop rule as Prolific's STOP, server/prolific.py)."""
    s = _study(db, study)
    for i, status in enumerate(["Assignable", "Assignable", "expired"]):
        db.add(MTurkHit(study_id=s.id, hit_id=f"HITX{i}", unique_request_token=f"tx{i}", launch_id="L", batch_index=i,
                        max_assignments=9, reward="0.50", status=status, sandbox=True))
    db.commit()
    client.stubber.add_response("update_expiration_for_hit", {}, {"HITId": "HITX0", "ExpireAt": PAST})
    client.stubber.add_client_error("update_expiration_for_hit", "RequestError", "Hit HITX1 does not exist. (1700)",
                                    expected_params={"HITId": "HITX1", "ExpireAt": PAST})
    assert service.expire_study(s) == 2
    assert set(db.scalars(select(MTurkHit.status))) == {"expired"}
    assert service.expire_study(s) == 0  # nothing open: no request at all (the Stubber has none left)
    client.stubber.assert_no_pending_responses()
