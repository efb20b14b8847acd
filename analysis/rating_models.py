"""The subject bias and inconsistency model of ITU-T P.913 (06/2021) clause 12.6 (also P.910 (11/2021)
Annex E), and a seeded simulator of rating studies for tests and benchmarks.

The model
---------
Worker ``i``'s rating of stimulus ``j`` is ``u_ij = psi_j + delta_i + upsilon_i X``, ``X ~ N(0, 1)``:
a true quality ``psi_j``, a bias ``delta_i`` and an inconsistency ``upsilon_i`` (SD) of each worker.
The maximum-likelihood estimates are found by the standard's alternating projection, as Netflix's
sureal does it (``P910AnnexEModel``, ``SubjectMLEModelProjectionSolver2``, sureal 0.9.0), step for
step so that the estimates agree with sureal's to rounding:

1. ``psi_j`` = the plain mean of stimulus ``j``'s ratings; ``delta_i`` = the mean of worker ``i``'s
   residuals ``u_ij - psi_j``.
2. Repeat: residuals ``r_ij = u_ij - psi_j - delta_i``; ``upsilon_i`` = their SD per worker and
   ``sigma_j`` their SD per stimulus (both with ``ddof=0``); ``psi_j`` = the mean of ``u_ij - delta_i``
   weighted by ``1 / (upsilon_i^2 + 1e-8)``; ``delta_i`` = the mean of ``u_ij - psi_j``; stop when the
   Euclidean norm of the change of ``psi`` is below ``1e-8`` or after 1,000 rounds.
3. Shift so that the biases average zero (``delta -= mean(delta)``, ``psi += mean(delta)``): the model
   fixes only ``psi_j + delta_i``, and P.913 reports the scores of an average worker.

Each of these steps is the exact maximiser of the likelihood in one block of parameters with the others
fixed, so the fixed point is the maximum-likelihood estimate (the content-oblivious model of sureal's
``MaximumLikelihoodEstimationModelContentOblivious`` reaches the same point by Newton steps).

Missing ratings are simply absent: the data are observation lists (stimulus, worker, rating), and every
sum over "the ratings of a worker" or "of a stimulus" is a ``numpy.bincount`` over the ratings that exist.
A worker who rated a stimulus twice contributes two observations, as sureal's repetition axis does.
A worker with a single rating has no residual spread (``upsilon = 0``) and so the weight ``1e8``: that
is sureal's behaviour too, kept for agreement; the screening's minimum counts are the place to drop
such workers.
This is the masked (stimuli x workers) array of the standard without the cells that are empty, which
in a crowd study are most of them (500 stimuli x 200 workers with 24 ratings per stimulus is 12 % full).

Standard errors and 95 % intervals are sureal's: ``SE(psi_j) = 1 / sqrt(sum_i 1 / sigma_j^2)``
(``sigma_j / sqrt(n_j)``), ``SE(delta_i) = upsilon_i / sqrt(n_i)``, ``SE(upsilon_i)`` from the observed
information, intervals ``+/- 1.95996 SE`` for scores and biases and the chi-square interval
``[upsilon_i sqrt(n_i / chi2_{0.975}(n_i)), upsilon_i sqrt(n_i / chi2_{0.025}(n_i))]`` for inconsistencies.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import chdtri

MAX_ITERATIONS = 1000
DELTA_THRESHOLD = 1e-8
WEIGHT_EPSILON = 1e-8
Z_95 = 1.95996  # sureal's constant (Phi^-1(0.975) to 6 digits), kept so the intervals agree to the digit


@dataclass(frozen=True)
class P913Fit:
    """Estimates of the P.913 clause 12.6 model (arrays over stimuli ``J`` and workers ``I``)."""

    quality: np.ndarray              # (J,) psi_j, the score of an average (zero-bias) worker
    quality_se: np.ndarray           # (J,)
    bias: np.ndarray                 # (I,) delta_i, mean zero over the workers in the fit
    bias_se: np.ndarray              # (I,)
    inconsistency: np.ndarray        # (I,) upsilon_i, an SD in rating units
    inconsistency_se: np.ndarray     # (I,)
    inconsistency_low: np.ndarray    # (I,) 95 % chi-square interval of upsilon_i
    inconsistency_high: np.ndarray   # (I,)
    n_stimulus: np.ndarray           # (J,) ratings per stimulus
    n_worker: np.ndarray             # (I,) ratings per worker
    iterations: int
    converged: bool

    @property
    def quality_low(self) -> np.ndarray:
        return self.quality - Z_95 * self.quality_se

    @property
    def quality_high(self) -> np.ndarray:
        return self.quality + Z_95 * self.quality_se


def _mean_by(index: np.ndarray, values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.bincount(index, values, len(counts)) / counts


def _sd_by(index: np.ndarray, values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Population SD (``ddof=0``) of ``values`` per group, two-pass as numpy's ``nanstd`` computes it."""
    mean = _mean_by(index, values, counts)
    deviation = values - mean[index]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.sqrt(np.bincount(index, deviation * deviation, len(counts)) / counts)


def fit_p913(stimulus: np.ndarray, worker: np.ndarray, rating: np.ndarray, n_stimuli: int | None = None,
             n_workers: int | None = None, *, max_iterations: int = MAX_ITERATIONS,
             threshold: float = DELTA_THRESHOLD, init: tuple[np.ndarray, np.ndarray] | None = None) -> P913Fit:
    """Fit the P.913 clause 12.6 model by alternating projection (see the module docstring).

    Parameters
    ----------
    stimulus, worker : (n,) int arrays
        Stimulus index (``0..J-1``) and worker index (``0..I-1``) of every rating.
    rating : (n,) float array
        The ratings (any numeric scale; repeated ratings of a pair are separate observations).
    n_stimuli, n_workers : int, optional
        ``J`` and ``I`` (default: one more than the largest index). Every stimulus and worker must have
        at least one rating.
    max_iterations, threshold : optional
        sureal's stopping rule: at most 1,000 rounds, or until ``||psi_new - psi_old|| < 1e-8``.
    init : (quality, bias), optional
        A warm start (a fit of nearly the same data, as in a jackknife) instead of step 1's plain means; the
        fixed point is the same, only fewer rounds are needed.

    Returns
    -------
    P913Fit

    Raises
    ------
    ValueError
        No ratings, or a stimulus or worker without any.
    """
    stimulus = np.asarray(stimulus, dtype=np.int64)
    worker = np.asarray(worker, dtype=np.int64)
    x = np.asarray(rating, dtype=float)
    if x.size == 0:
        raise ValueError("the P.913 model needs ratings; there are none")
    J = int(stimulus.max()) + 1 if n_stimuli is None else n_stimuli
    I = int(worker.max()) + 1 if n_workers is None else n_workers
    n_j = np.bincount(stimulus, minlength=J).astype(float)
    n_i = np.bincount(worker, minlength=I).astype(float)
    if not (n_j > 0).all() or not (n_i > 0).all():
        raise ValueError("every stimulus and every worker of the P.913 model needs at least one rating")
    if init is None:
        psi = _mean_by(stimulus, x, n_j)
        delta = _mean_by(worker, x - psi[stimulus], n_i)
    else:
        psi, delta = np.asarray(init[0], dtype=float), np.asarray(init[1], dtype=float)
    iterations, converged = 0, False
    while True:
        previous = psi
        residual = x - psi[stimulus] - delta[worker]
        upsilon = _sd_by(worker, residual, n_i)
        sigma = _sd_by(stimulus, residual, n_j)
        weight = (1.0 / (upsilon * upsilon + WEIGHT_EPSILON))[worker]
        psi = np.bincount(stimulus, weight * (x - delta[worker]), J) / np.bincount(stimulus, weight, J)
        delta = _mean_by(worker, x - psi[stimulus], n_i)
        iterations += 1
        if np.linalg.norm(previous - psi) < threshold:
            converged = True
            break
        if iterations >= max_iterations:
            break
    with np.errstate(divide="ignore", invalid="ignore"):
        quality_se = 1.0 / np.sqrt(np.maximum(0.0, n_j / sigma ** 2))
        bias_se = 1.0 / np.sqrt(np.maximum(0.0, n_i / upsilon ** 2))
        residual = x - psi[stimulus] - delta[worker]
        v2 = (upsilon * upsilon)[worker]
        curvature = np.bincount(worker, 1.0 / v2 - 3.0 * residual * residual / (v2 * v2), I)
        inconsistency_se = 1.0 / np.sqrt(np.maximum(0.0, -curvature))
        low = upsilon * np.sqrt(n_i / chdtri(n_i, 0.025))     # chdtri(df, q): the upper-q quantile
        high = upsilon * np.sqrt(n_i / chdtri(n_i, 0.975))
    shift = float(np.mean(delta))
    return P913Fit(quality=psi + shift, quality_se=quality_se, bias=delta - shift, bias_se=bias_se,
                   inconsistency=upsilon, inconsistency_se=inconsistency_se, inconsistency_low=low,
                   inconsistency_high=high, n_stimulus=n_j.astype(np.int64), n_worker=n_i.astype(np.int64),
                   iterations=iterations, converged=converged)


# --------------------------------------------------------------------------- simulation

@dataclass(frozen=True)
class SimulatedRatings:
    """A simulated rating study with its truth (indices into ``stimulus_ids`` / ``worker_ids``)."""

    stimulus: np.ndarray        # (n,) stimulus index of each rating
    worker: np.ndarray          # (n,) worker index
    rating: np.ndarray          # (n,) float ratings on the scale (rounded unless continuous)
    true_quality: np.ndarray    # (J,) on the rating scale
    true_bias: np.ndarray       # (I,)
    true_inconsistency: np.ndarray  # (I,)
    worker_type: np.ndarray     # (I,) "honest", "careless" (uniform random) or "straight" (one value)
    stimulus_ids: np.ndarray
    worker_ids: np.ndarray
    low: float
    high: float

    def columns(self) -> dict[str, np.ndarray]:
        """The ratings as the columns of a ratings.csv: ``worker_id``, ``stimulus_id``, ``rating``."""
        return {"worker_id": self.worker_ids[self.worker], "stimulus_id": self.stimulus_ids[self.stimulus],
                "rating": np.array([repr(float(v)) for v in self.rating])}


def simulate_ratings(n_stimuli: int = 40, n_workers: int = 30, ratings_per_stimulus: int | None = None,
                     *, low: float = 1.0, high: float = 5.0, quality_sd: float = 0.9, bias_sd: float = 0.3,
                     inconsistency_range: tuple[float, float] = (0.3, 0.9), careless: float = 0.0,
                     straight_liners: float = 0.0, continuous: bool = False, clip: bool = True,
                     centre_bias: bool = True, seed: int | np.random.Generator | None = 0) -> SimulatedRatings:
    """Simulate ratings from the P.913 model, with careless and straight-lining workers.

    Parameters
    ----------
    n_stimuli, n_workers : int
        Study size.
    ratings_per_stimulus : int, optional
        Ratings of each stimulus, by distinct workers drawn at random (default: every worker rates every
        stimulus, a complete design).
    low, high : float
        The scale (ACR/DCR 1..5, CCR -3..3).
    quality_sd : float
        SD of the true qualities around the scale's middle.
    bias_sd : float
        SD of the workers' biases.
    centre_bias : bool
        Centre the drawn biases on zero (the model's convention: the true qualities are then what the
        model estimates). ``False`` leaves them as drawn, the workers a sample of a population of mean
        bias zero (for the coverage of intervals over repeated studies).
    inconsistency_range : (float, float)
        Each worker's inconsistency (SD) is uniform in this range.
    careless, straight_liners : float
        Shares of workers who rate uniformly at random, and who give one value to everything.
    continuous : bool
        Keep the ratings continuous (a slider); otherwise they are rounded to whole scale points.
    clip : bool
        Clip to ``[low, high]`` (with ``False`` and ``continuous`` the data follow the model exactly).
    seed : int or numpy.random.Generator

    Returns
    -------
    SimulatedRatings
    """
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    if not 0 <= careless + straight_liners <= 1:
        raise ValueError("the shares of careless and straight-lining workers must add up to at most 1")
    middle = (low + high) / 2
    quality = np.clip(middle + rng.normal(0.0, quality_sd, n_stimuli), low + 0.3, high - 0.3)
    bias = rng.normal(0.0, bias_sd, n_workers)
    if centre_bias:
        bias -= bias.mean()
    inconsistency = rng.uniform(*inconsistency_range, n_workers)
    n_careless, n_straight = round(careless * n_workers), round(straight_liners * n_workers)
    kind = np.array(["careless"] * n_careless + ["straight"] * n_straight
                    + ["honest"] * (n_workers - n_careless - n_straight))[rng.permutation(n_workers)]
    if ratings_per_stimulus is None or ratings_per_stimulus >= n_workers:
        stimulus = np.repeat(np.arange(n_stimuli), n_workers)
        worker = np.tile(np.arange(n_workers), n_stimuli)
    else:
        # distinct workers per stimulus: the smallest k of a row of uniform keys
        keys = rng.random((n_stimuli, n_workers))
        worker = np.argpartition(keys, ratings_per_stimulus - 1, axis=1)[:, :ratings_per_stimulus].ravel()
        stimulus = np.repeat(np.arange(n_stimuli), ratings_per_stimulus)
    value = quality[stimulus] + bias[worker] + inconsistency[worker] * rng.standard_normal(stimulus.size)
    value = np.where(kind[worker] == "careless", rng.uniform(low, high, stimulus.size), value)
    straight_value = rng.integers(int(np.ceil(low)), int(np.floor(high)) + 1, n_workers).astype(float)
    value = np.where(kind[worker] == "straight", straight_value[worker], value)
    if not continuous:
        value = np.round(value)
    if clip:
        value = np.clip(value, low, high)
    return SimulatedRatings(stimulus=stimulus, worker=worker, rating=value, true_quality=quality, true_bias=bias,
                            true_inconsistency=inconsistency, worker_type=kind,
                            stimulus_ids=np.array([f"s{k:03d}" for k in range(n_stimuli)]),
                            worker_ids=np.array([f"w{k:03d}" for k in range(n_workers)]), low=low, high=high)
