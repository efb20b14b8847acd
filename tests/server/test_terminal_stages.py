"""Nothing after the end: responses at a terminal stage are refused on both vote paths (the Flask view and
PostgreSQL's one-statement function), a worker turned away in one assignment cannot complete another of the
same study, and only those who earned a completion code have one (end page, ``codes check``, participants
page, payment plan)."""
from __future__ import annotations

import dataclasses

import uuid

from click.testing import CliRunner
from sqlalchemy import func, select

from server import codes
from server.cli import cli
from server.models import Assignment, Study, Worker
from server.paradigms.paired.models import Pair, Vote
from server.paradigms.core import ENDED, record_in_one_statement, stop
from server.paradigms.paired.paradigm import PairedComparison
from server.paradigms.stages import Stage
from server.payments import payment_plan
from server.services import app_services
from server.tokens import read_token

from .conftest import SMALL_STUDY, WorkerClient, create_test_study

PID_DONE, PID_QUIZ, PID_FULL = "5f3a9c0e1d2b3a4c5d6e7f80", "5f3a9c0e1d2b3a4c5d6e7f81", "5f3a9c0e1d2b3a4c5d6e7f82"
SHARED_CODE = "C1PL4ABC"


def _session(app):
    return app_services(app).sessions()


def _counted_votes(app) -> tuple[int, int]:
    """(vote rows, the sum of the pairs' n_votes): what the targets of the pairs see."""
    with _session(app) as session:
        return (int(session.scalar(select(func.count()).select_from(Vote))),
                int(session.scalar(select(func.coalesce(func.sum(Pair.n_votes), 0)))))


def _vote_body(trial_id: str, choice: str = "left", vote_id: str | None = None) -> dict:
    return {"vote_id": vote_id or str(uuid.uuid4()), "trial_id": trial_id, "choice": choice, "rt_ms": 1234.5,
            "input": "mouse", "client_time": "2026-11-21T10:00:00Z", "window": {"width": 1366, "height": 768, "dpr": 1}}


def _stop_by_hidden_gold(worker: WorkerClient) -> tuple[list[dict], dict]:
    """Pass the quiz, then answer every hidden gold trial wrongly (gold first on each page) until the
    hidden-gold rule stops the worker; return the page's trials still open then and the last stored vote."""
    assert worker.answer_page(worker.correct_side)["stage"] == "trials"
    for _ in range(3):
        state = worker.state()
        if state["stage"] == "page_done":
            assert worker.action("continue").status_code == 200
            continue
        trials = sorted((t for t in state["page"]["trials"] if not t["answered"]),
                        key=lambda t: worker.gold_side(t) is None)  # gold first
        for k, trial in enumerate(trials):
            body = _vote_body(trial["trial_id"], worker.wrong_side(trial))
            response = worker.client.post(f"/api/v1/assignments/{worker.assignment_id}/votes",
                                          headers=worker.headers, json=body)
            assert response.status_code == 201, response.json
            if response.json["stage"] == "stopped":
                return trials[k + 1:], body
    raise AssertionError("the hidden-gold rule never stopped the worker")


def test_votes_after_a_stop_are_refused_on_both_paths_and_counted_nowhere(app, study, monkeypatch, clock):
    worker = WorkerClient(app.test_client(), study)
    worker.start()
    still_open, last = _stop_by_hidden_gold(worker)
    assert len(still_open) >= 2, "the stop came with real pairs left on its page"
    before = _counted_votes(app)
    for k, trial in enumerate(still_open):
        with monkeypatch.context() as patch:
            if k % 2:  # every other vote takes the regular path (on PostgreSQL too)
                patch.setattr(PairedComparison, "response_kinds", tuple(
                    dataclasses.replace(kind, one_statement=None) for kind in PairedComparison.response_kinds))
            response = worker.vote(trial["trial_id"], "left")
        assert response.status_code == 409, response.json
        assert response.json["error"] == ENDED and "stopped" in response.json["message"]
    assert _counted_votes(app) == before
    # The vote that stopped the worker, sent again (the browser's retry), is still a duplicate.
    replay = worker.client.post(f"/api/v1/assignments/{worker.assignment_id}/votes", headers=worker.headers,
                                json=last)
    assert replay.status_code == 200 and replay.json["status"] == "duplicate"
    assert worker.state()["stage"] == "stopped"

    engine = app_services(app).engine
    if engine.dialect.name == "postgresql":  # the function itself refuses: no Flask needed
        claims = read_token(app.config["SECRET_KEY"], worker.token)
        status, body = record_in_one_statement(engine, "votes", claims, _vote_body(still_open[0]["trial_id"]),
                                               clock())
        assert status == 409 and body["error"] == ENDED
        # ... and hands a replay to the regular path (which answers "duplicate").
        assert record_in_one_statement(engine, "votes", claims, last, clock()) is None
    assert _counted_votes(app) == before


def test_votes_after_the_quiz_failed_or_the_assignment_completed_are_refused(app, study):
    failed = WorkerClient(app.test_client(), study)
    failed.start()
    quiz = failed.state()["page"]["trials"]
    for trial in quiz[:-1]:
        assert failed.vote(trial["trial_id"], failed.wrong_side(trial)).status_code == 201
    assert failed.vote(quiz[-1]["trial_id"], failed.wrong_side(quiz[-1])).json["stage"] == "disqualified"

    done = WorkerClient(app.test_client(), study)
    done.start()
    done.answer_page(done.correct_side)
    done.answer_page(done.correct_side)
    assert done.action("finish").json["stage"] == "completed"
    before = _counted_votes(app)
    # A crafted client sends votes for trials it never answered: none are stored. (Trials of a later
    # page do not exist; the open ones here are those a finished assignment still holds, if any.)
    with _session(app) as session:
        from server.paradigms.paired.models import Trial

        open_trials = {a: [str(t) for t in session.scalars(select(Trial.id).where(
            Trial.assignment_id == int(a), ~Trial.answered))] for a in (failed.assignment_id, done.assignment_id)}
    for worker in (failed, done):
        for trial_id in open_trials[worker.assignment_id]:
            response = worker.vote(trial_id, "left")
            assert response.status_code == 409 and response.json["error"] == ENDED
    assert _counted_votes(app) == before


def test_a_worker_stopped_in_one_hit_completes_no_other(app, study):
    client = app.test_client()
    hit_a = WorkerClient(client, study, worker_id="A2STOPPED")
    hit_b = WorkerClient(client, study, worker_id="A2STOPPED")  # the same worker, a second HIT open at once
    hit_c = WorkerClient(client, study, worker_id="A2STOPPED")  # and a third
    hit_b.start()
    hit_b.answer_page(hit_b.correct_side)  # the quiz
    hit_b.answer_page(hit_b.correct_side)  # a page: page_done, enough for the HIT (min_pages 1)
    assert hit_b.state()["stage"] == "page_done"
    hit_c.start()  # passed the quiz already: straight to a page of trials
    c_page = hit_c.state()["page"]["trials"]
    # HIT A: the worker is stopped there (as the hidden-gold rule does).
    hit_a.start()
    with _session(app) as session:
        assignment = session.get(Assignment, int(hit_a.assignment_id))
        stop(assignment, "gold_accuracy", wrong=3, total=10)
        session.commit()
    # HIT B cannot finish: it is stopped too, with its paid page (a code for review, as the payment plan lists it).
    finished = hit_b.action("finish")
    assert finished.status_code == 200 and finished.json["stage"] == "stopped"
    # HIT C cannot vote on: its open page's votes are refused, and the assignment is stopped (kept).
    before = _counted_votes(app)
    refused = hit_c.vote(c_page[0]["trial_id"], "left")
    assert refused.status_code == 409 and refused.json["error"] == ENDED
    assert _counted_votes(app) == before
    state_c = hit_c.state()
    assert state_c["stage"] == "stopped" and state_c["completion"] is None  # no paid page: no code
    with _session(app) as session:
        stages = dict(session.execute(select(Assignment.id, Assignment.stage)).all())
        plan = payment_plan(session, session.scalar(select(Study)))
    assert stages[int(hit_b.assignment_id)] == "stopped" and stages[int(hit_c.assignment_id)] == "stopped"
    assert [(row.stage, row.pages_completed) for row in plan.rows] == [("stopped", 1)]
    # A new HIT of the worker starts stopped.
    assert WorkerClient(client, study, worker_id="A2STOPPED").entry["stage"] == "stopped"


def _motion_entry(client, slug: str, worker_id: str) -> tuple[str, dict[str, str]]:
    body = {"platform": "mturk", "worker_id": worker_id, "assignment_id": f"A{uuid.uuid4().hex[:12].upper()}",
            "hit_id": "HIT1", "turk_submit_to": "https://workersandbox.mturk.com"}
    response = client.post(f"/api/v1/studies/{slug}/assignments", json=body)
    assert response.status_code == 201, response.json
    return response.json["assignment_id"], {"Authorization": f"Bearer {response.json['token']}"}


def test_a_motion_worker_disqualified_in_one_session_calibrates_no_other(app, motion_clips, tmp_path):
    from server.paradigms import create_study, read_study_file

    study_file = tmp_path / "twice.toml"
    study_file.write_text(f'[study]\nkind = "motion"\nslug = "twice"\nname = "Motion"\n'
                          f'clips = ["{motion_clips.as_posix()}"]\n[entry]\nexternal_hits = true\n')
    with _session(app) as session:
        create_study(session, read_study_file(study_file))
        session.commit()
    client = app.test_client()
    first, headers = _motion_entry(client, "twice", "A3MOTION")
    second, _ = _motion_entry(client, "twice", "A3MOTION")  # a second session open at once
    for action in ("consent", "instructions_done"):
        assert client.post(f"/api/v1/assignments/{first}/actions", headers=headers,
                           json={"action": action}).status_code == 200
    with _session(app) as session:  # the screening of the second session turned the worker away
        stop(session.get(Assignment, int(second)), "motion_screening", r="0.10", needed="0.50")
        session.commit()
    calibration = {"card_width_px": 323.5, "card_height_px": 204.0, "refresh_intervals_ms": [1000 / 60] * 60,
                   "fullscreen": True, "device_pixel_ratio": 1, "screen_width": 1920, "screen_height": 1080,
                   "window_width": 1366, "window_height": 768}
    for _ in range(2):  # the first refusal turns the session away; the second meets it at its terminal stage
        refused = client.post(f"/api/v1/assignments/{first}/calibration", headers=headers, json=calibration)
        assert refused.status_code == 409 and refused.json["error"] == ENDED, refused.json
    state = client.get(f"/api/v1/assignments/{first}/state", headers=headers).json
    assert state["stage"] == "disqualified" and state["completion"] is None
    with _session(app) as session:
        assert session.get(Assignment, int(first)).completion_code is None


# ---------------------------------------------------------------- who has a code

def _prolific_participant(app, slug: str, pid: str) -> WorkerClient:
    client = app.test_client()
    worker = WorkerClient(client, slug, worker_id=pid, platform="link")
    assert client.get(f"/s/{slug}?PROLIFIC_PID={pid}").status_code == 302
    return worker


def test_only_who_earned_it_has_a_code_even_with_a_shared_completion_code(app, demo_stimuli, tmp_path):
    slug = create_test_study(app, demo_stimuli, tmp_path, slug="shared",
                             entry={"recruiter": "prolific", "completion_code": SHARED_CODE}, **SMALL_STUDY)
    done = _prolific_participant(app, slug, PID_DONE)
    done.start()
    done.answer_page(done.correct_side)
    done.answer_page(done.correct_side)
    assert done.action("finish").json["completion"]["code"] == SHARED_CODE
    quiz = _prolific_participant(app, slug, PID_QUIZ)
    quiz.start()
    assert quiz.answer_page(quiz.wrong_side)["stage"] == "disqualified"
    full = _prolific_participant(app, slug, PID_FULL)
    with _session(app) as session:
        # A participant told the study is full, and (as older versions did) a quiz failure with a stored code.
        session.get(Assignment, int(full.assignment_id)).stage = Stage.FULL
        session.get(Assignment, int(full.assignment_id)).completion_code = "STOREDFULL"
        quiz_row = session.get(Assignment, int(quiz.assignment_id))
        assert quiz_row.completion_code is None  # stop() stores none for a disqualified assignment
        quiz_row.completion_code = "STOREDQUIZ"
        session.commit()
        study = session.scalar(select(Study).where(Study.slug == slug))
        by_id = {p.external_id: p for p in codes.participants(session, study)}
    assert by_id[PID_DONE].code == SHARED_CODE
    assert by_id[PID_QUIZ].code is None and by_id[PID_FULL].code is None
    assert quiz.state()["completion"] is None

    submitted = tmp_path / "prolific.csv"
    submitted.write_text("Participant id,Status,Completion code\n"
                         f"{PID_DONE},AWAITING REVIEW,{SHARED_CODE}\n"
                         f"{PID_QUIZ},AWAITING REVIEW,{SHARED_CODE}\n"
                         f"{PID_FULL},AWAITING REVIEW,{SHARED_CODE}\n")
    result = CliRunner().invoke(cli, ["codes", "check", slug, str(submitted),
                                      "--database-url", app.config["DATABASE_URL"]])
    assert result.exit_code == 1, result.output
    assert "3 rows: 1 valid, 2 not completed" in result.output
    assert "disqualified (stage disqualified" in result.output and "full (stage full" in result.output


def test_a_quiz_failure_has_no_code_even_with_one_stored_by_an_older_version(app, study):
    worker = WorkerClient(app.test_client(), study)
    worker.start()
    assert worker.answer_page(worker.wrong_side)["stage"] == "disqualified"
    with _session(app) as session:
        assert session.get(Assignment, int(worker.assignment_id)).completion_code is None
        session.get(Assignment, int(worker.assignment_id)).completion_code = "OLDSTORED1"
        session.commit()
        participant = codes.participants(session, session.scalar(select(Study)))[0]
        assert participant.status == "disqualified" and participant.code is None  # the participants page's code
        assert session.scalar(select(Worker.status)) == "disqualified"
    assert worker.state()["completion"] is None
