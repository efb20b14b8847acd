"""The rating forecast before launch (analysis/rating_forecast.py): the crowd's fit, the allocation, a replay
against a whole simulated study, the JSON report."""
from __future__ import annotations

import numpy as np
import pytest

from analysis.forecast import ForecastInputError, StudyPlan, report
from analysis.rating_forecast import (WHOLE_SET, _least_rated_stream, fit_rating_pilot, forecast_ratings, halfwidths,
                                      ratings_needed_by_study, simulate_whole_study)
from analysis.rating_models import simulate_ratings
from analysis.ratings import build_ratings, t_interval


def _ratings(sim):
    columns = sim.columns()
    return build_ratings(columns["worker_id"], columns["stimulus_id"], columns["rating"], scale="acr")


@pytest.mark.parametrize("careless, seed", [(0.2, 1), (0.0, 2), (0.35, 3)])
def test_the_fit_recovers_a_simulated_crowd(careless, seed):
    """P.913 raters (rounded, clipped) with uniform careless ones, about 15 ratings per worker (the simulator of
    analysis/rating_models.py, not the forecast's own)."""
    sim = simulate_ratings(n_stimuli=60, n_workers=120, ratings_per_stimulus=30, bias_sd=0.4,
                           inconsistency_range=(0.4, 0.9), careless=careless, seed=seed)
    fit = fit_rating_pilot(_ratings(sim))
    honest = sim.worker_type == "honest"
    assert fit.careless_share == pytest.approx(careless, abs=0.06)
    assert fit.bias_sd == pytest.approx(float(np.std(sim.true_bias[honest])), abs=0.08)
    assert fit.inconsistency_rms == pytest.approx(float(np.sqrt(np.mean(sim.true_inconsistency[honest] ** 2))),
                                                  abs=0.06)
    order = [int(s[1:]) for s in fit.stimulus_ids]
    assert np.corrcoef(fit.quality_mean, sim.true_quality[order])[0, 1] > 0.9
    # the workers the mixture calls careless are the careless ones
    called = fit.honest_posterior < 0.5
    assert np.mean(called == ~honest[[int(w[1:]) for w in sim.worker_ids]]) > 0.9


def test_half_widths_are_the_mos_t_intervals_of_the_ratings():
    sim = simulate_ratings(n_stimuli=10, n_workers=8, seed=5)
    mean, low, high, _ = t_interval(sim.stimulus, sim.rating, 10)
    assert np.allclose(halfwidths(sim.stimulus, sim.worker, sim.rating, 10, 8), high - mean)
    one = np.array([0, 0, 1])  # stimulus 1 has one rating: no interval
    assert np.isnan(halfwidths(one, np.array([0, 1, 0]), np.array([3.0, 4.0, 2.0]), 2, 2)[1])


def test_the_least_rated_stimuli_are_rated_first():
    rng = np.random.default_rng(0)
    stream = _least_rated_stream(np.array([3, 0, 1, 0]), 6, rng)
    # the two unrated, then those at 1 (ties at random), then ...
    assert sorted(stream[:2]) == [1, 3] and sorted(stream[2:5]) == [1, 2, 3] and stream[5] in (1, 2, 3)
    counts = np.bincount(_least_rated_stream(np.zeros(7, dtype=np.int64), 7 * 5 + 3, rng), minlength=7)
    assert counts.max() - counts.min() == 1 and counts.sum() == 38


def _replay(seed: int, target: float = 0.35):
    """A whole simulated study of a known crowd (3 scenes x 40 stimuli, 25 % careless, 10-40 ratings per worker),
    the ratings it needed, and the forecast from its first 15 %."""
    crowd, study = simulate_whole_study(seed=seed)
    actual = ratings_needed_by_study(study.stimulus, study.worker, study.rating, len(crowd.stimulus_ids), target,
                                     quantiles=[1.0, 0.9], growth=1.1)
    pilot = study.ratings(crowd, int(0.15 * len(study.rating)), seconds_per_rating=6.0)
    fit = fit_rating_pilot(pilot, stimuli=crowd.stimulus_ids)
    careless = 1.0 - study.honest[[int(w[1:]) for w in pilot.worker_ids]].mean()  # among the pilot's workers
    return actual["needed"], fit, careless, forecast_ratings(fit, target, quantiles=[1.0, 0.9], replicates=20,
                                                             seed=seed)


def test_a_replay_finds_what_the_whole_study_needed_inside_its_band():
    """Seeds 0-7 of this replay: forecasts 9 % low to 11 % high, 13 of the 16 needs (two quantiles) inside their
    10-90 % band."""
    needed, fit, careless, result = _replay(0)
    assert fit.careless_share == pytest.approx(careless, abs=0.05) and fit.seconds_per_trial == pytest.approx(6.0)
    assert fit.set_ids == ["scene0", "scene1", "scene2"]
    for q in range(2):
        band = result.votes_needed(q)
        assert band["low"] <= needed[q] <= band["high"], (q, needed[q], band)
        assert band["reached"] == 1.0
    # every stimulus must reach the target: more ratings than 90 % of them
    assert result.votes_needed(0)["total"] > result.votes_needed(1)["total"]
    assert set(result.votes_needed(0)["per_set"]) == {"scene0", "scene1", "scene2"}
    assert 0.8 < np.median(result.inconsistency) < 1.25  # the fitted crowd reproduces its pilot's half-widths


def test_the_report_has_the_paired_forecasts_shape_counting_ratings():
    sim = simulate_ratings(n_stimuli=20, n_workers=30, ratings_per_stimulus=10, careless=0.1, seed=7)
    fit = fit_rating_pilot(_ratings(sim), rt_ms=["3000"] * len(sim.rating))
    assert fit.set_ids == [WHOLE_SET] and fit.seconds_source == "rt_ms" and fit.seconds_per_trial == 3.0
    first = forecast_ratings(fit, 0.4, replicates=4, seed=1)
    again = forecast_ratings(fit, 0.4, replicates=4, seed=1)
    assert np.array_equal(first.needed, again.needed)  # seeded
    doc = report(first, StudyPlan(pairs_per_page=10, gold_per_page=1, reward=0.9, bonus_per_page=0.6))
    assert doc["work_unit"] == "ratings" and doc["target"]["units"] == "points"
    assert set(doc["votes_needed"]) >= {"total", "low", "high", "per_set", "reached"}
    assert doc["votes_needed"]["low"] <= doc["votes_needed"]["total"] <= doc["votes_needed"]["high"]
    # 9 ratings a page; the pilot's 6.7 ratings per worker are less than a page: a participant does min_pages (1)
    assert doc["participants"]["total"] == int(np.ceil(doc["votes_needed"]["total"] / 9))
    assert doc["pilot"]["ratings"] == len(sim.rating)


def test_bad_pilots_and_targets_are_refused():
    one = build_ratings(["w1", "w1"], ["a", "b"], ["3", "4"], scale="acr")
    with pytest.raises(ForecastInputError, match="at least 2 workers"):
        fit_rating_pilot(one)
    gold = build_ratings(["w1", "w2"], ["a", "a"], ["3", "4"], is_gold=["1", "1"], scale="acr")
    with pytest.raises(ForecastInputError, match="no ratings of test stimuli"):
        fit_rating_pilot(gold)
    fit = fit_rating_pilot(_ratings(simulate_ratings(n_stimuli=10, n_workers=6, seed=1)))
    with pytest.raises(ForecastInputError, match="below the pilot's 60 ratings"):
        forecast_ratings(fit, 0.3, max_ratings=10)
    with pytest.raises(ForecastInputError, match="positive"):
        forecast_ratings(fit, 0.0)
