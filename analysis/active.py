"""Active pair sampling: choose the next comparisons of a set where they teach the most.

Posterior
---------
Scores follow Thurstone Case V (:mod:`analysis.thurstone`): ``P(i beats j) = Phi(s_i - s_j)``,
z units. The posterior over the scores of one set is approximated by a Gaussian at the
maximum a posteriori estimate (Laplace): its mean is :func:`~analysis.thurstone.thurstone_mle`
with a ridge prior, its covariance the inverse of the penalised negative log-likelihood's
Hessian there. The covariance is full, not factorised as in ASAP's message passing, so the
uncertainty of a difference ``s_i - s_j`` knows about the indirect comparisons that link ``i``
and ``j``. :meth:`ScorePosterior.update` folds a few new votes in cheaply (one Newton step and
a low-rank update of the covariance) when a caller keeps the posterior between batches.

What a comparison is worth
--------------------------
A batch tries to reduce the posterior loss ::

    R = sum over pairs i < j of  w_ij * Var(s_i - s_j),
    w_ij = P_ij / Var(s_i - s_j) + beta * mean(P / Var)

where ``P_ij = Phi(-|E[s_i - s_j]| / sd(s_i - s_j))`` is the posterior probability that the
current estimate puts ``i`` and ``j`` in the wrong order. The first term is the relative
variance of the differences whose order is still in doubt (what rank correlations such as
SROCC measure); the second, uniform term (``beta``, :data:`UNIFORM_WEIGHT`) keeps the whole
scale in view (what RMSE measures), so that far-apart items stay linked. The weights are frozen
at the start of a batch. One more comparison of ``a`` and ``b`` adds, on average over its
outcome, ``f`` to the precision along ``u = e_a - e_b``, where ``f`` is the Fisher information
``phi(d)^2 / (Phi(d) Phi(-d))`` averaged over the posterior of ``d = s_a - s_b``
(:func:`expected_fisher_information`); the covariance loses ``f Sigma u u' Sigma / (1 + f u'
Sigma u)`` and ``R`` drops by ``f / (1 + f u' Sigma u) * u' Sigma L Sigma u`` with ``L`` the
Laplacian of ``w``. Every candidate's value is read off the ``n x n`` matrix ``Sigma L Sigma``
at once. :func:`pair_gains` gives the classical alternative, the expected information gain
(BALD, as ASAP) of each pair; in simulated studies of 20 and 155 items, batches chosen by the
loss above reached as high or higher SROCC than batches chosen by BALD, at lower RMSE.

Batches
-------
Up to :data:`GREEDY_LIMIT` items a batch is chosen greedily with the posterior updated by
expected outcomes: the best pair, then the covariance and ``u' Sigma L Sigma u`` of every
candidate are updated as if its comparison had been made (a rank-one update, ``O(n^2)``), and
so on. The update lowers the value of every pair that shares information with a chosen one, so
a batch spreads over the set. Larger sets skip the updates (``O(n^2)`` per pick would cost
seconds) and spread the batch with a cap on how often one item may appear in it. Ties are
broken at random (``rng``), so a set without votes gets a random, spread-out batch.

Cost per batch (``benchmarks/active_sampling.py``): the fit, one ``n x n`` inversion and two
``n x n`` products (single precision above :data:`FLOAT32_LIMIT` items), about 20 ms at 155
items and well under a second at 2,000 when the previous batch's mean is passed as ``init``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg
from scipy.special import log_ndtr, ndtr

from .thurstone import _hessian, _pair_terms, aggregate_pairs, thurstone_mle
from .threads import limits_blas_threads

SELECTION_PRIOR_STRENGTH = 4.0
"""Ridge (prior precision) of the selection posterior, z units.

Much stronger than the reporting MLE's 0.01 on purpose: with a prior SD of 10 z units, one
unanimous vote already moves a pair several z units apart and the posterior declares it
settled, so the selector would never look at it again. A prior SD of 0.5 z units keeps early
posteriors modest; after a few votes per item the data dominate. Tuned on simulated studies
(``benchmarks/active_sampling.py``); it only steers the choice of pairs, never a reported scale.
"""

UNIFORM_WEIGHT = 3.0
"""``beta``: weight of the uniform (whole-scale) term of the loss relative to the mean order term.

On simulated studies of 20 and 155 items, 3 keeps the RMSE of active studies at or below random
sampling's from one standard trial on, while their SROCC stays ahead at every budget; 1 gains a
little SROCC in the first standard trial and loses RMSE.
"""

GREEDY_LIMIT = 400
"""Largest set for which batches are chosen greedily with posterior updates (``O(n^2)`` per pick)."""

GREEDY_POOL = 8
"""The greedy search considers the ``GREEDY_POOL * batch_size`` pairs of highest initial value."""

FLOAT32_LIMIT = 1000
"""Above this many items the covariance is inverted and multiplied in single precision (twice as fast)."""

_C2 = np.pi * np.log(2.0) / 2.0  # Houlsby et al.: h(Phi(x)) ~ exp(-x^2 / (2 C^2)) in bits
_LN2 = np.log(2.0)
_FISHER_PEAK, _FISHER_WIDTH = 2.0 / np.pi, 1.3  # I(d) ~ (2/pi) exp(-d^2 / (2 * 1.3))


# --------------------------------------------------------------------------- posterior

@dataclass
class ScorePosterior:
    """Gaussian (Laplace) posterior over the scores of one set.

    Attributes
    ----------
    mean : (n,) array
        MAP scores, z units.
    cov : (n, n) array
        Posterior covariance: the inverse of ``precision`` (single precision above
        :data:`FLOAT32_LIMIT` items).
    precision : (n, n) array
        Hessian of the penalised negative log-likelihood at ``mean``.
    prior_strength : float
        Ridge used.
    """

    mean: np.ndarray
    cov: np.ndarray
    precision: np.ndarray
    prior_strength: float

    @property
    def n_items(self) -> int:
        return len(self.mean)

    def difference_moments(self, pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and variance of ``s_i - s_j`` for each row ``(i, j)`` of ``pairs``."""
        pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
        i, j = pairs[:, 0], pairs[:, 1]
        d = np.diagonal(self.cov).astype(float)
        var = d[i] + d[j] - 2.0 * self.cov[i, j]
        return self.mean[i] - self.mean[j], np.maximum(var, 1e-12)

    def mean_difference_variance(self) -> float:
        """Mean over all pairs of ``Var(s_i - s_j)``: the scale's imprecision, free of the gauge."""
        return _mean_difference_variance(self.cov)

    @limits_blas_threads
    def update(self, winners: np.ndarray, losers: np.ndarray) -> "ScorePosterior":
        """The posterior after a few more votes: one Newton step from the current mean.

        The precision gains the new votes' curvature at the current mean (earlier votes keep
        theirs), so the covariance changes by a rank-``k`` Woodbury update, ``O(n^2 k)`` for
        ``k`` distinct new pairs, instead of a fresh ``O(n^3)`` inversion. Earlier votes are not
        re-linearised: refit with :func:`fit_posterior` once the new votes are many (about
        ``n / 4`` or more, where the update stops being cheaper anyway).
        """
        winners, losers = _check_votes(self.n_items, winners, losers)
        if not len(winners):
            return self
        pairs, wins = aggregate_pairs(winners, losers, np.ones(len(winners), dtype=bool))
        i, j = pairs[:, 0], pairs[:, 1]
        _, grad_pair, curv = _pair_terms(self.mean[i] - self.mean[j], wins[:, 0], wins[:, 1])
        cols = np.arange(len(pairs))
        u = np.zeros((self.n_items, len(pairs)))
        u[i, cols], u[j, cols] = 1.0, -1.0
        su = self.cov @ u
        inner = u.T @ su + np.diag(1.0 / np.maximum(curv, 1e-12))
        cov = self.cov - (su @ scipy.linalg.solve(inner, su.T, assume_a="pos")).astype(self.cov.dtype)
        # The old objective's gradient is ~0 at its MAP: only the new votes pull the mean.
        step = -(cov @ (u @ grad_pair))
        precision = self.precision + (u * curv) @ u.T
        return ScorePosterior(self.mean + step, cov, precision, self.prior_strength)


def _check_votes(n_items: int, winners, losers) -> tuple[np.ndarray, np.ndarray]:
    _check_n_items(n_items)
    winners = np.asarray(winners).ravel()
    losers = np.asarray(losers).ravel()
    if winners.shape != losers.shape:
        raise ValueError(f"winners and losers differ in length: {winners.size} vs {losers.size}")
    for name, values in (("winners", winners), ("losers", losers)):
        _check_indices(name, values, n_items)
    if np.any(winners == losers):
        raise ValueError("a vote compares an item with itself (winner == loser)")
    return winners.astype(np.int64), losers.astype(np.int64)


def _check_n_items(n_items) -> None:
    if isinstance(n_items, bool) or not isinstance(n_items, (int, np.integer)) or n_items < 2:
        raise ValueError(f"n_items must be a whole number of at least 2, got {n_items!r}")


def _check_indices(name: str, values: np.ndarray, n_items: int) -> None:
    if not values.size:
        return
    if not np.issubdtype(values.dtype, np.integer):
        raise ValueError(f"{name} must be integer item indices, got dtype {values.dtype}")
    if values.min() < 0 or values.max() >= n_items:
        raise ValueError(f"{name} must be item indices in [0, {n_items}), found {values.min()}..{values.max()}")


@limits_blas_threads
def fit_posterior(n_items: int, winners: np.ndarray, losers: np.ndarray, *,
                  prior_strength: float = SELECTION_PRIOR_STRENGTH,
                  init: np.ndarray | None = None) -> ScorePosterior:
    """Laplace posterior over a set's Thurstone scores from its votes.

    Parameters
    ----------
    n_items : int
        Items of the set, indexed ``0 .. n_items - 1``.
    winners, losers : (V,) int arrays
        Item index of the winner and of the loser of each vote.
    prior_strength : float
        Ridge (prior precision); see :data:`SELECTION_PRIOR_STRENGTH`.
    init : (n_items,) array, optional
        Warm start of the MAP search (e.g. the previous batch's mean).

    Returns
    -------
    ScorePosterior
    """
    winners, losers = _check_votes(n_items, winners, losers)
    if not prior_strength > 0:
        raise ValueError(f"prior_strength must be positive, got {prior_strength}")
    n = int(n_items)
    if len(winners):
        pairs, wins = aggregate_pairs(winners, losers, np.ones(len(winners), dtype=bool))
        # A loose tolerance: the selection needs the MAP to a few thousandths of a z unit.
        mean = thurstone_mle(pairs, wins, n, prior_strength, init=init, tol=1e-4)
        _, _, curv = _pair_terms(mean[pairs[:, 0]] - mean[pairs[:, 1]], wins[:, 0], wins[:, 1])
        precision = _hessian(pairs, curv, n, prior_strength, dense=True)
    else:
        mean, precision = np.zeros(n), np.eye(n) * prior_strength
    return ScorePosterior(mean, _inverse_spd(precision), precision, float(prior_strength))


def _inverse_spd(a: np.ndarray) -> np.ndarray:
    """Inverse of a symmetric positive definite matrix by LAPACK's potrf/potri.

    Single precision above :data:`FLOAT32_LIMIT` rows: twice as fast, and the selection
    needs variances to a few digits only.
    """
    single = len(a) > FLOAT32_LIMIT
    potrf, potri = ((scipy.linalg.lapack.spotrf, scipy.linalg.lapack.spotri) if single
                    else (scipy.linalg.lapack.dpotrf, scipy.linalg.lapack.dpotri))
    factor, info = potrf(a.astype(np.float32) if single else a, lower=1, clean=1)
    if info != 0:
        raise np.linalg.LinAlgError(f"the posterior precision is not positive definite (potrf info {info})")
    inv, info = potri(factor, lower=1)  # the lower triangle; the upper one is zero (clean=1)
    if info != 0:
        raise np.linalg.LinAlgError(f"inverting the posterior precision failed (potri info {info})")
    full = inv + inv.T
    full[np.diag_indices_from(full)] *= 0.5
    return full


def _mean_difference_variance(cov: np.ndarray) -> float:
    """``mean over i < j of Var(s_i - s_j) = 2 (tr C - 1'C1 / n) / (n - 1)``."""
    n = len(cov)
    return float(2.0 * (np.trace(cov, dtype=float) - cov.sum(dtype=float) / n) / (n - 1))


# --------------------------------------------------------------------------- information

def _binary_entropy_bits(p: np.ndarray) -> np.ndarray:
    p = np.clip(p, 1e-300, 1.0)
    q = np.clip(1.0 - p, 1e-300, 1.0)
    return -(p * np.log(p) + q * np.log(q)) / _LN2


def information_gain(mean_diff: np.ndarray, var_diff: np.ndarray) -> np.ndarray:
    """Expected information gain (bits) of one comparison whose difference is ``N(mean_diff, var_diff)``.

    BALD: the entropy of the predicted outcome minus the expected entropy of the outcome given
    the scores, the latter in Houlsby et al.'s closed form (within 0.003 bits of quadrature).
    """
    mu = np.asarray(mean_diff, dtype=float)
    var = np.asarray(var_diff, dtype=float)
    predictive = ndtr(mu / np.sqrt(1.0 + var))
    expected = np.sqrt(_C2 / (var + _C2)) * np.exp(-mu * mu / (2.0 * (var + _C2)))
    return np.maximum(_binary_entropy_bits(predictive) - expected, 0.0)


def fisher_information(mean_diff: np.ndarray) -> np.ndarray:
    """Expected curvature of one comparison's negative log-likelihood at difference ``mean_diff``.

    ``phi(d)^2 / (Phi(d) Phi(-d))``: the precision that one more comparison adds to
    ``s_i - s_j`` on average over its outcome (0.64 at ``d = 0``, 0.13 at ``d = 2``).
    """
    d = np.asarray(mean_diff, dtype=float)
    log_pdf = -0.5 * d * d - 0.5 * np.log(2.0 * np.pi)
    return np.exp(2.0 * log_pdf - log_ndtr(d) - log_ndtr(-d))


def expected_fisher_information(mean_diff: np.ndarray, var_diff: np.ndarray) -> np.ndarray:
    """:func:`fisher_information` averaged over ``d ~ N(mean_diff, var_diff)``.

    Closed form from ``I(d) ~ 0.6366 exp(-d^2 / 2.6)`` (within 0.01 of the exact curve, and within
    about 1 % of quadrature once averaged): a pair whose difference is still uncertain is expected
    to be informative even when its current estimate is far from 0.
    """
    var = _FISHER_WIDTH + _floats(var_diff)
    mu = _floats(mean_diff)
    return _FISHER_PEAK * np.sqrt(_FISHER_WIDTH / var) * np.exp(-mu * mu / (2.0 * var))


def _floats(x) -> np.ndarray:
    """``x`` as a float array, keeping single precision (the large sets' matrices) as it is."""
    x = np.asarray(x)
    return x if x.dtype in (np.float32, np.float64) else x.astype(float)


def pair_gains(posterior: ScorePosterior, pairs: np.ndarray) -> np.ndarray:
    """Expected information gain (bits, BALD) of one more comparison of each row of ``pairs``."""
    return information_gain(*posterior.difference_moments(pairs))


# --------------------------------------------------------------------------- loss and values

def loss_weights(posterior: ScorePosterior, uniform_weight: float = UNIFORM_WEIGHT) -> np.ndarray:
    """``(n, n)`` weights ``w_ij`` of the posterior loss (zero diagonal); see the module docstring."""
    return _moments_and_weights(posterior, uniform_weight)[2]


def _moments_and_weights(posterior: ScorePosterior, uniform_weight: float):
    """``(n, n)`` matrices of ``E[s_i - s_j]``, ``Var(s_i - s_j)`` and the loss weights ``w_ij``."""
    cov = posterior.cov
    d = np.diagonal(cov)
    var = np.maximum(d[:, None] + d[None, :] - 2.0 * cov, 1e-12)
    mean = posterior.mean.astype(cov.dtype)
    diff = mean[:, None] - mean[None, :]
    weights = ndtr(-np.abs(diff) / np.sqrt(var)) / var
    np.fill_diagonal(weights, 0.0)
    n = len(weights)
    weights += uniform_weight * weights.sum(dtype=float) / (n * (n - 1))
    np.fill_diagonal(weights, 0.0)
    return diff, var, weights


def _laplacian(weights: np.ndarray) -> np.ndarray:
    lap = -weights
    lap[np.diag_indices_from(lap)] = weights.sum(axis=1)
    return lap


@dataclass(frozen=True)
class _ValueMatrices:
    """Per-pair terms of a comparison's value, as ``(n, n)`` matrices: ``value = f / (1 + f v) * reach``."""

    fisher: np.ndarray
    var: np.ndarray
    reach: np.ndarray
    value: np.ndarray
    lap: np.ndarray


def _value_matrices(posterior: ScorePosterior, uniform_weight: float) -> _ValueMatrices:
    diff, var, weights = _moments_and_weights(posterior, uniform_weight)
    lap = _laplacian(weights)
    cov = posterior.cov
    loss = cov @ (lap @ cov)  # Sigma L Sigma: two n x n products, the dominant cost
    diag = np.diagonal(loss)
    reach = diag[:, None] + diag[None, :] - 2.0 * loss
    fisher = expected_fisher_information(diff, var).astype(cov.dtype, copy=False)
    return _ValueMatrices(fisher, var, reach, fisher / (1.0 + fisher * var) * reach, lap)


@limits_blas_threads
def pair_values(posterior: ScorePosterior, pairs: np.ndarray,
                uniform_weight: float = UNIFORM_WEIGHT) -> np.ndarray:
    """Expected drop of the posterior loss from one more comparison of each row of ``pairs``.

    Costs two ``n x n`` matrix products, whatever the number of pairs.
    """
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    return _value_matrices(posterior, uniform_weight).value[pairs[:, 0], pairs[:, 1]].astype(float)


# --------------------------------------------------------------------------- batches

@dataclass(frozen=True)
class PrecisionGain:
    """How much more precise a set's scale is expected to be after a batch.

    Attributes
    ----------
    sd_before, sd_after : float
        Root mean posterior variance of the score differences ``s_i - s_j`` over all pairs
        (z units), now and after the batch's comparisons (their expected curvature added).
    """

    sd_before: float
    sd_after: float

    @property
    def percent(self) -> float:
        """Relative increase of precision (1 / variance), in percent: what the dashboard shows."""
        return 100.0 * ((self.sd_before / self.sd_after) ** 2 - 1.0) if self.sd_after > 0 else 0.0


@dataclass(frozen=True)
class ActiveBatch:
    """A chosen batch: ``pairs`` (k, 2) with ``i < j``, and its expected precision gain."""

    pairs: np.ndarray
    gain: PrecisionGain | None
    posterior: ScorePosterior


def candidate_pairs(n_items: int, candidates: np.ndarray | None = None,
                    exclude: np.ndarray | None = None) -> np.ndarray:
    """The pairs a batch may use: ``candidates`` (default: all pairs) minus ``exclude``.

    Both are ``(m, 2)`` arrays of item indices in any order; the result has ``i < j``, sorted,
    without repeats.

    Raises
    ------
    ValueError
        A pair names an item outside ``[0, n_items)``, an item twice, or the array is not ``(m, 2)``.
    """
    _check_n_items(n_items)
    n = int(n_items)
    if candidates is None:
        i, j = np.triu_indices(n, 1)
        pairs = np.column_stack([i, j]).astype(np.int64)
    else:
        pairs = _normalise_pairs("candidates", candidates, n)
    if exclude is not None and len(pairs):
        gone = _normalise_pairs("exclude", exclude, n)
        pairs = pairs[~np.isin(pairs[:, 0] * n + pairs[:, 1], gone[:, 0] * n + gone[:, 1])]
    return pairs


def _normalise_pairs(name: str, pairs, n: int) -> np.ndarray:
    pairs = np.asarray(pairs)
    if pairs.size == 0:
        return np.empty((0, 2), dtype=np.int64)
    if pairs.ndim != 2 or pairs.shape[1] != 2:
        raise ValueError(f"{name} must be an (m, 2) array of item index pairs, got shape {pairs.shape}")
    _check_indices(name, pairs, n)
    if np.any(pairs[:, 0] == pairs[:, 1]):
        raise ValueError(f"{name} pairs an item with itself")
    low, high = np.minimum(pairs[:, 0], pairs[:, 1]), np.maximum(pairs[:, 0], pairs[:, 1])
    keys = np.unique(low.astype(np.int64) * n + high)
    return np.column_stack([keys // n, keys % n])


@limits_blas_threads
def plan_batch(n_items: int, winners: np.ndarray, losers: np.ndarray, batch_size: int, *,
               rng: np.random.Generator, candidates: np.ndarray | None = None,
               exclude: np.ndarray | None = None, posterior: ScorePosterior | None = None,
               init: np.ndarray | None = None, prior_strength: float = SELECTION_PRIOR_STRENGTH,
               uniform_weight: float = UNIFORM_WEIGHT, with_gain: bool = True) -> ActiveBatch:
    """Choose the next batch of comparisons of one set, with its expected precision gain.

    Parameters
    ----------
    n_items : int
        Items of the set, indexed ``0 .. n_items - 1``.
    winners, losers : (V,) int arrays
        The set's votes so far (winner and loser item index of each).
    batch_size : int
        Most pairs to return.
    rng : numpy.random.Generator
        Breaks ties (all of them, when there are no votes yet).
    candidates : (m, 2) int array, optional
        Only these pairs may be chosen (default: every pair of the set).
    exclude : (m, 2) int array, optional
        Pairs never to choose (e.g. pages already reserved).
    posterior : ScorePosterior, optional
        Use this posterior (e.g. kept up to date by :meth:`ScorePosterior.update`) instead of
        fitting one from ``winners`` and ``losers``.
    init : (n_items,) array, optional
        Warm start of the fit (the previous batch's ``posterior.mean``).
    prior_strength, uniform_weight : float
        See :data:`SELECTION_PRIOR_STRENGTH` and :data:`UNIFORM_WEIGHT`.
    with_gain : bool
        Compute the expected precision gain (free up to :data:`GREEDY_LIMIT` items, one more
        ``O(n^3)`` inversion above; ``gain`` is None when False).

    Returns
    -------
    ActiveBatch
        ``pairs`` is ``(k, 2)``, ``i < j``, distinct, ``k = min(batch_size, usable pairs)``,
        in the order chosen (most valuable first).
    """
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 0:
        raise ValueError(f"batch_size must be a whole number >= 0, got {batch_size!r}")
    pairs = candidate_pairs(n_items, candidates, exclude)
    if posterior is None:
        posterior = fit_posterior(n_items, winners, losers, prior_strength=prior_strength, init=init)
    elif posterior.n_items != n_items:
        raise ValueError(f"the posterior has {posterior.n_items} items, n_items is {n_items}")
    k = min(int(batch_size), len(pairs))
    if k == 0:
        empty = np.empty((0, 2), dtype=np.int64)
        return ActiveBatch(empty, expected_precision_gain(posterior, empty) if with_gain else None, posterior)
    terms = _value_matrices(posterior, uniform_weight)
    # Candidates as flat indices i * n + j into the matrices; a tiny random factor breaks ties
    # (all pairs tie before the first vote).
    flat = pairs[:, 0] * n_items + pairs[:, 1]
    tie = 1.0 + 1e-6 * rng.random(len(flat))
    value = terms.value.ravel()[flat].astype(float) * tie
    if n_items <= GREEDY_LIMIT:
        top = _best(value, GREEDY_POOL * k)
        chosen, after = _greedy(posterior, terms, flat[top], tie[top], k)
    else:
        chosen, after = _capped(flat, value, n_items, k), None
    batch = np.column_stack([chosen // n_items, chosen % n_items]).astype(np.int64)
    if not with_gain:
        return ActiveBatch(batch, None, posterior)
    if after is None:
        return ActiveBatch(batch, expected_precision_gain(posterior, batch), posterior)
    before = posterior.mean_difference_variance()
    return ActiveBatch(batch, PrecisionGain(float(np.sqrt(before)), float(np.sqrt(after))), posterior)


def select_batch(n_items: int, winners: np.ndarray, losers: np.ndarray, batch_size: int, *,
                 rng: np.random.Generator, candidates: np.ndarray | None = None,
                 exclude: np.ndarray | None = None, **options) -> np.ndarray:
    """The pairs of :func:`plan_batch`: ``(k, 2)`` int array, ``i < j``, distinct, ``k <= batch_size``.

    ``options`` are passed on (``posterior``, ``init``, ``prior_strength``, ``uniform_weight``).
    """
    return plan_batch(n_items, winners, losers, batch_size, rng=rng, candidates=candidates,
                      exclude=exclude, with_gain=False, **options).pairs


def _best(value: np.ndarray, size: int) -> np.ndarray:
    """Indices of the ``size`` largest values, largest first."""
    top = np.argpartition(-value, size - 1)[:size] if size < len(value) else np.arange(len(value))
    return top[np.argsort(-value[top], kind="stable")]


def _greedy(posterior: ScorePosterior, terms: _ValueMatrices, flat: np.ndarray, tie: np.ndarray,
            k: int) -> tuple[np.ndarray, float]:
    """Pick ``k`` of the candidate pairs ``flat`` one by one, updating the posterior by each pick's
    expected curvature (``tie``: each candidate's tie-breaking factor).

    Only the ``GREEDY_POOL * k`` pairs of highest value at the start compete (values shrink as the
    batch fills up, so the others would hardly ever win): ``O(n^2)`` per pick for the covariance,
    ``O(k)`` for the values.
    """
    n = posterior.n_items
    a, b = flat // n, flat % n
    fisher = terms.fisher.ravel()[flat].astype(float)
    var = terms.var.ravel()[flat].astype(float)
    reach = terms.reach.ravel()[flat].astype(float)
    lap = terms.lap.astype(float, copy=False)
    cov = np.array(posterior.cov, dtype=float)
    value = fisher / (1.0 + fisher * var) * reach * tie
    chosen = []
    for _ in range(k):
        p = int(np.argmax(value))
        chosen.append(p)
        value[p] = -np.inf
        w = cov[:, a[p]] - cov[:, b[p]]
        shrink = fisher[p] / (1.0 + fisher[p] * var[p])
        lap_w = lap @ w
        z = cov @ lap_w
        dw, dz = w[a] - w[b], z[a] - z[b]
        # Sigma' = Sigma - c w w';  u' Sigma' L Sigma' u = reach - 2c (u'w)(u'z) + c^2 (w'Lw) (u'w)^2
        reach -= shrink * (2.0 * dw * dz - shrink * (w @ lap_w) * dw * dw)
        var = np.maximum(var - shrink * dw * dw, 1e-12)
        cov -= shrink * np.outer(w, w)
        live = np.isfinite(value)
        value[live] = fisher[live] / (1.0 + fisher[live] * var[live]) * reach[live] * tie[live]
    return flat[chosen], _mean_difference_variance(cov)


def _capped(flat: np.ndarray, value: np.ndarray, n: int, k: int) -> np.ndarray:
    """``k`` valuable candidates (flat indices ``i * n + j``) such that no item is in more than
    ``ceil(2k / n) + 1`` of them.

    In rounds, every item that still has room proposes its most valuable candidate among the items
    with room, and the proposals are accepted best first as far as room allows. A plain global
    ranking would crowd around the few most uncertain items, whose every pair ranks high; rounds
    move on to the next ones as soon as those are full. When no candidate is left the cap is raised.
    """
    cap = -(-2 * k // n) + 1
    values = np.full(n * n, -np.inf, dtype=np.float32)  # every candidate, both orientations
    values[flat] = value
    values[(flat % n) * n + flat // n] = value
    values = values.reshape(n, n)
    table = values.copy()
    room = np.full(n, cap)
    masked = np.zeros(n, dtype=bool)
    rows = np.arange(n)
    chosen: list[np.ndarray] = []
    count = 0
    while count < k:
        full = np.flatnonzero((room <= 0) & ~masked)  # items filled since the last round
        table[full, :] = -np.inf
        table[:, full] = -np.inf
        masked[full] = True
        partner = table.argmax(axis=1)
        best = table[rows, partner]
        live = np.isfinite(best)
        if not live.any():
            if cap >= k or not np.isfinite(values).any():
                break
            cap += 1  # the candidates are too few or too clustered to fill the batch at this cap
            room += 1
            table = values.copy()
            masked[:] = False
            continue
        low = np.minimum(rows[live], partner[live])
        high = np.maximum(rows[live], partner[live])
        proposals, first = np.unique(low * n + high, return_index=True)  # i and j may propose each other
        proposals = proposals[np.argsort(-best[live][first], kind="stable")]
        take = proposals[_b_matching(proposals // n, proposals % n, room, k - count)]
        chosen.append(take)
        count += len(take)
        np.subtract.at(room, take // n, 1)
        np.subtract.at(room, take % n, 1)
        for grid in (table, values):  # a pair is chosen once
            grid[take // n, take % n] = -np.inf
            grid[take % n, take // n] = -np.inf
    return np.concatenate(chosen) if chosen else np.empty(0, dtype=np.int64)


def _b_matching(a: np.ndarray, b: np.ndarray, room: np.ndarray, k: int) -> np.ndarray:
    """Greedy b-matching: rows of the pairs ``(a, b)`` (best first) to take, at most ``k``, in order,
    so that item ``i`` gets at most ``room[i]`` of them.

    Works in rounds: a round takes every pair both of whose items have fewer earlier candidates
    than room left, which can never overfill an item; the best pair left always qualifies, so
    every round makes progress.
    """
    room = room.copy()
    alive = (room[a] > 0) & (room[b] > 0)
    out: list[np.ndarray] = []
    count = 0
    while count < k and alive.any():
        rows = np.flatnonzero(alive)
        ends = np.column_stack([a[rows], b[rows]]).ravel()  # in row order, so ranks follow value
        order = np.argsort(ends, kind="stable")
        sorted_ends = ends[order]
        starts = np.flatnonzero(np.r_[True, sorted_ends[1:] != sorted_ends[:-1]])
        rank = np.empty(len(ends), dtype=np.int64)  # earlier candidates sharing the item
        rank[order] = np.arange(len(ends)) - np.repeat(starts, np.diff(np.r_[starts, len(ends)]))
        ok = (rank[0::2] < room[a[rows]]) & (rank[1::2] < room[b[rows]])
        take = rows[ok][:k - count]
        if not len(take):  # cannot happen (the first row qualifies); guards the loop
            break
        out.append(take)
        count += len(take)
        np.subtract.at(room, a[take], 1)
        np.subtract.at(room, b[take], 1)
        alive[take] = False
        alive &= (room[a] > 0) & (room[b] > 0)
    return np.sort(np.concatenate(out)) if out else np.empty(0, dtype=np.int64)


@limits_blas_threads
def expected_precision_gain(posterior: ScorePosterior, pairs: np.ndarray) -> PrecisionGain:
    """Expected precision of the scale before and after one more comparison of each row of ``pairs``.

    The batch's expected curvature (:func:`expected_fisher_information` of each pair under the
    current posterior) is added to the posterior precision; repeated rows count repeatedly. ``O(n^3)``: about 0.1 s
    at 2,000 items.
    """
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    _check_indices("pairs", pairs, posterior.n_items)
    before = float(np.sqrt(posterior.mean_difference_variance()))
    if not len(pairs):
        return PrecisionGain(before, before)
    n = posterior.n_items
    i, j = pairs[:, 0], pairs[:, 1]
    curv = expected_fisher_information(*posterior.difference_moments(pairs))
    added = np.bincount(np.concatenate([i * n + i, j * n + j, i * n + j, j * n + i]),
                        weights=np.concatenate([curv, curv, -curv, -curv]), minlength=n * n).reshape(n, n)
    after = _mean_difference_variance(_inverse_spd(posterior.precision + added))
    return PrecisionGain(before, float(np.sqrt(after)))
