"""Each screening rule of analysis/rating_screening.py flags the worker it is for and keeps honest ones."""
import numpy as np
import pytest

from analysis.rating_models import simulate_ratings
from analysis.rating_screening import RULES, ScreeningOptions, bt500_counts, correlation_with_others, screen_ratings


def honest_study(seed=0, n_stimuli=40, n_workers=24):
    """Honest workers on a wide range of qualities (every one correlates well above 0.75 with the others)."""
    return simulate_ratings(n_stimuli, n_workers, quality_sd=1.3, bias_sd=0.2, inconsistency_range=(0.2, 0.5),
                            seed=seed)


def screen(stimulus, worker, rating, J, W, **kwargs):
    return screen_ratings(stimulus, worker, rating, J, W, 1.0, 5.0, **kwargs)


def test_honest_workers_pass_every_rule():
    sim = honest_study()
    result = screen(sim.stimulus, sim.worker, sim.rating, 40, 24)
    assert result.kept.all(), {rule: np.flatnonzero(f).tolist() for rule, f in result.flags.items()}
    assert (result.statistics["correlation"] > 0.75).all()


def test_straight_liners_are_flagged_by_their_rule_alone():
    sim = simulate_ratings(40, 24, quality_sd=1.3, inconsistency_range=(0.2, 0.5), straight_liners=0.125, seed=1)
    result = screen(sim.stimulus, sim.worker, sim.rating, 40, 24)
    straight = sim.worker_type == "straight"
    assert straight.sum() == 3
    assert (result.flags["straight_liner"] == straight).all()
    assert np.isnan(result.statistics["correlation"][straight]).all()   # no spread: no correlation
    assert (result.kept == ~straight).all()


def test_careless_workers_fail_the_careless_rule_and_vqeg_s_fixed_correlation_rule():
    sim = simulate_ratings(40, 24, quality_sd=1.3, inconsistency_range=(0.2, 0.5), careless=0.125, seed=2)
    result = screen(sim.stimulus, sim.worker, sim.rating, 40, 24)
    careless = sim.worker_type == "careless"
    assert (result.flags["careless"] == careless).all()
    assert (result.kept == ~careless).all()
    # the default correlation test flags only a significantly negative correlation; VQEG's r < 0.75 is alpha 0.5
    assert not result.flags["correlation"].any()
    vqeg = screen(sim.stimulus, sim.worker, sim.rating, 40, 24,
                  options=ScreeningOptions(correlation_threshold=0.75, correlation_alpha=0.5))
    assert (vqeg.flags["correlation"] == careless).all()
    np.testing.assert_allclose(vqeg.statistics["correlation_bound"], vqeg.statistics["correlation"])


def test_the_correlation_leaves_the_worker_out_of_the_mos():
    # two workers: each one's correlation is with the other alone
    stimulus = np.array([0, 1, 2, 3, 4, 0, 1, 2, 3, 4])
    worker = np.repeat([0, 1], 5)
    rating = np.array([1, 2, 3, 4, 5, 5, 4, 3, 2, 1], float)
    np.testing.assert_allclose(correlation_with_others(stimulus, worker, rating, 5, 2), [-1.0, -1.0])
    assert np.isnan(correlation_with_others(stimulus, worker, rating, 5, 2, min_common=6)).all()


@pytest.mark.parametrize("seed", range(3))
def test_bt500_rejects_a_worker_who_is_often_far_off_in_both_directions(seed):
    sim = simulate_ratings(60, 30, quality_sd=1.0, bias_sd=0.2, inconsistency_range=(0.3, 0.6), seed=seed)
    rating = sim.rating.copy()
    rogue = sim.worker == 0
    # worker 0 answers two points above the (rounded) truth on even stimuli and two below on odd ones
    truth = np.round(sim.true_quality[sim.stimulus[rogue]])
    sign = np.where(sim.stimulus[rogue] % 2 == 0, 1.0, -1.0)
    sign = np.where(truth + 2 * sign > 5, -1.0, np.where(truth + 2 * sign < 1, 1.0, sign))
    rating[rogue] = truth + 2 * sign
    P, Q, rejected = bt500_counts(sim.stimulus, sim.worker, rating, 60, 30)
    assert np.flatnonzero(rejected).tolist() == [0]
    assert (P[0] + Q[0]) / 60 > 0.05 and abs(P[0] - Q[0]) / (P[0] + Q[0]) < 0.3
    result = screen(sim.stimulus, sim.worker, rating, 60, 30, options=ScreeningOptions(rules=("bt500",)))
    assert np.flatnonzero(~result.kept).tolist() == [0] and result.reasons(0) == ["bt500"]


def test_bt500_counts_by_hand():
    # beta2 = 2 / 0.8^2 = 3.125, normal: bounds mean +/- 2 s, s = sqrt(16 / 19) = 0.918, so 5 and 1 count
    normal = np.array([1.0] + [2.0] * 4 + [3.0] * 10 + [4.0] * 4 + [5.0])
    P, Q, rejected = bt500_counts(np.zeros(20, dtype=int), np.arange(20), normal, 1, 20)
    assert P.tolist() == [0] * 19 + [1] and Q.tolist() == [1] + [0] * 19
    assert not rejected.any()          # one-sided for each worker: |P - Q| / (P + Q) = 1
    # the same worker at both ends of two such stimuli is two-sided, and rejected
    stimulus, worker = np.repeat([0, 1], 20), np.concatenate([np.arange(20), np.arange(20)[::-1]])
    P, Q, rejected = bt500_counts(stimulus, worker, np.tile(normal, 2), 2, 20)
    assert (P[0], Q[0], P[19], Q[19]) == (1, 1, 1, 1) and rejected.tolist() == [True] + [False] * 18 + [True]
    # one far-off rating among agreeing ones: beta2 > 4, the bound widens to sqrt(20) s and it does not count
    peaked = np.array([3.0] * 10 + [4.0] * 10 + [1.0])
    m2 = np.mean((peaked - peaked.mean()) ** 2)
    assert np.mean((peaked - peaked.mean()) ** 4) / m2 ** 2 > 4
    P, Q, _ = bt500_counts(np.zeros(21, dtype=int), np.arange(21), peaked, 1, 21)
    assert P.sum() == Q.sum() == 0


def test_gold_rule_uses_the_answer_ranges():
    sim = honest_study(seed=4)
    gold_worker = np.repeat(np.arange(24), 4)
    gold_rating = np.full(96, 5.0)
    gold_rating[gold_worker == 7] = [5.0, 1.0, 1.0, 2.0]           # one of four inside [4, 5]
    result = screen(sim.stimulus, sim.worker, sim.rating, 40, 24, gold_worker=gold_worker,
                    gold_rating=gold_rating, gold_low=np.full(96, 4.0), gold_high=np.full(96, 5.0))
    assert np.flatnonzero(result.flags["gold"]).tolist() == [7]
    assert result.statistics["gold_accuracy"][7] == 0.25 and result.statistics["gold_accuracy"][0] == 1.0
    assert result.reasons(7) == ["gold"]


def test_hidden_reference_rule_flags_a_worker_who_rates_references_below_bad_stimuli():
    sim = honest_study(seed=5)
    reference = sim.true_quality >= np.sort(sim.true_quality)[-4]     # the four best are the references
    rating = sim.rating.copy()
    inverted = sim.worker == 3
    rating[inverted] = 6.0 - rating[inverted]
    hidden = reference[sim.stimulus]
    result = screen(sim.stimulus, sim.worker, rating, 40, 24, hidden_reference=hidden,
                    options=ScreeningOptions(rules=("hidden_reference",)))
    assert np.flatnonzero(result.flags["hidden_reference"]).tolist() == [3]
    assert result.statistics["hidden_reference_mean"][3] < result.statistics["impaired_mean"][3]
    assert result.kept.sum() == 23


def test_rules_switched_off_still_report_but_keep():
    sim = simulate_ratings(40, 24, quality_sd=1.3, inconsistency_range=(0.2, 0.5), straight_liners=0.125, seed=1)
    result = screen(sim.stimulus, sim.worker, sim.rating, 40, 24, options=ScreeningOptions(rules=()))
    assert result.kept.all() and result.flags["straight_liner"].sum() == 3
    assert set(result.summary()["flagged"]) == set(RULES)
    with pytest.raises(ValueError, match="unknown screening rule"):
        ScreeningOptions(rules=("kurtosis",))


def test_fisher_z_bound_and_shared_stimuli_by_hand():
    from analysis.rating_screening import correlation_upper_bound, shared_stimuli

    # r = 0.5 over 12 pairs: tanh(atanh(0.5) + 1.6449 / 3) = tanh(1.0976) = 0.7996; alpha 0.5 is r itself; k = 3: none
    np.testing.assert_allclose(correlation_upper_bound(np.array([0.5]), np.array([12])), [0.79963], atol=1e-4)
    np.testing.assert_allclose(correlation_upper_bound(np.array([0.5]), np.array([12]), 0.5), [0.5])
    assert np.isnan(correlation_upper_bound(np.array([0.5]), np.array([3]))).all()
    stimulus, worker = np.array([0, 1, 2, 0, 3]), np.array([0, 0, 0, 1, 1])
    assert shared_stimuli(stimulus, worker, 4, 2).tolist() == [1, 1]


def test_the_careless_rule_needs_more_evidence_from_fewer_ratings():
    from analysis.rating_screening import careless_mixture

    # 30 honest workers rating all 40 stimuli; two more workers answer at random, one 40 times, one 6 times
    sim = simulate_ratings(40, 30, quality_sd=0.8, inconsistency_range=(0.4, 0.8), seed=3)
    rng = np.random.default_rng(3)
    stimulus = np.concatenate([sim.stimulus, np.arange(40), np.arange(6)])
    worker = np.concatenate([sim.worker, np.full(40, 30), np.full(6, 31)])
    rating = np.concatenate([sim.rating, rng.integers(1, 6, 46).astype(float)])
    m = careless_mixture(stimulus, worker, rating, 40, 32, 1.0, 5.0)
    assert m.posterior[30] > 0.99 and (m.posterior[:30] < 0.5).all()
    assert abs(m.llr[31]) < abs(m.llr[30])             # six ratings say less than forty
    assert 0.4 < m.honest_sd < 0.9 and m.careless_sd > 1.4 and 0.85 < m.honest_share < 1
    # a slider's careless rater is uniform on the continuous range: (high - low)^2 / 12 instead of (K^2 - 1) / 12
    continuous = careless_mixture(stimulus, worker, rating + 0.01, 40, 32, 1.0, 5.0)
    assert continuous.careless_sd < m.careless_sd


def test_moderated_variances_pool_alike_variances_and_never_give_zero():
    from analysis.ratings import moderated_t_halfwidths, moderated_variances

    rng = np.random.default_rng(0)
    variance = rng.chisquare(9, 200) / 9 * 0.5       # 200 stimuli, true variance 0.5, 9 df each
    variance[0] = 0.0                                 # five equal ratings
    posterior, df, s0, d0 = moderated_variances(variance, np.full(200, 9.0))
    assert abs(s0 - 0.5) < 0.05 and d0 > 50 and posterior[0] > 0.4 and (df > 59).all()
    assert (moderated_t_halfwidths(np.full(200, 10), variance) > 0).all()
