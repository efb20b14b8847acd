"""Reason codes (server/reasons.py): every turn-away, stop and refused entry is recorded under its code, counted
for the dashboard (server/refusals.py) and in workers.csv, and told to the worker in their language. The
paradigms' own paths (quiz, hidden checks, straight-lining, the motion screening and display, the video entry
checks) assert their codes in their own tests (tests/server/reason_support.py)."""
from __future__ import annotations

import csv
import gettext
import io
import re
from pathlib import Path

import flask_babel
import pytest
from sqlalchemy import func, select, update

from server.models import Assignment, EntryRefusal, Study
from server.paradigms import paradigm_for
from server.paradigms.core import lock_assignment, spec_for, stop
from server.pilot import end_simulated
from server.reasons import REASONS, Reason, markdown_table, register, viewing_reason
from server.i18n import _l
from server.paradigms.stages import Stage
from server.services import app_services

from .conftest import WorkerClient
from .reason_support import counts, one, recorded

# Records, counts and pages: the same on any database.
pytestmark = pytest.mark.one_database
DOCS = Path(__file__).resolve().parents[2] / "docs" / "reasons.md"


def test_the_docs_table_is_the_registry():
    assert markdown_table() in DOCS.read_text(encoding="utf-8")
    for code, reason in REASONS.items():
        assert re.fullmatch(r"[a-z][a-z0-9_]*", code) and reason.code == code
        assert reason.english() and reason.what  # every message renders, placeholders or not


def test_adding_a_code_is_one_line_and_a_clash_is_refused():
    added = viewing_reason("test_acuity", _l("Your acuity test failed."), "acuity below the threshold")
    try:
        assert REASONS["viewing_test_acuity"] is added and added.stage == Stage.DISQUALIFIED
        assert register(added) is added  # the same line again (a module imported twice) is fine
        with pytest.raises(ValueError, match="registered twice"):
            register(Reason("viewing_test_acuity", Stage.STOPPED, _l("other words"), "other"))
    finally:
        REASONS.pop("viewing_test_acuity")


def test_a_hidden_check_stop_is_recorded_counted_and_exported(app, study, admin):
    client = app.test_client()
    careless = WorkerClient(client, study, worker_id="WCARELESS")
    careless.start()
    careless.answer_page(careless.correct_side)  # the quiz
    while (state := careless.state())["stage"] in ("trials", "page_done"):
        if state["stage"] == "page_done":
            careless.action("continue")
            continue
        careless.page_trials = state["page"]["trials"]
        trial = next(t for t in careless.page_trials if not t["answered"])
        careless.vote(trial["trial_id"], careless.wrong_side(trial))
    assert careless.state()["stage"] == "stopped"
    assert recorded(app, careless.assignment_id) == ("gold_accuracy", "gold_accuracy")
    honest = WorkerClient(client, study, worker_id="WHONEST")
    honest.start()
    assert counts(app, study) == one("gold_accuracy")
    # The dashboard's table, and workers.csv's column (blank for a worker who was not turned away).
    page = admin.get(f"/admin/studies/{study}").get_data(as_text=True)
    row = re.search(r'<tr data-code="gold_accuracy">(.*?)</tr>', page, re.S).group(1)
    assert "stopped" in row and '<td class="num" data-count="workers">1</td>' in row
    rows = {r["worker_id"]: r for r in csv.DictReader(io.StringIO(
        admin.get(f"/admin/studies/{study}/workers.csv?raw_worker_ids=1").get_data(as_text=True)))}
    assert rows["WCARELESS"]["reason_code"] == "gold_accuracy" and rows["WHONEST"]["reason_code"] == ""


def test_a_full_study_is_counted_per_assignment_and_forgotten_when_it_reopens(app, study):
    worker = WorkerClient(app.test_client(), study, worker_id="WFULL")
    with app_services(app).sessions() as session:
        assignment = lock_assignment(session, int(worker.assignment_id))
        paradigm_for(assignment.study).no_work_left(assignment, spec_for(session, assignment.study_id))
        session.commit()
    assert recorded(app, worker.assignment_id) == (None, "study_full")  # the worker is not turned away
    assert counts(app, study) == one("study_full")
    assert b"no work left for you" in app.test_client().get(f"/w/{worker.token}/").data
    assert app.test_client().post(f"/w/{worker.token}/retry").status_code == 303  # work is free: reopened
    assert recorded(app, worker.assignment_id) == (None, None) and counts(app, study) == {}


def test_simulated_participants_who_gave_up_are_counted_only_with_the_pilots(app, study):
    from server.pilot import pilot_signature

    with app_services(app).sessions() as session:
        study_row = session.scalar(select(Study).where(Study.slug == study))
    client = app.test_client()
    bot = client.post(f"/api/v1/studies/{study}/assignments", json={
        "platform": "link", "worker_id": "BOT1", "pilot": pilot_signature(app.config["SECRET_KEY"], study),
        "simulated": True})
    assert bot.status_code == 201, bot.json
    with app_services(app).sessions() as session:
        study_row = session.get(Study, study_row.id)
        assert end_simulated(session, study_row, ["BOT1"], "no answer after 3 retries") == 1
        session.commit()
    assert counts(app, study) == {} and counts(app, study, include_pilot=True) == one("simulated_gave_up")


@pytest.mark.parametrize("code, entry", [
    ("participant_required", "/s/{slug}"),
    ("bad_entry", "/s/{slug}?participant=bad%20id%21"),
    ("unknown_hit", "/s/{slug}?assignmentId=A1&hitId=H9&workerId=W1&turkSubmitTo=https://www.mturk.com"),
])
def test_refused_entries_are_counted_in_one_row_per_code(app, demo_stimuli, tmp_path, code, entry):
    from .conftest import create_test_study

    slug = create_test_study(app, demo_stimuli, tmp_path, slug="refusing", entry={"external_hits": False})
    client = app.test_client()
    for _ in range(30):
        assert client.get(entry.format(slug=slug)).status_code in (400, 403)
    assert counts(app, slug) == {code: {"workers": 0, "entries": 30}}
    with app_services(app).sessions() as session:
        assert session.scalar(select(func.count()).select_from(EntryRefusal)) == 1  # a flood grows no table


def test_a_paused_or_stopped_study_counts_its_refusals_over_the_page_and_the_api(app, study):
    client = app.test_client()
    for status, code in (("paused", "study_paused"), ("stopped", "study_stopped")):
        with app_services(app).sessions() as session:
            session.execute(update(Study).where(Study.slug == study).values(status=status))
            session.commit()
        assert client.get(f"/s/{study}?participant=P1").status_code == 409
        api = client.post(f"/api/v1/studies/{study}/assignments", json={"platform": "link", "worker_id": "P2"})
        assert api.status_code == 409 and api.json["error"] == code
    assert counts(app, study) == {"study_paused": {"workers": 0, "entries": 2},
                                  "study_stopped": {"workers": 0, "entries": 2}}
    with app_services(app).sessions() as session:
        assert session.scalar(select(func.count()).select_from(Assignment)) == 0  # nothing else was stored


class _Marked(gettext.NullTranslations):
    """A catalog that marks every string it translates, to see which words went through gettext."""

    def ugettext(self, message):
        return "[de] " + message

    gettext = ugettext


def test_the_worker_reads_the_reason_through_the_catalogs_and_the_record_keeps_english(app, study, monkeypatch):
    worker = WorkerClient(app.test_client(), study)
    worker.start()
    with app_services(app).sessions() as session:
        stop(session.get(Assignment, int(worker.assignment_id)), "gold_accuracy", wrong=4, total=5)
        session.commit()
    monkeypatch.setattr(flask_babel.Domain, "get_translations", lambda self: _Marked())
    page = app.test_client().get(f"/w/{worker.token}/").get_data(as_text=True)
    assert "[de] Too many check questions were answered wrongly (4 of 5)." in page
    assert worker.state()["message"].startswith("[de] Too many check questions")
    with app_services(app).sessions() as session:
        from server.models import Worker
        stored = session.scalar(select(Worker.status_reason))
    assert stored.startswith("Too many check questions were answered wrongly (4 of 5).")


def test_stop_refuses_a_code_that_turns_nobody_away(app, study):
    worker = WorkerClient(app.test_client(), study)
    with app_services(app).sessions() as session:
        with pytest.raises(ValueError, match="does not turn a worker away"):
            stop(session.get(Assignment, int(worker.assignment_id)), "study_paused")
        with pytest.raises(KeyError):
            stop(session.get(Assignment, int(worker.assignment_id)), "no_such_code")


def test_the_device_checks_problems_are_counted_without_touching_the_record(app, study):
    client = app.test_client()
    worker = WorkerClient(client, study)
    url = f"/w/{worker.token}/refused"
    consent = client.get(f"/w/{worker.token}/").get_data(as_text=True)
    assert f'data-refused="/w/{worker.token}/refused"' in consent  # where device_check.js reports
    for problem in ("phone", "window_too_small", "window_too_small"):
        assert client.post(url, json={"problem": problem}).status_code == 204
    for bad in ({"problem": "toaster"}, {"problem": 3}, {"problem": "phone", "x": 1}, ["phone"]):
        assert client.post(url, json=bad).status_code == 400
    assert counts(app, study) == {"device_phone": {"workers": 0, "entries": 1},
                                  "window_too_small": {"workers": 0, "entries": 2}}
    assert recorded(app, worker.assignment_id) == (None, None) and worker.state()["stage"] == "consent"
    worker.action("consent")
    assert client.post(url, json={"problem": "phone"}).status_code == 409


def test_study_show_counts_the_reasons(app, study):
    import json

    from click.testing import CliRunner

    from server.cli import cli

    worker = WorkerClient(app.test_client(), study)
    app.test_client().post(f"/w/{worker.token}/refused", json={"problem": "tablet"})
    with app_services(app).sessions() as session:
        stop(session.get(Assignment, int(worker.assignment_id)), "quiz_failed", correct=0, total=3, needed="70%")
        session.commit()
    url = str(app_services(app).engine.url.render_as_string(hide_password=False))
    shown = CliRunner().invoke(cli, ["study", "show", study, "--json", "--database-url", url])
    assert json.loads(shown.output)["reasons"] == {**one("device_tablet", 0, 1), **one("quiz_failed")}
    text = CliRunner().invoke(cli, ["study", "show", study, "--database-url", url]).output
    assert "turned away: device_tablet 1 entries, quiz_failed 1" in text
