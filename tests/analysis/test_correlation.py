import numpy as np
import pytest
from scipy import stats

from analysis.correlation import bootstrap_srocc, correlate, fisher_ci, krocc, plcc, srocc


def test_correlations_match_scipy(rng):
    x = rng.normal(size=50)
    y = x + rng.normal(size=50)
    assert srocc(x, y) == pytest.approx(stats.spearmanr(x, y).statistic)
    assert plcc(x, y) == pytest.approx(stats.pearsonr(x, y).statistic)
    assert krocc(x, y) == pytest.approx(stats.kendalltau(x, y).statistic)


def test_fisher_interval_formula():
    low, high = fisher_ci(0.598, 141, 0.95)
    half = 1.959963984540054 / np.sqrt(138)
    assert low == pytest.approx(np.tanh(np.arctanh(0.598) - half))
    assert high == pytest.approx(np.tanh(np.arctanh(0.598) + half))
    assert low < 0.598 < high
    assert np.isnan(fisher_ci(0.5, 3)[0])


def test_correlate_reports_disagreement(rng):
    x = np.arange(20.0)
    c = correlate(x, x[::-1], "srocc")
    assert c.r == pytest.approx(-1.0) and c.disagreement == pytest.approx(2.0)


def test_bootstrap_srocc_is_seeded_and_brackets(rng):
    x = rng.normal(size=80)
    y = x + rng.normal(scale=0.8, size=80)
    a, b = bootstrap_srocc(x, y, 500, seed=3), bootstrap_srocc(x, y, 500, seed=3)
    assert a == b
    assert a.percentile_low < a.srocc < a.percentile_high
    assert a.fisher_low < a.mean < a.fisher_high


def test_nan_pairs_are_ignored():
    assert srocc([1, 2, np.nan, 4], [1, 2, 3, 4]) == pytest.approx(1.0)
