"""Every vote rule through PostgreSQL's one-statement function and through the regular Python path.

The rules of a vote have two homes by design, one per path: ``server/paradigms/paired/vote.sql``
(the function ``perceptlab_paired_vote``, which stores the common votes in one statement) and
``record_vote`` / ``_after_vote`` (server/paradigms/paired/paradigm.py, which decide everything the
function defers). Two databases copied from one template play the same workers in lockstep, one with
the function and one without; after every rule both must have given the same answer (status and
body) and hold the same rows, and the function must have decided the rules it is meant to decide
itself (stored, or refused after the end), not deferred them all (the comparison would prove nothing).

The function's text has one home too: the database's function is the file's, and the newest
migration that installs the file pins its SHA-256 (editing the file without a migration fails here).
"""
from __future__ import annotations

import hashlib
import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import select, text

from server.db import alembic_config
from server.models import Assignment, Study, Worker
from server.paradigms.paired.models import Pair
from server.paradigms.paired import paradigm as paired
from server.paradigms.paired.paradigm import PairedComparison
from server.pilot import mark_pilot, pilot_signature
from server.services import app_services
from server.tokens import make_token

from .conftest import SMALL_STUDY, WorkerClient, create_test_study
from .vote_paths_support import DEFER, ENDED, REGULAR, STORED, Side, Twins, revoked_token, twin_sides

ROOT = Path(__file__).resolve().parents[2]
SERVER = ROOT / "server"
VOTE_SQL = SERVER / "paradigms" / "paired" / "vote.sql"
PAGE_SQL = SERVER / "paradigms" / "paged.sql"  # the end of a page, which vote.sql and rating.sql call


class PairedTwins(Twins):
    """Twins that vote."""

    def __init__(self, sql: Side, python: Side):
        super().__init__(sql, python, paired.record_vote_in_one_statement, "votes")

    def body(self, trial_id: str, choice: str, vote_id: str | None = None) -> dict[str, Any]:
        return {"vote_id": vote_id or self.client_id(), "trial_id": trial_id, "choice": choice, "rt_ms": 900.5,
                "input": "keyboard", "client_time": "2026-11-27T10:00:00Z",
                "window": {"width": 1366, "height": 768, "dpr": 1.25}}

    def enter(self, worker: str, **options) -> None:
        def run(side: Side):
            side.workers[worker] = WorkerClient(side.client, "demo", **options)
            return side.scrub(side.workers[worker].entry)
        self.same(f"{worker} enters", run)

    def side_of(self, worker: str, trial: dict) -> tuple[str | None, str | None]:
        """(right answer, wrong answer) of a gold trial on both sides (the same), (None, None) for a real pair."""
        sql_side = self.sql.workers[worker].gold_side(trial)
        assert sql_side == self.python.workers[worker].gold_side(trial)
        if sql_side is None:
            return None, None
        return sql_side, "right" if sql_side == "left" else "left"


def _sides(postgres_urls, tmp_path, demo_stimuli) -> tuple[Side, Side]:
    return twin_sides(postgres_urls, tmp_path,
                      lambda app, folder: create_test_study(app, demo_stimuli, folder, **SMALL_STUDY))


def _token_without_study(side: Side, client: WorkerClient) -> str:
    with app_services(side.app).sessions() as session:
        assignment = session.get(Assignment, int(client.assignment_id))
        return make_token(side.app.config["SECRET_KEY"], assignment.id, assignment.token_nonce)


def _pair_votes(side: Side) -> int:
    with app_services(side.app).sessions() as session:
        return sum(session.scalars(select(Pair.n_votes)))


@pytest.mark.slow  # two PostgreSQL databases and every rule in lockstep
def test_every_vote_rule_gives_the_same_answer_and_rows_on_both_paths(two_postgres_urls, tmp_path, demo_stimuli,
                                                                      monkeypatch):
    sql, python = _sides(two_postgres_urls, tmp_path, demo_stimuli)
    PairedTwins(sql, python).play(monkeypatch, PairedComparison, _play_every_rule)


def _answer_quiz(twins: PairedTwins, worker: str, *, right: bool, common: str = STORED) -> dict:
    """Answer the worker's quiz (right or wrong): its votes are the function's (``common``), its end the
    regular path's. The last answer."""
    trials = twins.open_trials(worker)
    answer = {}
    for k, trial in enumerate(trials):
        last = k == len(trials) - 1
        side = twins.side_of(worker, trial)[0 if right else 1]
        rule = ("quiz end, passed" if right else "quiz end, failed") if last else "quiz vote"
        rule = rule if common == STORED else f"pilot's {rule}"
        answer = twins.rule(rule, worker, twins.body(trial["trial_id"], side),
                            (DEFER if common == STORED else common) if last else common, status=201)
    return answer


def _play_every_rule(twins: PairedTwins) -> None:
    for worker in ("A", "B", "C"):
        twins.enter(worker)
    assert twins.act("A", "consent")["stage"] == "instructions"
    # A vote before the quiz: the assignment has no trial yet.
    twins.rule("before the quiz", "A", twins.body("1", "left"), DEFER, status=404)
    for worker in ("A", "B", "C"):
        if worker != "A":
            twins.act(worker, "consent")
        twins.act(worker, "instructions_done")
    answer = _answer_quiz(twins, "A", right=True)
    assert answer["stage"] == "trials" and answer["state"]["page"]["trials"]
    assert _answer_quiz(twins, "C", right=False)["stage"] == "disqualified"
    assert _answer_quiz(twins, "B", right=True)["stage"] == "trials"

    # A's first page: the common votes, replays and refusals.
    page = twins.open_trials("A")
    real = [t for t in page if twins.side_of("A", t)[0] is None]
    gold = [t for t in page if twins.side_of("A", t)[0] is not None]
    assert len(real) >= 3 and gold, "a page with real pairs and a hidden gold pair"
    first = twins.body(real[0]["trial_id"], "left")
    twins.rule("vote", "A", first, STORED, status=201)
    twins.rule("replay", "A", first, DEFER, status=200)
    twins.rule("replay, other choice", "A", {**first, "choice": "right"}, DEFER, status=409)
    twins.rule("vote ID reused for another trial", "A", twins.body(real[1]["trial_id"], "left", first["vote_id"]),
               DEFER, status=409)
    twins.rule("unknown trial", "A", twins.body("999999", "left"), DEFER, status=404)
    b_trial = twins.open_trials("B")[0]["trial_id"]
    twins.rule("another assignment's trial", "A", twins.body(b_trial, "left"), DEFER, status=404)
    twins.rule("trial ID beyond the column", "A", twins.body("9" * 18, "left"), DEFER, status=404)
    twins.rule("malformed vote", "A", {**twins.body(real[1]["trial_id"], "up")}, DEFER, status=400)
    twins.rule("revoked token", "A", twins.body(real[1]["trial_id"], "left"), DEFER, status=403,
               token=revoked_token)
    twins.rule("token naming no study", "A", twins.body(real[1]["trial_id"], "right"), REGULAR, status=201,
               token=_token_without_study)
    right, _ = twins.side_of("A", gold[0])
    twins.rule("hidden gold, right", "A", twins.body(gold[0]["trial_id"], right), STORED, status=201)
    rest = [t for t in twins.open_trials("A")]
    for trial in rest[:-1]:
        twins.rule("vote", "A", twins.body(trial["trial_id"], twins.side_of("A", trial)[0] or "left"), STORED)
    answer = twins.rule("page complete", "A", twins.body(rest[-1]["trial_id"],
                                                         twins.side_of("A", rest[-1])[0] or "left"), STORED,
                        status=201)
    assert answer["stage"] == "page_done" and answer["page_complete"] and answer["state"]["stage"] == "page_done"

    # A's later pages: the last vote of the last page completes the assignment (the regular path).
    for _ in range(5):
        stage = twins.state("A")["stage"]
        if stage != "page_done":
            break
        twins.act("A", "continue")
        trials = twins.open_trials("A")
        for k, trial in enumerate(trials):
            last = k == len(trials) - 1
            final = last and twins.state("A")["progress"]["pages_completed"] == 2
            answer = twins.rule("last page complete" if final else "page complete" if last else "vote", "A",
                                twins.body(trial["trial_id"], twins.side_of("A", trial)[0] or "left"),
                                DEFER if final else STORED)
    assert twins.state("A")["stage"] == "completed"
    twins.rule("replay after the end", "A", first, DEFER, status=200)

    # B: a second MTurk assignment of the same worker, open at its quiz, for the rule of a worker
    # turned away elsewhere.
    def second_assignment(side: Side):
        side.workers["B2"] = WorkerClient(side.client, "demo", worker_id=side.workers["B"].worker_id)
        side.workers["B2"].start()
        return side.scrub(side.workers["B2"].entry)
    twins.same("B's second assignment", second_assignment)

    # B misses hidden gold: the first miss is stored by the function, the stopping one decided by the regular path.
    misses = 0
    for _ in range(6):
        state = twins.state("B")
        if state["stage"] == "page_done":
            twins.act("B", "continue")
            continue
        if state["stage"] != "trials":
            break
        for trial in [t for t in state["page"]["trials"] if not t["answered"]]:
            right, wrong = twins.side_of("B", trial)
            if wrong is None:
                twins.rule("vote", "B", twins.body(trial["trial_id"], "left"), STORED)
                continue
            misses += 1
            answer = twins.rule("hidden gold, wrong" if misses == 1 else "hidden gold, wrong: stopped", "B",
                                twins.body(trial["trial_id"], wrong), STORED if misses == 1 else DEFER, status=201)
            if answer["stage"] == "stopped":
                break
        else:
            continue
        break
    assert twins.state("B")["stage"] == "stopped"
    b2_trials = twins.open_trials("B2")
    twins.rule("turned away in another assignment", "B2", twins.body(b2_trials[0]["trial_id"], "left"), DEFER,
               status=409)
    assert twins.state("B2")["stage"] == "stopped"
    twins.rule("after the end, an open trial", "B2", twins.body(b2_trials[1]["trial_id"], "left"), ENDED,
               status=409)

    # Pilots: a pilot participant's token names no study (the regular path), and a participant marked as
    # a pilot while answering a page keeps a token that does: the function counts no pair for either.
    def pilot_entry(side: Side):
        body = {"platform": "link", "worker_id": "PILOT1",
                "pilot": pilot_signature(side.app.config["SECRET_KEY"], "demo")}
        response = side.client.post("/api/v1/studies/demo/assignments", json=body)
        assert response.status_code == 201, response.json
        client = WorkerClient.__new__(WorkerClient)
        client.client, client.entry, client.worker_id = side.client, response.json, "PILOT1"
        client.assignment_id, client.token = response.json["assignment_id"], response.json["token"]
        side.workers["P"] = client
        client.start()
        return side.scrub(response.json)
    twins.same("a pilot enters", pilot_entry)
    _answer_quiz(twins, "P", right=True, common=REGULAR)
    before = twins.each(_pair_votes)
    trial = next(t for t in twins.open_trials("P") if twins.side_of("P", t)[0] is None)
    twins.rule("pilot's vote", "P", twins.body(trial["trial_id"], "left"), REGULAR, status=201)
    assert twins.each(_pair_votes) == before, "a pilot's vote counted toward its pair"

    twins.enter("M", worker_id="MARKED1", platform="link")
    twins.act("M", "consent")
    twins.act("M", "instructions_done")
    _answer_quiz(twins, "M", right=True)
    real = [t for t in twins.open_trials("M") if twins.side_of("M", t)[0] is None]
    twins.rule("vote", "M", twins.body(real[0]["trial_id"], "left"), STORED, status=201)

    def mark(side: Side):
        with app_services(side.app).sessions() as session:
            study = session.scalar(select(Study).where(Study.slug == "demo"))
            mark_pilot(session, study, list(session.scalars(select(Worker).where(Worker.external_id == "MARKED1"))))
            session.commit()
    twins.same("a participant marked as a pilot", mark)
    before = twins.each(_pair_votes)
    twins.rule("marked pilot's vote", "M", twins.body(real[1]["trial_id"], "left"), STORED, status=201)
    assert twins.each(_pair_votes) == before, "a marked pilot's vote counted toward its pair"

    # The function decided the common rules itself, and deferred the rest.
    assert twins.stored_rules() >= {
        "vote", "quiz vote", "hidden gold, right", "hidden gold, wrong", "page complete", "marked pilot's vote"}
    assert twins.decided["after the end, an open trial"] == {ENDED}
    for rule in ("quiz end, passed", "quiz end, failed", "hidden gold, wrong: stopped", "last page complete",
                 "replay", "replay, other choice", "vote ID reused for another trial", "unknown trial",
                 "another assignment's trial", "revoked token", "turned away in another assignment",
                 "before the quiz", "trial ID beyond the column", "malformed vote", "replay after the end"):
        assert twins.decided[rule] == {DEFER}, rule


# ---------------------------------------------------------------- the function's text: one home

def _function_body(sql: str) -> str:
    """The PL/pgSQL body of a CREATE FUNCTION ... AS $$ <body> $$ text."""
    match = re.search(r"AS \$\$(.*)\$\$", sql, re.DOTALL)
    assert match, "no $$ body"
    return match.group(1)


def _migration_pins() -> list[tuple[str, dict[str, str]]]:
    """(revision, SQL_FILES) of every migration that installs SQL files, newest first."""
    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    pins = []
    for revision in script.walk_revisions():
        spec = importlib.util.spec_from_file_location(f"migration_{revision.revision}", revision.path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        if hasattr(module, "SQL_FILES"):
            pins.append((revision.revision, module.SQL_FILES))
    return pins


def test_every_paradigm_sql_file_is_pinned_by_the_newest_migration_that_installs_it():
    files = sorted(path.relative_to(SERVER).as_posix() for path in (SERVER / "paradigms").rglob("*.sql"))
    assert "paradigms/paired/vote.sql" in files
    pins = _migration_pins()
    for relative in files:
        newest = next(((revision, pinned[relative]) for revision, pinned in pins if relative in pinned), None)
        assert newest is not None, f"{relative}: no migration installs it"
        revision, pinned = newest
        digest = hashlib.sha256((SERVER / relative).read_bytes()).hexdigest()
        assert digest == pinned, (f"{relative} changed since migration {revision} installed it: add a migration "
                                  f"that installs it again (SQL_FILES = {{{relative!r}: {digest!r}}})")


def test_the_pin_check_fails_for_an_edited_file(tmp_path):
    """The check above can fail: the same comparison over an edited copy of the file."""
    edited = VOTE_SQL.read_bytes().replace(b"outcome := 'stored';", b"outcome := 'stored'; -- edited")
    assert edited != VOTE_SQL.read_bytes()
    revision, pinned = next((r, p) for r, p in _migration_pins() if "paradigms/paired/vote.sql" in p)
    assert hashlib.sha256(edited).hexdigest() != pinned["paradigms/paired/vote.sql"]


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_the_databases_vote_function_is_the_files(app):
    engine = app_services(app).engine
    for function, path in (("perceptlab_paired_vote", VOTE_SQL), ("perceptlab_page_answered", PAGE_SQL)):
        with engine.connect() as connection:
            installed = connection.execute(text("SELECT prosrc FROM pg_proc WHERE proname = :name"),
                                           {"name": function}).scalars().all()
        assert installed == [_function_body(path.read_text(encoding="utf-8"))], function
