"""Every rating rule through PostgreSQL's one-statement function and through the regular Python path.

As tests/server/test_vote_rules.py does for paired votes: the rules of a rating have two homes, one per
path: ``server/paradigms/rating/rating.sql`` (the function ``perceptlab_rating_response``, which stores
the common ratings in one statement) and ``record_rating`` / ``_after_rating``
(server/paradigms/rating/paradigm.py, which decide everything the function defers). Two databases
copied from one template play the same workers in lockstep, one with the function and one without;
after every rule both must have given the same answer (status and body) and hold the same rows, and the
function must have decided the rules it is meant to decide itself (stored, or refused after the end),
not deferred them all. Quality checks (hidden references, degraded images) are stored by the function as
real stimuli are, unless they stop the worker: a worker cannot tell them apart by their answers.

The function's text has one home too: test_vote_rules.py checks the newest migration's pin of every
paradigm SQL file; the database's function is the file's (below).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from server.paradigms.rating import paradigm as rating
from server.paradigms.rating.paradigm import Rating
from server.services import app_services

from .conftest import ManualClock, make_test_app
from .rating_support import RatingWorker, copy_prepared, create_rating_study, shown_answer, trial_facts
from .vote_paths_support import DEFER, ENDED, REGULAR, STORED, Side, Twins, revoked_token, twin_sides

RATING_SQL = Path(__file__).resolve().parents[2] / "server" / "paradigms" / "rating" / "rating.sql"

# DCR on the scale's values with a training of three checks; CCR with the slider and no training.
STUDIES = {
    "dcr": {"rating": {"method": "dcr", "ratings_per_stimulus": 3},
            "pages": {"ratings_per_page": 8, "min_pages": 1, "max_pages": 2, "reward_per_page": "0.50",
                      "bonus_per_page": "0.40"},
            "quality": {"quiz_size": 3, "gold_rate": 0.25, "gold_min_answered": 2, "accuracy_threshold": 0.6,
                        "straight_line_pages": 1}},
    "ccr": {"rating": {"method": "ccr", "slider": True, "ratings_per_stimulus": 3},
            "pages": {"ratings_per_page": 8, "min_pages": 1, "max_pages": 3, "reward_per_page": "0.50",
                      "bonus_per_page": "0.40"},
            "quality": {"quiz_size": 0, "gold_rate": 0.25, "gold_min_answered": 2, "accuracy_threshold": 0.6,
                        "straight_line_pages": 1}},
}


class RatingTwins(Twins):
    """Twins that rate."""

    def __init__(self, sql: Side, python: Side):
        super().__init__(sql, python, rating.record_rating_in_one_statement, "ratings")

    def body(self, trial_id: int, value, rating_id: str | None = None) -> dict[str, Any]:
        return {"rating_id": rating_id or self.client_id(), "trial_id": trial_id, "rating": value, "rt_ms": 2310.5}

    def enter(self, worker: str, slug: str, pilot: bool = False) -> None:
        def run(side: Side):
            side.workers[worker] = RatingWorker(side.client, slug, worker_id=f"W{worker}", pilot=pilot)
            return side.workers[worker].assignment_id
        self.same(f"{worker} enters", run)

    def role(self, trial: dict) -> str:
        """The trial's stimulus role (the same on both sides: both studies are made from one seed)."""
        role = trial_facts(self.sql.app, trial["id"])[0]
        assert role == trial_facts(self.python.app, trial["id"])[0]
        return role

    def answer(self, trial: dict, correct: bool = True) -> int:
        value = shown_answer(self.sql.app, trial["id"], correct)
        assert value == shown_answer(self.python.app, trial["id"], correct)
        return value


def _sides(postgres_urls, tmp_path, demo_stimuli) -> tuple[Side, Side]:
    # One stimulus folder for both (the study rows name it); the second study creation writes the same files.
    manifest = copy_prepared(demo_stimuli, tmp_path / "stimuli")

    def create_studies(app, folder):
        for slug, sections in STUDIES.items():
            create_rating_study(app, manifest, folder, slug, **sections)
    return twin_sides(postgres_urls, tmp_path, create_studies)


@pytest.mark.slow  # two PostgreSQL databases, four rating studies and every rule in lockstep
def test_every_rating_rule_gives_the_same_answer_and_rows_on_both_paths(two_postgres_urls, tmp_path, demo_stimuli,
                                                                        monkeypatch):
    sql, python = _sides(two_postgres_urls, tmp_path, demo_stimuli)
    twins = RatingTwins(sql, python)
    twins.play(monkeypatch, Rating, _play_dcr, _play_ccr_slider)
    stored = twins.stored_rules()
    assert stored >= {"rating", "training rating", "hidden check, in range", "hidden check, out of range",
                      "page complete", "slider rating", "ccr rating", "ccr hidden check"}, stored
    assert twins.decided["after the end, an open trial"] == {ENDED}
    assert twins.decided["pilot's rating"] == {REGULAR}
    for rule in ("training end, passed", "training end, failed", "replay", "replay, other rating",
                 "rating ID reused for another trial", "unknown trial", "another assignment's trial",
                 "trial ID beyond the column", "rating outside the scale", "revoked token",
                 "hidden check: stopped", "straight-lined page: stopped", "last page complete",
                 "slider outside the scale"):
        assert twins.decided[rule] == {DEFER}, rule


def _answer_training(twins: RatingTwins, worker: str, *, right: bool, common: str = STORED) -> dict:
    """Answer the worker's training (right or wrong): its ratings are the function's (``common``), its end
    the regular path's. The last answer."""
    trials = twins.open_trials(worker)
    answer = {}
    for k, trial in enumerate(trials):
        last = k == len(trials) - 1
        rule = ("training end, passed" if right else "training end, failed") if last else "training rating"
        rule = rule if common == STORED else f"pilot's {rule}"
        answer = twins.rule(rule, worker, twins.body(trial["id"], twins.answer(trial, right)),
                            (DEFER if common == STORED else common) if last else common, status=201)
        if not last:
            assert answer["feedback"] == {"correct": right}, "training answers are told whether they were in range"
    return answer


def _play_dcr(twins: RatingTwins) -> None:
    for worker in ("A", "B", "C", "D"):
        twins.enter(worker, "dcr")
        twins.act(worker, "consent")
        twins.act(worker, "instructions_done")
    assert _answer_training(twins, "A", right=True)["stage"] == "trials"
    assert _answer_training(twins, "C", right=False)["stage"] == "disqualified"
    _answer_training(twins, "B", right=True)
    _answer_training(twins, "D", right=True)

    # A's first page: the common ratings, replays and refusals, the hidden checks.
    page = twins.open_trials("A")
    real = [t for t in page if twins.role(t) == "test"]
    checks = [t for t in page if twins.role(t) != "test"]
    assert len(real) >= 3 and checks, "a page with real stimuli and a hidden check"
    first = twins.body(real[0]["id"], 4)
    twins.rule("rating", "A", first, STORED, status=201)
    twins.rule("replay", "A", first, DEFER, status=200)
    twins.rule("replay, other rating", "A", {**first, "rating": 2}, DEFER, status=409)
    twins.rule("rating ID reused for another trial", "A", twins.body(real[1]["id"], 3, first["rating_id"]), DEFER,
               status=409)
    twins.rule("unknown trial", "A", twins.body(999999, 3), DEFER, status=404)
    twins.rule("another assignment's trial", "A", twins.body(twins.open_trials("B")[0]["id"], 3), DEFER, status=404)
    twins.rule("trial ID beyond the column", "A", twins.body(int("9" * 18), 3), DEFER, status=404)
    twins.rule("rating outside the scale", "A", twins.body(real[1]["id"], 6), DEFER, status=400)
    twins.rule("rating outside the scale", "A", twins.body(real[1]["id"], 4.5), DEFER, status=400)
    twins.rule("revoked token", "A", twins.body(real[1]["id"], 3), DEFER, status=403, token=revoked_token)
    twins.rule("hidden check, in range", "A", twins.body(checks[0]["id"], twins.answer(checks[0])), STORED, status=201)
    rest = twins.open_trials("A")
    for k, trial in enumerate(rest[:-1]):
        twins.rule("rating", "A", twins.body(trial["id"], twins.answer(trial) if twins.role(trial) != "test"
                                             else 2 + k % 3), STORED, status=201)
    answer = twins.rule("page complete", "A", twins.body(rest[-1]["id"], twins.answer(rest[-1])), STORED, status=201)
    assert answer["stage"] == "page_done" and answer["page_complete"] and answer["state"]["stage"] == "page_done"
    # The second page is the last (max_pages 2): its end completes the assignment (the regular path).
    twins.act("A", "continue")
    rest = twins.open_trials("A")
    for k, trial in enumerate(rest):
        last = k == len(rest) - 1
        twins.rule("last page complete" if last else "rating", "A",
                   twins.body(trial["id"], twins.answer(trial) if twins.role(trial) != "test" else 1 + k % 5),
                   DEFER if last else STORED, status=201)
    assert twins.state("A")["stage"] == "completed"
    twins.rule("replay after the end", "A", first, DEFER, status=200)

    # B misses hidden checks: the first miss is stored by the function, the stopping one decided by Python.
    misses = 0
    while twins.state("B")["stage"] == "trials":
        page = sorted(twins.open_trials("B"), key=lambda t: twins.role(t) == "test")  # checks first
        trial = page[0]
        is_check = twins.role(trial) != "test"
        if is_check:
            misses += 1
        rule = ("hidden check, out of range" if misses == 1 else "hidden check: stopped") if is_check else "rating"
        if not is_check and len(twins.open_trials("B")) == 1:
            rule = "page complete"
        value = twins.answer(trial, correct=False) if is_check else 2 + len(twins.open_trials("B")) % 3
        answer = twins.rule(rule, "B", twins.body(trial["id"], value),
                            DEFER if rule == "hidden check: stopped" else STORED, status=201)
        if answer["stage"] == "page_done":
            twins.act("B", "continue")
    assert twins.state("B")["stage"] == "stopped" and misses == 2
    assert len(page) > 1, "trials left open on the page of the stop"
    twins.rule("after the end, an open trial", "B", twins.body(page[1]["id"], 3), ENDED, status=409)

    # D straight-lines a page: every answer alike; the page's last rating stops D (the regular path).
    rest = twins.open_trials("D")
    for k, trial in enumerate(rest):
        last = k == len(rest) - 1
        twins.rule("straight-lined page: stopped" if last else "rating", "D", twins.body(trial["id"], 3),
                   DEFER if last else STORED, status=201)
    assert twins.state("D")["stage"] == "stopped"

    # A pilot: a pilot participant's token names no study (server/pilot.py), so the regular path answers.
    twins.enter("P", "dcr", pilot=True)
    twins.act("P", "consent")
    twins.act("P", "instructions_done")
    _answer_training(twins, "P", right=True, common=REGULAR)
    trial = next(t for t in twins.open_trials("P") if twins.role(t) == "test")
    twins.rule("pilot's rating", "P", twins.body(trial["id"], 3), REGULAR, status=201)


def _play_ccr_slider(twins: RatingTwins) -> None:
    twins.enter("S", "ccr")
    twins.act("S", "consent")
    assert twins.act("S", "instructions_done")["stage"] == "trials"  # no training
    trials = twins.open_trials("S")
    real = [t for t in trials if twins.role(t) == "test"]
    checks = [t for t in trials if twins.role(t) != "test"]
    twins.rule("slider outside the scale", "S", twins.body(real[0]["id"], 3.25), DEFER, status=400)
    # Normalised by the trial's reference place, on both paths (rows compared): the sign of 1.75 is turned
    # for trials whose reference was the second image.
    twins.rule("slider rating", "S", twins.body(real[0]["id"], 1.75), STORED, status=201)
    twins.rule("ccr rating", "S", twins.body(real[1]["id"], -3), STORED, status=201)
    twins.rule("slider rating", "S", twins.body(real[2]["id"], 0.3), STORED, status=201)
    shown = twins.answer(checks[0])
    twins.rule("ccr hidden check", "S", twins.body(checks[0]["id"], shown - 0.4 if shown > 0 else shown + 0.4),
               STORED, status=201)


def test_the_databases_rating_function_is_the_files(two_postgres_urls, tmp_path):
    app = make_test_app(two_postgres_urls[0], tmp_path / "instance", clock=ManualClock())
    engine = app_services(app).engine
    try:
        with engine.connect() as connection:
            installed = connection.execute(text(
                "SELECT prosrc FROM pg_proc WHERE proname = 'perceptlab_rating_response'")).scalars().all()
    finally:
        engine.dispose()
    match = re.search(r"AS \$\$(.*)\$\$", RATING_SQL.read_text(encoding="utf-8"), re.DOTALL)
    assert match and installed == [match.group(1)]
