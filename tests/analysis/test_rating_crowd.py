"""On simulated crowds (tests/analysis/crowd_support.py) the default screening keeps the honest raters and drops the
careless ones, and the intervals cover their stated estimands, never of zero width, never outside the scale.

Thresholds. Over 30 seeds (``crowd_figures(seeds=range(10, 40))``) the defaults kept 97.2 % of the honest workers,
dropped 98.8 % of the careless ones, and covered 94.7 % (MOS) and 95.6 % (P.913). The tests hold 12 other seeds
(720 intervals a model; measured 97.1 %, 97.9 %, 93.8 % and 96.1 %): a coverage's Monte Carlo SE there is about
0.008 (the stimuli of a study share their workers, so a little more), so the band 0.93-0.97 is about 2 SE either
side of the rates measured over 30 seeds. On honest workers alone the MOS interval covers 94.6 % (40 seeds): the
rest of its shortfall is the few careless workers the screening keeps. Screening: at
least 95 % of the honest kept (the issue asks 90 %: an analysis that drops one honest worker in ten wastes a tenth of
the budget) and at least 90 % of the careless dropped (the issue asks 80 %: a careless worker left in pulls the MOS
toward the scale's middle; the coverage test is what bounds their harm). Harder shapes (a quality range of one
point, or a single page per worker) hold the issue's 90 % and 80 %.
"""
import numpy as np
import pytest

from analysis.rating_report import RatingOptions, analyze_ratings
from analysis.rating_screening import ScreeningOptions
from analysis.ratings import FEWER_THAN_TWO, build_ratings, mos_scores
from tests.analysis.crowd_support import crowd_figures, expected_rating, simulate_crowd

SEEDS = range(12)
BAND = (0.93, 0.97)


@pytest.fixture(scope="module")
def figures():
    return crowd_figures(seeds=SEEDS)


def test_the_default_screening_keeps_honest_raters_and_drops_careless_ones(figures):
    assert figures["honest_kept"] >= 0.95, figures
    assert figures["careless_dropped"] >= 0.90, figures


def test_mos_and_p913_intervals_cover_their_estimands(figures):
    assert BAND[0] <= figures["coverage_mos"] <= BAND[1], figures
    assert BAND[0] <= figures["coverage_p913"] <= BAND[1], figures


def test_no_interval_is_of_zero_width_or_outside_the_scale(figures):
    assert figures["intervals"] == 2 * 60 * len(SEEDS)     # every stimulus has an interval here
    assert figures["zero_width"] == 0 and figures["outside_scale"] == 0, figures


@pytest.mark.parametrize("shape", [{"quality_range": (2.5, 3.5)}, {"pages": (1,)}])
def test_harder_crowds_still_keep_nine_honest_workers_in_ten(shape):
    f = crowd_figures(seeds=range(3), **shape)
    assert f["honest_kept"] >= 0.90 and f["careless_dropped"] >= 0.80, f


def test_vqeg_s_fixed_correlation_rule_fails_the_same_crowds():
    # The test has the power to reject the old default (r < 0.75 flags): it keeps about half of the honest workers.
    old = RatingOptions(screening=ScreeningOptions(rules=("bt500", "correlation", "straight_liner", "gold",
                                                          "hidden_reference"),
                                                   correlation_threshold=0.75, correlation_alpha=0.5))
    f = crowd_figures(old, seeds=range(2))
    assert f["honest_kept"] < 0.7, f


def test_the_mos_estimand_is_the_expected_rounded_rating():
    # A quality at a scale point, far from the ends, is its own expected rating (rounding is symmetric there).
    assert expected_rating(np.array([3.0]), 0.3, (0.4, 0.9))[0] == pytest.approx(3.0, abs=1e-12)
    # Near the top the clipping pulls the expectation below the latent quality.
    assert expected_rating(np.array([4.8]), 0.3, (0.4, 0.9))[0] < 4.7
    sim = simulate_crowd(0, n_workers=4000, careless=0.0, n_stimuli=12, pages=(1,))
    mean = np.bincount(sim.stimulus, sim.rating) / np.bincount(sim.stimulus)
    np.testing.assert_allclose(mean, sim.expected, atol=0.06)


def _ratings(rows):
    worker, stimulus, rating = zip(*rows)
    return build_ratings(worker, stimulus, [str(r) for r in rating], scale="acr")


def test_small_samples_get_honest_intervals_not_zero_width_or_off_the_scale():
    # The cases: five equal ratings (was [4.0, 4.0]), two ratings 4 and 5 (was [-1.85, 10.85]), one
    # worker's ratings (blank with the reason); the other stimuli give the typical spread.
    rng = np.random.default_rng(0)
    rows = [(f"w{k}", "chelsea", 4) for k in range(5)] + [("w0", "camera", 4), ("w1", "camera", 5)]
    rows += [("w9", "alone", 3), ("w9", "alone", 4)]
    rows += [(f"w{k}", f"s{j}", int(np.clip(np.round(3 + rng.normal(0, 0.8)), 1, 5)))
             for j in range(20) for k in range(8)]
    result = analyze_ratings(_ratings(rows), RatingOptions(screening=ScreeningOptions(rules=())))
    by_id = {r["stimulus_id"]: r for r in result.scores}
    chelsea, camera, alone = by_id["chelsea"], by_id["camera"], by_id["alone"]
    assert 1.0 <= chelsea["ci_low"] < 4.0 < chelsea["ci_high"] <= 5.0 and chelsea["ci_reason"] == ""
    assert 1.0 <= camera["ci_low"] < 4.5 < camera["ci_high"] <= 5.0 and camera["ci_reason"] == ""
    assert np.isnan(alone["ci_low"]) and np.isnan(alone["ci_high"]) and alone["ci_reason"] == FEWER_THAN_TWO
    assert all(r["ci_high"] > r["ci_low"] for r in result.scores if r["ci_reason"] == "")
    intervals = result.summary["intervals"]
    assert "Smyth" in intervals["method_name"] and intervals["bounded_to"] == [1.0, 5.0]
    assert "typical rater" in intervals["estimand"]


def test_the_bootstrap_interval_is_blank_below_two_workers_and_without_spread():
    stimulus = np.array([0, 0, 0, 1, 1, 2])
    worker = np.array([0, 1, 2, 0, 1, 0])
    values = np.array([4.0, 4.0, 4.0, 2.0, 3.0, 5.0])
    s = mos_scores(stimulus, worker, values, 3, 3, "bootstrap", n_boot=200, seed=1, low=1.0, high=5.0)
    assert s.reason.tolist() == ["no spread", "", FEWER_THAN_TWO]
    assert np.isnan(s.ci_low[[0, 2]]).all() and 2.0 <= s.ci_low[1] < s.ci_high[1] <= 3.0
