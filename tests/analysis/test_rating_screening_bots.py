"""Issue 38: bots that answered every rating check right and rated the real stimuli at random, or gave every
real stimulus "3", completed pages and got codes. Checks cannot catch them (they pass every check); the
default rules of analysis/rating_screening.py must: the random bot by its correlation with the others' MOS,
the constant bot as a straight-liner. Honest workers stay kept. (The default rules as on this branch; the
``ratingstats`` branch changes them the same day.)"""
from __future__ import annotations

import numpy as np

from analysis.rating_screening import screen_ratings

N_STIMULI, N_HONEST, PER_WORKER = 40, 24, 25


def _study(rng: np.random.Generator):
    """Honest workers (true quality plus noise, rounded to 1..5), a random bot and a constant bot, each
    rating ``PER_WORKER`` distinct stimuli, and every worker answering 6 checks in range."""
    quality = rng.uniform(1.3, 4.7, N_STIMULI)
    stimulus, worker, x = [], [], []
    for w in range(N_HONEST + 2):
        items = rng.choice(N_STIMULI, PER_WORKER, replace=False)
        if w < N_HONEST:
            ratings = np.clip(np.rint(quality[items] + rng.normal(0, 0.4, PER_WORKER)), 1, 5)
        elif w == N_HONEST:
            ratings = rng.integers(1, 6, PER_WORKER).astype(float)  # at random
        else:
            ratings = np.full(PER_WORKER, 3.0)  # constantly "3"
        stimulus += items.tolist()
        worker += [w] * PER_WORKER
        x += ratings.tolist()
    n_workers = N_HONEST + 2
    gold_worker = np.repeat(np.arange(n_workers), 6)
    gold_low = np.tile([4.0, 1.0, 4.0, 1.0, 4.0, 1.0], n_workers)
    gold_high = gold_low + 1
    gold_rating = gold_low.copy()  # every check answered in range, bots included
    return (np.array(stimulus), np.array(worker), np.array(x), n_workers,
            dict(gold_worker=gold_worker, gold_rating=gold_rating, gold_low=gold_low, gold_high=gold_high))


def test_check_passing_bots_are_caught_by_the_default_rules():
    caught_random = caught_constant = honest_flagged = 0
    for seed in range(20):
        stimulus, worker, x, n_workers, gold = _study(np.random.default_rng(seed))
        result = screen_ratings(stimulus, worker, x, N_STIMULI, n_workers, 1.0, 5.0, **gold)
        assert result.flags["gold"].sum() == 0  # the checks do not catch them
        caught_random += not result.kept[N_HONEST]
        caught_constant += not result.kept[N_HONEST + 1]
        assert result.flags["straight_liner"][N_HONEST + 1]
        honest_flagged += int((~result.kept[:N_HONEST]).sum())
    assert caught_random == 20 and caught_constant == 20
    assert honest_flagged <= 0.05 * 20 * N_HONEST
