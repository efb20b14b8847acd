"""The database out of reach (server/outages.py): every route answers 503 with Retry-After, one log line per
outage and one when it ends, nothing stored twice or lost.

The outage is real: a PostgreSQL cluster of the test's own (benchmarks/own_postgres.py: ``initdb`` in a
temporary folder, its own port), stopped and started again with ``pg_ctl``; the machine's shared server is
never touched.
"""
from __future__ import annotations

import logging
import os
import sqlite3

import pytest
from sqlalchemy import exc as sa_exc
from sqlalchemy import func, select

from server.outages import RETRY_AFTER_S, Outages, is_unavailable
from server.paradigms.paired.models import Vote
from server.services import app_services

from .conftest import SMALL_STUDY, ManualClock, WorkerClient, create_test_study, make_test_app
from benchmarks.own_postgres import NoPostgres, OwnPostgres


@pytest.fixture(scope="module")
def cluster():
    try:
        own = OwnPostgres()
    except NoPostgres as exc:
        if os.environ.get("PERCEPTLAB_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"{exc} (PERCEPTLAB_REQUIRE_POSTGRES=1)")
        pytest.skip(str(exc))
    yield own
    own.close()


def _tracebacks(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


def _outage_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "perceptlab.outages"]


def test_every_route_answers_503_with_retry_after_while_postgres_is_down(cluster, demo_stimuli, tmp_path, caplog):
    from server import auth

    from .admin_support import PASSWORD, csrf_of, log_in

    app = make_test_app(cluster.url, tmp_path / "instance", clock=ManualClock())
    try:
        slug = create_test_study(app, demo_stimuli, tmp_path, **SMALL_STUDY)
        with app_services(app).sessions() as session:
            auth.create_user(session, "alice", PASSWORD)
            session.commit()
        admin = app.test_client()
        assert log_in(admin).status_code == 303
        worker = WorkerClient(app.test_client(), slug)
        trials = worker.start()["page"]["trials"]
        assert worker.vote(trials[0]["trial_id"], worker.correct_side(trials[0])).status_code == 201  # fast lane on
        vote_id = "0b7e4c52-4a43-4a5e-9d7e-2f1f1c1f0a02"
        sides = [worker.correct_side(trial) for trial in trials]  # asks the database: before it goes
        csrf = csrf_of(admin, f"/admin/studies/{slug}")
        caplog.clear()
        caplog.set_level(logging.INFO)

        cluster.stop()
        client = app.test_client()
        answers = {
            "vote (fast lane)": worker.vote(trials[1]["trial_id"], sides[1], vote_id=vote_id),
            "state": worker.client.get(f"/api/v1/assignments/{worker.assignment_id}/state", headers=worker.headers),
            "action": worker.action("continue"),
            "entry (API)": client.post(f"/api/v1/studies/{slug}/assignments",
                                       json={"platform": "link", "worker_id": "PX1"}),
            "entry page": client.get(f"/s/{slug}?PROLIFIC_PID=P1"),
            "admin page": admin.get(f"/admin/studies/{slug}"),
            "admin JSON": admin.get(f"/admin/api/studies/{slug}/summary"),
            "admin form": admin.post(f"/admin/studies/{slug}/pause", data={"csrf_token": csrf}),
        }
        for name, response in answers.items():
            assert response.status_code == 503, (name, response.status_code, response.get_data(as_text=True)[:300])
            assert response.headers["Retry-After"] == str(RETRY_AFTER_S), name
            if name in ("vote (fast lane)", "state", "action", "entry (API)", "admin JSON"):
                assert response.json["error"] == "unavailable" and response.json["retry_after_s"] == RETRY_AFTER_S
            else:
                assert response.mimetype == "text/html", name
        # A GET page waits and loads itself again; a form is not sent again by itself.
        assert 'id="waiting"' in answers["entry page"].get_data(as_text=True)
        assert 'id="waiting"' in answers["admin page"].get_data(as_text=True)
        assert 'id="waiting"' not in answers["admin form"].get_data(as_text=True)
        assert _tracebacks(caplog) == []
        assert len(_outage_lines(caplog)) == 1 and "out of reach" in _outage_lines(caplog)[0]

        cluster.start()
        again = worker.vote(trials[1]["trial_id"], sides[1], vote_id=vote_id)
        assert again.status_code == 201, again.json  # nothing was stored during the outage
        assert worker.state()["stage"] == "quiz"
        lines = _outage_lines(caplog)
        assert len(lines) == 2 and "reachable again" in lines[1] and f"({len(answers)} requests answered 503)" in lines[1]
        assert _tracebacks(caplog) == []
        with app_services(app).sessions() as session:
            assert session.scalar(select(func.count()).select_from(Vote)) == 2

        # A second outage is a second pair of lines.
        cluster.stop()
        assert worker.vote(trials[2]["trial_id"], sides[2]).status_code == 503
        cluster.start()
        assert worker.vote(trials[2]["trial_id"], sides[2]).status_code == 201
        assert len(_outage_lines(caplog)) == 4 and _tracebacks(caplog) == []
    finally:
        app_services(app).engine.dispose()


def test_one_line_per_outage_and_one_when_it_ends(caplog):
    now = [100.0]
    outages = Outages(seconds=lambda: now[0], logger=logging.getLogger("perceptlab.outages"))
    caplog.set_level(logging.INFO)
    outages.recovered()  # no outage: nothing to say
    error = sa_exc.OperationalError("SELECT 1", {}, Exception("connection refused\nmore detail"))
    for _ in range(50):
        outages.noticed(error)
    outages.noticed(error, counted=False)  # a teardown or background job: part of it, not a refused request
    now[0] += 12.34
    outages.recovered()
    outages.recovered()
    lines = _outage_lines(caplog)
    assert len(lines) == 2
    assert "connection refused" in lines[0] and "more detail" not in lines[0]
    assert lines[1] == "database reachable again after 12.3 s (50 requests answered 503)"
    assert outages.outages == 1 and not outages.down


def test_which_errors_mean_the_database_is_out_of_reach():
    import psycopg

    assert is_unavailable(sa_exc.OperationalError("x", {}, Exception("refused")))
    assert is_unavailable(psycopg.OperationalError("server closed the connection unexpectedly"))
    assert is_unavailable(sqlite3.OperationalError("database is locked"))
    assert is_unavailable(sa_exc.TimeoutError("QueuePool limit reached"))
    try:  # a rollback's own error raised while the outage's was handled: still the outage
        try:
            raise psycopg.OperationalError("refused")
        except psycopg.OperationalError:
            raise RuntimeError("cleanup failed")
    except RuntimeError as wrapped:
        assert is_unavailable(wrapped)
    assert not is_unavailable(ValueError("a bug"))
    assert not is_unavailable(sa_exc.IntegrityError("x", {}, Exception("duplicate key")))
    assert not is_unavailable(None)


def test_the_pools_are_emptied_when_the_database_goes_not_when_they_are_full():
    emptied = []
    outages = Outages(on_start=lambda exc: emptied.append(type(exc).__name__))
    outages.noticed(sa_exc.TimeoutError("QueuePool limit of size 10 overflow 20 reached"))
    outages.recovered()

    class Engine:
        def dispose(self):
            emptied.append("disposed")

    from server.outages import _drop_connections

    _drop_connections(Engine(), sa_exc.TimeoutError("pool"))
    _drop_connections(Engine(), sa_exc.OperationalError("x", {}, Exception("terminating connection")))
    assert emptied == ["TimeoutError", "disposed"]
