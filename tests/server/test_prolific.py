"""server/prolific.py against a fake Prolific (tests/server/prolific_fake.py: the documented endpoints, their
error shapes, and injected faults): every call, retries with backoff, 429s with Retry-After, calls that must
not be repeated after an unknown outcome, and a bonus retried after a timeout that pays once."""
from __future__ import annotations

import random

import httpx
import pytest
from sqlalchemy import func, select

from server.services import app_services
from server.models import ProlificBonus, ProlificStudy, ProlificSubmission, Study
from server.prolific import (SETTLE, ProlificClient, ProlificError, ProlificService, RetryPolicy, StudyDraft,
                             devices)

from .conftest import SMALL_STUDY, create_test_study
from .prolific_fake import (BASE_URL, COMPLETION_CODE, HOST, PROLIFIC_ENTRY, TOKEN, Clock, FaultyTransport,
                            completed_participant, make_fake)

PIDS = [f"{i:024x}" for i in range(1, 6)]



@pytest.fixture
def fake():
    app, state = make_fake()
    return state, FaultyTransport(app)


@pytest.fixture
def sleeps():
    return []


@pytest.fixture
def service_clock():
    """The Prolific side's clock (the app has its own, ``clock``)."""
    return Clock()


@pytest.fixture
def client(fake, sleeps, service_clock):
    _, transport = fake
    client = ProlificClient(TOKEN, base_url=BASE_URL, transport=transport, sleep=sleeps.append, clock=service_clock,
                            rng=random.Random(7))
    yield client
    client.close()


@pytest.fixture
def pro(app, demo_stimuli, tmp_path) -> str:
    """A small study set up for Prolific, with participants: PIDS[0] and PIDS[1] did all 3 pages (1 required:
    a bonus of 2 x 0.40), PIDS[2] did 1 page (no bonus), PIDS[3] is still in the quiz."""
    slug = create_test_study(app, demo_stimuli, tmp_path, slug="pro", entry=PROLIFIC_ENTRY, **SMALL_STUDY)
    for pid, pages, stage in [(PIDS[0], 3, "completed"), (PIDS[1], 3, "completed"), (PIDS[2], 1, "completed"),
                              (PIDS[3], 0, "quiz")]:
        completed_participant(app, slug, pid, pages, stage=stage)
    return slug


@pytest.fixture
def db(app):
    with app_services(app).sessions() as session:
        yield session


@pytest.fixture
def service(client, db, service_clock):
    return ProlificService(client, db, clock=service_clock)


def _study(db, slug) -> Study:
    return db.scalar(select(Study).where(Study.slug == slug))


def _draft(places=3) -> StudyDraft:
    return StudyDraft(name="Compare images", internal_name="perceptlab t", description="Pairs of images.",
                      external_study_url=f"{HOST}/s/x?PROLIFIC_PID={{{{%PROLIFIC_PID%}}}}",
                      completion_code="C1", reward_cents=50, estimated_minutes=5, places=places,
                      devices=("desktop",))


def _published_with_submissions(service, db, fake, slug) -> Study:
    """The study created and published on the fake, where PIDS[0..3] have submissions awaiting review (PIDS[1]
    entered a wrong code) and PIDS[4] (unknown here) one too."""
    state, _ = fake
    study = _study(db, slug)
    row = service.create(study, host=HOST, places=5)
    service.publish(study)
    state.settle()
    db.commit()
    for pid in PIDS:
        state.add_submission(row.prolific_id, pid, code="WRONG" if pid == PIDS[1] else COMPLETION_CODE)
    service.reconcile(study)
    db.commit()
    return study


# ---------------------------------------------------------------- the client: every call

def test_every_call_of_the_client_against_the_fake(client, fake):
    state, _ = fake
    assert client.me()["email"] == "lab@example.org"
    created = [client.create_study(_draft()) for _ in range(3)]
    assert [s.status for s in created] == ["UNPUBLISHED"] * 3
    assert [s.id for s in client.list_studies()] == [s.id for s in created]  # 3 studies, pages of 2
    assert state.served("GET", "/studies/") == 2
    body = state.studies[created[0].id]
    assert body["completion_codes"] == [{"code": "C1", "code_type": "COMPLETED",
                                         "actions": [{"action": "MANUALLY_REVIEW"}]}]
    assert (body["reward"], body["estimated_completion_time"], body["total_available_places"],
            body["device_compatibility"], body["prolific_id_option"]) == (50, 5, 3, ["desktop"], "url_parameters")

    assert body["filters"] == []  # required by the API: an empty list recruits everyone the devices allow

    study_id = created[0].id
    assert client.transition_study(study_id, "PUBLISH").status == "PUBLISHING"  # Prolific publishes asynchronously
    with pytest.raises(ProlificError, match="Cannot PAUSE a study that is PUBLISHING"):
        client.transition_study(study_id, "PAUSE")
    state.settle()
    assert client.transition_study(study_id, "PAUSE").status == "PAUSED"
    assert client.transition_study(study_id, "START").status == "ACTIVE"
    assert client.set_places(study_id, 7).total_available_places == 7
    assert client.get_study(study_id).total_available_places == 7

    ids = [state.add_submission(study_id, pid, code="C1") for pid in PIDS[:3]]
    listed = client.study_submissions(study_id)  # 3 submissions, pages of 2
    assert [(s.id, s.participant_id, s.entered_code, s.status) for s in listed] == [
        (i, pid, "C1", "AWAITING REVIEW") for i, pid in zip(ids, PIDS)]
    assert client.get_submission(ids[0]).participant_id == PIDS[0]

    assert client.transition_submission(ids[0], "APPROVE").status == "APPROVED"
    assert client.transition_submission(ids[0], "APPROVE").status == "APPROVED"  # ignored when repeated
    rejected = client.transition_submission(ids[1], "REJECT", rejection_category="NO_CODE", message="x" * 100)
    assert rejected.status == "REJECTED"
    client.bulk_approve([ids[2]])  # asynchronous: under way, approved later
    assert client.get_submission(ids[2]).status == "PROCESSING"
    state.settle()
    assert client.get_submission(ids[2]).status == "APPROVED"

    from decimal import Decimal
    bulk = client.set_up_bonuses(study_id, [(PIDS[0], Decimal("0.80")), (PIDS[2], Decimal("0.40"))])
    assert (bulk.amount_cents, bulk.fees_cents, bulk.total_cents) == (120, 40, 160)  # cents, as the API answers
    assert state.payments == []  # set up: nothing paid
    client.pay_bonuses(bulk.id)
    assert (state.paid_to(PIDS[0]), state.paid_to(PIDS[2])) == (80, 40)
    assert client.get_submission(ids[0]).bonus_payments == (80,)
    assert client.transition_study(study_id, "STOP").status == "AWAITING REVIEW"


def test_errors_carry_prolifics_error_shape(client):
    with pytest.raises(ProlificError) as caught:
        client.create_study(_draft(places=0))
    error = caught.value
    assert (error.status, error.error_code, error.uncertain) == (400, 140001, False)
    assert error.detail == {"total_available_places": ["A positive whole number is required."]}
    assert "total_available_places: A positive whole number is required." in str(error)
    with pytest.raises(ProlificError, match="404 .*No study nope"):
        client.get_study("nope")


def test_the_token_comes_from_the_environment(monkeypatch, fake):
    _, transport = fake
    monkeypatch.delenv("PROLIFIC_TOKEN", raising=False)
    with pytest.raises(ProlificError, match="set PROLIFIC_TOKEN"):
        ProlificClient(base_url=BASE_URL, transport=transport)
    monkeypatch.setenv("PROLIFIC_TOKEN", TOKEN)
    assert ProlificClient(base_url=BASE_URL, transport=transport).me()["id"]
    monkeypatch.setenv("PROLIFIC_TOKEN", "wrong")
    with pytest.raises(ProlificError, match="401") as caught:
        ProlificClient(base_url=BASE_URL, transport=transport).me()
    assert caught.value.error_code == 140100


# ---------------------------------------------------------------- retries

def test_a_429_waits_as_long_as_retry_after_says(client, fake, sleeps):
    state, transport = fake
    transport.inject("GET", "/users/me/", "429", times=2, retry_after="7")
    assert client.me()["id"]
    assert sleeps == [7.0, 7.0] and state.served("GET", "/users/me/") == 1
    # An HTTP date is read against the injected clock; a 429 without Retry-After backs off.
    transport.inject("GET", "/users/me/", "429", retry_after="Sat, 21 Nov 2026 12:00:30 GMT")
    transport.inject("GET", "/users/me/", "429", retry_after=None)
    sleeps.clear()
    client.me()
    assert sleeps[0] == 30.0 and 0 <= sleeps[1] <= client.retry.base_s * 2


def test_a_429_on_the_pay_call_is_retried_and_pays_once(client, fake):
    state, transport = fake
    study = client.create_study(_draft())
    state.add_submission(study.id, PIDS[0])
    bulk = client.set_up_bonuses(study.id, [(PIDS[0], 1)])
    transport.inject("POST", "/pay/", "429", times=3)  # refused before any work: safe to repeat
    client.pay_bonuses(bulk.id)
    assert state.paid_to(PIDS[0]) == 100 and state.bulks[bulk.id]["pay_calls"] == 1


def test_server_errors_timeouts_and_lost_connections_are_retried_with_jittered_backoff(client, fake, sleeps):
    state, transport = fake
    study = client.create_study(_draft())
    transport.inject("GET", f"/studies/{study.id}/", "500", times=2)
    transport.inject("GET", f"/studies/{study.id}/", "timeout_before")
    assert client.get_study(study.id).id == study.id
    assert len(sleeps) == 3
    assert all(0 <= wait <= client.retry.base_s * 2 ** i for i, wait in enumerate(sleeps))
    # Creating a study is not idempotent, but a connection never made cannot have created one.
    transport.inject("POST", "/studies/", "connect")
    client.create_study(_draft())
    assert len(state.studies) == 2


def test_retries_stop_after_the_policys_attempts(fake, sleeps):
    _, transport = fake
    client = ProlificClient(TOKEN, base_url=BASE_URL, transport=transport, sleep=sleeps.append,
                            retry=RetryPolicy(attempts=3))
    transport.inject("GET", "/users/me/", "500", times=3)
    with pytest.raises(ProlificError, match="500") as caught:
        client.me()
    assert caught.value.uncertain and len(sleeps) == 2
    transport.inject("GET", "/users/me/", "429", times=3)
    with pytest.raises(ProlificError, match="429"):
        client.me()


def test_calls_that_are_not_idempotent_are_never_repeated_after_an_unknown_outcome(client, fake, sleeps):
    state, transport = fake
    study = client.create_study(_draft())
    state.add_submission(study.id, PIDS[0])
    bulk = client.set_up_bonuses(study.id, [(PIDS[0], 1)])
    transport.inject("POST", "/pay/", "timeout")
    with pytest.raises(ProlificError, match="may have been carried out") as caught:
        client.pay_bonuses(bulk.id)
    assert caught.value.uncertain and sleeps == []
    assert state.bulks[bulk.id]["pay_calls"] == 1 and state.paid_to(PIDS[0]) == 100  # paid once, answer lost
    transport.inject("POST", "/studies/", "500_after")
    with pytest.raises(ProlificError) as caught:
        client.create_study(_draft())
    assert caught.value.uncertain and len(state.studies) == 2


# ---------------------------------------------------------------- the service: a perceptlab study on Prolific

def test_the_draft_comes_from_the_study(service, db, pro):
    study = _study(db, pro)
    draft = service.draft(study, host=HOST, places=4)
    assert draft.external_study_url == (f"{HOST}/s/pro?PROLIFIC_PID={{{{%PROLIFIC_PID%}}}}&STUDY_ID={{{{%STUDY_ID%}}}}"
                                        "&SESSION_ID={{%SESSION_ID%}}")
    assert (draft.completion_code, draft.reward_cents, draft.places) == (COMPLETION_CODE, 50, 4)  # 1 page of 0.50
    assert draft.estimated_minutes >= 1 and draft.devices[0] == "desktop"
    with pytest.raises(ProlificError, match="https://"):
        service.draft(study, host="http://lab.example.org", places=4)


def test_devices_follow_the_display_requirement():
    from server.paradigms.display import WindowRequirement

    assert devices(WindowRequirement(min_window=(1200, 600))) == ("desktop",)
    assert devices(WindowRequirement(min_window=(900, 600))) == ("desktop", "tablet")
    assert devices(WindowRequirement(min_window=(320, 480))) == ("desktop", "tablet", "mobile")
    assert devices(WindowRequirement(min_window=(320, 480), needs_mouse=True)) == ("desktop",)


def test_a_study_not_set_up_for_prolific_is_refused(service, db, study):
    with pytest.raises(ProlificError, match='recruiter = "prolific"'):
        service.create(_study(db, study), host=HOST, places=3)


def test_create_records_first_and_finds_a_create_whose_answer_was_lost(service, db, fake, pro):
    state, transport = fake
    study = _study(db, pro)
    transport.inject("POST", "/studies/", "timeout")  # Prolific made the study; the answer is lost
    row = service.create(study, host=HOST, places=5)
    assert len(state.studies) == 1 and row.prolific_id == next(iter(state.studies))
    assert (row.status, row.places, row.reward_cents) == ("UNPUBLISHED", 5, 50)
    assert state.studies[row.prolific_id]["internal_name"] == row.internal_name
    assert service.create(study, host=HOST, places=5) is row  # once only
    assert state.served("POST", "/studies/") == 1


def test_a_create_lost_before_prolific_got_it_is_made_on_the_next_run(service, db, fake, pro):
    state, transport = fake
    study = _study(db, pro)
    transport.inject("POST", "/studies/", "timeout_before")
    with pytest.raises(ProlificError, match="never makes a second one"):
        service.create(study, host=HOST, places=5)
    assert db.scalar(select(ProlificStudy.status)) == "creating" and state.studies == {}
    row = service.create(study, host=HOST, places=5)
    assert len(state.studies) == 1 and row.prolific_id in state.studies


def test_publish_places_pause_resume_and_stop_can_be_repeated(service, db, fake, pro):
    state, _ = fake
    study = _study(db, pro)
    row = service.create(study, host=HOST, places=5)
    assert service.publish(study) == "publishing"
    assert service.publish(study) == "already publishing"
    with pytest.raises(ProlificError, match="PUBLISHING: wait until Prolific has finished"):
        service.pause(study)  # asked of a study in transition: refused here, never sent
    state.settle()
    assert service.publish(study) == "already active"
    assert service.add_places(study, 3) == 8 and state.studies[row.prolific_id]["total_available_places"] == 8
    assert service.pause(study) == "paused"
    assert service.resume(study) == "active"
    assert service.stop(study) == "awaiting review"
    assert service.stop(study) == "already awaiting review"
    assert state.served("POST", "/transition/") == 4
    with pytest.raises(ProlificError, match="at least 1"):
        service.add_places(study, 0)


def test_reconcile_fetches_every_page_of_submissions(service, db, fake, pro):
    study = _published_with_submissions(service, db, fake, pro)
    assert db.scalar(select(func.count()).select_from(ProlificSubmission)) == 5
    assert fake[0].served("GET", "/submissions/") == 3  # 5 submissions, pages of 2
    assert service.reconcile(study)["new"] == 0


def test_approve_only_submissions_whose_codes_check_and_reject_with_reasons(service, db, fake, pro):
    state, _ = fake
    study = _published_with_submissions(service, db, fake, pro)
    asked, refused = service.approve_checked(study)
    assert {s.participant_id for s in asked} == {PIDS[0], PIDS[2]}
    assert {s.participant_id: why.split(":")[0] for s, why in refused} == {
        PIDS[1]: "wrong code", PIDS[3]: "not completed", PIDS[4]: "unknown participant"}
    by_pid = {s["participant_id"]: s for s in state.submissions.values()}
    assert [by_pid[p]["status"] for p in PIDS] == ["PROCESSING", "AWAITING REVIEW", "PROCESSING", "AWAITING REVIEW",
                                                   "AWAITING REVIEW"]
    state.settle()
    assert [by_pid[p]["status"] for p in PIDS] == ["APPROVED", "AWAITING REVIEW", "APPROVED", "AWAITING REVIEW",
                                                   "AWAITING REVIEW"]
    assert service.approve(study, by_pid[PIDS[1]]["id"]) == "approved"  # a person looked
    with pytest.raises(ProlificError, match="at least 100 characters"):
        service.reject(study, by_pid[PIDS[4]]["id"], "NO_DATA", "No data.")
    with pytest.raises(ProlificError, match="unknown rejection category"):
        service.reject(study, by_pid[PIDS[4]]["id"], "RUDE", "x" * 120)
    reason = "We have no record of your work in this study: you did not take part through the study link. " * 2
    assert service.reject(study, by_pid[PIDS[4]]["id"], "NO_DATA", reason) == "rejected"
    assert by_pid[PIDS[4]]["status"] == "REJECTED"
    with pytest.raises(ProlificError, match="no submission"):
        service.approve(study, "not-mine")


# ---------------------------------------------------------------- bonuses: a ledger before every call

def _approved(service, db, fake, slug) -> Study:
    study = _published_with_submissions(service, db, fake, slug)
    service.approve_checked(study)  # PIDS[0] and PIDS[2]
    fake[0].settle()  # Prolific carries the bulk approval out
    service.reconcile(study)  # ... and reading back shows it
    db.commit()
    return study


def test_bonuses_follow_the_pay_rules_and_are_paid_once(service, db, fake, pro):
    state, _ = fake
    study = _approved(service, db, fake, pro)
    plan = {b.participant_id: b for b in service.bonus_plan(study)}
    assert set(plan) == {PIDS[0], PIDS[1]}  # 2 extra pages each; PIDS[2] did the required page only
    assert str(plan[PIDS[0]].amount) == "0.80" and plan[PIDS[1]].submission_status == "AWAITING REVIEW"
    run = service.pay_bonuses(study)
    assert (len(run.paid), run.waiting) == (1, 1)  # PIDS[1] waits for approval
    assert state.paid_to(PIDS[0]) == 80 and state.paid_to(PIDS[1]) == 0
    assert [(b.participant_id, b.status) for b in service.ledger(study)] == [(PIDS[0], "paid")]
    again = service.pay_bonuses(study)
    assert again.paid == [] and state.served("POST", "/pay/") == 1 and state.paid_to(PIDS[0]) == 80


def test_a_bonus_retried_after_a_timeout_pays_once(service, db, fake, pro):
    """The pay call times out after Prolific paid: the row stays "paying"; the retry reconciles against the
    submission's bonuses on Prolific, sees the payment and never calls pay again."""
    state, transport = fake
    study = _approved(service, db, fake, pro)
    transport.inject("POST", "/pay/", "timeout")
    first = service.pay_bonuses(study)
    assert first.paid == [] and len(first.unconfirmed) == 1
    assert db.scalar(select(ProlificBonus.status)) == "paying" and state.paid_to(PIDS[0]) == 80
    second = service.pay_bonuses(study)
    assert len(second.confirmed) == 1 and second.paid == []
    assert db.scalar(select(ProlificBonus.status)) == "paid"
    assert state.served("POST", "/pay/") == 1 and state.paid_to(PIDS[0]) == 80


def test_a_pay_call_lost_before_prolific_got_it_pays_once_after_the_settling_time(service, db, fake, pro,
                                                                                   service_clock):
    state, transport = fake
    study = _approved(service, db, fake, pro)
    transport.inject("POST", "/pay/", "timeout_before")
    service.pay_bonuses(study)
    assert service.reconcile(study)["bonuses_unconfirmed"] == 1  # not seen on Prolific: it may still come
    assert service.pay_bonuses(study).paid == [] and state.served("POST", "/pay/") == 0
    service_clock.now += SETTLE
    run = service.pay_bonuses(study)  # unseen after the settling time: set up again and paid once
    assert len(run.paid) == 1 and state.paid_to(PIDS[0]) == 80
    assert len(state.bulks) == 2 and db.scalar(select(ProlificBonus.status)) == "paid"


def test_without_prolifics_list_of_bonuses_a_lost_pay_call_is_never_repeated(service, db, fake, pro,
                                                                               service_clock):
    state, transport = fake
    state.lists_bonuses = False
    study = _approved(service, db, fake, pro)
    transport.inject("POST", "/pay/", "timeout_before")
    service.pay_bonuses(study)
    service_clock.now += 10 * SETTLE
    run = service.pay_bonuses(study)
    assert len(run.unconfirmed) == 1 and run.paid == [] and state.bulks[next(iter(state.bulks))]["pay_calls"] == 0
    assert "check the study's bonuses on Prolific" in db.scalar(select(ProlificBonus.note))


def test_a_refused_pay_call_leaves_the_bonus_to_be_set_up_again(service, db, fake, pro):
    state, _ = fake
    study = _approved(service, db, fake, pro)
    service.record_bonuses(study)
    bonus = db.scalar(select(ProlificBonus))
    bonus.status, bonus.bulk_id = "set_up", "no-such-bulk"
    db.commit()
    with pytest.raises(ProlificError, match="404"):
        service.pay_bonuses(study)
    db.refresh(bonus)  # the service changes the ledger by conditional UPDATEs (claims)
    assert (bonus.status, bonus.bulk_id) == ("recorded", None)
    assert len(service.pay_bonuses(study).paid) == 1 and state.paid_to(PIDS[0]) == 80


# ---------------------------------------------------------------- the CLI

def _cli(monkeypatch, fake, database_url, *args, input=None):
    """Run ``perceptlab prolific ARGS``; each run makes (and closes) its own client on the fake."""
    from click.testing import CliRunner

    from server.cli import cli, cmd_prolific

    monkeypatch.setattr(cmd_prolific, "client_factory",
                        lambda: ProlificClient(TOKEN, base_url=BASE_URL, transport=fake[1], sleep=lambda s: None))
    return CliRunner().invoke(cli, ["prolific", *args, "--database-url", database_url], input=input)


def test_cli_create_publish_review_approve_reject_and_bonus(monkeypatch, fake, database_url, pro):
    state, transport = fake
    result = _cli(monkeypatch, fake, database_url, "create", pro, "--url", HOST, "--places", "5", "--publish",
                  input="y\n")
    assert result.exit_code == 0, result.output
    assert "5 place(s), reward 0.50" in result.output and "published: publishing" in result.output
    state.settle()
    prolific_id = next(iter(state.studies))
    for pid in PIDS[:3]:
        state.add_submission(prolific_id, pid, code=COMPLETION_CODE)
    result = _cli(monkeypatch, fake, database_url, "submissions", pro)
    assert result.exit_code == 0 and "3 submission(s) (3 new)" in result.output
    assert result.output.count("code checks: approvable") == 3
    assert _cli(monkeypatch, fake, database_url, "add-places", pro, "2").output.strip() == "pro: 7 place(s) in all"
    assert "paused" in _cli(monkeypatch, fake, database_url, "pause", pro).output
    assert "active" in _cli(monkeypatch, fake, database_url, "resume", pro).output

    sub = next(s["id"] for s in state.submissions.values() if s["participant_id"] == PIDS[2])
    result = _cli(monkeypatch, fake, database_url, "reject", pro, sub, "--category", "LOW_EFFORT", "--reason", "bad")
    assert result.exit_code != 0 and "at least 100 characters" in result.output and "Traceback" not in result.output
    result = _cli(monkeypatch, fake, database_url, "reject", pro, sub, "--category", "LOW_EFFORT", "--reason",
                  "Your answers were given faster than the images could be seen, on every page of the study. " * 2)
    assert result.exit_code == 0 and f"{sub}: rejected" in result.output
    result = _cli(monkeypatch, fake, database_url, "approve", pro, "--yes")
    assert result.exit_code == 0 and "approval asked for 2 submission(s), 0 left" in result.output
    result = _cli(monkeypatch, fake, database_url, "bonus", pro, "--yes")  # not approved yet: nothing is paid
    assert result.exit_code == 0 and "0 new bonus(es)" in result.output and state.payments == []
    state.settle()
    first = next(s["id"] for s in state.submissions.values() if s["participant_id"] == PIDS[0])
    result = _cli(monkeypatch, fake, database_url, "approve", pro, first, "--yes")
    assert result.exit_code == 0 and f"{first}: already approved" in result.output

    transport.inject("POST", "/pay/", "timeout")
    result = _cli(monkeypatch, fake, database_url, "bonus", pro, "--yes")
    assert result.exit_code != 0 and "await confirmation" in result.output
    result = _cli(monkeypatch, fake, database_url, "reconcile", pro)
    assert "bonuses confirmed 2" in result.output
    result = _cli(monkeypatch, fake, database_url, "bonus", pro, "--yes")
    assert result.exit_code == 0 and "0 new bonus(es)" in result.output
    assert state.served("POST", "/pay/") == 1 and (state.paid_to(PIDS[0]), state.paid_to(PIDS[1])) == (80, 80)
    assert _cli(monkeypatch, fake, database_url, "stop", pro).output.strip() == "pro: awaiting review"
    assert _cli(monkeypatch, fake, database_url, "stop", pro).output.strip() == "pro: already awaiting review"


def test_cli_errors_are_one_line(monkeypatch, fake, database_url, study):
    result = _cli(monkeypatch, fake, database_url, "create", study, "--url", HOST)
    assert result.exit_code != 0 and 'recruiter = "prolific"' in result.output and "Traceback" not in result.output
    result = _cli(monkeypatch, fake, database_url, "publish", study, "--yes")
    assert result.exit_code != 0 and "no Prolific study yet" in result.output


def test_the_client_is_an_httpx_client_with_timeouts():
    client = ProlificClient("t", transport=httpx.MockTransport(lambda r: httpx.Response(200, json={})))
    assert client.http.timeout.read == 30.0 and client.http.timeout.connect == 10.0
    assert client.http.headers["Authorization"] == "Token t"
