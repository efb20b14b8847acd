"""How rating pages are filled: each worker rates a stimulus at most once, ratings balanced across stimuli
(the least-rated first, open pages' stimuli reserved), order and CCR sides randomised and seeded per page,
reservations lapse and are released, on SQLite and PostgreSQL."""
from __future__ import annotations

import collections

import numpy as np
from sqlalchemy import func, select

from server.paradigms.rating.allocation import page_rows
from server.paradigms.rating.models import RatingResponse, RatingStimulus, RatingTrial
from server.services import app_services

from .rating_support import RatingWorker, create_rating_study

NO_CHECKS = {"quiz_size": 0, "gold_rate": 0.0}


def _varied(trial: dict) -> int:
    """Answers that differ along a page (a page of one answer is straight-lined: the worker would be stopped)."""
    return 1 + trial["position"] % 5


def _real_trials(app, worker: RatingWorker) -> list[int]:
    """Stimulus IDs of the worker's real trials, in page and position order."""
    with app_services(app).sessions() as session:
        return list(session.scalars(select(RatingTrial.stimulus_id)
                                    .where(RatingTrial.assignment_id == int(worker.assignment_id), ~RatingTrial.is_gold)
                                    .order_by(RatingTrial.page_id, RatingTrial.position)))


def _counts(app) -> dict[int, int]:
    """Stored ratings per real stimulus (0 for those without)."""
    with app_services(app).sessions() as session:
        rated = dict(session.execute(select(RatingResponse.stimulus_id, func.count())
                                     .group_by(RatingResponse.stimulus_id)).all())
        return {sid: rated.get(sid, 0) for sid in session.scalars(select(RatingStimulus.id)
                                                                   .where(~RatingStimulus.is_gold))}


def test_a_worker_rates_each_stimulus_at_most_once(app, rating_manifest, tmp_path):
    # 44 stimuli, pages of 10: the fifth page has the 4 left, then the worker has seen every stimulus.
    slug = create_rating_study(app, rating_manifest, tmp_path, rating={"ratings_per_stimulus": 5},
                               pages={"ratings_per_page": 10, "max_pages": 6}, quality=NO_CHECKS)
    worker = RatingWorker(app.test_client(), slug)
    worker.pass_training()
    for _ in range(5):
        worker.answer_page(_varied)
        state = worker.state()
        if state["stage"] != "page_done" or not state["progress"]["next_page"]:
            break
        worker.action("continue")
    seen = _real_trials(app, worker)
    assert len(seen) == len(set(seen)) == 44
    assert worker.state()["progress"]["next_page"] is False  # nothing left for this worker


def test_ratings_are_balanced_across_stimuli_and_open_pages_reserve_theirs(app, rating_manifest, tmp_path, clock):
    slug = create_rating_study(app, rating_manifest, tmp_path, rating={"ratings_per_stimulus": 3},
                               pages={"ratings_per_page": 10}, quality=NO_CHECKS)
    workers = [RatingWorker(app.test_client(), slug) for _ in range(9)]
    for worker in workers:  # every page opened before any rating: the reservations alone share the stimuli out
        worker.pass_training()
    shown = collections.Counter(s for worker in workers for s in _real_trials(app, worker))
    assert max(shown.values()) - min(shown.values()) <= 1 and sum(shown.values()) == 90
    for worker in workers:
        worker.answer_page(_varied)
    counts = _counts(app)
    assert max(counts.values()) - min(counts.values()) <= 1 and sum(counts.values()) == 90
    # The least-rated first: a new page takes only stimuli rated fewest times so far.
    fewest = min(counts.values())
    newcomer = RatingWorker(app.test_client(), slug)
    newcomer.pass_training()
    assert all(counts[s] == fewest for s in _real_trials(app, newcomer))


def test_a_lapsed_reservation_frees_its_stimuli(app, rating_manifest, tmp_path, clock):
    # One rating per stimulus and pages of 22: two open pages hold every one of the 44 stimuli.
    slug = create_rating_study(app, rating_manifest, tmp_path, rating={"ratings_per_stimulus": 1},
                               pages={"ratings_per_page": 22}, quality={**NO_CHECKS, "reservation_minutes": 5})
    first, second = RatingWorker(app.test_client(), slug), RatingWorker(app.test_client(), slug)
    first.pass_training()
    second.pass_training()
    assert not set(_real_trials(app, first)) & set(_real_trials(app, second))
    third = RatingWorker(app.test_client(), slug)
    assert third.start()["stage"] == "full"  # everything is reserved
    clock.advance(minutes=6)  # the first two walked away: their reservations lapse
    fourth = RatingWorker(app.test_client(), slug)
    state = fourth.pass_training()
    assert state["stage"] == "trials" and len(state["page"]["trials"]) == 22
    # A returning worker keeps the page and may still answer it.
    status, body = first.rate(first.state()["page"]["trials"][0]["id"], 3)
    assert status == 201


def test_starting_a_page_in_another_assignment_releases_the_first(app, rating_manifest, tmp_path):
    # 44 stimuli, one rating each, pages of 11.
    slug = create_rating_study(app, rating_manifest, tmp_path, rating={"ratings_per_stimulus": 1},
                               pages={"ratings_per_page": 11}, quality=NO_CHECKS)
    client = app.test_client()
    first = RatingWorker(client, slug, worker_id="WSAMEWORKER1")
    first.pass_training()
    # The same worker in a second HIT: a page of other stimuli, and the first page's are released (a worker
    # holds one reserved page in a study).
    again = RatingWorker(client, slug, worker_id="WSAMEWORKER1")
    assert again.pass_training()["stage"] == "trials"
    assert not set(_real_trials(app, again)) & set(_real_trials(app, first))
    others = [RatingWorker(client, slug) for _ in range(3)]
    for other in others:  # 33 stimuli are free: the 22 never shown and the 11 released
        assert other.pass_training()["stage"] == "trials"
    taken = {s for other in others for s in _real_trials(app, other)}
    assert set(_real_trials(app, first)) <= taken


def test_page_order_and_ccr_sides_are_random_and_seeded():
    real, checks = list(range(100, 118)), [900, 901]
    one = page_rows("ccr", real, checks, np.random.default_rng([7, 3, 1]))
    assert one == page_rows("ccr", real, checks, np.random.default_rng([7, 3, 1]))  # the same page, the same draws
    other = page_rows("ccr", real, checks, np.random.default_rng([7, 3, 2]))
    assert [r["stimulus_id"] for r in one] != [r["stimulus_id"] for r in other]
    assert sorted(r["stimulus_id"] for r in one) == sorted(real + checks)
    assert {r["reference_first"] for r in one} == {True, False}
    assert {r["is_gold"] for r in one if r["stimulus_id"] in checks} == {True}
    dcr = page_rows("dcr", real, checks, np.random.default_rng(0))
    assert all(r["reference_first"] for r in dcr)  # DCR shows the reference first, always


def test_different_workers_get_different_orders(app, rating_manifest, tmp_path):
    slug = create_rating_study(app, rating_manifest, tmp_path, rating={"ratings_per_stimulus": 20},
                               pages={"ratings_per_page": 10}, quality=NO_CHECKS)
    orders = []
    for _ in range(3):
        worker = RatingWorker(app.test_client(), slug)
        worker.pass_training()
        orders.append(_real_trials(app, worker))
    assert len({tuple(o) for o in orders}) == 3
