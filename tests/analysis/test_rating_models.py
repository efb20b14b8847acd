"""The P.913 clause 12.6 subject model against Netflix's sureal 0.9.0 (the standard's reference code) and
against the truth of simulations."""
from importlib.util import find_spec

import numpy as np
import pytest

from analysis.rating_models import Z_95, fit_p913, simulate_ratings

from .rating_support import nflx_matrix, sureal_fit

# Found, not imported: sureal imports pandas and matplotlib.pyplot (1.9 s of CPU), and every pytest-xdist worker
# collects this module; the tests that compare with it import it (rating_support.sureal_fit).
if find_spec("sureal") is None:
    pytest.skip("sureal is not installed", allow_module_level=True)
TOLERANCE = 1e-3


def ours(matrix):
    j, i = np.nonzero(~np.isnan(matrix))
    return fit_p913(j, i, matrix[j, i], matrix.shape[0], matrix.shape[1])


def differences(fit, reference) -> dict[str, float]:
    """Max abs difference of every estimate and interval sureal reports."""
    pairs = {
        "quality": (fit.quality, reference["quality_scores"]),
        "quality_se": (fit.quality_se, reference["quality_scores_std"]),
        "quality_ci95": (Z_95 * fit.quality_se, reference["quality_scores_ci95"][0]),
        "bias": (fit.bias, reference["observer_bias"]),
        "bias_se": (fit.bias_se, reference["observer_bias_std"]),
        "inconsistency": (fit.inconsistency, reference["observer_inconsistency"]),
        "inconsistency_se": (fit.inconsistency_se, reference["observer_inconsistency_std"]),
        "inconsistency_ci95_low": (fit.inconsistency - fit.inconsistency_low, reference["observer_inconsistency_ci95"][0]),
        "inconsistency_ci95_high": (fit.inconsistency_high - fit.inconsistency,
                                    reference["observer_inconsistency_ci95"][1]),
    }
    return {name: float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for name, (a, b) in pairs.items()}


@pytest.fixture(scope="module")
def nflx():
    return nflx_matrix()[0]


def test_matches_sureal_p910_annex_e_on_the_public_nflx_dataset(nflx):
    fit = ours(nflx)
    reference = sureal_fit(nflx)
    assert nflx.shape == (79, 26) and not np.isnan(nflx).any()
    diff = differences(fit, reference)
    assert max(diff.values()) < TOLERANCE, diff
    assert fit.iterations == reference["num_iter"] and fit.converged
    assert abs(fit.bias.mean()) < 1e-12   # sureal's convention: biases average zero


def test_matches_sureal_with_missing_ratings(nflx):
    rng = np.random.default_rng(5)
    sparse = nflx.copy()
    sparse[rng.random(sparse.shape) < 0.4] = np.nan
    assert (~np.isnan(sparse)).sum(axis=0).min() > 0 and (~np.isnan(sparse)).sum(axis=1).min() > 0
    diff = differences(ours(sparse), sureal_fit(sparse))
    assert max(diff.values()) < TOLERANCE, diff


def test_is_the_maximum_likelihood_estimate_sureal_reaches_by_newton_steps(nflx):
    """sureal's content-oblivious MLE (belief propagation, a different algorithm) lands on the same point."""
    fit = ours(nflx)
    mle = sureal_fit(nflx, "MaximumLikelihoodEstimationModelContentOblivious")
    assert np.max(np.abs(fit.quality - mle["quality_scores"])) < TOLERANCE
    assert np.max(np.abs(fit.bias - mle["observer_bias"])) < TOLERANCE
    assert np.max(np.abs(fit.inconsistency - mle["observer_inconsistency"])) < TOLERANCE


def test_matches_sureal_on_a_sparse_simulated_crowd():
    sim = simulate_ratings(120, 60, 12, continuous=True, seed=11)
    matrix = np.full((120, 60), np.nan)
    matrix[sim.stimulus, sim.worker] = sim.rating
    keep = ~np.isnan(matrix).all(axis=0)       # a worker the random design never drew has no column
    diff = differences(ours(matrix[:, keep]), sureal_fit(matrix[:, keep]))
    assert max(diff.values()) < TOLERANCE, diff


def test_recovers_the_true_bias_inconsistency_and_quality():
    sim = simulate_ratings(300, 40, continuous=True, clip=False, bias_sd=0.5, inconsistency_range=(0.2, 1.2), seed=2)
    fit = fit_p913(sim.stimulus, sim.worker, sim.rating)
    assert np.max(np.abs(fit.bias - sim.true_bias)) < 4 * fit.bias_se.max()
    assert np.max(np.abs(fit.inconsistency - sim.true_inconsistency)) < 0.15
    assert np.corrcoef(fit.inconsistency, sim.true_inconsistency)[0, 1] > 0.98
    inside = (fit.inconsistency_low <= sim.true_inconsistency) & (sim.true_inconsistency <= fit.inconsistency_high)
    assert inside.mean() >= 0.85
    # weighting by inconsistency beats the plain mean
    mos = np.bincount(sim.stimulus, sim.rating) / np.bincount(sim.stimulus)
    assert np.sqrt(np.mean((fit.quality - sim.true_quality) ** 2)) < np.sqrt(np.mean((mos - sim.true_quality) ** 2))


def test_repeated_ratings_count_as_observations():
    sim = simulate_ratings(30, 10, continuous=True, seed=4)
    once = fit_p913(sim.stimulus, sim.worker, sim.rating)
    twice = fit_p913(np.tile(sim.stimulus, 2), np.tile(sim.worker, 2), np.tile(sim.rating, 2))
    np.testing.assert_allclose(twice.quality, once.quality, atol=1e-9)
    np.testing.assert_allclose(twice.quality_se, once.quality_se / np.sqrt(2), rtol=1e-9)


def test_bad_input():
    with pytest.raises(ValueError, match="needs ratings"):
        fit_p913([], [], [])
    with pytest.raises(ValueError, match="at least one rating"):
        fit_p913([0, 2], [0, 1], [3.0, 4.0], n_stimuli=3)


def test_the_content_model_matches_sureal_mle_on_the_nflx_dataset():
    from analysis.rating_content_model import fit_content_model
    from analysis.rating_report import content_keys
    from analysis.ratings import read_ratings

    from .rating_support import NFLX_CSV

    r = read_ratings(NFLX_CSV)
    keys, content = np.unique(content_keys(r), return_inverse=True)
    assert len(keys) == 9                                 # the nine source contents, by their references
    fit = fit_content_model(r.stimulus, r.worker, content, r.rating)
    matrix = np.full((79, 26), np.nan)
    matrix[r.stimulus, r.worker] = r.rating
    reference = sureal_fit(matrix, "MaximumLikelihoodEstimationModel", content=content)
    diff = differences(fit, reference)
    diff["ambiguity"] = float(np.max(np.abs(fit.ambiguity - reference["content_ambiguity"])))
    diff["ambiguity_se"] = float(np.max(np.abs(fit.ambiguity_se - reference["content_ambiguity_std"])))
    assert max(diff.values()) < TOLERANCE, diff
    assert fit.iterations == reference["num_iter"] and fit.converged
