"""PostgreSQL's one-statement vote (server/paradigms/paired/vote.sql, ``paired.record_vote_in_one_statement``) against
the regular vote path (``paired.record_vote``).

The fast path stores the common votes itself and hands every other case to the regular path; the
fast lane (``server/views/fast_lane.py``) answers the votes it stores below Flask. Two fresh
databases play the same scripted study, one with the fast path and one without: every answer the
workers get (status, body and headers) and every row left behind must be the same, and the fast
path must have stored most of the votes, answered without Flask (otherwise the comparison would
prove nothing).
"""
from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass, field
from typing import Any

from flask import request

from server.models import Assignment
from server.paradigms.paired import paradigm as paired
from server.paradigms.paired.paradigm import PairedComparison
from server.services import app_services
from server.tokens import make_token

from .conftest import SMALL_STUDY, ManualClock, WorkerClient, create_test_study, make_test_app
from .vote_paths_support import Scrubber, first_difference, snapshot


@dataclass
class Play:
    """What one scripted study left: the answers in order, the database, and who stored the votes."""

    answers: list[tuple[str, int, Any]] = field(default_factory=list)
    snapshot: dict[str, list[tuple]] = field(default_factory=dict)
    stored_votes: int = 0
    stored_in_one_statement: int = 0
    votes_seen_by_flask: int = 0



class _Script:
    """The scripted workers of one play; vote IDs come from a counter, so both plays send the same."""

    def __init__(self, app, client, play: Play):
        self.app, self.client, self.play = app, client, play
        self.next_vote = 0
        self.scrub = Scrubber()

    def vote_id(self) -> str:
        self.next_vote += 1
        return str(uuid.UUID(int=self.next_vote, version=4))

    def send(self, label: str, worker: WorkerClient, trial_id: str, choice: str, vote_id: str | None = None,
             headers: dict | None = None):
        body = {"vote_id": vote_id or self.vote_id(), "trial_id": trial_id, "choice": choice, "rt_ms": 900.5,
                "input": "keyboard", "client_time": "2026-11-27T10:00:00Z",
                "window": {"width": 1366, "height": 768, "dpr": 1.25}}
        response = self.client.post(f"/api/v1/assignments/{worker.assignment_id}/votes",
                                    headers=headers or worker.headers, json=body)
        self.play.answers.append((label, response.status_code, self.scrub(response.get_json()),
                                  sorted((k, v) for k, v in response.headers if k not in ("Content-Length", "X-Request-ID"))))
        if response.status_code == 201:
            self.play.stored_votes += 1
        return response, body

    def state(self, label: str, worker: WorkerClient) -> dict:
        state = worker.state()
        self.play.answers.append((label, 200, self.scrub(state)))
        return state

    def act(self, label: str, worker: WorkerClient, action: str) -> None:
        response = worker.action(action)
        self.play.answers.append((label, response.status_code, self.scrub(response.get_json())))

    def answer_page(self, label: str, worker: WorkerClient, choose, clock: ManualClock) -> dict:
        """Answer the open trials of the worker's page with ``choose(trial) -> side``; the new state."""
        for trial in self.state(label, worker)["page"]["trials"]:
            if not trial["answered"]:
                self.send(label, worker, trial["trial_id"], choose(trial))
                clock.advance(seconds=40)  # renewals from a moving clock
        return self.state(label, worker)

    def answer_pages(self, label: str, worker: WorkerClient, choose, clock: ManualClock) -> dict:
        """Answer page after page until the worker's stage leaves the pages; the final state."""
        state = self.state(label, worker)
        for _ in range(10):
            if state["stage"] == "page_done":
                self.act(label, worker, "continue")
                state = self.state(label, worker)
            elif state["stage"] in ("quiz", "trials"):
                state = self.answer_page(label, worker, choose, clock)
            else:
                return state
        return state


def _play(database_url: str, tmp_path, demo_stimuli, clock: ManualClock, monkeypatch, *, fast: bool) -> Play:
    play = Play()
    tmp_path.mkdir()
    app = make_test_app(database_url, tmp_path / "instance", clock=clock)
    try:
        slug = create_test_study(app, demo_stimuli, tmp_path, **SMALL_STUDY)
        client = app.test_client()
        script = _Script(app, client, play)

        @app.before_request
        def count_votes_seen_by_flask():
            play.votes_seen_by_flask += request.path.endswith("/votes")

        def counted(*args):
            answer = paired.record_vote_in_one_statement(*args)
            play.stored_in_one_statement += answer is not None
            return answer

        with monkeypatch.context() as patch:
            patch.setattr(PairedComparison, "response_kinds", tuple(
                dataclasses.replace(kind, one_statement=counted if fast else None)
                for kind in PairedComparison.response_kinds))
            _script(script, app, client, slug, clock)
        play.snapshot = snapshot(app)
    finally:
        app_services(app).engine.dispose()
    return play


def _script(script: _Script, app, client, slug: str, clock: ManualClock) -> None:
    # A: passes the quiz and answers every page, with replays and refusals on the way, to completion.
    a = WorkerClient(client, slug, worker_id="WORKERA")
    b = WorkerClient(client, slug, worker_id="WORKERB")
    c = WorkerClient(client, slug, worker_id="WORKERC")
    for worker in (a, b, c):
        script.play.answers.append(("start", 200, script.scrub(worker.start())))
    assert script.answer_page("A quiz", a, a.correct_side, clock)["stage"] == "trials"
    page = script.state("A page", a)["page"]["trials"]
    first, second = page[0], page[1]
    response, body = script.send("A first", a, first["trial_id"], a.correct_side(first))
    script.send("A replay", a, first["trial_id"], body["choice"], vote_id=body["vote_id"])
    other = "right" if body["choice"] == "left" else "left"
    script.send("A replay, other choice", a, first["trial_id"], other, vote_id=body["vote_id"])
    script.send("A vote ID reused", a, second["trial_id"], "left", vote_id=body["vote_id"])
    script.send("A unknown trial", a, "999999", "left")
    b_trial = script.state("B quiz", b)["page"]["trials"][0]["trial_id"]
    script.send("A trial of B", a, b_trial, "left")
    with app_services(app).sessions() as session:
        assignment = session.get(Assignment, int(a.assignment_id))
        revoked = make_token(app.config["SECRET_KEY"], assignment.id, "0" * 16, assignment.study_id)
        older = make_token(app.config["SECRET_KEY"], assignment.id, assignment.token_nonce)  # no study in it
    refused, _ = script.send("A revoked token", a, second["trial_id"], "left",
                             headers={"Authorization": f"Bearer {revoked}"})
    assert refused.status_code == 403
    # A token made before tokens named their study still votes (through the regular path).
    stored, _ = script.send("A older token", a, second["trial_id"], "left",
                            headers={"Authorization": f"Bearer {older}"})
    assert stored.status_code == 201
    end = script.answer_pages("A pages", a, a.correct_side, clock)
    assert end["stage"] == "completed", end["stage"]
    script.send("A after the end", a, first["trial_id"], body["choice"], vote_id=body["vote_id"])
    # B: passes the quiz, then misses every hidden gold trial until stopped; votes on after the stop.
    assert script.answer_page("B quiz", b, b.correct_side, clock)["stage"] == "trials"
    end = script.answer_pages("B pages", b, b.wrong_side, clock)
    assert end["stage"] == "stopped", end["stage"]
    # C: fails the quiz.
    end = script.answer_pages("C quiz", c, c.wrong_side, clock)
    assert end["stage"] == "disqualified", end["stage"]




def test_both_vote_paths_give_the_same_answers_and_rows(two_postgres_urls, tmp_path, demo_stimuli, monkeypatch):
    start = ManualClock()
    clocks = [ManualClock(), ManualClock()]
    for clock in clocks:
        clock.now = start.now
    regular = _play(two_postgres_urls[0], tmp_path / "regular", demo_stimuli, clocks[0], monkeypatch, fast=False)
    fast = _play(two_postgres_urls[1], tmp_path / "fast", demo_stimuli, clocks[1], monkeypatch, fast=True)
    assert regular.stored_in_one_statement == 0
    # Most votes were the fast path's: all but the ends of the quizzes, of the last pages and the stop;
    # and the fast lane answered them (the page ends too, building their State in a request context).
    assert fast.stored_in_one_statement >= 0.7 * fast.stored_votes, (fast.stored_in_one_statement, fast.stored_votes)
    assert regular.votes_seen_by_flask > fast.stored_votes  # every vote request, refused ones too
    assert fast.votes_seen_by_flask == regular.votes_seen_by_flask - fast.stored_in_one_statement
    for (label, *regular_answer), (_, *fast_answer) in zip(regular.answers, fast.answers):
        assert fast_answer == regular_answer, label
    assert len(fast.answers) == len(regular.answers)
    assert fast.snapshot == regular.snapshot, first_difference(regular.snapshot, fast.snapshot)
    assert any(row for row in fast.snapshot["pair"]), "the pairs' counters are part of the comparison"
