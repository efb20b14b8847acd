"""Two entries of the same worker at once (a double click): both get the one assignment.

The entry has no SAVEPOINT of its own (server/paradigms/core.py, ``Paradigm.enter``): the one that loses the
race on the unique keys rolls its transaction back and finds the rows the other made. The race is made
deterministic here: the second entry runs, to its commit, while the first waits at its admission (between its
lookup, which found nothing, and its INSERTs). PostgreSQL only: on SQLite the first entry's transaction holds
the write lock from its first statement (BEGIN IMMEDIATE), so no other entry can commit inside it.
"""
from __future__ import annotations

import threading

import pytest
from sqlalchemy import func, select

from server.models import Assignment, Worker
from server.services import app_services

from .conftest import create_test_study

ENTRY = {"platform": "mturk", "worker_id": "WRACE0001", "assignment_id": "ARACE0001", "hit_id": "HIT1",
         "turk_submit_to": "https://workersandbox.mturk.com"}


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_an_entry_that_loses_the_race_answers_with_the_winners_assignment(app, demo_stimuli, tmp_path, monkeypatch):
    from server.views import api

    slug = create_test_study(app, demo_stimuli, tmp_path, slug="race")
    admitted, inner = [], {}
    plain_admission = api.admission

    def enter_from_another_thread() -> None:
        # A thread of its own: its own app context, database session and transaction, committed before it ends.
        inner["response"] = app.test_client().post(f"/api/v1/studies/{slug}/assignments", json=ENTRY)

    def racing_admission(*args, **kwargs):
        admit = plain_admission(*args, **kwargs)

        def admit_new() -> None:
            admit()
            admitted.append(threading.current_thread().name)
            if len(admitted) == 1:  # the first entry, found nothing yet: the other one comes in now, whole
                thread = threading.Thread(target=enter_from_another_thread, name="second")
                thread.start()
                thread.join(30)
        return admit_new

    monkeypatch.setattr(api, "admission", racing_admission)
    first = app.test_client().post(f"/api/v1/studies/{slug}/assignments", json=ENTRY)
    second = inner["response"]
    # The second entry made the rows (201); the first lost the race on them and answers with them (200).
    assert (second.status_code, first.status_code) == (201, 200), (second.json, first.json)
    assert first.json["assignment_id"] == second.json["assignment_id"]
    assert first.json["stage"] == second.json["stage"] == "consent"
    assert admitted == [threading.current_thread().name, "second"]  # the retry found the rows: no new admission
    with app_services(app).sessions() as session:
        assert session.scalar(select(func.count()).select_from(Worker)) == 1
        assert session.scalar(select(func.count()).select_from(Assignment)) == 1
    # Both tokens are the assignment's (the nonce is the one stored).
    for response in (first, second):
        state = app.test_client().get(f"/api/v1/assignments/{response.json['assignment_id']}/state",
                                      headers={"Authorization": f"Bearer {response.json['token']}"})
        assert state.status_code == 200 and state.json["stage"] == "consent"
