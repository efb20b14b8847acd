"""Pair designs: random regular, banded, full, gold pairs."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from stimuli.designs import (GoldPair, banded_design, full_design, gold_pairs, is_connected,
                             random_regular_design)


def _assert_canonical(pairs: np.ndarray) -> None:
    assert pairs.ndim == 2 and pairs.shape[1] == 2
    assert np.all(pairs[:, 0] < pairs[:, 1])
    assert len({tuple(p) for p in pairs.tolist()}) == len(pairs), "repeated pair"
    order = np.lexsort((pairs[:, 1], pairs[:, 0]))
    np.testing.assert_array_equal(order, np.arange(len(pairs)))


@pytest.mark.parametrize("n_items, degree", [(155, 6), (20, 3), (10, 4), (8, 7), (50, 2)])
def test_random_regular_design_is_regular_connected_and_simple(n_items, degree):
    pairs = random_regular_design(n_items, degree, seed=11)
    _assert_canonical(pairs)
    assert len(pairs) == n_items * degree // 2
    np.testing.assert_array_equal(np.bincount(pairs.ravel(), minlength=n_items), degree)
    assert is_connected(pairs, n_items)


def test_random_regular_design_is_reproducible_by_seed():
    np.testing.assert_array_equal(random_regular_design(40, 6, seed=3), random_regular_design(40, 6, seed=3))
    np.testing.assert_array_equal(random_regular_design(40, 6, seed=np.random.default_rng(3)),
                                  random_regular_design(40, 6, seed=3))
    assert not np.array_equal(random_regular_design(40, 6, seed=3), random_regular_design(40, 6, seed=4))


@pytest.mark.parametrize("n_items, degree, word", [(9, 3, "even"), (6, 6, "more than"), (5, 9, "more than"),
                                                   (10, 1, "never connected")])
def test_random_regular_design_errors(n_items, degree, word):
    with pytest.raises(ValueError, match=word):
        random_regular_design(n_items, degree, seed=0)


def test_banded_design_matches_the_jpeg_experiment():
    pairs = banded_design(13, 6)
    _assert_canonical(pairs)
    assert len(pairs) == 57  # StudyMB 2.0: 57 pairs (I_k, I_l) with |k - l| <= 6
    expected = {(k, l) for k in range(13) for l in range(k + 1, 13) if l - k <= 6}
    assert {tuple(p) for p in pairs.tolist()} == expected


def test_banded_design_edge_cases():
    np.testing.assert_array_equal(banded_design(5, 1), [[0, 1], [1, 2], [2, 3], [3, 4]])
    np.testing.assert_array_equal(banded_design(6, 5), full_design(6))
    np.testing.assert_array_equal(banded_design(6, 50), full_design(6))
    for n, d in [(1, 1), (5, 0)]:
        with pytest.raises(ValueError):
            banded_design(n, d)


def test_gold_pairs_from_known_bad_items():
    good, bad = [f"g{i}" for i in range(6)], ["blur", "noise"]
    pairs = gold_pairs(good, bad, n_pairs=12, seed=5)
    assert len(pairs) == 12
    for pair in pairs:
        assert isinstance(pair, GoldPair)
        assert pair.better in good and pair.worse in bad
        assert {pair.item_a, pair.item_b} == {pair.better, pair.worse}
    assert set(Counter(p.better for p in pairs).values()) == {2}   # every good item twice
    assert set(Counter(p.worse for p in pairs).values()) == {6}    # bad items used evenly
    sides = Counter(p.better == p.item_a for p in pairs)
    assert sides[True] > 0 and sides[False] > 0                    # correct answer on both sides
    assert gold_pairs(good, bad, n_pairs=12, seed=5) == pairs       # reproducible


def test_gold_pairs_from_degrade_callable():
    pairs = gold_pairs(["a", "b", "c"], degrade=lambda item: f"{item}-degraded", seed=0)
    assert sorted(p.better for p in pairs) == ["a", "b", "c"]
    assert all(p.worse == f"{p.better}-degraded" for p in pairs)


def test_gold_pairs_errors():
    with pytest.raises(ValueError, match="exactly one"):
        gold_pairs(["a"])
    with pytest.raises(ValueError, match="exactly one"):
        gold_pairs(["a"], ["b"], degrade=str.upper)
    with pytest.raises(ValueError, match="both good and bad"):
        gold_pairs(["a", "b"], ["b"])
    with pytest.raises(ValueError, match="itself"):
        gold_pairs(["a"], degrade=lambda item: item)
    with pytest.raises(ValueError):
        gold_pairs([], ["b"])
