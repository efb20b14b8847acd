"""Workers tied on TPR at the cut of iterative screening are kept or dropped together."""
from itertools import combinations

import numpy as np
import pytest

from analysis.formats import build_votes
from analysis.scaling import ScalingOptions
from analysis.screening import _select_fraction, screen_workers
from analysis.simulate import simulate_study

ITEMS = [f"i{k}" for k in range(6)]  # consensus order: i0 best ... i5 worst
PAIRS = list(combinations(range(6), 2))  # 15 pairs; in each, the lower index is the better item


def _tied_study():
    """Three groups of workers who each answer all 15 pairs.

    A (4 workers) always agree with the consensus (TPR 1); B (3 workers) answer identically and reverse
    the 5 neighbouring pairs (TPR 10/15); C (2 workers) answer identically and reverse 8 of the other
    pairs (TPR 7/15). B and C reverse different pairs, so every pair keeps a majority for the
    consensus and the scale follows it. Votes: A 60, B 45, C 30 of 135.
    """
    neighbours = {p for p, (a, b) in enumerate(PAIRS) if b == a + 1}
    others = sorted(set(range(len(PAIRS))) - neighbours)
    groups = {"A": (4, set()), "B": (3, neighbours), "C": (2, set(others[:8]))}
    rows = []
    for name, (size, reversed_pairs) in groups.items():
        for k in range(size):
            for p, (a, b) in enumerate(PAIRS):
                winner = b if p in reversed_pairs else a
                rows.append((f"{name}{k}", "s", ITEMS[a], ITEMS[b], ITEMS[winner]))
    return rows


def _votes(rows, rename=None, order=None):
    rows = [rows[i] for i in order] if order is not None else rows
    rename = rename or (lambda w: w)
    columns = list(zip(*rows))
    return build_votes([rename(w) for w in columns[0]], *columns[1:])


def _kept_ids(votes, result, rename_back=None):
    back = rename_back or (lambda w: w)
    return sorted(back(str(w)) for w in votes.worker_ids[result.kept])


def test_select_fraction_keeps_every_worker_tied_at_the_cut():
    tpr = np.array([0.9, 0.8, 0.8, 0.8, 0.6])
    n = np.array([10, 10, 30, 10, 10])
    # 50 % of 70 votes = 35: the 0.9 worker (10) is short, so the whole 0.8 level (50 more) comes in,
    # not just its biggest member (which alone would reach the target).
    assert _select_fraction(tpr, n, np.ones(5, bool), 0.5).tolist() == [True, True, True, True, False]
    # When the higher levels reach the target the tied level goes as a whole.
    assert _select_fraction(tpr, n, np.ones(5, bool), 0.1).tolist() == [True, False, False, False, False]
    # Ineligible workers are never kept, even when tied with kept ones.
    eligible = np.array([True, True, False, True, True])
    assert _select_fraction(tpr, n, eligible, 0.5).tolist() == [True, True, False, True, False]
    assert not _select_fraction(tpr, n, np.zeros(5, bool), 0.5).any()


def test_select_fraction_does_not_depend_on_worker_order(rng):
    tpr = rng.choice([0.55, 0.6, 0.7, 0.75, 0.9], size=40)  # many exact ties
    n = rng.integers(5, 40, size=40)
    eligible = rng.random(40) < 0.9
    for fraction in (0.3, 0.5, 0.6, 0.8):
        kept = _select_fraction(tpr, n, eligible, fraction)
        # Whole TPR levels: every eligible worker with a TPR above the lowest kept one is kept.
        assert (kept == (eligible & (tpr >= tpr[kept].min()))).all()
        # Dropping the lowest kept level would fall short of the target.
        below = n[kept & (tpr > tpr[kept].min())].sum()
        assert below < fraction * n[eligible].sum() <= n[kept].sum()
        for _ in range(3):
            perm = rng.permutation(40)
            assert (_select_fraction(tpr[perm], n[perm], eligible[perm], fraction) == kept[perm]).all()


def test_screening_keeps_tied_workers_together():
    votes = _votes(_tied_study())
    result = screen_workers(votes, ScalingOptions(), keep=0.6, gold_threshold=None)
    tpr = dict(zip(votes.worker_ids, result.tpr))
    assert tpr["A0"] == 1.0 and tpr["B0"] == tpr["B1"] == tpr["B2"] == pytest.approx(10 / 15)
    assert tpr["C0"] == tpr["C1"] == pytest.approx(7 / 15)
    # 60 % of 135 votes = 81: A has 60, so B's level is needed, and all three B workers come in together
    # (A and two of B, 90 votes, would reach the target too: a tie-break by ID or votes would pick two).
    assert _kept_ids(votes, result) == ["A0", "A1", "A2", "A3", "B0", "B1", "B2"]
    assert result.kept_vote_fraction == pytest.approx(105 / 135)
    assert result.converged and result.threshold_tpr == pytest.approx(10 / 15)
    # The minimum-TPR rule keeps a TPR equal to its threshold.
    at_threshold = screen_workers(votes, ScalingOptions(), min_tpr=result.threshold_tpr, gold_threshold=None)
    assert (at_threshold.kept == result.kept).all()


@pytest.mark.parametrize("keep", [0.6, 0.45, 0.9])
def test_tied_screening_ignores_row_order_and_worker_ids(keep, rng):
    rows = _tied_study()
    expected = _kept_ids(_votes(rows), screen_workers(_votes(rows), ScalingOptions(), keep=keep,
                                                      gold_threshold=None))
    # Renaming reverses the workers' ID order (B2 sorts before B0), and the rows are shuffled.
    rename = {w: f"{w[0]}{9 - int(w[1:])}" for w in {r[0] for r in rows}}
    back = {v: k for k, v in rename.items()}
    for _ in range(3):
        votes = _votes(rows, rename.get, rng.permutation(len(rows)))
        result = screen_workers(votes, ScalingOptions(), keep=keep, gold_threshold=None)
        assert _kept_ids(votes, result, back.get) == expected


@pytest.mark.parametrize("keep", ["auto", 0.6])
def test_simulated_screening_ignores_row_order_and_worker_ids(keep, rng):
    study = simulate_study(n_sets=2, n_items=20, degree=4, votes_per_pair=8, n_workers=30,
                           random_clickers=0.3, left_clickers=0.0, seed=11)
    v = study.votes
    rows = list(zip(v.worker_ids[v.worker], v.set_ids[v.vote_set], v.item_ids[v.item_a], v.item_ids[v.item_b],
                    np.where(v.a_won, v.item_ids[v.item_a], v.item_ids[v.item_b])))
    expected = _kept_ids(_votes(rows), screen_workers(_votes(rows), ScalingOptions(), keep=keep))
    rename = {w: f"Z{999 - k:03d}" for k, w in enumerate(sorted({r[0] for r in rows}))}
    back = {v: k for k, v in rename.items()}
    votes = _votes(rows, rename.get, rng.permutation(len(rows)))
    assert _kept_ids(votes, screen_workers(votes, ScalingOptions(), keep=keep), back.get) == expected
