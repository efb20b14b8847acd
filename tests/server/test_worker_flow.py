"""The worker's path through a study over the API, on SQLite and PostgreSQL."""
from __future__ import annotations

from sqlalchemy import func, select

from server.models import Worker
from server.paradigms.paired.models import GoldResult, Trial, Vote
from server.services import app_services

from .conftest import WorkerClient
from .reason_support import counts, one, recorded


def _count(app, model, *where) -> int:
    with app_services(app).sessions() as session:
        return session.scalar(select(func.count()).select_from(model).where(*where))


def test_quiz_pages_and_completion(app, study):
    client = app.test_client()
    worker = WorkerClient(client, study)
    state = worker.start()
    assert state["stage"] == "quiz" and state["page"]["kind"] == "quiz" and state["page"]["n_trials"] == 3
    body = worker.answer_page(worker.correct_side)
    assert body["feedback"] == {"correct": True} and body["stage"] == "trials"
    # The vote that completes a page carries the State a GET would give next (here: the first trials page).
    assert body["state"] == worker.state() and body["state"]["stage"] == "trials"
    for page in range(3):
        state = worker.state()
        assert state["stage"] == "trials" and state["page"]["n_trials"] == 6
        body = worker.answer_page(worker.correct_side)
        assert body["page_complete"]
        assert body["state"] == worker.state() and body["state"]["stage"] == body["stage"]
        if body["stage"] == "page_done":
            assert worker.action("continue").status_code == 200
    assert body["stage"] == "completed"
    state = worker.state()
    assert state["completion"]["mode"] == "mturk"
    assert state["completion"]["submit_url"] == "https://workersandbox.mturk.com/mturk/externalSubmit"
    assert _count(app, Vote) == 3 + 3 * 6
    # 6 trials per page with gold_rate 0.2 -> 1 hidden gold per page, never the same real pair twice.
    assert _count(app, GoldResult, ~GoldResult.is_quiz) == 3
    with app_services(app).sessions() as session:
        pairs = session.scalars(select(Trial.pair_id).where(~Trial.is_gold)).all()
    assert len(pairs) == len(set(pairs)) == 3 * 5


def test_failed_quiz_disqualifies_for_good(app, study):
    client = app.test_client()
    worker = WorkerClient(client, study, worker_id="WBAD")
    worker.start()
    wrong = worker.wrong_side
    body = worker.answer_page(wrong)
    assert body["stage"] == "disqualified" and body["feedback"] == {"correct": False}
    assert "quiz" in worker.state()["message"]
    # A new HIT of the same study: the worker is turned away at once.
    again = WorkerClient(client, study, worker_id="WBAD")
    assert again.entry["stage"] == "disqualified"
    assert _count(app, Worker, Worker.status == "disqualified") == 1
    assert recorded(app, again.assignment_id) == ("quiz_failed", "quiz_failed")  # the worker's reason, in each HIT
    assert counts(app, study) == one("quiz_failed")
