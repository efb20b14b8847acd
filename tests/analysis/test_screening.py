import numpy as np
import pytest

from analysis.formats import build_votes
from analysis.scaling import ScalingOptions
from analysis.screening import _select_fraction, gold_accuracy, screen_workers, worker_tpr
from analysis.simulate import simulate_study


@pytest.fixture(scope="module")
def study():
    return simulate_study(n_sets=3, n_items=40, degree=6, votes_per_pair=12, n_workers=60,
                          random_clickers=0.25, left_clickers=0.05, seed=7)


def test_auto_rule_removes_injected_clickers_and_keeps_honest_workers(study):
    result = screen_workers(study.votes, ScalingOptions(), keep="auto")
    honest = study.honest_mask
    assert not (result.kept & ~honest).any(), "a random or left clicker was kept"
    assert (result.kept & honest).sum() >= 0.95 * honest.sum()
    assert result.converged and result.iterations >= 2
    assert 0.5 < result.honest_share < 0.9
    assert result.kept_vote_fraction == pytest.approx(result.n_votes[result.kept].sum() / result.n_votes.sum())


def test_fixed_fraction_keeps_the_target_share_of_votes(study):
    result = screen_workers(study.votes, ScalingOptions(), keep=0.6)
    assert result.rule == "fraction" and result.target_fraction == 0.6
    assert 0.6 <= result.kept_vote_fraction < 0.6 + result.n_votes.max() / result.n_votes.sum()
    removed_tpr, kept_tpr = result.tpr[~result.kept & (result.n_votes > 0)], result.tpr[result.kept]
    assert kept_tpr.min() >= removed_tpr.max() - 1e-12  # dropped workers are the lowest-TPR ones
    assert result.threshold_tpr == pytest.approx(kept_tpr.min())


def test_min_tpr_rule(study):
    result = screen_workers(study.votes, ScalingOptions(), min_tpr=0.65)
    assert (result.tpr[result.kept] >= 0.65).all()
    assert not (result.kept & ~study.honest_mask).any()


def test_no_screening_keeps_everyone(study):
    result = screen_workers(study.votes, ScalingOptions(), keep="none")
    assert result.kept.all() and result.iterations == 0


def test_select_fraction_takes_highest_tpr_until_target():
    tpr = np.array([0.9, 0.5, 0.8, 0.7])
    n = np.array([10, 10, 10, 10])
    kept = _select_fraction(tpr, n, np.ones(4, bool), 0.5)
    assert kept.tolist() == [True, False, True, False]


def test_tpr_counts_agreement_with_the_scale_order():
    v = build_votes(["w1", "w1", "w2", "w2"], ["s"] * 4, ["a", "b", "a", "a"], ["b", "c", "c", "b"],
                    ["a", "c", "a", "b"])
    scale = np.array([2.0, 1.0, 0.0])  # a > b > c
    assert worker_tpr(v, scale, np.ones(4, bool)).tolist() == [0.5, 0.5]


def test_gold_screening_excludes_workers_below_threshold(study):
    v = study.votes
    rng = np.random.default_rng(0)
    workers = np.repeat(v.worker_ids[:10], 10)
    correct = np.ones(100, dtype=bool)
    correct[:10] = rng.random(10) < 0.5  # worker 0 guesses on gold questions
    correct[:4] = False
    gold = build_votes(
        np.concatenate([v.worker_ids[v.worker], workers]),
        np.concatenate([v.set_ids[v.vote_set], np.full(100, v.set_ids[0])]),
        np.concatenate([v.item_ids[v.item_a], np.full(100, "reference")]),
        np.concatenate([v.item_ids[v.item_b], np.full(100, "degraded")]),
        np.concatenate([v.item_ids[v.winner], np.where(correct, "reference", "degraded")]),
        is_gold=np.concatenate([np.zeros(len(v), bool), np.ones(100, bool)]),
        gold_winner=np.concatenate([np.full(len(v), ""), np.full(100, "reference")]))
    accuracy = gold_accuracy(gold)
    first = list(gold.worker_ids).index(v.worker_ids[0])
    assert accuracy[first] < 0.7
    result = screen_workers(gold, ScalingOptions(), keep="none")
    assert result.gold_failed[first] and not result.kept[first]
    assert result.gold_failed.sum() == 1
    assert np.isnan(accuracy).sum() == len(gold.worker_ids) - 10


def test_checks_on_real_votes_are_scored_and_still_scaled(study):
    """A gold trial of a design pair is a real vote with a ``gold_winner``: gold screening scores it, and the
    scaling keeps it (it is not an ``is_gold`` row)."""
    v = study.votes
    first = v.worker == 0
    # Worker 0's votes become checks whose known answer is always the loser: 0 % accuracy.
    known = np.where(first, v.item_ids[v.loser], "")
    checked = build_votes(v.worker_ids[v.worker], v.set_ids[v.vote_set], v.item_ids[v.item_a], v.item_ids[v.item_b],
                          v.item_ids[v.winner], is_gold=np.zeros(len(v), bool), gold_winner=known)
    accuracy = gold_accuracy(checked)
    assert accuracy[0] == 0.0 and np.isnan(accuracy[1:]).all()
    result = screen_workers(checked, ScalingOptions(), keep="none", gold_threshold=0.7)
    assert result.gold_failed.tolist() == [True] + [False] * (len(v.worker_ids) - 1)
    assert result.n_votes[0] == first.sum()  # its votes are scaling votes: counted as such, not dropped as gold
