"""Prolific as documented (issue 38 item 3): every request server/prolific.py sends is checked against the
documented field list of its endpoint (tests/server/prolific_fake.py ENDPOINTS, the one place those lists live,
each citing its documentation page), and the client copes with what the documentation says the API does:
``filters`` required on create, submissions paged by ``limit``/``offset`` against ``meta.count`` without a next
link, bulk approval carried out asynchronously, transitional states, set-up amounts in cents."""
from __future__ import annotations

import random
from decimal import Decimal

import pytest
from sqlalchemy import select

from server import claims
from server.models import ProlificBonus, Study
from server.prolific import ProlificClient, ProlificError, ProlificService, Request, StudyDraft
from server.services import app_services

from .conftest import SMALL_STUDY, create_test_study
from .prolific_fake import (BASE_URL, COMPLETION_CODE, ENDPOINTS, HOST, PROLIFIC_ENTRY, TOKEN, Clock, FaultyTransport,
                            completed_participant, endpoint_of, make_fake, publish_and_approve_all)

PIDS = [f"{i:024x}" for i in range(1, 8)]



@pytest.fixture
def database_url(sqlite_url) -> str:
    """SQLite only: what is tested here is the conversation with Prolific; the claims that make it safe on
    PostgreSQL as well are raced on both databases in test_payments_once.py."""
    return sqlite_url


@pytest.fixture
def fake():
    app, state = make_fake()
    return state, FaultyTransport(app)


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def client(fake, clock):
    client = ProlificClient(TOKEN, base_url=BASE_URL, transport=fake[1], sleep=lambda s: None, clock=clock,
                            rng=random.Random(3))
    yield client
    client.close()


def _draft(**changes) -> StudyDraft:
    fields = dict(name="Compare images", internal_name="perceptlab t", description="Pairs of images.",
                  external_study_url=f"{HOST}/s/x?PROLIFIC_PID={{{{%PROLIFIC_PID%}}}}", completion_code="C1",
                  reward_cents=50, estimated_minutes=5, places=3, devices=("desktop",))
    return StudyDraft(**{**fields, **changes})


def test_every_request_the_client_sends_is_as_documented(client, fake):
    """Each client call once (or more), every request checked by the fake against ENDPOINTS: no violation, no
    undocumented endpoint, and every documented endpoint the list names is used (the list holds no more than the
    client sends)."""
    state, _ = fake
    client.me()
    studies = [client.create_study(_draft(internal_name=f"t{i}")) for i in range(3)]
    client.create_study(_draft(filters=({"filter_id": "handedness", "selected_values": ["1"]},)))
    assert len(client.list_studies()) == 4
    study_id = studies[0].id
    client.transition_study(study_id, "PUBLISH")
    state.settle()
    client.set_places(study_id, 5)
    client.get_study(study_id)
    ids = [state.add_submission(study_id, pid, code="C1") for pid in PIDS[:5]]
    assert len(client.study_submissions(study_id)) == 5
    client.get_submission(ids[0])
    client.transition_submission(ids[0], "APPROVE")
    client.transition_submission(ids[1], "REJECT", rejection_category="NO_CODE", message="x" * 100)
    client.bulk_approve(ids[2:])
    state.settle()
    bulk = client.set_up_bonuses(study_id, [(PIDS[0], Decimal("0.80"))])
    client.pay_bonuses(bulk.id)

    assert state.violations == []
    keys = [key for _, key, _, _ in state.requests]
    assert None not in keys and set(keys) == set(ENDPOINTS)
    create = next(body for method, key, body, _ in state.requests if key == ("POST", "studies/"))
    assert ENDPOINTS[("POST", "studies/")].required <= set(create)


@pytest.mark.parametrize("method, path, body, params, field", [
    ("POST", "studies/", {k: v for k, v in _draft().body().items() if k != "filters"}, None, "filters"),
    ("POST", "studies/", {**_draft().body(), "colour": "red"}, None, "colour"),
    ("POST", "submissions/bulk-approve/", {"participant_ids": ["p"]}, None, "non_field_errors"),
    ("POST", "submissions/bonus-payments/", {"csv_bonuses": "p,1.00"}, None, "study_id"),
    ("GET", "studies/", None, {"page": 2}, "page"),
])
def test_the_fake_refuses_what_the_documentation_refuses(client, fake, method, path, body, params, field):
    state, _ = fake
    with pytest.raises(ProlificError, match="400") as caught:
        client.send(Request(method, path, json=body, params=params))
    assert field in caught.value.detail and state.violations[-1][2] == caught.value.detail


def test_the_field_lists_name_their_documentation_pages():
    assert all(e.doc.startswith("https://docs.prolific.com/api-reference/") for e in ENDPOINTS.values())
    assert endpoint_of("POST", "/api/v1/submissions/bulk-approve/") == ("POST", "submissions/bulk-approve/")
    assert endpoint_of("POST", "/api/v1/submissions/5abc/transition/") == ("POST", "submissions/{id}/transition/")
    assert endpoint_of("DELETE", "/api/v1/studies/") is None


def test_a_list_without_next_links_is_paged_by_offset_against_its_count(client, fake):
    state, _ = fake
    study = client.create_study(_draft())
    ids = [state.add_submission(study.id, pid) for pid in PIDS]  # 7, pages of at most 2, no next link
    assert [s.id for s in client.study_submissions(study.id)] == ids
    offsets = [query for method, key, _, query in state.requests if key == ("GET", "studies/{id}/submissions/")]
    assert len(offsets) == 4 and all(q == {"limit", "offset"} for q in offsets)


def test_next_links_are_followed_when_given(client, fake):
    state, _ = fake
    made = [client.create_study(_draft(internal_name=f"t{i}")).id for i in range(5)]
    assert [s.id for s in client.list_studies()] == made
    assert state.served("GET", "/studies/") == 3  # 5 studies, pages of 2, each next link followed once


def test_set_up_amounts_are_cents_and_other_units_are_never_paid(app, demo_stimuli, tmp_path, fake, clock):
    """The set-up answer gives cents; an answer in pounds (what the old fake gave) does not match the ledger, and
    nothing is paid."""
    state, transport = fake
    slug = _study_with_participants(app, demo_stimuli, tmp_path, PIDS[:1])
    with app_services(app).sessions() as session:
        service = _service(session, transport, clock)
        study = _approve_all(service, state, session, slug)
        transport.inject("POST", "/bonus-payments/", "pounds")
        with pytest.raises(ProlificError, match="for 1 cents where the ledger has 80 cents due: nothing paid"):
            service.pay_bonuses(study)
        assert state.payments == [] and {b.status for b in service.ledger(study)} == {"recorded"}
        assert len(service.pay_bonuses(study).paid) == 1
    assert state.paid_to(PIDS[0]) == 80


def _service(session, transport, clock) -> ProlificService:
    client = ProlificClient(TOKEN, base_url=BASE_URL, transport=transport, sleep=lambda s: None, clock=clock)
    return ProlificService(client, session, clock=clock)


def _study_with_participants(app, demo_stimuli, tmp_path, pids) -> str:
    slug = create_test_study(app, demo_stimuli, tmp_path, slug="pro", entry=PROLIFIC_ENTRY, **SMALL_STUDY)
    for pid in pids:
        completed_participant(app, slug, pid, 3)  # 2 extra pages: a bonus of 0.80
    return slug


def _approve_all(service, state, session, slug) -> Study:
    study = session.scalar(select(Study).where(Study.slug == slug))
    publish_and_approve_all(service, state, study, PIDS, places=len(PIDS))
    return study


def test_participants_past_the_first_page_are_approved_and_paid(app, demo_stimuli, tmp_path, fake, clock):
    state, transport = fake
    slug = _study_with_participants(app, demo_stimuli, tmp_path, PIDS)
    with app_services(app).sessions() as session:
        service = _service(session, transport, clock)
        study = _approve_all(service, state, session, slug)
        assert len(service.submissions(study)) == 7  # pages of 2
        run = service.pay_bonuses(study)
    assert len(run.paid) == 7 and [state.paid_to(pid) for pid in PIDS] == [80] * 7
    assert {s["status"] for s in state.submissions.values()} == {"APPROVED"}


def test_no_bonus_before_prolific_shows_the_approval(app, demo_stimuli, tmp_path, fake, clock):
    """Bulk approval is asynchronous: asked for, the submissions are PROCESSING; the bonus waits until reading
    them back shows APPROVED, and a second approval is not asked for within the lease."""
    state, transport = fake
    slug = _study_with_participants(app, demo_stimuli, tmp_path, PIDS[:2])
    with app_services(app).sessions() as session:
        service = _service(session, transport, clock)
        study = session.scalar(select(Study).where(Study.slug == slug))
        row = service.create(study, host=HOST, places=5)
        subs = [state.add_submission(row.prolific_id, pid, code=COMPLETION_CODE) for pid in PIDS[:2]]
        service.reconcile(study)
        asked, _ = service.approve_checked(study)
        assert len(asked) == 2 and {r.status for r in service.submissions(study)} == {"AWAITING REVIEW"}
        run = service.pay_bonuses(study)  # reads back: PROCESSING, not approved
        assert run.waiting == 2 and run.paid == [] and state.bulks == {}
        assert {r.status for r in service.submissions(study)} == {"PROCESSING"}
        assert len(service.pending_approval(study)) == 2
        assert service.approve(study, subs[0]) == "approval in progress on Prolific (PROCESSING)"
        assert service.approve_checked(study)[0] == []  # not asked twice
        assert state.served("POST", "/bulk-approve/") == 1
        state.settle()
        run = service.pay_bonuses(study)
        assert len(run.paid) == 2 and service.pending_approval(study) == []
    assert [state.paid_to(pid) for pid in PIDS[:2]] == [80, 80]


def test_an_approval_prolific_lost_is_asked_again_after_the_lease(app, demo_stimuli, tmp_path, fake, clock):
    state, transport = fake
    slug = _study_with_participants(app, demo_stimuli, tmp_path, PIDS[:1])
    with app_services(app).sessions() as session:
        service = _service(session, transport, clock)
        study = session.scalar(select(Study).where(Study.slug == slug))
        row = service.create(study, host=HOST, places=5)
        sub = state.add_submission(row.prolific_id, PIDS[0], code=COMPLETION_CODE)
        service.reconcile(study)
        service.approve_checked(study)
        state.submissions[sub]["status"] = "AWAITING REVIEW"  # Prolific dropped the bulk approval
        service.reconcile(study)
        assert service.approve_checked(study)[0] == []
        clock.now += claims.LEASE
        assert len(service.approve_checked(study)[0]) == 1
    assert state.served("POST", "/bulk-approve/") == 2


def test_a_publishing_study_is_waited_for(app, demo_stimuli, tmp_path, fake, clock):
    state, transport = fake
    slug = _study_with_participants(app, demo_stimuli, tmp_path, [])
    with app_services(app).sessions() as session:
        service = _service(session, transport, clock)
        study = session.scalar(select(Study).where(Study.slug == slug))
        service.create(study, host=HOST, places=5)
        assert service.publish(study) == "publishing"
        for action in (service.pause, service.stop, service.resume):
            with pytest.raises(ProlificError, match="is PUBLISHING: wait until Prolific has finished"):
                action(study)
        assert service.publish(study) == "already publishing"
        state.settle()
        assert service.pause(study) == "paused"
    assert state.served("POST", "/transition/") == 2 and state.violations == []


def test_the_ledger_keeps_no_claim_for_a_refused_set_up(app, demo_stimuli, tmp_path, fake, clock):
    state, transport = fake
    slug = _study_with_participants(app, demo_stimuli, tmp_path, PIDS[:1])
    with app_services(app).sessions() as session:
        service = _service(session, transport, clock)
        study = _approve_all(service, state, session, slug)
        transport.inject("POST", "/bonus-payments/", "500", times=5)
        with pytest.raises(ProlificError):
            service.pay_bonuses(study)
        assert [b.status for b in session.scalars(select(ProlificBonus))] == ["recorded"]
        assert len(service.pay_bonuses(study).paid) == 1  # the next run sets it up at once
