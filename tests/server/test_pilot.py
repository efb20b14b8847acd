"""Pilot participants, the preview, and `study pilot | reset | delete` (server/pilot.py), on SQLite and PostgreSQL.

A pilot (the experimenter's preview, a simulated worker, a participant marked by the experimenter) takes
part like anyone, and counts in no time estimate, wage, payment plan, pair target, dashboard figure or
default export.
"""
from __future__ import annotations

import csv
import io
import re
import uuid

from click.testing import CliRunner
from sqlalchemy import func, select

from server import auth, exports, wages
from server.paradigms.paired import live_scales
from server.cli import cli
from server.models import Assignment, Page, Study, Worker
from server.paradigms.paired.models import Pair, StudySet, Vote
from server.paradigms.paired.paradigm import study_progress
from server.payments import payment_plan
from server.pilot import mark_pilot, pilot_signature
from server.services import app_services
from server.worker_time import assignment_times, time_estimate

from .conftest import WorkerClient, held_count_problems

SECRET = "test-secret"  # make_test_app's secret key


def _entry(client, slug: str, worker_id: str, **extra):
    body = {"platform": "mturk", "worker_id": worker_id, "assignment_id": f"A{uuid.uuid4().hex[:12].upper()}",
            "hit_id": "HIT1", "turk_submit_to": "https://workersandbox.mturk.com", **extra}
    return client.post(f"/api/v1/studies/{slug}/assignments", json=body)


def _worker_from_entry(client, slug: str, response, worker_id: str) -> WorkerClient:
    """A WorkerClient over an entry made here (WorkerClient enters by itself without pilot fields)."""
    assert response.status_code == 201, response.json
    worker = WorkerClient.__new__(WorkerClient)
    worker.client, worker.entry, worker.worker_id = client, response.json, worker_id
    worker.assignment_id, worker.token = response.json["assignment_id"], response.json["token"]
    return worker


def _complete(worker: WorkerClient) -> None:
    """Consent, quiz, one page of trials, finish: a completed assignment with a code (min_pages = 1)."""
    worker.start()
    worker.answer_page(worker.correct_side)  # quiz
    body = worker.answer_page(worker.correct_side)
    assert body["stage"] == "page_done", body
    assert worker.action("finish").json["stage"] == "completed"


def _simulated(app, slug: str, worker_id: str) -> WorkerClient:
    client = app.test_client()
    return _worker_from_entry(client, slug, _entry(client, slug, worker_id, pilot=pilot_signature(SECRET, slug),
                                                   simulated=True), worker_id)


def _study(session, slug: str) -> Study:
    return session.scalar(select(Study).where(Study.slug == slug))


def _pair_votes(session, study: Study) -> dict[int, int]:
    return dict(session.execute(select(Pair.id, Pair.n_votes).join(StudySet).where(StudySet.study_id == study.id,
                                                                                   ~Pair.is_gold)).all())


def _real_votes_per_pair(session, study: Study) -> dict[int, int]:
    counted = dict(session.execute(select(Vote.pair_id, func.count())
                                   .join(Assignment, Assignment.id == Vote.assignment_id)
                                   .where(Vote.study_id == study.id, ~Assignment.pilot).group_by(Vote.pair_id)).all())
    return {pair_id: counted.get(pair_id, 0) for pair_id in _pair_votes(session, study)}


def test_simulated_and_preview_participants_count_in_nothing(app, study):
    real = WorkerClient(app.test_client(), study, worker_id="WREAL1")
    _complete(real)
    bots = [_simulated(app, study, f"SIMW{k}") for k in range(2)]
    for bot in bots:
        _complete(bot)
    # The preview: a new pilot participant at each visit, whatever the study's entry rules.
    browser = app.test_client()
    opened = browser.get(f"/s/{study}?pilot={pilot_signature(SECRET, study)}")
    assert opened.status_code == 302 and "/w/" in opened.headers["Location"]
    again = app.test_client().get(f"/s/{study}?pilot={pilot_signature(SECRET, study)}")
    assert again.headers["Location"] != opened.headers["Location"]

    with app_services(app).sessions() as session:
        s = _study(session, study)
        workers = {w.external_id: w for w in session.scalars(select(Worker).where(Worker.study_id == s.id))}
        assert workers["WREAL1"].pilot is False
        assert all(workers[f"SIMW{k}"].pilot and workers[f"SIMW{k}"].simulated for k in range(2))
        previews = [w for w in workers.values() if w.platform == "pilot"]
        assert len(previews) == 2 and all(w.pilot and not w.simulated for w in previews)
        by_id = {w.id: w for w in workers.values()}
        assert all(a.pilot == by_id[a.worker_id].pilot
                   for a in session.scalars(select(Assignment).where(Assignment.study_id == s.id)))

        # Pair targets: only the real worker's votes count; the pilots' pages hold nothing.
        pair_votes = _pair_votes(session, s)
        # The real worker's votes: every trial showed a pair of the design (the demo's gold pairs are design
        # pairs, whose gold trials are votes of them): the quiz's 3, and the page's 5 real pairs and hidden gold.
        assert sum(pair_votes.values()) == 3 + 5 + 1
        assert pair_votes == _real_votes_per_pair(session, s)
        assert session.scalar(select(func.count()).select_from(Vote).where(Vote.study_id == s.id)) == 3 * 9
        pilot_pages = session.scalars(select(Page).join(Assignment).where(Assignment.pilot, Page.kind == "trials"))
        assert all(not p.held and p.reserved_until is None for p in pilot_pages)

        # Estimates, wages, payment plans and the dashboard's figures know only the real worker.
        times = assignment_times(session, s)
        assert {t.worker_id for t in times.values()} == {workers["WREAL1"].id}
        assert len(assignment_times(session, s, include_pilot=True)) == 5
        assert time_estimate(session, s).n_finished == 1
        assert [w.raw_id for w in wages.study_pay(session, s).workers] == ["WREAL1"]
        assert [row.worker_id for row in payment_plan(session, s).rows] == ["WREAL1"]
        progress = study_progress(session, s.id)
        assert progress["n_workers"] == 1 and progress["n_votes"] == 9
        assert live_scales.vote_count(session, s.id) == 9

        # Exports leave them out unless asked.
        salt = exports.study_salt(SECRET, study)
        kept = exports.export_study(session, s, salt=salt)
        votes = list(csv.DictReader(io.StringIO(kept.files["votes.csv"])))
        assert {v["worker_id"] for v in votes} == {exports.pseudonym(salt, "WREAL1")} and len(votes) == 9
        meta = list(csv.DictReader(io.StringIO(kept.files["workers_meta.csv"])))
        assert [m["worker_id"] for m in meta] == [exports.pseudonym(salt, "WREAL1")]
        everyone = exports.export_study(session, s, salt=salt, include_pilot=True)
        assert len(list(csv.DictReader(io.StringIO(everyone.files["votes.csv"])))) == 27
        assert len(list(csv.DictReader(io.StringIO(everyone.files["workers_meta.csv"])))) == 5
    assert held_count_problems(app) == []


def test_a_pilot_entry_needs_the_studys_signature(app, study, demo_stimuli, tmp_path):
    from .conftest import create_test_study

    client = app.test_client()
    forged = _entry(client, study, "WFORGE1", pilot="0" * 32, simulated=True)
    assert forged.status_code == 403 and forged.json["error"] == "bad_link"
    unsigned = _entry(client, study, "WFORGE2", simulated=True)
    assert unsigned.status_code == 403 and unsigned.json["error"] == "bad_link"
    other = create_test_study(app, demo_stimuli, tmp_path, slug="other")
    elsewhere = _entry(client, study, "WFORGE3", pilot=pilot_signature(SECRET, other))
    assert elsewhere.status_code == 403
    assert client.get(f"/s/{study}?pilot=abc").status_code == 403
    assert client.get(f"/s/{study}?participant=P1&simulated=1").status_code == 403
    with app_services(app).sessions() as session:
        assert session.scalar(select(func.count()).select_from(Worker)) == 0
    # A real worker who adds nothing stays real; the same worker cannot become a pilot by re-entering.
    ok = _entry(client, study, "WREAL2")
    assert ok.status_code == 201
    with app_services(app).sessions() as session:
        assert session.scalar(select(Worker.pilot).where(Worker.external_id == "WREAL2")) is False


def test_marking_a_participant_as_pilot_gives_their_votes_back_and_can_be_undone(app, study):
    first = WorkerClient(app.test_client(), study, worker_id="WMARK1")
    _complete(first)
    second = WorkerClient(app.test_client(), study, worker_id="WMARK2")
    second.start()
    second.answer_page(second.correct_side)  # quiz: now on a held page of trials
    with app_services(app).sessions() as session:
        s = _study(session, study)
        # The first worker's 9 votes (quiz, real and hidden gold trials all show design pairs), the second's quiz;
        # the second's page holds its 5 real pairs and its hidden gold's design pair.
        assert sum(_pair_votes(session, s).values()) == 9 + 3
        assert session.scalar(select(func.sum(Pair.n_held)).join(StudySet).where(StudySet.study_id == s.id)) == 6
        mark_pilot(session, s, list(session.scalars(select(Worker).where(Worker.study_id == s.id))))
        session.commit()
        assert sum(_pair_votes(session, s).values()) == 0
        assert session.scalar(select(func.sum(Pair.n_held)).join(StudySet).where(StudySet.study_id == s.id)) == 0
        assert all(session.scalars(select(Assignment.pilot)))
    assert held_count_problems(app) == []
    # The marked worker's next votes (their token still names the study: PostgreSQL's one-statement
    # path counts them) are recounted at their next page start.
    second.answer_page(second.correct_side)
    assert second.action("continue").status_code == 200
    with app_services(app).sessions() as session:
        s = _study(session, study)
        assert _pair_votes(session, s) == _real_votes_per_pair(session, s)
        assert sum(_pair_votes(session, s).values()) == 0
        mark_pilot(session, s, [session.scalar(select(Worker).where(Worker.external_id == "WMARK1"))], pilot=False)
        session.commit()
        assert sum(_pair_votes(session, s).values()) == 9
        assert _pair_votes(session, s) == _real_votes_per_pair(session, s)
        assert [row.worker_id for row in payment_plan(session, s).rows] == ["WMARK1"]
    assert held_count_problems(app) == []


def _cli(app, *args: str, input: str | None = None):
    return CliRunner().invoke(cli, [*args, "--database-url", app.config["DATABASE_URL"]], input=input,
                              env={"PERCEPTLAB_SECRET_KEY": SECRET})


def test_cli_pilot_links_preview_and_results_include_pilot(app, study, tmp_path):
    real = WorkerClient(app.test_client(), study, worker_id="WCLI1")
    _complete(real)
    colleague = WorkerClient(app.test_client(), study, worker_id="WCLI2")
    _complete(colleague)
    salt = exports.study_salt(SECRET, study)
    marked = _cli(app, "study", "pilot", study, exports.pseudonym(salt, "WCLI2"))
    assert marked.exit_code == 0 and "1 pilot participant(s): WCLI2" in marked.output, marked.output
    unknown = _cli(app, "study", "pilot", study, "WNOBODY")
    assert unknown.exit_code == 2 and "no participant 'WNOBODY'" in unknown.output

    preview = _cli(app, "study", "links", study, "--preview", "--base-url", "https://lab.example.org")
    assert preview.exit_code == 0, preview.output
    assert preview.output.strip() == (f"preview\thttps://lab.example.org/s/{study}?pilot="
                                      f"{pilot_signature(SECRET, study)}")

    out = tmp_path / "export"
    exported = _cli(app, "export", study, "--out", str(out))
    assert exported.exit_code == 0, exported.output
    assert "9 votes (4 gold) by 1 workers" in exported.output
    assert "1 pilot or simulated participant(s) left out (--include-pilot keeps them)" in exported.output
    exported = _cli(app, "export", study, "--out", str(out), "--include-pilot")
    assert "18 votes (8 gold) by 2 workers" in exported.output and "included (--include-pilot)" in exported.output


def _paid_study(app, study) -> None:
    _complete(WorkerClient(app.test_client(), study, worker_id="WPAID1"))
    _complete(_simulated(app, study, "SIMWPAID"))


def _counts(app, slug: str) -> tuple[int, int, int, int]:
    with app_services(app).sessions() as session:
        s = _study(session, slug)
        if s is None:
            return -1, -1, -1, -1
        return (session.scalar(select(func.count()).select_from(Worker).where(Worker.study_id == s.id)),
                session.scalar(select(func.count()).select_from(Vote).where(Vote.study_id == s.id)),
                session.scalar(select(func.count()).select_from(Pair).join(StudySet).where(StudySet.study_id == s.id)),
                sum(_pair_votes(session, s).values()))


def test_reset_refuses_paid_work_confirms_and_keeps_the_study(app, study):
    _paid_study(app, study)
    workers, votes, pairs, counted = _counts(app, study)
    assert (workers, votes, counted) == (2, 18, 9)  # the real worker's 9 votes, all on design pairs
    refused = _cli(app, "study", "reset", study, "--yes")
    assert refused.exit_code == 2, refused.output
    assert "holds paid work (1 completed assignment(s) of real participants with a completion code)" in refused.output
    assert _counts(app, study) == (workers, votes, pairs, counted)
    declined = _cli(app, "study", "reset", study, "--force", input="n\n")
    assert declined.exit_code == 2 and "2 participant(s) (1 pilot), 2 assignment(s) and 18 response(s)" \
        in declined.output and "nothing was reset" in declined.output
    assert _counts(app, study) == (workers, votes, pairs, counted)
    done = _cli(app, "study", "reset", study, "--force", input="y\n")
    assert done.exit_code == 0 and "the study is as new" in done.output, done.output
    assert _counts(app, study) == (0, 0, pairs, 0)
    assert held_count_problems(app) == []
    # The study takes part again as new.
    _complete(WorkerClient(app.test_client(), study, worker_id="WPAID1"))
    assert _counts(app, study)[3] == 9


def test_reset_and_delete_of_a_pilot_only_study_need_no_force(app, study, demo_stimuli, tmp_path):
    from .conftest import create_test_study

    _complete(_simulated(app, study, "SIMWONLY"))
    reset = _cli(app, "study", "reset", study, "--yes")
    assert reset.exit_code == 0, reset.output
    assert _counts(app, study)[:2] == (0, 0)

    other = create_test_study(app, demo_stimuli, tmp_path, slug="doomed")
    _paid_study(app, other)
    refused = _cli(app, "study", "delete", other, "--yes")
    assert refused.exit_code == 2 and "--force" in refused.output
    deleted = _cli(app, "study", "delete", other, "--yes", "--force")
    assert deleted.exit_code == 0 and re.search(r"doomed: deleted with 2 participant\(s\)", deleted.output)
    assert _counts(app, other) == (-1, -1, -1, -1)
    with app_services(app).sessions() as session:
        assert session.scalar(select(func.count()).select_from(Vote)) == 0
        assert session.scalar(select(func.count()).select_from(StudySet).join(Study).where(Study.slug == study)) > 0
    listed = _cli(app, "study", "list")
    assert study in listed.output and "doomed" not in listed.output


def _logged_in(app):
    """A test client logged in as an experimenter."""
    password = "correct horse battery staple"
    with app_services(app).sessions() as session:
        auth.create_user(session, "alice", password)
        session.commit()
    client = app.test_client()
    token = re.search(r'name="csrf_token" value="([^"]+)"', client.get("/admin/login").get_data(as_text=True))[1]
    assert client.post("/admin/login", data={"username": "alice", "password": password,
                                             "csrf_token": token}).status_code == 303
    return client


def test_reset_and_delete_refuse_a_study_whose_hits_may_still_bring_workers(app, study):
    from server.models import MTurkHit

    _complete(_simulated(app, study, "SIMWHIT"))
    with app_services(app).sessions() as session:
        session.add(MTurkHit(study_id=_study(session, study).id, hit_id="HITOPEN", unique_request_token="t-open",
                             launch_id="L1", batch_index=0, max_assignments=9, reward="0.50", status="Assignable",
                             sandbox=True))
        session.commit()
    refused = _cli(app, "study", "reset", study, "--yes")
    assert refused.exit_code == 2 and "1 HIT(s) not expired: perceptlab mturk expire SLUG first" in refused.output
    with app_services(app).sessions() as session:
        session.scalar(select(MTurkHit)).status = "expired"
        session.commit()
    assert _cli(app, "study", "reset", study, "--yes").exit_code == 0
    assert _counts(app, study)[:2] == (0, 0)


def test_the_dashboard_marks_pilots_and_links_the_preview(app, study):
    admin = _logged_in(app)
    _complete(WorkerClient(app.test_client(), study, worker_id="WDASH1"))
    salt = exports.study_salt(SECRET, study)
    page = admin.get(f"/admin/studies/{study}")
    assert f'href="/s/{study}?pilot={pilot_signature(SECRET, study)}"' in page.get_data(as_text=True)
    # One status per worker (a worker stays "active" until turned away: shown beside "completed", read as a
    # contradiction).
    (shown,) = admin.get(f"/admin/api/studies/{study}/summary").json["workers"]
    assert (shown["status"], shown["stage"], shown["state"]) == ("active", "completed", "completed")
    listing = admin.get(f"/admin/studies/{study}/participants").get_data(as_text=True)
    token = re.search(r'name="csrf_token" value="([^"]+)"', listing)[1]
    answer = admin.post(f"/admin/studies/{study}/participants/pilot",
                        data={"csrf_token": token, "worker": exports.pseudonym(salt, "WDASH1"), "pilot": "1"})
    assert answer.status_code == 303
    listing = admin.get(f"/admin/studies/{study}/participants").get_data(as_text=True)
    assert 'data-pilot="1"' in listing and "Count as real" in listing
    summary = admin.get(f"/admin/api/studies/{study}/summary").json
    assert summary["study"]["n_workers"] == 0 and summary["study"]["n_responses"] == 0
    forged = admin.post(f"/admin/studies/{study}/participants/pilot",
                        data={"csrf_token": token, "worker": "w_000000000000", "pilot": "1"})
    assert forged.status_code == 404

