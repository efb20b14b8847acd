"""Concurrent requests over real HTTP (threaded werkzeug server), on SQLite (WAL) and PostgreSQL.

Retries and double submissions must never store a vote twice or lose an acknowledged one, and
workers starting pages at the same moment must never push a pair past its target.
"""
from __future__ import annotations

import threading
import time
import uuid
from collections import Counter

from sqlalchemy import create_engine, func, select, text, update

from server.models import Assignment, Pair, Trial, Vote, Worker
from server.services import app_services

from .concurrency_support import TIMEOUT, HttpWorker, together
from .conftest import create_test_study, held_count_problems


def vote_body(trial_id: str, choice: str = "left") -> dict:
    return {"vote_id": str(uuid.uuid4()), "trial_id": trial_id, "choice": choice, "rt_ms": 640, "input": "mouse",
            "client_time": "2026-11-21T10:00:00Z", "window": {"width": 1280, "height": 800, "dpr": 1}}


def _session(app):
    return app_services(app).sessions()


NO_QUIZ = {"quality": {"quiz_size": 0, "gold_rate": 0.0}}


def test_the_same_vote_sent_eight_times_at_once(app, live_server, demo_stimuli, tmp_path):
    slug = create_test_study(app, demo_stimuli, tmp_path, slug="same",
                             pages={"pairs_per_page": 6, "min_pages": 1, "max_pages": 2}, **NO_QUIZ)
    worker = HttpWorker(live_server, slug)
    worker.action("consent")
    trials = worker.action("instructions_done").json()["page"]["trials"]
    body = vote_body(trials[0]["trial_id"])
    responses = together(8, worker.vote, *[(body,)] * 8)
    statuses = Counter((r.status_code, r.json().get("status")) for r in responses)
    assert statuses == {(201, "stored"): 1, (200, "duplicate"): 7}, statuses
    assert all(r.json()["vote_id"] == body["vote_id"] for r in responses)
    # Eight different vote IDs for one trial (two tabs, say): one is stored, seven refused.
    bodies = [(vote_body(trials[1]["trial_id"], "right"),) for _ in range(8)]
    responses = together(8, worker.vote, *bodies)
    outcomes = Counter((r.status_code, r.json().get("status", r.json().get("error"))) for r in responses)
    assert outcomes == {(201, "stored"): 1, (409, "trial_already_answered"): 7}, outcomes
    with _session(app) as session:
        votes = session.scalars(select(Vote)).all()
    assert sorted(v.trial_id for v in votes) == sorted(int(t["trial_id"]) for t in trials[:2])
    assert {v.client_vote_id for v in votes} == {body["vote_id"]} | {
        b[0]["vote_id"] for b, r in zip(bodies, responses) if r.status_code == 201}


def test_many_workers_voting_at_once_store_exactly_the_acknowledged_votes(app, live_server, demo_stimuli, tmp_path):
    slug = create_test_study(app, demo_stimuli, tmp_path, slug="many",
                             pages={"pairs_per_page": 6, "min_pages": 1, "max_pages": 2},
                             quality={"quiz_size": 0, "gold_rate": 0.2})
    workers = [HttpWorker(live_server, slug) for _ in range(6)]
    jobs = []
    for worker in workers:
        worker.action("consent")
        for trial in worker.action("instructions_done").json()["page"]["trials"]:
            body = vote_body(trial["trial_id"], "left" if len(jobs) % 2 else "right")
            jobs += [(worker, body), (worker, body)]  # every vote is retried once, possibly at the same time
    responses = together(16, lambda w, b: (b["vote_id"], w.vote(b)), *jobs)
    acknowledged = set()
    for vote_id, response in responses:
        assert response.status_code in (200, 201), response.text
        assert response.json()["status"] == ("stored" if response.status_code == 201 else "duplicate")
        acknowledged.add(vote_id)
    assert Counter(r.status_code for _, r in responses) == {201: len(jobs) // 2, 200: len(jobs) // 2}
    with _session(app) as session:
        stored = session.scalars(select(Vote.client_vote_id)).all()
        open_trials = session.scalar(select(func.count()).select_from(Trial).where(~Trial.answered))
    assert len(stored) == len(set(stored)) == len(acknowledged) == 6 * 6
    assert set(stored) == acknowledged
    assert open_trials == 0
    # Every page is complete and every worker moved on.
    assert {w.state()["stage"] for w in workers} == {"page_done"}
    assert not held_count_problems(app)


def test_concurrent_page_starts_never_overfill_a_pair(app, live_server, demo_stimuli, tmp_path):
    # 44 pairs x 2 votes = 88 open slots; 10 workers asking for 20 pairs each at the same moment.
    slug = create_test_study(app, demo_stimuli, tmp_path, slug="fill", design={"degree": 2, "votes_per_pair": 2},
                             pages={"pairs_per_page": 20, "min_pages": 1, "max_pages": 3}, **NO_QUIZ)
    workers = [HttpWorker(live_server, slug) for _ in range(10)]
    for worker in workers:
        assert worker.action("consent").status_code == 200
    responses = together(10, lambda w: w.action("instructions_done"), *[(w,) for w in workers])
    assert all(r.status_code == 200 for r in responses), [r.text for r in responses if r.status_code != 200]
    with _session(app) as session:
        held = Counter(session.scalars(select(Trial.pair_id)))
        targets = dict(session.execute(select(Pair.id, Pair.target_votes).where(~Pair.is_gold)).all())
    over = {pair: n for pair, n in held.items() if n > targets[pair]}
    assert not over, f"pairs over their target: {over}"
    assert sum(held.values()) == 88  # and no slot was left unused
    stages = Counter(r.json()["stage"] for r in responses)
    # Those who found nothing left are told the study is full (no page yet, so never "completed").
    assert stages["trials"] >= 5 and stages["trials"] + stages["full"] == 10, stages
    assert not held_count_problems(app)
    with _session(app) as session:  # every open slot is held: the pairs' counters say so too
        assert session.scalar(select(func.sum(Pair.n_held))) == 88


def test_a_vote_waiting_for_the_assignment_lock_sees_the_committed_stage(app, live_server, demo_stimuli, tmp_path):
    """While one request holds the assignment (here: a concurrent gold vote that stops the worker), a vote
    that waited for the lock must act on the committed assignment, not on what it read before waiting."""
    slug = create_test_study(app, demo_stimuli, tmp_path, slug="lock",
                             pages={"pairs_per_page": 4, "min_pages": 1, "max_pages": 3}, **NO_QUIZ)
    worker = HttpWorker(live_server, slug)
    worker.action("consent")
    trials = worker.action("instructions_done").json()["page"]["trials"]
    for trial in trials[:-1]:
        assert worker.vote(vote_body(trial["trial_id"])).status_code == 201
    assignment_id = int(worker.assignment_id)
    engine = app_services(app).engine
    postgres = engine.dialect.name == "postgresql"
    result = {}
    with engine.connect() as connection:
        transaction = connection.begin()  # SQLite: BEGIN IMMEDIATE, the database's write lock
        connection.execute(select(Assignment.id).where(Assignment.id == assignment_id).with_for_update())
        connection.execute(update(Assignment).where(Assignment.id == assignment_id).values(stage="stopped"))
        connection.execute(update(Worker).values(status="stopped", status_reason="stopped by a concurrent vote"))
        thread = threading.Thread(target=lambda: result.setdefault("response", worker.vote(vote_body(
            trials[-1]["trial_id"]))))
        thread.start()
        if postgres:
            _wait_for_lock_waiter(engine)
        else:
            time.sleep(0.5)
        assert thread.is_alive()
        transaction.commit()
    thread.join(TIMEOUT)
    response = result["response"]
    assert response.status_code in (201, 409), response.text
    with _session(app) as session:
        assignment = session.get(Assignment, assignment_id)
        assert (assignment.stage, assignment.pages_completed) == ("stopped", 0), response.json()
    if response.status_code == 201:
        assert response.json()["stage"] == "stopped"


def _wait_for_lock_waiter(engine) -> None:
    """Until another session of this database waits for a lock (PostgreSQL)."""
    watcher = create_engine(engine.url)
    try:
        deadline = time.monotonic() + 10
        with watcher.connect() as connection:
            while time.monotonic() < deadline:
                waiting = connection.execute(text(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock'")).scalar()
                if waiting:
                    return
                connection.commit()
                time.sleep(0.02)
        raise AssertionError("the vote never waited for the assignment lock")
    finally:
        watcher.dispose()
