"""The forecast before launch (analysis/forecast.py): the noise fit, replays against whole simulated studies,
the JSON report."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from scipy.stats import chi2
from scipy.stats import t as student_t

from analysis.formats import build_votes, json_text
from analysis.forecast import (Forecast, ForecastInputError, StudyPlan, careless_share, combined_band, costs,
                               crowd_factors, draw_careless_share, fit_pilot, forecast, known_crowd,
                               prediction_band, report, scale_agreement, seconds_per_trial, share_errors,
                               share_refits_for, simulate_votes, votes_needed_by_study, worker_spread)
from analysis.simulate import simulate_study


def _prefix(votes, share: float):
    return votes.subset(np.arange(len(votes)) < int(share * len(votes)))


@pytest.mark.parametrize("random_clickers, left_clickers", [(0.25, 0.05), (0.0, 0.0), (0.4, 0.1)])
def test_the_careless_share_is_recovered_from_a_whole_study(random_clickers, left_clickers):
    study = simulate_study(n_sets=3, n_items=40, degree=6, votes_per_pair=20, n_workers=120, seed=4,
                           random_clickers=random_clickers, left_clickers=left_clickers)
    true_share = float(np.mean(study.worker_type != "honest"))
    assert careless_share(study.votes) == pytest.approx(true_share, abs=0.06)


def test_a_pilot_of_a_few_votes_per_worker_still_shows_its_careless_workers():
    """15 % of a study: 3 votes per pair, about 9 per worker; the screening keeps most careless workers."""
    study = simulate_study(n_sets=3, n_items=40, degree=6, votes_per_pair=20, n_workers=120, seed=3)
    fit = fit_pilot(_prefix(study.votes, 0.15), "jod", n_boot=50, share_refits=0)
    assert fit.careless_source == "scale"
    assert 0.2 <= fit.careless_share <= 0.4  # 0.30 are careless
    assert fit.careless_vote_share < 0.15  # what the screening of the pilot leaves out


def _crowd_votes(sampling: str, careless: float, seed: int):
    """A random-design study, or an active one (a 1-vote warm-up continued by active sampling), of a crowd
    with ``careless`` random and left clickers; the votes and which of their workers were honest."""
    shares = {"random_clickers": careless * 5 / 6, "left_clickers": careless / 6}
    if sampling == "random":
        study = simulate_study(n_sets=2, n_items=30, degree=6, votes_per_pair=25, n_workers=150, seed=seed, **shares)
        return study.votes, study.honest_mask
    warm = simulate_study(n_sets=2, n_items=30, degree=4, votes_per_pair=1, n_workers=100, seed=seed, **shares)
    honest = {w: t == "honest" for w, t in zip(warm.worker_ids, warm.worker_type)}
    crowd = known_crowd(warm.votes, warm.truth, warm.item_ids, honest, {w: 30 for w in warm.worker_ids})
    return simulate_votes(crowd, "active", 3000, seed, with_honest=True)


@pytest.mark.parametrize("sampling", ["random", "active"])
@pytest.mark.parametrize("careless", [0.3, 0.0])
def test_the_careless_share_is_recovered_from_agreement_with_the_fitted_scale(sampling, careless):
    """Active sampling repeats almost no pair, so agreement on repeated pairs cannot see its careless workers;
    agreement with the fitted scale can, in either design."""
    votes, honest = _crowd_votes(sampling, careless, seed=1)
    present = np.bincount(votes.worker, minlength=len(votes.worker_ids)) > 0
    true_share = float(1.0 - honest[present].mean())
    assert abs(true_share - careless) < 0.05  # the crowd is what the test says it is
    found = scale_agreement(votes)
    assert found.careless_share == pytest.approx(true_share, abs=0.05)
    # Each worker's posterior sorts the crowd: careless workers are mostly found (when there are any).
    if careless:
        assert found.honest[present & ~honest].mean() < 0.4 < 0.8 < found.honest[present & honest].mean()


def _active_pilot(seed: int):
    """A pilot-sized active study: 80 workers, 30 % random clickers, a 1-vote warm-up of a 4-regular design over
    2 x 30 items continued by active sampling to 12 votes a worker (960 votes, mostly close pairs)."""
    warm = simulate_study(n_sets=2, n_items=30, degree=4, votes_per_pair=1, n_workers=80, seed=seed,
                          random_clickers=0.3, left_clickers=0.0)
    honest = {w: t == "honest" for w, t in zip(warm.worker_ids, warm.worker_type)}
    crowd = known_crowd(warm.votes, warm.truth, warm.item_ids, honest, {w: 12 for w in warm.worker_ids})
    return simulate_votes(crowd, "active", 960, seed, with_honest=True)


def test_the_careless_share_of_an_active_pilot_is_recovered_without_bias():
    """Active sampling shows close pairs, on which a random clicker agrees with the scale about as often as an
    honest worker; over six seeded pilots the fitted share still centres on the truth (within 0.05 on average;
    the screening's estimate found 0.00-0.17 where 0.30 were). One pilot's share is noisy at about 12 votes a
    worker (0.14-0.41 over seeds 0-7 where 0.28-0.35 were), hence the loose tolerance per pilot."""
    fitted, true = [], []
    for seed in range(6):
        votes, honest = _active_pilot(seed)
        present = np.bincount(votes.worker, minlength=len(votes.worker_ids)) > 0
        found = scale_agreement(votes)
        fitted.append(found.careless_share)
        true.append(float(1.0 - honest[present].mean()))
        assert found.careless_share == pytest.approx(true[-1], abs=0.17)
        assert found.honest[present & ~honest].mean() < found.honest[present & honest].mean()
    assert np.mean(fitted) == pytest.approx(np.mean(true), abs=0.05)


def test_refits_of_simulated_pilots_miss_the_share_as_its_posterior_says_where_every_worker_shows_their_type():
    """40 workers giving 60 votes each, 30 % of them careless: each worker's type is plain, so the share is uncertain
    by which 40 workers came (binomial, SD 0.07), as its posterior says, and refitting simulated pilots of the fitted
    crowd misses the share they were drawn with by about as much (SD 0.066, posterior 0.071) and on average by
    little. On an active pilot, whose votes come mostly from a dozen workers on close pairs, they missed by more (the
    replays' seed 4: 0.12 for a posterior SD of 0.06; benchmarks/forecast.py). Known crowds have no fit to refit."""
    study = simulate_study(n_sets=2, n_items=20, degree=4, votes_per_pair=30, n_workers=40, seed=1)
    fit = fit_pilot(study.votes, "jod", n_boot=10, share_refits=0)
    misses = share_errors(fit, np.random.default_rng(0), refits=12)
    posterior = draw_careless_share(fit.worker_log_ratio[fit.worker_votes > 0], np.random.default_rng(0), 4000)
    assert len(misses) == 12 and abs(misses.mean()) < 0.03
    assert 0.6 < misses.std(ddof=1) / posterior.std() < 1.5
    assert share_errors(dataclasses.replace(fit, worker_log_ratio=None), np.random.default_rng(0)) is None
    assert fit_pilot(study.votes, "jod", n_boot=10, share_refits=3).share_error.shape == (3,)


def test_each_replicate_draws_the_careless_share_from_its_posterior():
    """Workers known for what they are: the share's posterior is a Beta(31, 71), mean 0.30, SD 0.045; workers
    who tell nothing leave the flat prior (mean 1/2, SD 0.29)."""
    rng = np.random.default_rng(0)
    decisive = np.array([20.0] * 70 + [-20.0] * 30)
    draws = np.array([draw_careless_share(decisive, rng) for _ in range(2000)])
    assert draws.mean() == pytest.approx(31 / 102, abs=0.005) and draws.std() == pytest.approx(0.045, abs=0.005)
    flat = np.array([draw_careless_share(np.zeros(100), rng) for _ in range(2000)])
    assert flat.mean() == pytest.approx(0.5, abs=0.02) and flat.std() == pytest.approx(0.289, abs=0.01)


def _heavy_pilot(heavy: int = 5):
    """A pilot of 100 workers, 30 % of them known careless (the last ones), in which the first ``heavy`` workers
    (all careful) gave 200 votes each and the others 2 (an active pilot's first workers); ``heavy`` 0: 2 each."""
    study = simulate_study(n_sets=1, n_items=12, degree=4, votes_per_pair=4, n_workers=100, seed=0)
    fit = fit_pilot(study.votes, "jod", n_boot=10, share_refits=0)  # the share's draws: its posterior
    has = np.flatnonzero(fit.worker_votes > 0)
    counts = np.where(fit.worker_votes > 0, 2, 0)
    counts[has[:heavy]] = 200
    log_ratio = np.zeros(len(counts))
    log_ratio[has] = 20.0
    log_ratio[has[len(has) - int(0.3 * len(has)):]] = -20.0  # the last 30 % careless, every heavy worker careful
    return dataclasses.replace(fit, worker_votes=counts, worker_log_ratio=log_ratio,
                               honest_posterior=(log_ratio > 0).astype(float))


def test_the_share_draws_are_the_fitted_share_less_the_refits_miss():
    """With the share estimator's misses on simulated pilots (``share_error``), a study's careless share is the
    fitted one plus Student t draws (K degrees of freedom) as wide as the misses' root mean square: the median at
    the fitted share (the misses' mean, mostly refits collapsing to 0, is not a shift), the 10th-90th percentiles
    ``t_{K, 0.9} rms`` either side. Without them, the posterior given the workers' likelihood ratios (here 30 % of
    the workers known careless: mean 0.30, SD 0.045)."""
    fit = dataclasses.replace(_heavy_pilot(0), careless_share=0.2)
    misses = np.array([-0.1, 0.0, 0.05, -0.05, 0.1, -0.2, 0.0, 0.02, -0.02, 0.0])  # RMS 0.081
    draws = dataclasses.replace(fit, share_error=misses).draw_share(np.random.default_rng(0), 20000)
    half = student_t.ppf(0.9, 10) * np.sqrt(np.mean(misses ** 2))
    assert np.median(draws) == pytest.approx(0.2, abs=0.005)
    assert np.percentile(draws, [10, 90]) == pytest.approx([0.2 - half, 0.2 + half], abs=0.01)
    assert draws.min() > 0  # a share, however far the t's tail reaches
    posterior = fit.draw_share(np.random.default_rng(0), 20000)
    ratio = fit.worker_log_ratio[fit.worker_votes > 0]
    a, b = (ratio < 0).sum() + 1, (ratio > 0).sum() + 1  # a Beta(a, b) posterior: the known workers' counts
    assert posterior.mean() == pytest.approx(a / (a + b), abs=0.005)
    assert posterior.std() == pytest.approx(np.sqrt(a * b / (a + b) ** 2 / (a + b + 1)), abs=0.005)


def test_new_workers_are_careless_at_the_drawn_share_whatever_votes_they_give():
    """A pilot in which a few workers gave most votes and were all careful (an active pilot's first workers): the
    simulated study's new workers are careless at the replicate's share (its posterior: 0.30 +- 0.045), each
    whatever votes the pilot worker they resample gave. Resampling types with vote counts made the few heavy
    workers' types the whole crowd's (about 5 % of the new votes careless here): the active replays' forecasts
    were low where the pilot's heavy workers happened to be careful (benchmarks/forecast.py)."""
    fit = _heavy_pilot()
    shares = []
    for seed in range(3):
        votes, honest = simulate_votes(fit, "random", 20000, seed, with_honest=True)
        new = votes.worker >= len(fit.votes.worker_ids)
        shares.append(float(np.mean(~honest[votes.worker[new]])))
    assert np.mean(shares) == pytest.approx(0.3, abs=0.08)


def test_further_crowds_spread_wider_when_a_few_workers_give_most_votes():
    """Votes per honest vote of the first 3,000 votes, over further crowds: centred on 1 / (1 - 0.3) either way, and
    spread by the share's posterior alone when every worker gives 2 votes; when 5 % of the workers give 200, a
    study's 3,000 votes come mostly from about a dozen workers, and which of them are careless is a coin toss each,
    so its careless votes are far less certain than its careless workers (the active replays' misses,
    benchmarks/forecast.py)."""
    rng = np.random.default_rng(0)
    even = crowd_factors(_heavy_pilot(0), [3000.0], rng)[:, 0]
    heavy = crowd_factors(_heavy_pilot(5), [3000.0], rng)[:, 0]
    assert np.median(even) == pytest.approx(1 / 0.7, abs=0.08) and np.median(heavy) == pytest.approx(1 / 0.7, abs=0.12)
    spread = lambda f: np.subtract(*np.percentile(np.log(f), [90, 10]))  # noqa: E731
    assert spread(even) == pytest.approx(2 * 1.28 * 0.045 / 0.7, rel=0.3)  # the share's SD, on the log factor
    assert spread(heavy) > 2 * spread(even)


def test_the_combined_band_holds_a_further_study_eight_times_in_ten():
    """Needs that are honest votes needed (log-normal) times votes per honest vote (a crowd's: 1 / (1 - v), v a
    Beta(6, 14) careless share of the votes): six replicates give the first, 1,000 further crowds the second, and
    the band holds a seventh study 8 times in 10. Without spread of the crowd it is the Student t prediction band
    of the needs themselves; none of it falls below the floor (the pilot's votes)."""
    rng = np.random.default_rng(1)
    held = []
    for _ in range(1500):
        honest = np.exp(8.0 + 0.1 * rng.standard_normal(7))
        per_honest = 1.0 / (1.0 - rng.beta(6, 14, 7))
        crowds = 1.0 / (1.0 - rng.beta(6, 14, 1000))
        mid, low, high = combined_band(honest[:6], crowds, rng.standard_t(5, 1000))
        held.append(low <= honest[6] * per_honest[6] <= high)
        assert low <= mid <= high
    assert 0.76 < np.mean(held) < 0.84
    needs = np.exp(8.5 + 0.2 * rng.standard_normal(6))
    _, low, high = combined_band(needs, np.ones(20000), rng.standard_t(5, 20000))
    assert (low, high) == pytest.approx(prediction_band(needs), rel=0.02)
    assert combined_band(needs, np.ones(100), rng.standard_t(5, 100), floor=np.max(needs) * 2)[1] == \
        pytest.approx(np.max(needs) * 2)


def test_a_pilot_without_repeated_pairs_still_has_a_careless_share():
    """One vote per pair (an active study's warm-up): no two votes to compare on a pair, but 15 votes per worker
    against the fitted scale."""
    study = simulate_study(n_sets=3, n_items=40, degree=10, votes_per_pair=1, n_workers=40, seed=2)
    assert careless_share(study.votes) is None
    fit = fit_pilot(study.votes, "z", n_boot=20, share_refits=0)
    assert fit.careless_source == "scale" and fit.careless_share_repeats is None
    true_share = float(np.mean(~study.honest_mask))
    assert fit.careless_share == pytest.approx(true_share, abs=0.1)
    # The pilot's workers replay its pairs with their own posteriors, whose mean is the share new workers draw from.
    assert 1.0 - fit.honest_posterior[fit.worker_votes > 0].mean() == pytest.approx(fit.careless_share, abs=1e-3)


def test_a_case_v_crowd_has_an_inconsistency_factor_near_one():
    """The pilot's own half-widths against those of the simulated Case V crowd fitted to it."""
    study = simulate_study(n_sets=2, n_items=20, degree=6, votes_per_pair=20, n_workers=40, seed=1)
    fit = fit_pilot(_prefix(study.votes, 0.3), "jod", n_boot=100, share_refits=share_refits_for("random"))
    result = forecast(fit, 10.0, quantiles=[0.5, 0.9], replicates=4, n_boot=100)
    assert np.all((0.7 < np.median(result.inconsistency, axis=0)) & (np.median(result.inconsistency, axis=0) < 1.4))


def _fit_of_workers(n_workers: int):
    """A fitted crowd (likelihood ratios known) of ``n_workers`` honest workers: what worker_spread reads."""
    study = simulate_study(n_sets=1, n_items=10, degree=4, votes_per_pair=4, n_workers=8, seed=1)
    fit = fit_pilot(study.votes, "jod", n_boot=10, share_refits=0)
    return dataclasses.replace(fit, worker_votes=np.full(n_workers, 10), honest_posterior=np.ones(n_workers))


@pytest.mark.parametrize("workers", [5, 100])
def test_the_factor_widens_as_a_variance_seen_in_w_minus_1_degrees_of_freedom(workers):
    """Five honest workers cannot show how much a crowd's workers disagree: the factor's square is drawn as
    (W - 1) / chi2(W - 1), whose 90th percentile is 3.8 at W = 5 and 1.2 at W = 100."""
    draws = worker_spread(_fit_of_workers(workers), np.random.default_rng(3), 20_000) ** 2
    dof = workers - 1
    assert np.percentile(draws, [10, 50, 90]) == pytest.approx(dof / chi2.ppf([0.9, 0.5, 0.1], dof), rel=0.05)


def _replay(votes, sampling: str, seed: int, workers: int):
    """Target a little above what the whole study reached at the 90 % quantile, measured as the study's need is
    (the same resamples: a separate bootstrap of the whole study differs by several per cent, 0.52-0.59 over four
    seeds of the active study, and could set a target the study's own last checkpoint misses); forecast from its
    first 20 %."""
    whole = votes_needed_by_study(votes, 0.0, quantiles=[0.9], growth=1.15, n_boot=100, seed=seed)
    target = round(1.1 * whole["halfwidths"][-1][0], 2)
    actual = votes_needed_by_study(votes, target, quantiles=[0.9], growth=1.15, n_boot=100, seed=seed)["needed"][0]
    fit = fit_pilot(_prefix(votes, 0.2), "jod", seed=seed, share_refits=share_refits_for(sampling))
    result = forecast(fit, target, quantiles=[0.9], sampling=sampling, replicates=6, seed=seed,
                      votes_per_worker=len(votes) / workers, max_votes=3 * len(votes))
    return actual, result.votes_needed(0)


def test_the_forecast_band_holds_what_a_random_design_study_needed():
    study = simulate_study(n_sets=2, n_items=25, degree=6, votes_per_pair=20, n_workers=60, seed=11)
    actual, band = _replay(study.votes, "random", 0, 60)
    assert np.isfinite(actual)
    assert band["low"] <= actual <= band["high"]
    assert band["reached"] == 1.0 and set(band["per_set"]) == {"set01", "set02"}


def test_the_forecast_of_an_actively_sampled_study_is_near_what_it_needed_and_not_low():
    """Active sampling forecasts from the fitted model alone (the pilot's pairs were chosen from its own
    outcomes, see analysis.forecast.forecast). This pilot fits 0.38 careless workers where 0.31 were, and the rest
    of the study happened to get only 23 % careless votes. Measured with soft screening's weights (the precision
    ``[stopping]`` and ``results`` measure) and the band's votes per honest vote from further crowds: 3,141 forecast
    (band 2,458-4,425) for 2,281 needed, +38 %, inside (the replicates' own band: 2,975, 2,528-3,570, +30 %, above
    it; with hard screening +36 %, inside). With the share's draws as wide as refits of simulated pilots missed
    (analysis.forecast.share_errors): 3,147, band 2,171-5,848, +38 %, inside; shifted by the refits' mean miss as
    well, +65 %. How often the band holds is the replays' figure (benchmarks/forecast.py,
    10 seeds); one seed can only show the forecast is near and errs high, the lesser error.
    When new workers took the types of the pilot workers whose vote counts they resample (before they were careless
    at the drawn share): +32 % with hard screening."""
    warm = simulate_study(n_sets=2, n_items=25, degree=4, votes_per_pair=1, n_workers=60, seed=5)
    honest = {w: t == "honest" for w, t in zip(warm.worker_ids, warm.worker_type)}
    crowd = known_crowd(warm.votes, warm.truth, warm.item_ids, honest, {w: 50 for w in warm.worker_ids})
    votes = simulate_votes(crowd, "active", 3000, 5)
    actual, band = _replay(votes, "active", 1, len(np.unique(votes.worker)))
    assert np.isfinite(actual)
    assert band["low"] <= band["total"] <= band["high"] and band["high"] >= actual
    assert abs(band["total"] - actual) <= 0.4 * actual
    assert band["model_only"] == {k: band[k] for k in ("total", "low", "high")}  # no factor applied


def test_the_band_holds_a_further_simulated_study_eight_times_in_ten():
    """Six replicates' 10th-90th percentiles hold a seventh draw of the same distribution about 4 times in 7; the
    band, widened to the Student t prediction interval of a further draw, holds it 8 times in 10."""
    rng = np.random.default_rng(0)
    draws = np.exp(8.5 + 0.2 * rng.standard_normal((4000, 7)))  # needs of 6 replicates and one further study

    def band(needed):
        result = Forecast([0.9], needed[:, None], needed[:, None, None], np.ones((6, 1)), ["s"], None, 1.0, "jod",
                          "random", 0.95, 10 ** 6, 10, [], needed[:, None])
        return result.votes_needed(0)

    bands = [band(row[:6]) for row in draws]
    held = np.mean([b["low"] <= row[6] <= b["high"] for b, row in zip(bands, draws)])
    low, high = np.percentile(draws[:, :6], [10, 90], axis=1)
    assert np.mean((low <= draws[:, 6]) & (draws[:, 6] <= high)) < 0.65
    assert 0.77 < held < 0.83
    assert all(b["low"] <= b["total"] <= b["high"] for b in bands)
    # a replicate that did not reach the target leaves the band's top open, as before
    assert band(np.array([5000.0, 5200, 5400, 5600, 5800, np.inf]))["high"] is None


def test_time_per_trial_comes_from_the_gaps_between_a_workers_votes_else_rt_ms():
    stamps = ["2026-01-01T10:00:00+00:00", "2026-01-01T10:00:04+00:00", "2026-01-01T10:00:10+00:00",
              "2026-01-01T11:00:00+00:00",  # a break: not a trial
              "2026-01-01T10:00:00Z", "2026-01-01T10:00:05Z"]
    votes = build_votes(["a", "a", "a", "a", "b", "b"], ["s"] * 6, ["x", "y", "x", "y", "x", "y"],
                        ["y", "z", "z", "x", "y", "z"], ["x", "y", "z", "x", "x", "z"], extra={"created_at": stamps})
    assert seconds_per_trial(votes) == (5.0, "created_at")  # gaps 4, 6 and 5 s
    bare = build_votes(["a", "b"], ["s", "s"], ["x", "x"], ["y", "y"], ["x", "y"])
    assert seconds_per_trial(bare, ["2000", "4000"]) == (3.0, "rt_ms")
    assert seconds_per_trial(bare) == (None, "unknown")


def test_costs_follow_the_pay_rules():
    study = simulate_study(n_sets=2, n_items=20, degree=4, votes_per_pair=4, n_workers=30, seed=1)
    fit = fit_pilot(study.votes, "z", n_boot=20, share_refits=0)
    plan = StudyPlan(pairs_per_page=20, gold_per_page=2, min_pages=1, max_pages=10, reward=1.5, bonus_per_page=1.0,
                     pages_per_worker=3, seconds_per_trial=10, arrivals_per_hour=10)
    out = costs(1800, fit, plan)  # 100 pages of 18 votes, 3 per worker: 33.3 workers
    assert out["participants"] == 34
    assert out["dollars"] == pytest.approx(100 / 3 * 1.5 + (100 - 100 / 3) * 1.0, abs=0.01)
    assert out["worker_hours"] == pytest.approx(100 * 20 * 10 / 3600, abs=0.05)
    assert out["wall_clock_hours"] == pytest.approx(100 / 3 / 10 + 3 * 20 * 10 / 3600, abs=0.05)
    assert costs(None, fit, plan)["dollars"] is None
    fee = costs(1800, fit, StudyPlan(pages_per_worker=3, platform_fee=0.2))["dollars"]
    assert fee == pytest.approx(out["dollars"] / 0.8, abs=0.01)


def test_the_report_has_every_documented_field_and_is_json():
    study = simulate_study(n_sets=2, n_items=15, degree=4, votes_per_pair=6, n_workers=30, seed=2)
    fit = fit_pilot(_prefix(study.votes, 0.3), "jod", n_boot=30, share_refits=share_refits_for("random"))
    result = forecast(fit, 1.0, quantiles=[1.0, 0.9], replicates=2, n_boot=30)
    doc = json.loads(json_text(report(result, StudyPlan())))
    assert {"target", "quantile", "votes_needed", "participants", "dollars", "worker_hours", "wall_clock_hours",
            "forecasts", "pilot", "assumptions", "replicates", "band_percentiles", "max_votes", "seconds"} <= set(doc)
    assert set(doc["votes_needed"]) == {"total", "low", "high", "per_set", "reached", "model_only"}
    assert set(doc["votes_needed"]["per_set"]) == {"set01", "set02"}
    assert [f["quantile"] for f in doc["forecasts"]] == [1.0, 0.9]
    assert doc["votes_needed"] == doc["forecasts"][0]["votes_needed"]
    for f in doc["forecasts"]:
        band = f["votes_needed"]
        if band["total"] is not None:
            assert band["total"] >= fit.n_votes  # the pilot's votes count
            assert band["low"] <= band["total"] and (band["high"] is None or band["total"] <= band["high"])
    assert doc["pilot"]["votes"] == fit.n_votes and doc["target"]["units"] == "jod"
    # what the model assumes, in words: the crowd, the careless share, the factor, the sampling
    assert len(doc["model"]) == 5 and "Thurstone Case V" in doc["model"][0]
    assert f"{100 * fit.careless_share:.0f} % in the pilot" in doc["model"][1]
    assert "inconsistency factor, median" in doc["model"][2] and doc["model"][3].startswith("random sampling")
    workers = f"W = {fit.honest_posterior[fit.worker_votes > 0].sum():.0f} honest pilot workers"
    assert "sqrt((W - 1) / chi2(W - 1))" in doc["model"][2] and workers in doc["model"][2]
    assert "1,000 further crowds" in doc["model"][4]


def test_bad_input_raises_one_line_errors():
    study = simulate_study(n_sets=1, n_items=10, degree=4, votes_per_pair=4, n_workers=20, seed=1)
    fit = fit_pilot(study.votes, "z", n_boot=10, share_refits=0)
    for kwargs in ({"sampling": "greedy"}, {"quantiles": [1.5]}, {"replicates": 0}, {"max_votes": 3}):
        with pytest.raises(ForecastInputError) as error:
            forecast(fit, 0.5, **kwargs)
        assert "\n" not in str(error.value)
    with pytest.raises(ForecastInputError):
        forecast(fit, 0.0)
    lonely = build_votes(["a", "a"], ["s", "s"], ["x", "y"], ["y", "x"], ["x", "y"])
    with pytest.raises(ForecastInputError, match="at least 2 workers"):
        fit_pilot(lonely)
    with pytest.raises(ForecastInputError):
        StudyPlan(pairs_per_page=2, gold_per_page=2)


def test_a_resampled_pilot_gives_each_drawn_workers_votes_under_their_own_id():
    """The pilot bootstrap of the inconsistency factor: workers drawn with replacement, a worker drawn twice giving
    their votes twice (two IDs, so the worker bootstrap and the screening see two workers), the same pick
    reusable on the simulated pilot."""
    from analysis.forecast import resample_workers

    votes = simulate_study(n_sets=1, n_items=6, degree=2, votes_per_pair=3, n_workers=5, seed=1).votes
    sample, pick = resample_workers(votes, np.random.default_rng(3))
    counts = np.bincount(votes.worker, minlength=len(votes.worker_ids))
    assert len(pick) == int((counts > 0).sum()) and len(set(pick.tolist())) < len(pick)  # a worker drawn twice
    assert len(sample) == int(counts[pick].sum())
    assert len(set(sample.worker_ids.tolist())) == len(pick)
    for k, w in enumerate(pick):
        mine = sample.worker == k
        assert np.array_equal(sample.item_a[mine], votes.item_a[votes.worker == w])
        assert np.array_equal(sample.a_won[mine], votes.a_won[votes.worker == w])
    again, _ = resample_workers(votes, np.random.default_rng(99), pick)
    assert np.array_equal(again.item_a, sample.item_a)
