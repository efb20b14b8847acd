"""Quality control of ratings: known answer ranges (hidden references, degraded images) per method, the
slider's half step, scores against the threshold, straight-lining (pure), and in a study: the training,
hidden checks that stop a worker, straight-lined pages that stop one, on SQLite and PostgreSQL."""
from __future__ import annotations

import numpy as np
import pytest
from sqlalchemy import select

from server.paradigms.rating.models import RatingGoldResult
from server.paradigms.rating.quality import below_threshold, in_range, known_range, straight_lined
from server.paradigms.rating.scales import normalise, scale_of, valid_rating
from server.services import app_services

from .rating_support import SMALL, RatingWorker, create_rating_study, shown_answer, trial_facts
from .reason_support import counts, one, recorded


@pytest.mark.parametrize("method, role, inside, outside", [
    ("dcr", "hidden_reference", [5, 4], [3, 2, 1]),
    ("dcr", "gold_low", [1, 2], [3, 4, 5]),
    ("acr", "hidden_reference", [5, 4, 3], [2, 1]),
    ("acr", "gold_low", [1, 2], [3, 4, 5]),
    ("ccr", "hidden_reference", [-1, 0, 1], [-3, -2, 2, 3]),
    ("ccr", "gold_low", [-3, -2, -1], [0, 1, 2, 3]),
])
def test_known_ranges_of_each_check(method, role, inside, outside):
    assert all(in_range(method, role, v) for v in inside)
    assert not any(in_range(method, role, v) for v in outside)
    low, high = known_range(method, role, slider=True)  # a continuous answer counts as its nearest label
    assert in_range(method, role, low, slider=True) and not in_range(method, role, low - 0.01, slider=True)
    assert (low, high) == (min(inside) - 0.5, max(inside) + 0.5)
    with pytest.raises(KeyError):
        known_range(method, "test")  # a real stimulus has no right answer


def test_the_ccr_normalisation_turns_the_sign_when_the_reference_was_second():
    assert normalise("ccr", 2, reference_first=True) == 2    # second (test) better than first (reference)
    assert normalise("ccr", 2, reference_first=False) == -2  # second (reference) better than first (test)
    assert normalise("dcr", 2, reference_first=True) == 2 and normalise("acr", 4, reference_first=False) == 4


def test_valid_ratings_per_scale():
    assert valid_rating("dcr", False, 5) and valid_rating("dcr", False, 1.0) and not valid_rating("dcr", False, 0)
    assert not valid_rating("acr", False, 4.5) and valid_rating("acr", True, 4.5)
    assert valid_rating("ccr", False, -3) and not valid_rating("ccr", True, 3.01)
    assert not valid_rating("ccr", True, float("nan")) and not valid_rating("dcr", False, True)
    assert scale_of("ccr").values == (-3, -2, -1, 0, 1, 2, 3)


def test_threshold_and_straight_lining():
    assert below_threshold(2, 3, 0.7) and not below_threshold(7, 10, 0.7) and not below_threshold(0, 0, 0.7)
    assert straight_lined(np.full(8, 3.0)) and not straight_lined(np.array([3, 3, 3, 3, 3, 3, 4.0]))
    assert not straight_lined(np.full(4, 3.0))  # too few to tell
    assert straight_lined(np.full(5, -1.0), min_trials=5)


def test_hidden_checks_out_of_range_stop_a_worker(app, rating_manifest, tmp_path):
    slug = create_rating_study(app, rating_manifest, tmp_path, pages={"ratings_per_page": 8, "max_pages": 5},
                               quality={"quiz_size": 0, "gold_rate": 0.25, "gold_min_answered": 2,
                                        "accuracy_threshold": 0.6, "straight_line_pages": 0})
    worker = RatingWorker(app.test_client(), slug)
    worker.pass_training()
    wrong = 0
    while worker.state()["stage"] in ("trials", "page_done"):
        state = worker.state()
        if state["stage"] == "page_done":
            worker.action("continue")
            continue
        trial = next(t for t in state["page"]["trials"] if not t["answered"])
        is_check = trial_facts(app, trial["id"])[0] != "test"
        status, body = worker.rate(trial["id"], shown_answer(app, trial["id"], correct=not is_check))
        assert status == 201 and "feedback" not in body  # hidden checks are never told apart
        wrong += is_check
    assert worker.state()["stage"] == "stopped" and wrong == 2  # stopped once two checks were answered wrongly
    assert recorded(app, worker.assignment_id) == ("gold_accuracy", "gold_accuracy")
    assert counts(app, slug) == one("gold_accuracy")
    with app_services(app).sessions() as session:
        results = session.execute(select(RatingGoldResult.is_quiz, RatingGoldResult.correct)).all()
    assert results == [(False, False), (False, False)]


def test_a_straight_lined_page_stops_a_worker(app, rating_manifest, tmp_path):
    slug = create_rating_study(app, rating_manifest, tmp_path, **{**SMALL, "quality": {
        "quiz_size": 0, "gold_rate": 0.0, "straight_line_pages": 1}})
    honest = RatingWorker(app.test_client(), slug)
    honest.pass_training()
    body = honest.answer_page(lambda trial: 1 + trial["position"] % 5)
    assert body["stage"] == "page_done"
    liner = RatingWorker(app.test_client(), slug)
    liner.pass_training()
    body = liner.answer_page(lambda trial: 4)
    assert body["stage"] == "stopped" and body["page_complete"] is True
    state = liner.state()
    assert "same" in state["message"] and state["progress"]["pages_completed"] == 0 and state["completion"] is None
    assert recorded(app, liner.assignment_id) == ("straight_lining", "straight_lining")
    assert counts(app, slug) == one("straight_lining")


def test_the_training_uses_both_kinds_of_check_and_feeds_back(app, rating_study):
    worker = RatingWorker(app.test_client(), rating_study)
    trials = worker.start()["page"]["trials"]
    roles = {trial_facts(app, t["id"])[0] for t in trials}
    assert roles == {"hidden_reference", "gold_low"}  # the least-shown role first: both kinds in three trials
    status, body = worker.rate(trials[0]["id"], shown_answer(app, trials[0]["id"]))
    assert status == 201 and body["feedback"] == {"correct": True} and body["stage"] == "quiz"
