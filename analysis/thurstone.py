"""Thurstone Case V scaling of paired comparisons.

Model and units
---------------
Item ``i`` has scale value ``s_i``; an observer prefers ``i`` over ``j`` with
probability ``Phi(s_i - s_j)``, ``Phi`` the standard normal CDF. Raw scales are
therefore in *z units*: the discriminal difference ``A - B`` has unit variance
(sureal's convention; not ``Phi((s_i - s_j) / sqrt(2))``, where each item's
discriminal process would have unit variance). pwcmp's JOD units put a
difference of 1 JOD at 75 % preference: ``Phi(d_z) = 0.75`` gives
``d_z = Phi^-1(0.75) = 0.6745`` z units per JOD, so JOD = ``z / 0.6745 = z * 1.4826``
(:data:`JOD_PER_Z`). Anchored scales are unit free.

Estimators
----------
* :func:`thurstone_mle` maximises the likelihood with a weak Gaussian prior
  (ridge) ``prior_strength/2 * sum(s**2)``. Unanimous pairs, the normal case in
  sparse crowd designs, make the unregularised MLE diverge; the ridge keeps
  every estimate finite and fixes the gauge (at the optimum ``sum(s) == 0``
  exactly). Newton's method with the exact Hessian and a backtracking line
  search; likelihoods in log space (``scipy.special.log_ndtr``).
* :func:`thurstone_ls` is the classical least-squares method of StudyMB 1.0/2.0:
  minimise ``sum over compared pairs (s_i - s_j - z_ij)**2`` with ``sum(s) == 0``,
  where ``z_ij = Phi^-1(p_ij)`` and ``p_ij = (w_ij + c) / (n_ij + 2c)`` with the
  continuity correction ``c = 0.5`` so unanimous pairs give finite z-scores.

Both work on incomplete designs and take aggregated counts: ``pairs`` is an
``(P, 2)`` array of item indices and ``wins`` a ``(P, 2)`` array whose columns
count how often the first and the second item of each pair won.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg
import scipy.sparse as sp
import scipy.sparse.linalg
from scipy.sparse.csgraph import connected_components
from scipy.special import log_ndtr, ndtr, ndtri

from .threads import limits_blas_threads

JOD_PER_Z = float(1.0 / ndtri(0.75))  # 1.482602...
"""Multiply z-unit scales by this to get pwcmp's JOD units: ``Phi(1 / JOD_PER_Z) = 0.75``, so a
difference of 1 JOD means 75 % preference under this module's ``P = Phi(s_i - s_j)``."""

DEFAULT_PRIOR_STRENGTH = 0.01
DENSE_LIMIT = 1000  # above this many items, Newton steps use sparse conjugate gradients
_LOG_SQRT_2PI = 0.5 * np.log(2.0 * np.pi)


class DisconnectedDesignError(ValueError):
    """The comparison graph of a set falls apart into several components.

    Scale values of different components are not comparable: every peer but
    pwcmp silently places the components at arbitrary offsets.
    """

    def __init__(self, message: str, components: list[np.ndarray]):
        super().__init__(message)
        self.components = components


# --------------------------------------------------------------------------- counts

def aggregate_pairs(first: np.ndarray, second: np.ndarray, first_won: np.ndarray,
                    weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Aggregate individual votes into per-pair win counts.

    Parameters
    ----------
    first, second : int arrays of shape (V,)
        The two items of each vote (any order).
    first_won : bool array of shape (V,)
        True where ``first`` won.
    weights : array of shape (V,), optional
        Multiplicity of each vote (bootstrap resampling); default 1.

    Returns
    -------
    pairs : (P, 2) int array, ``pairs[:, 0] < pairs[:, 1]``, sorted
    wins : (P, 2) float array; ``wins[p, 0]`` counts wins of ``pairs[p, 0]``
    """
    pairs, vote_pair, low_won = index_pairs(first, second, first_won)
    w = np.ones(len(vote_pair)) if weights is None else np.asarray(weights, dtype=float)
    wins = np.column_stack([np.bincount(vote_pair, weights=w * low_won, minlength=len(pairs)),
                            np.bincount(vote_pair, weights=w * ~low_won, minlength=len(pairs))])
    return pairs, wins


def index_pairs(first: np.ndarray, second: np.ndarray,
                first_won: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct pairs of a list of votes, and which pair each vote belongs to.

    Returns
    -------
    pairs : (P, 2) int array, ``pairs[:, 0] < pairs[:, 1]``, sorted
    vote_pair : (V,) int array, the pair of each vote
    low_won : (V,) bool array, True where the pair's first (lower-index) item won
    """
    first = np.asarray(first, dtype=np.int64)
    second = np.asarray(second, dtype=np.int64)
    first_won = np.asarray(first_won, dtype=bool)
    low, high = np.minimum(first, second), np.maximum(first, second)
    low_won = np.where(first == low, first_won, ~first_won)
    n = max(int(high.max()) + 1 if len(high) else 0, 1)
    keys, vote_pair = np.unique(low * n + high, return_inverse=True)
    pairs = np.column_stack([keys // n, keys % n]).astype(np.int64)
    return pairs, vote_pair, low_won


def comparison_components(pairs: np.ndarray, n_items: int) -> np.ndarray:
    """Component label of every item in the comparison graph (isolated items get their own)."""
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    graph = sp.coo_matrix((np.ones(len(pairs)), (pairs[:, 0], pairs[:, 1])), shape=(n_items, n_items))
    return connected_components(graph, directed=False)[1]


def check_connected(pairs: np.ndarray, n_items: int, item_ids=None, set_id=None) -> None:
    """Raise :class:`DisconnectedDesignError` naming unreachable items, if any.

    The largest component is taken as the main one; the message lists the
    items of every other component (up to 20 names).
    """
    labels = comparison_components(pairs, n_items)
    sizes = np.bincount(labels)
    if len(sizes) <= 1:
        return
    main = int(np.argmax(sizes))
    components = [np.flatnonzero(labels == c) for c in np.argsort(-sizes)]
    stray = np.flatnonzero(labels != main)
    names = [str(item_ids[k]) if item_ids is not None else str(k) for k in stray[:20]]
    more = f" and {len(stray) - 20} more" if len(stray) > 20 else ""
    where = f"set {set_id!r}: " if set_id is not None else ""
    raise DisconnectedDesignError(
        f"{where}comparison graph has {len(sizes)} disconnected components; "
        f"{len(stray)} of {n_items} items cannot be reached from the largest component "
        f"({sizes[main]} items): {', '.join(names)}{more}. Scales of separate components "
        "are not comparable: add comparisons that link them, or allow a weak prior "
        "(--allow-disconnected) to tie each component to the common mean.",
        components,
    )


# --------------------------------------------------------------------------- anchors

def add_anchors(pairs: np.ndarray, wins: np.ndarray, n_items: int,
                anchor_votes: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Append the two virtual anchors of StudyMB 1.0/2.0 to a set's comparisons.

    The worst anchor gets index ``n_items``, the best ``n_items + 1``. Every
    real item gets ``anchor_votes`` virtual comparisons against each anchor: it
    wins all of them against the worst anchor and loses all of them against the
    best one. The anchors are estimated jointly with the real items (the
    papers reconstructed "155 + 2 images" per set); under the MLE the ridge
    prior keeps them finite, a few z units beyond the most extreme real items.
    """
    items = np.arange(n_items, dtype=np.int64)
    worst = np.full(n_items, n_items, dtype=np.int64)
    best = np.full(n_items, n_items + 1, dtype=np.int64)
    v = float(anchor_votes)
    anchor_pairs = np.vstack([np.column_stack([items, worst]), np.column_stack([items, best])])
    anchor_wins = np.vstack([np.tile([v, 0.0], (n_items, 1)), np.tile([0.0, v], (n_items, 1))])
    if wins.ndim == 3:  # a batch of count vectors sharing the same pairs
        anchor_wins = np.broadcast_to(anchor_wins, (wins.shape[0],) + anchor_wins.shape)
        return np.vstack([pairs, anchor_pairs]), np.concatenate([wins, anchor_wins], axis=1)
    return np.vstack([pairs, anchor_pairs]), np.vstack([wins, anchor_wins])


def rescale_to_anchors(scales: np.ndarray, n_items: int) -> np.ndarray:
    """Map raw scales linearly so the worst anchor is 0 and the best is 1; drop the anchors.

    Works on a single ``(n_items + 2,)`` vector or a ``(B, n_items + 2)`` batch.
    """
    worst = scales[..., n_items:n_items + 1]
    best = scales[..., n_items + 1:n_items + 2]
    return (scales[..., :n_items] - worst) / (best - worst)


# --------------------------------------------------------------------------- MLE

def _log_ndtr_pair(d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(log Phi(d), log Phi(-d))`` from one ``ndtr`` of the smaller tail (the fits' costliest call).

    The smaller tail ``p = Phi(-|d|)`` gives ``log Phi(-|d|) = log(p)`` (which is what ``log_ndtr`` itself
    computes down to -20; below, its asymptotic series and ``log(p)`` agree to 1e-15 of the value), the
    other one ``log1p(-p)``, accurate because ``p <= 1/2``; ``log_ndtr`` only where ``p`` would underflow
    (``|d| > 37``). numpy's ``log`` is vectorised, scipy's ``log_ndtr`` is not: 10-25 % faster than one
    ``log_ndtr`` and its ``exp`` for the other side, as the bootstrap calls it ((705, 100) arrays).
    """
    d = np.asarray(d, dtype=float)
    low = np.abs(d)
    np.negative(low, out=low)                # -|d|
    tail_p = ndtr(low)
    with np.errstate(divide="ignore"):
        tail = np.log(tail_p)
    far = low < -37.0
    if far.any():
        tail[far] = log_ndtr(low[far])
    body = np.log1p(np.negative(tail_p, out=tail_p), out=tail_p)
    negative = d < 0
    return np.where(negative, tail, body), np.where(negative, body, tail)


def _pair_terms(diff: np.ndarray, w: np.ndarray, l: np.ndarray):
    """Negative log-likelihood, its first and second derivative per pair w.r.t. ``diff``."""
    log_pos, log_neg = _log_ndtr_pair(diff)
    nll = -(w * log_pos + l * log_neg)
    grad, curv = _pair_derivatives(diff, w, l, log_pos, log_neg)
    return nll, grad, curv


def _penalised_nll(x: np.ndarray, pairs: np.ndarray, w: np.ndarray, l: np.ndarray, ridge: float) -> np.ndarray:
    """Objective of the MLE at ``x``, no derivatives, for line searches: ``x`` (n_items,) with ``w``, ``l``
    (P,), or every column of ``x`` (n_items, k) with ``w``, ``l`` (P, k) the columns' counts."""
    return _penalised_nll_logs(x, pairs, w, l, ridge)[0]


def _penalised_nll_logs(x: np.ndarray, pairs: np.ndarray, w: np.ndarray, l: np.ndarray, ridge: float):
    """:func:`_penalised_nll`, the ``(log Phi(d), log Phi(-d))`` it was made of and the differences ``d``, which
    the next Newton step's derivatives reuse where the line search accepts ``x`` (the logs are the costliest
    part)."""
    diff = x[pairs[:, 0]] - x[pairs[:, 1]]
    log_pos, log_neg = _log_ndtr_pair(diff)
    nll = np.einsum("p...,p...->...", w, log_pos)
    nll += np.einsum("p...,p...->...", l, log_neg)
    return 0.5 * ridge * np.einsum("n...,n...->...", x, x) - nll, log_pos, log_neg, diff


def _pair_derivatives(diff: np.ndarray, w: np.ndarray, l: np.ndarray, log_pos: np.ndarray,
                      log_neg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The first and second derivative of :func:`_pair_terms`, from the logs already known at ``diff``.

    ``grad = l * m_neg - w * m_pos`` and ``curv = w * m_pos * (diff + m_pos) + l * m_neg * (m_neg - diff)``,
    ``m_pos = phi(d) / Phi(d)`` and ``m_neg = phi(d) / Phi(-d)``, evaluated in place where a temporary
    would otherwise be made (the bootstrap's costliest arrays after the logs; the same operations in the
    same order, so the same bits).
    """
    log_pdf = -0.5 * diff
    log_pdf *= diff
    log_pdf -= _LOG_SQRT_2PI
    mills_pos = np.exp(log_pdf - log_pos)  # phi(d) / Phi(d)
    mills_neg = log_pdf - log_neg
    np.exp(mills_neg, out=mills_neg)       # phi(d) / Phi(-d)
    grad = l * mills_neg
    grad -= w * mills_pos
    curv = w * mills_pos
    curv *= diff + mills_pos
    other = l * mills_neg
    mills_neg -= diff
    other *= mills_neg
    curv += other
    return grad, curv


def _vote_derivatives(diff: np.ndarray, log_pos: np.ndarray, log_neg: np.ndarray):
    """Per pair, the first and second derivative w.r.t. ``diff`` of the negative log-likelihood of one vote won by
    the first item and of one won by the second, from the logs known at ``diff``: ``(grad_won, grad_lost,
    curv_won, curv_lost)``. A pair's derivatives are its counts times them (:func:`_pair_derivatives` for
    one pair's counts at once); where many count vectors share ``diff`` (resamples at their common start,
    linearised fits) they are computed once."""
    log_pdf = -0.5 * diff * diff - _LOG_SQRT_2PI
    mills_pos = np.exp(log_pdf - log_pos)  # phi(d) / Phi(d)
    mills_neg = np.exp(log_pdf - log_neg)  # phi(d) / Phi(-d)
    return -mills_pos, mills_neg, mills_pos * (diff + mills_pos), mills_neg * (mills_neg - diff)


def _incidence(pairs: np.ndarray, n: int) -> sp.csr_matrix:
    rows = np.repeat(np.arange(len(pairs)), 2)
    vals = np.tile([1.0, -1.0], len(pairs))
    return sp.csr_matrix((vals, (rows, pairs.ravel())), shape=(len(pairs), n))


def _hessian(pairs: np.ndarray, curv: np.ndarray, n: int, ridge: float, dense: bool):
    i, j = pairs[:, 0], pairs[:, 1]
    if dense:
        flat = np.bincount(np.concatenate([i * n + i, j * n + j, i * n + j, j * n + i]),
                           weights=np.concatenate([curv, curv, -curv, -curv]), minlength=n * n)
        hess = flat.reshape(n, n)
        hess[np.diag_indices(n)] += ridge
        return hess
    diag = np.bincount(i, curv, minlength=n) + np.bincount(j, curv, minlength=n) + ridge
    off = sp.coo_matrix((np.concatenate([-curv, -curv]), (np.concatenate([i, j]), np.concatenate([j, i]))),
                        shape=(n, n))
    return (off + sp.diags(diag)).tocsr()


@limits_blas_threads
def thurstone_mle(pairs: np.ndarray, wins: np.ndarray, n_items: int,
                  prior_strength: float = DEFAULT_PRIOR_STRENGTH, init: np.ndarray | None = None,
                  tol: float = 1e-8, max_iter: int = 100) -> np.ndarray:
    """Maximum-likelihood Thurstone Case V scale values with a weak ridge prior.

    Parameters
    ----------
    pairs : (P, 2) int array
    wins : (P, 2) float array of win counts of the first and second item
    n_items : int
    prior_strength : float
        Precision ``lambda`` of the zero-mean Gaussian prior on each scale value
        (``0.01``: a prior SD of 10 z units, negligible next to a few votes but
        enough to keep never-winning items finite). Must be positive.
    init : (n_items,) array, optional
        Warm start (e.g. the full-data solution when bootstrapping).
    tol : float
        Stop when the largest Newton step is below ``tol``.

    Returns
    -------
    (n_items,) array of scale values in z units, summing to zero.
    """
    if prior_strength <= 0:
        raise ValueError("prior_strength must be positive (the ridge keeps unanimous pairs finite)")
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    wins = np.asarray(wins, dtype=float).reshape(-1, 2)
    w, l = wins[:, 0], wins[:, 1]
    s = np.zeros(n_items) if init is None else np.array(init, dtype=float)
    dense = n_items <= DENSE_LIMIT
    inc = _incidence(pairs, n_items)

    def objective(x):
        return _penalised_nll(x, pairs, w, l, prior_strength)

    f = objective(s)
    for _ in range(max_iter):
        _, g_pair, curv = _pair_terms(s[pairs[:, 0]] - s[pairs[:, 1]], w, l)
        grad = inc.T @ g_pair + prior_strength * s
        hess = _hessian(pairs, curv, n_items, prior_strength, dense)
        if dense:
            step = -scipy.linalg.cho_solve(scipy.linalg.cho_factor(hess), grad)
        else:
            # Inexact Newton: far from the optimum a rough step does as well as an exact one, so the
            # solve's tolerance follows the gradient (Eisenstat-Walker style forcing term) and tightens
            # to 1e-10 as the fit converges; the stopping rule on the step size is unchanged.
            precond = sp.diags(1.0 / hess.diagonal())
            forcing = float(np.clip(np.linalg.norm(grad), 1e-10, 1e-2))
            step, _ = scipy.sparse.linalg.cg(hess, -grad, rtol=forcing, maxiter=500, M=precond)
        t = 1.0
        while True:  # backtracking keeps every step a descent step
            candidate = s + t * step
            f_new = objective(candidate)
            if f_new <= f + 1e-4 * t * (grad @ step) or t < 1e-8:
                break
            t *= 0.5
        s, f = candidate, f_new
        if np.max(np.abs(t * step)) < tol:
            break
    return s


@dataclass(frozen=True)
class MLEBatchSetup:
    """What :func:`thurstone_mle_batch` shares between batches of the same pairs: the transposed incidence matrix
    (items x pairs) for the gradients, and what its conjugate gradients use, in single precision: the incidence
    matrix, its transpose and the preconditioner, the inverse of the Hessian at the warm start."""

    inc_t: sp.csr_matrix
    inc32: sp.csr_matrix
    inc_t32: sp.csr_matrix
    precond32: np.ndarray


@limits_blas_threads
def mle_batch_setup(pairs: np.ndarray, wins: np.ndarray, n_items: int, init: np.ndarray,
                    prior_strength: float = DEFAULT_PRIOR_STRENGTH) -> MLEBatchSetup:
    """:class:`MLEBatchSetup` for batches of counts near ``wins`` ((P, 2)) on ``pairs``, warm-started at ``init``.

    A dense inverse (0.9 ms at 143 items) and two sparse matrices, made once for every batch that shares
    them rather than once per batch."""
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    wins = np.asarray(wins, dtype=float).reshape(-1, 2)
    init = np.asarray(init, dtype=float)
    start = init[pairs[:, 0]] - init[pairs[:, 1]]
    _, _, curv_won, curv_lost = _vote_derivatives(start, *_log_ndtr_pair(start))
    hess0 = _hessian(pairs, wins[:, 0] * curv_won + wins[:, 1] * curv_lost, n_items, prior_strength, dense=True)
    precond = scipy.linalg.cho_solve(scipy.linalg.cho_factor(hess0), np.eye(n_items))
    precond = 0.5 * (precond + precond.T)  # symmetric to rounding, as CG needs
    inc = _incidence(pairs, n_items)
    inc_t = inc.T.tocsr()
    return MLEBatchSetup(inc_t, inc.astype(np.float32), inc_t.astype(np.float32), precond.astype(np.float32))


@limits_blas_threads
def thurstone_mle_batch(pairs: np.ndarray, wins: np.ndarray, n_items: int,
                        prior_strength: float = DEFAULT_PRIOR_STRENGTH, init: np.ndarray | None = None,
                        tol: float = 1e-6, max_iter: int = 30, setup: MLEBatchSetup | None = None) -> np.ndarray:
    """MLE for a batch of count vectors on the same pairs (bootstrap resamples).

    Each resample is solved to the same optimum as :func:`thurstone_mle`
    (damped Newton with the exact Hessian), but all resamples iterate
    together: each Newton system is solved by conjugate gradients
    preconditioned with the inverse of the warm-start Hessian, computed once.
    A resample's Hessian differs from it in few directions (the items whose
    votes changed most), so a handful of CG steps per Newton step suffice.
    Resamples not converged after ``max_iter`` Newton steps are finished one
    by one. Each resample's CG stops at a relative residual that follows the
    square of its last Newton step (0.1 far from the optimum, 1e-3 near it), and a column
    leaves CG as soon as it is solved. Every resample ends within ``tol`` of
    the exact optimum (tests/analysis/test_thurstone.py).

    Inside, the resamples are the columns (items x resamples), so that the
    sparse products and the preconditioner (one matrix product, faster than
    two triangular solves) run on contiguous rows without copies; a resample
    that has converged leaves the arrays (they are compacted to the columns
    still iterating). The first Newton step starts every resample at ``init``,
    where each pair's derivatives per vote are shared: its gradient and
    curvatures are the counts times them. The conjugate gradients run in single
    precision: they only need a relative residual of 1e-3, which float32 holds
    with room to spare, while the gradient they are given, the line search and
    the stopping rule stay in double precision, so the optimum each resample
    converges to is the double-precision one.

    Parameters
    ----------
    wins : (B, P, 2) array
    init : (n_items,) array; defaults to the MLE of the mean counts.
    setup : MLEBatchSetup, optional
        The preconditioner and incidence matrices (:func:`mle_batch_setup`), when several batches of the
        same pairs share them (the bootstrap's chunks); default: made from these counts' mean.

    Returns
    -------
    (B, n_items) array
    """
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    wins = np.asarray(wins, dtype=float)
    n_batch = wins.shape[0]
    mean_wins = wins.mean(axis=0) if setup is None or init is None else None
    if init is None:
        init = thurstone_mle(pairs, mean_wins, n_items, prior_strength)
    init = np.asarray(init, dtype=float)
    if n_items > DENSE_LIMIT:  # one dense inverse would not pay off: solve each resample exactly
        return np.stack([thurstone_mle(pairs, wins[b], n_items, prior_strength, init=init) for b in range(n_batch)])
    w = np.ascontiguousarray(wins[..., 0].T)  # (P, B): a column per resample
    l = np.ascontiguousarray(wins[..., 1].T)
    i, j = pairs[:, 0], pairs[:, 1]
    if setup is None:
        setup = mle_batch_setup(pairs, mean_wins, n_items, init, prior_strength)
    inc_t, inc32, inc_t32, precond32 = setup.inc_t, setup.inc32, setup.inc_t32, setup.precond32
    # Every resample starts at ``init``: the logs and the per-vote derivatives of its pairs are computed once.
    start = init[i] - init[j]
    start_pos, start_neg = _log_ndtr_pair(start)
    grad_won, grad_lost, curv_won, curv_lost = _vote_derivatives(start, start_pos, start_neg)
    result = np.empty((n_batch, n_items))
    unfinished = []
    column = np.arange(n_batch)                # the resample of each column still iterating
    s = np.repeat(init[:, None], n_batch, axis=1)
    log_pos = log_neg = diff = None            # None: every column's logs are the start's
    f = -(start_pos @ w + start_neg @ l) + 0.5 * prior_strength * float(init @ init)
    previous = np.full(n_batch, np.inf)        # each column's last step size
    for _ in range(max_iter):
        if log_pos is None:
            g_pair = grad_lost[:, None] * l
            g_pair += grad_won[:, None] * w
            curv = curv_won[:, None] * w
            curv += curv_lost[:, None] * l
        else:
            g_pair, curv = _pair_derivatives(diff, w, l, log_pos, log_neg)
        grad = inc_t @ g_pair
        grad += prior_strength * s
        # Inexact Newton: far from the optimum (the last step large) a rough solve does as well as an
        # exact one. The relative residual follows the square of the last step (which keeps Newton's
        # quadratic convergence), from 0.1 down to 1e-3; CG's rtol is its square.
        forcing = np.clip(previous ** 2, 1e-3, 1e-1) ** 2
        step = _pcg_newton_step(grad, curv, inc32, inc_t32, precond32, prior_strength, rtol=forcing)
        descent = np.einsum("nk,nk->k", grad, step)
        # Near the optimum a step changes the objective by less than the rounding error of its sum
        # over the pairs: such a step is taken, not halved away to nothing (which would stop the
        # resample short of the optimum).
        rounding = 1e-12 * np.abs(f)
        t = np.ones(len(f))
        new_f, new_pos, new_neg, new_diff = _penalised_nll_logs(s + step, pairs, w, l, prior_strength)
        pending = np.flatnonzero(new_f > f + 1e-4 * descent + rounding)
        if len(pending):  # backtracking, re-evaluating only the columns that still need it
            if log_pos is None:  # a rejected column keeps the start's logs
                log_pos = np.repeat(start_pos[:, None], len(f), axis=1)
                log_neg = np.repeat(start_neg[:, None], len(f), axis=1)
                diff = np.repeat(start[:, None], len(f), axis=1)
            for _ in range(40):
                t[pending] *= 0.5
                trial, *logs = _penalised_nll_logs(s[:, pending] + t[pending] * step[:, pending], pairs,
                                                   w[:, pending], l[:, pending], prior_strength)
                ok = trial <= f[pending] + 1e-4 * t[pending] * descent[pending] + rounding[pending]
                accepted = pending[ok]
                new_f[accepted] = trial[ok]
                for new, trial_values in zip((new_pos, new_neg, new_diff), logs):
                    new[:, accepted] = trial_values[:, ok]
                pending = pending[~ok]
                if not len(pending):
                    break
            # No decrease found: stay put (the exact solver below finishes these).
            t[pending], new_f[pending] = 0.0, f[pending]
            for new, old in zip((new_pos, new_neg, new_diff), (log_pos, log_neg, diff)):
                new[:, pending] = old[:, pending]
            step *= t
        s += step
        f, log_pos, log_neg, diff = new_f, new_pos, new_neg, new_diff
        # A resample is done when its step is below tol, or when a full step's size times its ratio to
        # the previous step (the factor by which Newton's steps shrink, an overestimate once convergence
        # is quadratic) predicts a next step below tol: the error left is about that next step, so the
        # step that would only confirm convergence is not taken (two steps instead of four, typically).
        size = np.max(np.abs(step), axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):  # no previous step: no prediction
            # (after an inexact step the error shrinks by at least the CG's relative residual, not quadratically)
            shrink = np.maximum(size / previous, np.sqrt(forcing))
            predicted = np.where((t == 1.0) & np.isfinite(previous), size * shrink, np.inf)
        previous = size
        going = (size >= tol) & (predicted >= tol) & (t > 0)
        done = ~going
        if done.any():
            result[column[done]] = s[:, done].T
            unfinished.extend(column[done & (t == 0)])
            if not going.any():
                break
            # Compact every per-column array to the columns still iterating.
            column, s, w, l = column[going], s[:, going], w[:, going], l[:, going]
            f, previous = f[going], previous[going]
            log_pos, log_neg, diff = log_pos[:, going], log_neg[:, going], diff[:, going]
    else:
        result[column] = s.T
        unfinished.extend(column)
    unfinished = np.union1d(np.asarray(unfinished, dtype=np.int64), np.flatnonzero(~np.isfinite(result).all(axis=1)))
    for b in unfinished:
        result[b] = thurstone_mle(pairs, wins[b], n_items, prior_strength, init=init)
    return result


def thurstone_mle_linearised(pairs: np.ndarray, n_items: int, at: np.ndarray, reference: np.ndarray,
                             prior_strength: float = DEFAULT_PRIOR_STRENGTH):
    """The MLE of count vectors near ``reference`` linearised around its MLE ``at``: a function of a ``(B, P, 2)``
    batch of win counts returning ``(B, n_items)``, one Newton step from ``at`` each, with the Hessian of the
    ``reference`` counts (``(P, 2)``), factorised once.

    A resample's exact MLE differs from this by the square of its distance from ``at``. It serves where only a
    resample's first-order deviation matters and a full fit would double the bootstrap's cost (soft screening's
    re-estimated weights, :mod:`analysis.bootstrap`). Dense designs only (up to :data:`DENSE_LIMIT` items).
    """
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    at = np.asarray(at, dtype=float)
    reference = np.asarray(reference, dtype=float).reshape(-1, 2)
    if n_items > DENSE_LIMIT:
        raise ValueError(f"the linearised MLE is for dense designs (up to {DENSE_LIMIT} items), got {n_items}")
    diff = at[pairs[:, 0]] - at[pairs[:, 1]]
    log_pos, log_neg = _log_ndtr_pair(diff)
    first, second, curv_won, curv_lost = _vote_derivatives(diff, log_pos, log_neg)  # of one vote each
    curv = reference[:, 0] * curv_won + reference[:, 1] * curv_lost
    factor = scipy.linalg.cho_factor(_hessian(pairs, curv, n_items, prior_strength, dense=True))
    inc = _incidence(pairs, n_items)

    def solve(wins: np.ndarray) -> np.ndarray:
        wins = np.asarray(wins, dtype=float)
        g_pair = wins[..., 0] * first + wins[..., 1] * second              # (B, P)
        grad = (inc.T @ g_pair.T) + prior_strength * at[:, None]            # (n, B)
        return (at[:, None] - scipy.linalg.cho_solve(factor, grad)).T
    return solve


def _pcg_newton_step(grad: np.ndarray, curv: np.ndarray, inc: sp.csr_matrix, inc_t: sp.csr_matrix,
                     precond: np.ndarray, ridge: float, rtol: float | np.ndarray = 1e-6,
                     max_iter: int = 100) -> np.ndarray:
    """Solve ``H_b step_b = -grad_b`` for every column b by preconditioned conjugate gradients.

    ``grad`` (n_items, k), ``curv`` (P, k): the columns' gradients and pair curvatures;
    ``precond`` the inverse of a nearby Hessian. A column's CG stops once its squared
    residual is below ``rtol`` (one for all, or one per column) times its initial value
    (relative residual sqrt(rtol)), and the remaining columns go on without it (the slowest
    column of a batch needs about twice the steps of the median one). Such inexact Newton
    steps converge to the same optimum: the outer loop stops on the step size.

    The iterations run in the precision of ``precond`` (and of ``inc``, ``inc_t``): single
    precision halves their memory traffic and holds relative residuals far below the 1e-3
    asked of them. Returns float64 steps; a column whose gradient is zero gets a zero step.
    """
    dtype = precond.dtype
    x = np.zeros(grad.shape, dtype=dtype)
    r = np.negative(grad, dtype=dtype)
    curv = curv.astype(dtype, copy=False)
    rr = np.einsum("nk,nk->k", r, r)
    going = np.flatnonzero(rr > 0)  # the columns still iterating; r, p, rz, stop, curv hold only these
    stop = np.broadcast_to(rtol, rr.shape)[going] * rr[going]
    if len(going) < x.shape[1]:
        r, curv = r[:, going], curv[:, going]
    z = precond @ r
    p = z.copy()
    rz = np.einsum("nk,nk->k", r, z)
    for _ in range(max_iter if len(going) else 0):
        hp = inc_t @ (curv * (inc @ p))  # H_b p_b = Inc^T (curv_b * (Inc p_b)) + ridge p_b
        hp += ridge * p
        alpha = rz / np.einsum("nk,nk->k", p, hp)
        if len(going) == x.shape[1]:
            x += alpha * p
        else:
            x[:, going] += alpha * p
        r -= alpha * hp
        unsolved = np.einsum("nk,nk->k", r, r) > stop
        if not unsolved.any():
            break
        if not unsolved.all():
            going, r, p, rz, stop, curv = (going[unsolved], r[:, unsolved], p[:, unsolved], rz[unsolved],
                                           stop[unsolved], curv[:, unsolved])
        z = precond @ r
        rz_new = np.einsum("nk,nk->k", r, z)
        p = z + (rz_new / rz) * p
        rz = rz_new
    return x.astype(float)


# --------------------------------------------------------------------------- least squares

@limits_blas_threads
def thurstone_ls(pairs: np.ndarray, wins: np.ndarray, n_items: int, correction: float = 0.5,
                 ridge: float = 0.0) -> np.ndarray:
    """Classical least-squares Thurstone Case V scaling on z-scores of proportions.

    Parameters
    ----------
    correction : float
        Continuity correction ``c``: ``p = (w + c) / (n + 2c)``. With the
        default 0.5 a pair won 20:0 gives ``z = Phi^-1(20.5/21) = 1.98``.
    ridge : float
        Adds ``ridge * sum(s**2)`` (used only for disconnected designs when a
        weak prior is asked for); 0 gives the classical solution with
        ``sum(s) == 0``.

    Returns
    -------
    (n_items,) array in z units.
    """
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    wins = np.asarray(wins, dtype=float).reshape(-1, 2)
    total = wins.sum(axis=1)
    compared = total > 0
    pairs, wins, total = pairs[compared], wins[compared], total[compared]
    z = ndtri((wins[:, 0] + correction) / (total + 2.0 * correction))
    inc = _incidence(pairs, n_items)
    # Normal equations of the incidence system: a weighted graph Laplacian. The
    # rank-one term fixes the gauge sum(s) == 0 without changing the solution.
    laplacian = (inc.T @ inc).tocsr()
    rhs = inc.T @ z
    system = laplacian + (sp.identity(n_items) * ridge if ridge > 0 else 0)
    if n_items <= DENSE_LIMIT:
        dense = system.toarray() + (0.0 if ridge > 0 else 1.0 / n_items)
        s = scipy.linalg.solve(dense, rhs, assume_a="pos")
    else:
        s, _ = scipy.sparse.linalg.cg(system, rhs, rtol=1e-12, maxiter=5000,
                                      M=sp.diags(1.0 / np.maximum(system.diagonal(), 1e-12)))
    return s - s.mean() if ridge == 0 else s


# --------------------------------------------------------------------------- influence of single votes

def vote_derivatives(diff: np.ndarray, first_won: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """First and second derivative of each vote's negative log-likelihood w.r.t. ``diff = s_first - s_second``.

    Used to remove a worker's votes from a fit approximately (one Newton step,
    :mod:`analysis.collusion`) without refitting.
    """
    first_won = np.asarray(first_won, dtype=bool)
    _, grad, curv = _pair_terms(np.asarray(diff, dtype=float), first_won.astype(float), (~first_won).astype(float))
    return grad, curv


def information_matrix(pairs: np.ndarray, curv: np.ndarray, n_items: int, prior_strength: float):
    """Hessian of the penalised negative log-likelihood from per-pair (or per-vote) curvatures.

    Dense up to :data:`DENSE_LIMIT` items, else a sparse CSR matrix.
    """
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    return _hessian(pairs, np.asarray(curv, dtype=float), n_items, prior_strength, n_items <= DENSE_LIMIT)
