"""The fast lane (``server/views/fast_lane.py``): votes stored in one statement, answered below Flask.

What it stores and answers is compared with the regular path in ``test_one_statement_vote.py``
(answers, headers, rows). Here: everything it must leave to Flask gets Flask's own answer, with
the body put back, and nothing stored; a refused statement is not tried twice; a stored vote is
acknowledged even when the State that should come with it cannot be built.
"""
from __future__ import annotations

import json

import pytest
from sqlalchemy import event, func, select
from werkzeug.test import Client

from server.paradigms.paired.models import Vote
from server.services import app_services
from server.views import api, fast_lane
from server.views.fast_lane import FastLane

from .conftest import SMALL_STUDY, WorkerClient, create_test_study, make_test_app


@pytest.fixture
def pg_app(postgres_url, tmp_path, clock):
    app = make_test_app(postgres_url, tmp_path / "instance", clock=clock)
    yield app
    app_services(app).engine.dispose()


def _votes(app) -> int:
    with app_services(app).sessions() as session:
        return session.scalar(select(func.count()).select_from(Vote))


@pytest.fixture
def voting_worker(pg_app, demo_stimuli, tmp_path):
    """A worker at the quiz whose first vote is stored (so this process knows the study: the fast
    lane takes its next votes), and the trial to vote on next."""
    slug = create_test_study(pg_app, demo_stimuli, tmp_path, **SMALL_STUDY)
    worker = WorkerClient(pg_app.test_client(), slug)
    trials = worker.start()["page"]["trials"]
    assert worker.vote(trials[0]["trial_id"], worker.correct_side(trials[0])).status_code == 201
    return worker, trials[1]


def _vote_body(trial: dict) -> dict:
    return {"vote_id": "0b7e4c52-4a43-4a5e-9d7e-2f1f1c1f0a01", "trial_id": trial["trial_id"], "choice": "left",
            "rt_ms": 812.0, "input": "keyboard", "client_time": "2026-11-28T10:00:00Z",
            "window": {"width": 1366, "height": 768, "dpr": 1}}


# Requests the fast lane must not answer: (name, how to send the vote body); Flask refuses each.
BAD_REQUESTS = {
    "not JSON by its type": lambda body, token: dict(data=json.dumps(body), content_type="text/plain",
                                                     headers={"Authorization": f"Bearer {token}"}),
    "malformed JSON": lambda body, token: dict(data=json.dumps(body)[:-3], content_type="application/json",
                                               headers={"Authorization": f"Bearer {token}"}),
    "NaN": lambda body, token: dict(data=json.dumps({**body, "rt_ms": float("nan")}),
                                    content_type="application/json", headers={"Authorization": f"Bearer {token}"}),
    "NUL in a string": lambda body, token: dict(json={**body, "input": "key\u0000board"},
                                                headers={"Authorization": f"Bearer {token}"}),
    "a list, not an object": lambda body, token: dict(json=[body], headers={"Authorization": f"Bearer {token}"}),
    "deep JSON": lambda body, token: dict(data='{"a":' * 200 + "1" + "}" * 200, content_type="application/json",
                                          headers={"Authorization": f"Bearer {token}"}),
    "absurd size": lambda body, token: dict(data=json.dumps({**body, "pad": "x" * (2 << 20)}),
                                            content_type="application/json",
                                            headers={"Authorization": f"Bearer {token}"}),
    "shorter than its Content-Length": lambda body, token: dict(
        data=json.dumps(body), content_type="application/json", headers={"Authorization": f"Bearer {token}"},
        environ_overrides={"CONTENT_LENGTH": str(len(json.dumps(body)) + 40)}),
    "chunked": lambda body, token: dict(
        data=json.dumps(body), content_type="application/json", headers={"Authorization": f"Bearer {token}"},
        environ_overrides={"CONTENT_LENGTH": "", "HTTP_TRANSFER_ENCODING": "chunked", "wsgi.input_terminated": True}),
    "a duplicate key": lambda body, token: dict(
        data=json.dumps(body)[:-1] + ', "choice": "right"}', content_type="application/json",
        headers={"Authorization": f"Bearer {token}"}),
    "over the worker API's 64 kB": lambda body, token: dict(json={**body, "pad": "x" * (64 << 10)},
                                                            headers={"Authorization": f"Bearer {token}"}),
    "no token": lambda body, token: dict(json=body),
    "a forged token": lambda body, token: dict(json=body, headers={"Authorization": f"Bearer {token[:-4]}AAAA"}),
    "a bad field": lambda body, token: dict(json={**body, "choice": "middle"},
                                            headers={"Authorization": f"Bearer {token}"}),
    "an unknown field": lambda body, token: dict(json={**body, "correct": True},
                                                 headers={"Authorization": f"Bearer {token}"}),
}


@pytest.mark.parametrize("case", list(BAD_REQUESTS))
def test_a_request_left_to_flask_gets_flasks_answer_and_stores_nothing(pg_app, voting_worker, case):
    worker, trial = voting_worker
    lane = pg_app.wsgi_app.wsgi_app  # inside the metrics' middleware (server/metrics.py)
    assert isinstance(lane, FastLane)
    flask_alone = Client(lane.wsgi_app)  # the app without the fast lane
    with_lane = pg_app.test_client()
    stored = _votes(pg_app)
    path = f"/api/v1/assignments/{worker.assignment_id}/votes"
    answers = []
    for client in (with_lane, flask_alone):
        response = client.post(path, **BAD_REQUESTS[case](_vote_body(trial), worker.token))
        answers.append((response.status_code, response.get_json(silent=True)))
    assert answers[0] == answers[1]
    assert 400 <= answers[0][0] < 500 and answers[0][1]["error"], answers[0]
    assert _votes(pg_app) == stored
    # The trial is still open and takes a good vote.
    assert worker.vote(trial["trial_id"], worker.correct_side(trial)).status_code == 201


def test_a_vote_the_statement_refuses_is_decided_by_the_view_without_a_second_try(pg_app, voting_worker,
                                                                                   monkeypatch):
    worker, trial = voting_worker
    body = _vote_body(trial)
    first = worker.client.post(f"/api/v1/assignments/{worker.assignment_id}/votes", headers=worker.headers,
                               json=body)
    assert first.status_code == 201 and first.json["status"] == "stored"
    tries = []
    real = api.record_in_one_statement
    monkeypatch.setattr(api, "record_in_one_statement", lambda *args: tries.append(args) or real(*args))
    replay = worker.client.post(f"/api/v1/assignments/{worker.assignment_id}/votes", headers=worker.headers,
                                json=body)
    assert replay.status_code == 200 and replay.json["status"] == "duplicate", replay.json  # the body reached Flask
    assert tries == []
    # A request the fast lane did not take (its type is not JSON) is tried by the view, and refused there.
    refused = worker.client.post(f"/api/v1/assignments/{worker.assignment_id}/votes", headers=worker.headers,
                                 data=json.dumps(body), content_type="text/plain")
    assert refused.status_code == 400 and tries == []  # refused before the statement: nothing tried


def test_a_page_end_is_acknowledged_without_its_state_when_the_state_fails(pg_app, voting_worker, monkeypatch,
                                                                           caplog):
    worker, _ = voting_worker
    assert worker.answer_page(worker.correct_side)["stage"] == "trials"  # the quiz passed
    trials = worker.state()["page"]["trials"]

    def broken(claims):
        raise RuntimeError("the State could not be read")

    monkeypatch.setattr(fast_lane, "state_after_response", broken)
    stored = _votes(pg_app)
    answers = [worker.vote(trial["trial_id"], worker.correct_side(trial)) for trial in trials]
    assert [answer.status_code for answer in answers] == [201] * len(trials)
    assert answers[-1].json["page_complete"] and "state" not in answers[-1].json, answers[-1].json
    assert _votes(pg_app) == stored + len(trials)
    assert "the State after a stored response could not be built" in caplog.text
    assert worker.state()["stage"] == "page_done"  # the client asks for it, as before votes carried it


def test_a_page_end_ends_its_transaction_with_a_commit(pg_app, voting_worker):
    """The State of a page end is read in a transaction that must end with COMMIT: psycopg forgets
    every prepared statement of a connection at a ROLLBACK (the teardown's close would issue one),
    and the requests after each page end would pay for planning their statements again."""
    worker, _ = voting_worker
    assert worker.answer_page(worker.correct_side)["stage"] == "trials"  # the quiz passed
    rollbacks = []

    def count(connection):
        rollbacks.append(connection)

    votes = [(trial["trial_id"], worker.correct_side(trial)) for trial in worker.state()["page"]["trials"]]
    engine = app_services(pg_app).engine
    event.listen(engine, "rollback", count)
    try:
        answers = [worker.vote(trial_id, side) for trial_id, side in votes]
    finally:
        event.remove(engine, "rollback", count)
    last = answers[-1].json
    assert last["page_complete"] and last["state"]["stage"] == "page_done", last
    assert rollbacks == []


def test_a_page_completed_in_the_fast_lane_checks_the_studys_stopping_rules(pg_app, demo_stimuli, tmp_path,
                                                                            monkeypatch):
    """A page's last vote, stored below Flask, is followed by the throttled [stopping] check the view makes after
    a page-completing response: a study whose cap that vote reaches stops then, with no action after it."""
    from server import stopping
    from server.models import Study, StudyStopping

    pg_app.config["SERVER"]["stopping_check_seconds"] = 0  # every page end checks (no throttle in the way)
    # The cap is the quiz's votes and one page's: the demo's gold pairs are design pairs, whose gold trials (the
    # quiz's too) are votes of them, so the page's last vote reaches it.
    quiz, page = SMALL_STUDY["quality"]["quiz_size"], SMALL_STUDY["pages"]["pairs_per_page"]
    slug = create_test_study(pg_app, demo_stimuli, tmp_path, stopping={"max_votes": quiz + page}, **SMALL_STUDY)
    worker = WorkerClient(pg_app.test_client(), slug)
    worker.start()  # an action (checked: no vote yet); this process now knows the study
    assert worker.answer_page(worker.correct_side)["stage"] == "trials"  # the quiz: below the cap
    view_checks, checks = [], []
    monkeypatch.setattr(api, "check_stopping_after", lambda *args: view_checks.append(args))
    real_check = stopping.check_soon
    monkeypatch.setattr(stopping, "check_soon", lambda app, study_id: checks.append(study_id)
                        or real_check(app, study_id))

    def status() -> str:
        with app_services(pg_app).sessions() as session:
            return session.scalar(select(Study.status).where(Study.slug == slug))

    trials = worker.state()["page"]["trials"]
    for trial in trials[:-1]:
        assert worker.vote(trial["trial_id"], worker.correct_side(trial)).status_code == 201
    assert status() == "active" and checks == []  # a vote that completes no page checks nothing
    last = worker.vote(trials[-1]["trial_id"], worker.correct_side(trials[-1]))
    assert last.status_code == 201 and last.json["page_complete"] and last.json["state"]["stage"] == "page_done"
    assert view_checks == []  # answered by the fast lane, not the view
    assert len(checks) == 1 and status() == "stopped"
    with app_services(pg_app).sessions() as session:
        record = session.get(StudyStopping, checks[0])
        assert record.reason == "max_votes"
