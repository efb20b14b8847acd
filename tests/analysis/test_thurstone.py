import numpy as np
import pytest
from scipy.special import ndtri

from analysis.correlation import srocc
from analysis.thurstone import (DisconnectedDesignError, add_anchors, aggregate_pairs, check_connected,
                                rescale_to_anchors, thurstone_ls, thurstone_mle, thurstone_mle_batch,
                                thurstone_mle_linearised)
from stimuli.designs import full_design, random_regular_design
from tests.conftest import thurstone_counts


def test_mle_recovers_known_scale_on_sparse_design(rng):
    truth = rng.normal(0, 1, 155)
    pairs = random_regular_design(155, 6, rng)
    wins = thurstone_counts(truth, pairs, 20, rng)
    assert (wins.min(axis=1) == 0).sum() > 10  # unanimous pairs are present, as in real studies
    s = thurstone_mle(pairs, wins, 155)
    assert np.isfinite(s).all()
    assert srocc(s, truth) > 0.95
    assert abs(s.sum()) < 1e-8  # the ridge fixes the gauge at mean zero


def test_mle_is_a_stationary_point_of_the_penalised_likelihood(rng):
    truth = rng.normal(0, 1, 30)
    pairs = random_regular_design(30, 4, rng)
    wins = thurstone_counts(truth, pairs, 10, rng)
    s = thurstone_mle(pairs, wins, 30, prior_strength=0.05)
    from scipy.optimize import approx_fprime
    from scipy.special import log_ndtr

    def f(x):
        d = x[pairs[:, 0]] - x[pairs[:, 1]]
        return -(wins[:, 0] * log_ndtr(d) + wins[:, 1] * log_ndtr(-d)).sum() + 0.025 * x @ x
    assert np.abs(approx_fprime(s, f, 1e-7)).max() < 1e-4
    assert f(s) <= f(s + rng.normal(0, 1e-3, 30))


def test_ls_satisfies_its_normal_equations():
    pairs = full_design(4)
    wins = np.array([[7, 3], [2, 8], [9, 1], [1, 9], [6, 4], [8, 2]], dtype=float)
    s = thurstone_ls(pairs, wins, 4)
    z = ndtri((wins[:, 0] + 0.5) / (wins.sum(axis=1) + 1))
    resid = s[pairs[:, 0]] - s[pairs[:, 1]] - z
    per_item = np.bincount(pairs[:, 0], resid, 4) - np.bincount(pairs[:, 1], resid, 4)
    assert np.allclose(per_item, 0, atol=1e-10)
    assert abs(s.sum()) < 1e-10


def test_ls_and_mle_agree_on_complete_designs(rng):
    truth = rng.normal(0, 0.5, 12)
    pairs = full_design(12)
    wins = thurstone_counts(truth, pairs, 200, rng)
    mle, ls = thurstone_mle(pairs, wins, 12, prior_strength=1e-4), thurstone_ls(pairs, wins, 12)
    assert srocc(mle, ls) > 0.98
    assert np.abs(mle - ls).max() < 0.05


def test_unanimous_items_stay_finite_and_ordered():
    pairs = np.array([[0, 1], [1, 2], [0, 2]])
    wins = np.array([[10, 0], [10, 0], [10, 0]], dtype=float)  # 0 > 1 > 2, every vote unanimous
    for s in (thurstone_mle(pairs, wins, 3), thurstone_ls(pairs, wins, 3)):
        assert np.isfinite(s).all() and s[0] > s[1] > s[2]


def test_disconnected_graph_names_unreachable_items():
    pairs = np.array([[0, 1], [1, 2], [3, 4]])
    with pytest.raises(DisconnectedDesignError) as err:
        check_connected(pairs, 5, item_ids=np.array(["a", "b", "c", "d", "e"]), set_id="s1")
    message = str(err.value)
    assert "set 's1'" in message and "2 disconnected components" in message
    assert "d, e" in message and "a," not in message
    check_connected(np.array([[0, 1], [1, 2]]), 3)  # connected: no error


def test_anchors_map_to_exactly_zero_and_one_and_bracket_the_items(rng):
    truth = rng.normal(0, 1, 40)
    pairs = random_regular_design(40, 6, rng)
    wins = thurstone_counts(truth, pairs, 20, rng)
    p2, w2 = add_anchors(pairs, wins, 40, anchor_votes=1)
    raw = thurstone_mle(p2, w2, 42)
    assert raw[40] < raw[:40].min() and raw[41] > raw[:40].max()
    with_anchors = np.concatenate([rescale_to_anchors(raw, 40), [0, 1]])
    worst, best = (raw[40:] - raw[40]) / (raw[41] - raw[40])
    assert worst == 0.0 and best == 1.0
    assert (with_anchors[:40] > 0).all() and (with_anchors[:40] < 1).all()
    assert srocc(with_anchors[:40], truth) > 0.9


def test_aggregate_pairs_orders_and_counts():
    pairs, wins = aggregate_pairs([2, 0, 0, 1], [0, 2, 1, 0], [True, True, False, True])
    assert pairs.tolist() == [[0, 1], [0, 2]]
    assert wins.tolist() == [[0, 2], [1, 1]]


def test_batch_mle_matches_one_by_one(rng):
    truth = rng.normal(0, 1, 60)
    pairs = random_regular_design(60, 6, rng)
    base = thurstone_counts(truth, pairs, 20, rng)
    batch = np.stack([rng.poisson(base) for _ in range(12)]).astype(float)
    batch[0, :5] = [[20, 0]] * 5  # push some pairs to unanimity
    init = thurstone_mle(pairs, base, 60)
    together = thurstone_mle_batch(pairs, batch, 60, init=init)
    alone = np.stack([thurstone_mle(pairs, b, 60) for b in batch])
    assert np.abs(together - alone).max() < 1e-5


def test_batch_mle_reaches_each_worker_resamples_optimum(rng):
    # Worker resamples move the optimum far from the warm start (whole workers drop out or count three
    # times), the case the batch solver's inexact Newton steps and per-column CG stops must still
    # finish: every resample within the step tolerance of its own exact fit, with the anchors as analyze fits them.
    n, n_workers = 40, 25
    truth = rng.normal(0, 1, n)
    pairs = random_regular_design(n, 6, rng)
    votes_pair = rng.integers(0, len(pairs), (n_workers, 30))           # 30 votes per worker
    first_wins = rng.random(votes_pair.shape) < ndtr_gap(truth, pairs[votes_pair])
    per_worker = np.zeros((n_workers, len(pairs), 2))
    np.add.at(per_worker, (np.arange(n_workers)[:, None], votes_pair, (~first_wins).astype(int)), 1.0)
    counts = rng.multinomial(n_workers, np.full(n_workers, 1 / n_workers), size=30).astype(float)
    batch = np.einsum("bw,wpk->bpk", counts, per_worker)
    anchored, batch = add_anchors(pairs, batch, n)
    _, full = add_anchors(pairs, per_worker.sum(axis=0), n)
    init = thurstone_mle(anchored, full, n + 2)
    together = thurstone_mle_batch(anchored, batch, n + 2, init=init)
    alone = np.stack([thurstone_mle(anchored, b, n + 2, init=init, tol=1e-12) for b in batch])
    assert np.abs(alone - init).max() > 0.3  # the resamples' optima are far from the warm start
    assert np.abs(together - alone).max() < 1e-6


def test_the_linearised_mle_of_resamples_errs_by_the_square_of_their_deviation(rng):
    # Soft screening's bootstrap takes each resample's scale to first order around the full data's MLE
    # (analysis/bootstrap.py): its error is second order, a share of the deviation that shrinks with it.
    n = 40
    truth = rng.normal(0, 0.5, n)
    pairs = random_regular_design(n, 6, rng)
    full = thurstone_counts(truth, pairs, 20, rng)
    at = thurstone_mle(pairs, full, n)
    linearised = thurstone_mle_linearised(pairs, n, at, full)
    assert np.allclose(linearised(full[None]), at, atol=1e-6)  # at the optimum itself
    for size, most in ((1.0, 0.25), (0.1, 0.05)):
        batch = np.stack([full + size * (rng.poisson(full) - full) for _ in range(8)])
        exact = np.stack([thurstone_mle(pairs, b, n, init=at, tol=1e-12) for b in batch])
        deviation = np.sqrt(((exact - at) ** 2).mean(axis=1))
        error = np.sqrt(((linearised(batch) - exact) ** 2).mean(axis=1))
        assert np.all(error < most * deviation), (size, error / deviation)


def ndtr_gap(truth, pair_items):
    """P(the first item of each pair wins) under Thurstone Case V."""
    from scipy.special import ndtr
    return ndtr(truth[pair_items[..., 0]] - truth[pair_items[..., 1]])
