import numpy as np
import pytest

from analysis.bootstrap import bootstrap_sets, item_workers, ranks_descending
from analysis.ranking import overall_scores, pareto_groups, rerank
from analysis.scaling import ScalingOptions, fit_set, reported, set_designs
from analysis.simulate import simulate_study


@pytest.fixture(scope="module")
def honest():
    return simulate_study(n_sets=2, n_items=30, degree=6, votes_per_pair=15, n_workers=40,
                          random_clickers=0, left_clickers=0, seed=3)


@pytest.mark.parametrize("unit", ["worker", "vote"])
def test_bootstrap_intervals_cover_the_estimate_and_are_seeded(honest, unit):
    v, options = honest.votes, ScalingOptions()
    designs = set_designs(v)
    raws = [fit_set(d, options) for d in designs]
    kept = np.ones(len(v.worker_ids), bool)
    a = bootstrap_sets(designs, raws, options, v.worker, kept, n_boot=200, unit=unit, seed=1, progress=False)
    b = bootstrap_sets(designs, raws, options, v.worker, kept, n_boot=200, unit=unit, seed=1, progress=False)
    for d, raw, iv, iv2 in zip(designs, raws, a, b):
        value = reported(raw, d, options)
        assert np.array_equal(iv.samples, iv2.samples)
        assert (iv.scale_low <= value + 1e-9).mean() > 0.9 and (iv.scale_high >= value - 1e-9).mean() > 0.9
        assert (iv.scale_high - iv.scale_low > 0).all()
        assert (iv.rank_low <= iv.rank_high).all() and iv.rank_low.min() == 1


def test_worker_resample_wins_are_the_drawn_workers_votes(honest):
    """A resample's win counts (a product with each worker's outcomes) count every vote of each
    drawn worker as often as the worker was drawn, against the set's pairs and winners."""
    v = honest.votes
    rng = np.random.default_rng(4)
    for design in set_designs(v):
        counts = rng.integers(0, 3, (5, len(v.worker_ids))).astype(float)
        wins = design.wins_batch(counts, design.outcomes(v.worker[design.votes], len(v.worker_ids)))
        for b in range(len(counts)):
            per_vote = counts[b, v.worker[design.votes]]  # each vote as often as its worker was drawn
            first = np.bincount(design.vote_pair, per_vote * design.first_won, len(design.pairs))
            second = np.bincount(design.vote_pair, per_vote * ~design.first_won, len(design.pairs))
            assert np.array_equal(wins[b], np.column_stack([first, second]))
        assert np.array_equal(design.wins_batch(np.ones((1, len(design.votes))))[0], design.wins())


def test_worker_resampling_is_wider_than_vote_resampling_with_heterogeneous_workers():
    study = simulate_study(n_sets=1, n_items=30, degree=6, votes_per_pair=15, n_workers=30,
                           random_clickers=0.3, left_clickers=0, activity_sd=1.0, seed=5)
    v, options = study.votes, ScalingOptions(anchors=False)
    designs = set_designs(v)
    raws = [fit_set(d, options) for d in designs]
    kept = np.ones(len(v.worker_ids), bool)
    width = {}
    for unit in ("worker", "vote"):
        iv = bootstrap_sets(designs, raws, options, v.worker, kept, n_boot=300, unit=unit, seed=2, progress=False)[0]
        width[unit] = np.median(iv.scale_high - iv.scale_low)
    assert width["worker"] > width["vote"]


def test_ranks_descending_gives_one_to_the_best():
    assert ranks_descending(np.array([0.2, 0.9, 0.5])).tolist() == [3, 1, 2]


def test_overall_scores_average_over_sets():
    rows = overall_scores({"s1": {"a": 0.2, "b": 0.8}, "s2": {"a": 0.6, "b": 0.4, "c": 1.0}})
    by_id = {r["item_id"]: r for r in rows}
    assert by_id["a"]["mean_scale"] == pytest.approx(0.4) and by_id["b"]["mean_scale"] == pytest.approx(0.6)
    assert by_id["c"]["n_sets"] == 1 and by_id["c"]["rank"] == 1
    assert [r["item_id"] for r in rows] == ["c", "b", "a"]


def test_rerank_rank_differences_and_correlation():
    overall = overall_scores({"s": {"a": 0.9, "b": 0.5, "c": 0.4, "d": 0.1, "e": 0.05}})
    rmse = {"a": 3.0, "b": 1.0, "c": 2.0, "d": 4.0, "e": 5.0}  # lower is better
    result = rerank(overall, rmse, lower_is_better=True, n_boot=200)
    diff = {r["item_id"]: r["rank_difference"] for r in result.rows}
    assert diff == {"a": 2, "b": -1, "c": -1, "d": 0, "e": 0}
    assert result.srocc["srocc"] == pytest.approx(0.7)
    low, high = result.srocc["fisher_ci"]
    assert low < 0.7 < high


def test_pareto_groups_follow_dominance(rng):
    scores = rng.normal(size=(60, 3))
    groups = pareto_groups(scores)
    dominates = lambda p, q: (scores[p] >= scores[q]).all() and (scores[p] > scores[q]).any()  # noqa: E731
    for q in range(60):
        same = np.flatnonzero(groups == groups[q])
        assert not any(dominates(p, q) for p in same)  # a group is an antichain
        if groups[q] > 1:  # eq. (18): dominated by some member of the previous group
            assert any(dominates(p, q) for p in np.flatnonzero(groups == groups[q] - 1))
    assert (pareto_groups(-scores, higher_is_better=False) == groups).all()


def test_ranks_descending_matches_scipy_min_ranks_with_ties():
    from scipy.stats import rankdata

    rng = np.random.default_rng(5)
    values = rng.integers(0, 6, size=(50, 17)).astype(float)   # many ties
    assert (ranks_descending(values) == rankdata(-values, method="min", axis=-1)).all()
    assert list(ranks_descending(np.array([0.3, 0.9, 0.3, 0.1]))) == [2, 1, 2, 4]


def test_item_workers_counts_each_kept_worker_once_per_item(honest):
    # item_workers finds the distinct (item, worker) keys by sorting (np.unique's hash table is slow on
    # millions of keys); the counts must be those of the distinct pairs, counted one vote at a time.
    v = honest.votes
    kept = np.arange(len(v.worker_ids)) % 3 != 0
    for design in set_designs(v):
        seen = [set() for _ in range(design.n_items)]
        for vote, pair in zip(design.votes, design.vote_pair):
            if kept[v.worker[vote]]:
                for item in design.pairs[pair]:
                    seen[item].add(int(v.worker[vote]))
        counts = item_workers(design, v.worker, kept)
        assert counts.tolist() == [len(s) for s in seen]
        assert counts.max() > 1 and counts.sum() < 2 * kept[v.worker[design.votes]].sum()  # repeats collapsed
