import numpy as np
import pytest
from numpy.polynomial.hermite_e import hermegauss
from scipy.special import ndtr

import analysis.active as active
from analysis.active import (ScorePosterior, candidate_pairs, expected_fisher_information, expected_precision_gain,
                             fisher_information, fit_posterior, information_gain, loss_weights, pair_values,
                             plan_batch, select_batch)
from analysis.active_replay import ThurstoneOutcomes, replay_study
from analysis.thurstone import _hessian, _pair_terms, aggregate_pairs

NONE = np.empty(0, dtype=np.int64)


def thurstone_votes(truth, pairs, rng):
    """One simulated vote per row of ``pairs``: (winners, losers)."""
    first_won = rng.random(len(pairs)) < ndtr(truth[pairs[:, 0]] - truth[pairs[:, 1]])
    return np.where(first_won, pairs[:, 0], pairs[:, 1]), np.where(first_won, pairs[:, 1], pairs[:, 0])


@pytest.fixture(scope="module")
def votes():
    rng = np.random.default_rng(3)
    truth = rng.normal(0.0, 1.0, 12)
    i, j = np.triu_indices(12, 1)
    pairs = np.column_stack([i, j])[rng.integers(66, size=120)]
    return truth, *thurstone_votes(truth, pairs, rng)


def gauss_hermite(f, mean, var, nodes=60):
    x, w = hermegauss(nodes)
    return float((f(mean + np.sqrt(var) * x) * w).sum() / w.sum())


# ----------------------------------------------------------------------------- posterior and gains

def test_posterior_is_the_laplace_approximation_at_the_map(votes):
    truth, winners, losers = votes
    post = fit_posterior(12, winners, losers, prior_strength=2.0)
    pairs, wins = aggregate_pairs(winners, losers, np.ones(len(winners), dtype=bool))
    _, grad, curv = _pair_terms(post.mean[pairs[:, 0]] - post.mean[pairs[:, 1]], wins[:, 0], wins[:, 1])
    gradient = np.bincount(pairs[:, 0], grad, 12) - np.bincount(pairs[:, 1], grad, 12) + 2.0 * post.mean
    assert np.abs(gradient).max() < 1e-5  # the mean is the MAP
    np.testing.assert_allclose(post.cov @ _hessian(pairs, curv, 12, 2.0, dense=True), np.eye(12), atol=1e-9)
    assert np.corrcoef(post.mean, truth)[0, 1] > 0.8


def test_update_with_a_few_votes_is_close_to_a_refit(votes):
    truth, winners, losers = votes
    rng = np.random.default_rng(9)
    new_w, new_l = thurstone_votes(truth, np.array([[0, 1], [2, 5], [3, 7]]), rng)
    updated = fit_posterior(12, winners, losers).update(new_w, new_l)
    refit = fit_posterior(12, np.concatenate([winners, new_w]), np.concatenate([losers, new_l]))
    assert np.abs(updated.mean - refit.mean).max() < 0.02
    np.testing.assert_allclose(updated.cov, refit.cov, atol=0.01)


@pytest.mark.parametrize("mean, var", [(0.0, 0.01), (0.0, 1.0), (1.0, 0.5), (2.5, 3.0), (-1.5, 0.2)])
def test_closed_forms_match_quadrature(mean, var):
    entropy = lambda d: -(ndtr(d) * np.log2(ndtr(d)) + ndtr(-d) * np.log2(ndtr(-d)))  # noqa: E731
    p = gauss_hermite(ndtr, mean, var)
    bald = -(p * np.log2(p) + (1 - p) * np.log2(1 - p)) - gauss_hermite(entropy, mean, var)
    assert information_gain(mean, var) == pytest.approx(bald, abs=3e-3)
    assert expected_fisher_information(mean, var) == pytest.approx(
        gauss_hermite(fisher_information, mean, var), rel=0.03, abs=2e-3)
    assert fisher_information(0.0) == pytest.approx(2 / np.pi)


def test_pair_values_are_the_drop_of_the_posterior_loss(votes):
    _, winners, losers = votes
    post = fit_posterior(12, winners, losers)
    weights = loss_weights(post)
    lap = np.diag(weights.sum(axis=1)) - weights

    def loss(cov):  # sum over i < j of w_ij Var(s_i - s_j) = trace(L cov) / 1 ... written out
        d = np.diag(cov)
        return 0.5 * (weights * (d[:, None] + d[None, :] - 2 * cov)).sum()

    assert loss(post.cov) == pytest.approx(np.trace(lap @ post.cov))
    pairs = np.array([[0, 1], [3, 9], [4, 11]])
    mean_diff, var = post.difference_moments(pairs)
    f = expected_fisher_information(mean_diff, var)
    for (a, b), fa, value in zip(pairs, f, pair_values(post, pairs)):
        u = np.zeros(12)
        u[a], u[b] = 1, -1
        after = post.cov - fa * np.outer(post.cov @ u, post.cov @ u) / (1 + fa * u @ post.cov @ u)
        assert value == pytest.approx(loss(post.cov) - loss(after), rel=1e-9)


# ----------------------------------------------------------------------------- batches

@pytest.mark.parametrize("greedy_limit", [400, 5])  # the greedy path, and the capped path of large sets
def test_batches_are_distinct_ordered_pairs_that_respect_candidates_and_exclusions(votes, monkeypatch,
                                                                                  greedy_limit):
    monkeypatch.setattr(active, "GREEDY_LIMIT", greedy_limit)
    _, winners, losers = votes
    exclude = np.array([[1, 0], [2, 3], [5, 4]])
    batch = select_batch(12, winners, losers, 11, rng=np.random.default_rng(0), exclude=exclude)
    assert batch.shape == (11, 2) and batch.dtype == np.int64
    assert (batch[:, 0] < batch[:, 1]).all() and len({tuple(p) for p in batch}) == 11
    assert not {tuple(p) for p in batch} & {(0, 1), (2, 3), (4, 5)}
    if greedy_limit < 12:  # the cap: ceil(2 * 11 / 12) + 1 per item
        assert np.bincount(batch.ravel()).max() <= 3
    candidates = np.array([[7, 2], [3, 8], [0, 11], [6, 6 + 4], [1, 0]])
    small = select_batch(12, winners, losers, 10, rng=np.random.default_rng(0), candidates=candidates,
                         exclude=exclude)
    assert sorted(map(tuple, small)) == [(0, 11), (2, 7), (3, 8), (6, 10)]  # all usable candidates, no more
    assert select_batch(12, winners, losers, 0, rng=np.random.default_rng(0)).shape == (0, 2)


def test_a_batch_spreads_over_the_set_before_the_first_vote():
    batch = select_batch(20, NONE, NONE, 19, rng=np.random.default_rng(1))
    assert sorted(batch[:10].ravel()) == list(range(20))  # first a perfect matching: every item once
    assert set(np.bincount(batch.ravel(), minlength=20)) <= {1, 2}


def test_same_seed_same_batch_other_seed_other_tie_breaks(votes):
    _, winners, losers = votes
    one = select_batch(12, winners, losers, 8, rng=np.random.default_rng(5))
    np.testing.assert_array_equal(one, select_batch(12, winners, losers, 8, rng=np.random.default_rng(5)))
    first = [select_batch(12, NONE, NONE, 6, rng=np.random.default_rng(s)).tolist() for s in range(4)]
    assert len({str(f) for f in first}) == 4


def test_expected_precision_gain_matches_the_greedy_bookkeeping(votes):
    _, winners, losers = votes
    planned = plan_batch(12, winners, losers, 11, rng=np.random.default_rng(2))
    again = expected_precision_gain(planned.posterior, planned.pairs)
    assert planned.gain.sd_after == pytest.approx(again.sd_after, rel=1e-9)
    assert planned.gain.sd_before == pytest.approx(again.sd_before)
    assert 0 < planned.gain.sd_after < planned.gain.sd_before and planned.gain.percent > 0
    assert expected_precision_gain(planned.posterior, NONE.reshape(0, 2)).percent == 0


def test_active_beats_random_at_one_standard_trial():
    n, repeats = 12, 24
    i, j = np.triu_indices(n, 1)
    pairs = np.column_stack([i, j])
    scores = {"random": [], "active": []}
    for r in range(repeats):
        truth = np.random.default_rng(100 + r).normal(0.0, 1.0, n)
        for strategy in scores:
            study = replay_study(n, ThurstoneOutcomes(pairs, truth), truth, [1.0], strategy,
                                 np.random.default_rng(r))
            scores[strategy].append(study.srocc[0])
    random, chosen = np.mean(scores["random"]), np.mean(scores["active"])
    assert chosen > random + 0.02, (random, chosen)


# ----------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("call, message", [
    (lambda: select_batch(1, NONE, NONE, 1, rng=np.random.default_rng()), "n_items"),
    (lambda: select_batch(4, np.array([0, 1]), np.array([1]), 1, rng=np.random.default_rng()), "differ in length"),
    (lambda: select_batch(4, np.array([0]), np.array([4]), 1, rng=np.random.default_rng()), r"\[0, 4\)"),
    (lambda: select_batch(4, np.array([2]), np.array([2]), 1, rng=np.random.default_rng()), "itself"),
    (lambda: select_batch(4, np.array([0.5]), np.array([1]), 1, rng=np.random.default_rng()), "integer"),
    (lambda: select_batch(4, NONE, NONE, -1, rng=np.random.default_rng()), "batch_size"),
    (lambda: select_batch(4, NONE, NONE, 1, rng=np.random.default_rng(), candidates=np.array([1, 2])), "(m, 2)"),
    (lambda: select_batch(4, NONE, NONE, 1, rng=np.random.default_rng(), exclude=np.array([[3, 3]])), "itself"),
    (lambda: fit_posterior(4, NONE, NONE, prior_strength=0), "prior_strength"),
])
def test_bad_input_raises_a_clear_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_rng_must_be_a_generator():
    with pytest.raises(TypeError, match="Generator"):
        select_batch(4, NONE, NONE, 1, rng=0)


def test_candidate_pairs_normalises_order_and_repeats():
    pairs = candidate_pairs(5, np.array([[3, 1], [1, 3], [0, 4]]), exclude=np.array([[4, 0]]))
    assert pairs.tolist() == [[1, 3]]
    assert len(candidate_pairs(6)) == 15


def test_posterior_of_another_set_size_is_refused(votes):
    post = ScorePosterior(np.zeros(3), np.eye(3), np.eye(3), 1.0)
    with pytest.raises(ValueError, match="3 items"):
        plan_batch(4, NONE, NONE, 1, rng=np.random.default_rng(), posterior=post)
