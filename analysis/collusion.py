"""Collusion and machine-perfect workers: item-specific bias and agreement beyond human reach.

TPR and gold screening ask whether a worker answers like an attentive observer. A few workers who
answer attentively *except* that they always pick (or never pick) one item pass both, and bend that
item's scale. Three tests here look for what screening cannot see:

Targeted bias (:func:`targeted_bias`)
    For every kept worker and every item ID (pooled over the sets, where an ID names the same method
    in every scene), the number of the worker's votes the item won is compared with what an honest
    Thurstone observer would give, under a scale fitted *without that worker*. The scale without a
    worker is one Newton step from the full fit with the worker's votes removed (their gradient,
    through the full fit's Hessian): one factorisation per set serves every worker, instead of one
    refit per worker. An honest observer picks ``i`` over ``j`` with probability
    ``lapse/2 + (1 - lapse) * Phi(s_i - s_j)`` (the lapse of :mod:`analysis.screening`, so that one
    slip on an easy pair is not evidence). The count's exact null distribution is Poisson-binomial;
    the two-sided p-value is twice the smaller tail. Tests that could never reach significance
    (their smallest attainable p-value is too large: a worker with two votes on an item) are set
    aside by Tarone's rule, and the Benjamini-Hochberg procedure controls the false discovery rate
    over the others. Workers with a significant test are left out of the fit and every worker is
    tested again, until the flagged set repeats: with several colluders, each one's leave-one-out
    scale still holds the others' votes, and the second round sees the item without them.
Machine agreement (:func:`machine_agreement`)
    With an error per item against the reference (the image closer to the reference is a machine
    observer's answer), the number of a worker's votes that agree with the machine is compared, one
    sided, with the honest observer's expectation under the leave-one-out scale. A worker is flagged
    when the agreement is significant (Benjamini-Hochberg over workers) *and* at least
    :data:`MACHINE_AGREEMENT_MIN`: people agree with a pixel metric often, but not on the pairs
    where the crowd sees it differently.
Superhuman motion matching (:func:`superhuman_motion`)
    A worker whose median relative end-point error (``|response - truth| / |truth|``) is below
    :data:`HUMAN_MOTION_REL_ERROR` matches motion more precisely than human speed and direction
    discrimination allows (Weber fractions of about 5 % and more; 2 % of a typical 3 px/frame
    speed is less than one pixel of the response panel).

Honest workers who see an item differently from the crowd (a taste, not a plan) can be flagged by
the bias test too; the flags name the item and the direction so that a researcher can look.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np
import scipy.linalg
import scipy.sparse as sp
from scipy.special import ndtr

from .formats import Votes
from .scaling import ScalingOptions, SetDesign, fit_set, set_designs
from .screening import DEFAULT_LAPSE, honest_choice_probability
from .threads import limits_blas_threads
from .thurstone import information_matrix, vote_derivatives

DEFAULT_BIAS_FDR = 0.05
"""False discovery rate of the targeted-bias and machine-agreement tests."""
MACHINE_AGREEMENT_MIN = 0.95
"""Smallest share of votes agreeing with the machine observer that can be flagged."""
HUMAN_MOTION_REL_ERROR = 0.02
"""Median relative end-point error below which motion matching is beyond human precision."""
MIN_MOTION_TRIALS = 5
"""Trials a worker needs before :func:`superhuman_motion` judges them."""
EXACT_TAIL_LIMIT = 256
"""Largest group summed exactly by :func:`poisson_binomial_tails`; larger ones use the normal approximation."""


# --------------------------------------------------------------------------- statistics

def poisson_binomial_tails(p: np.ndarray, group: np.ndarray, observed: np.ndarray,
                           n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact tails ``P(T >= t)`` and ``P(T <= t)`` of sums of independent Bernoulli trials, per group.

    Parameters
    ----------
    p : (N,) array
        Success probability of each trial.
    group : (N,) int array
        The group (sum) each trial belongs to, ``0 <= group < n_groups``.
    observed : (n_groups,) int array
        Observed successes ``t`` per group.
    n_groups : int

    Returns
    -------
    upper, lower : (n_groups,) arrays
        ``P(T >= t)`` and ``P(T <= t)``; 1 for groups without trials.

    Notes
    -----
    The distribution of each sum is built trial by trial (a convolution per trial), for all groups
    of similar size at once: groups are bucketed by size (powers of two) and padded with trials of
    probability 0, so the work is about the sum over groups of size times padded size. Groups of
    more than :data:`EXACT_TAIL_LIMIT` trials (a worker who met one item hundreds of times) use the
    normal approximation with a continuity correction instead, where it is accurate and the exact
    sum would cost the square of the size.
    """
    p = np.asarray(p, dtype=float)
    group = np.asarray(group, dtype=np.int64)
    observed = np.asarray(observed, dtype=np.int64)
    upper, lower = np.ones(n_groups), np.ones(n_groups)
    if not len(p):
        return upper, lower
    order = np.argsort(group, kind="stable")
    g, pp = group[order], p[order]
    size = np.bincount(g, minlength=n_groups)
    start = np.concatenate([[0], np.cumsum(size)[:-1]])
    position = np.arange(len(g)) - start[g]
    large = size > EXACT_TAIL_LIMIT
    if large.any():
        mean = np.bincount(g, pp, n_groups)
        sd = np.sqrt(np.maximum(np.bincount(g, pp * (1 - pp), n_groups), 1e-300))
        upper[large] = ndtr(-(observed[large] - 0.5 - mean[large]) / sd[large])
        lower[large] = ndtr((observed[large] + 0.5 - mean[large]) / sd[large])
    bucket = np.ceil(np.log2(np.maximum(size, 1))).astype(int)
    for b in np.unique(bucket[(size > 0) & ~large]):
        members = np.flatnonzero((bucket == b) & (size > 0) & ~large)
        width = int(size[members].max())
        local = np.full(n_groups, -1)
        local[members] = np.arange(len(members))
        pick = local[g] >= 0
        probs = np.zeros((len(members), width))
        probs[local[g[pick]], position[pick]] = pp[pick]
        dist = np.zeros((len(members), width + 1))
        dist[:, 0] = 1.0
        for j in range(width):
            q = probs[:, j:j + 1]
            dist[:, 1:] = dist[:, 1:] * (1.0 - q) + dist[:, :-1] * q
            dist[:, 0] *= 1.0 - q[:, 0]
        t = np.clip(observed[members], 0, width)
        rows = np.arange(len(members))
        # Each tail summed from its own end, so that tiny tails keep their precision.
        upper[members] = np.minimum(np.cumsum(dist[:, ::-1], axis=1)[:, ::-1][rows, t], 1.0)
        lower[members] = np.minimum(np.cumsum(dist, axis=1)[rows, t], 1.0)
    return upper, lower


def tarone_testable(min_p: np.ndarray, level: float) -> np.ndarray:
    """Tarone's rule: the tests worth counting for multiple-comparison control at ``level``.

    A discrete test whose smallest attainable p-value (given only the trials' probabilities, not
    their outcomes) exceeds ``level / k`` cannot be rejected among ``k`` tests; the smallest ``k``
    with at most ``k`` tests able to reach ``level / k`` is the effective number of tests, and those
    tests are the testable ones. Which tests are testable does not depend on the outcomes, so the
    error control of the procedure applied to them holds.
    """
    min_p = np.asarray(min_p, dtype=float)
    if not len(min_p):
        return np.zeros(0, dtype=bool)
    ordered = np.sort(min_p)
    k = np.arange(1, len(min_p) + 1)
    able = np.searchsorted(ordered, level / k, side="right")
    first = int(np.argmax(able <= k))  # able(k) <= k always holds at k = len(min_p) or earlier
    return min_p <= level / k[first]


def benjamini_hochberg(p_values: np.ndarray, level: float) -> np.ndarray:
    """Rejections of the Benjamini-Hochberg procedure at false discovery rate ``level``."""
    p = np.asarray(p_values, dtype=float)
    m = len(p)
    if not m:
        return np.zeros(0, dtype=bool)
    order = np.argsort(p, kind="stable")
    passed = np.flatnonzero(p[order] <= level * np.arange(1, m + 1) / m)
    rejected = np.zeros(m, dtype=bool)
    if len(passed):
        rejected[order[:passed[-1] + 1]] = True
    return rejected


# --------------------------------------------------------------------------- leave-one-worker-out

LOO_RTOL = 1e-3
"""Relative residual at which the large-set leave-one-out solves (:func:`worker_solves`) stop."""
LOO_MAX_ITER = 100
SINGLE_PRECISION_RTOL = 1e-5
"""From this ``rtol`` up, :func:`worker_solves` iterates in single precision."""
"""Most conjugate-gradient steps per block of workers in :func:`worker_solves`."""
LOO_BLOCK_ENTRIES = 500_000
"""Items x workers solved together in :func:`worker_solves`: bounds its memory (a few arrays of this many floats).
25 workers a block at 20,000 items, whose arrays stay near the cache: leave_one_out_gaps of the 1.2 M-vote study
(benchmarks/analysis_scale.py) took 1.25 s CPU, 1.55 s with blocks of 2 M entries, with equal gaps (a block stops
when its slowest column is solved, so another blocking can move a gap within the solve's tolerance)."""


def worker_solves(hess, gradients: sp.csc_matrix, rtol: float = LOO_RTOL,
                  max_iter: int = LOO_MAX_ITER) -> Iterator[tuple[np.ndarray, np.ndarray, int]]:
    """``H^-1 G`` for a large set's sparse Hessian and one gradient column per worker, block by block.

    Parameters
    ----------
    hess : (N, N) sparse symmetric positive definite matrix
    gradients : (N, K) sparse matrix, one column per worker
    rtol, max_iter
        Each column's conjugate gradients stop once its residual is below ``rtol`` times its
        gradient (or after ``max_iter`` steps).

    Yields
    ------
    Per block of columns: ``(columns, solution (N, len(columns)), steps)``.

    Notes
    -----
    A sparse LU of the Hessian of a well-connected comparison graph (random designs are expanders)
    fills in to a dense matrix, and one solve per worker then costs ``N^2`` each: a quarter of an
    hour at 20,000 items. Conjugate gradients with the Jacobi preconditioner need only products with
    the sparse Hessian. A worker's gradient sums to zero (every vote adds ``g`` to one item and
    ``-g`` to the other), so it lies where the Hessian's spectrum is that of the comparison graph's
    Laplacian, away from the ridge's tiny eigenvalue: about ten steps reach ``rtol`` = 1e-3 on random
    designs (12 at 1e-4), whatever their size. The work is ``steps x nnz(H) x K``: linear in the items
    for a given crowd and in the workers for a given set (a crowd of very many workers with a few
    votes each costs items x workers per step all the same). Blocks of workers (at most
    :data:`LOO_BLOCK_ENTRIES` items x workers) share each sparse product.
    """
    # Single precision where the tolerance allows it (float32 holds relative residuals far below 1e-5): half
    # the memory traffic of the products and updates, which is what the solves cost.
    dtype = np.float32 if rtol >= SINGLE_PRECISION_RTOL else np.float64
    hess = sp.csr_matrix(hess).astype(dtype)
    n, k = gradients.shape
    inv_diag = (1.0 / hess.diagonal())[:, None]
    block = max(1, LOO_BLOCK_ENTRIES // max(n, 1))
    for start in range(0, k, block):
        columns = np.arange(start, min(start + block, k))
        r = gradients[:, columns].toarray().astype(dtype, copy=False)
        x = np.zeros_like(r)
        z = inv_diag * r
        p = z.copy()
        rz = np.einsum("nk,nk->k", r, z)
        # Stopped on the preconditioned residual (r' D^-1 r), which costs no pass of its own.
        stop = rtol ** 2 * rz
        work = np.empty_like(r)
        steps = 0
        for steps in range(1, max_iter + 1):
            hp = hess @ p
            php = np.einsum("nk,nk->k", p, hp)
            alpha = np.divide(rz, php, out=np.zeros_like(rz), where=php > 0)
            x += np.multiply(alpha, p, out=work)
            r -= np.multiply(alpha, hp, out=hp)
            np.multiply(inv_diag, r, out=z)
            rz_new = np.einsum("nk,nk->k", r, z)
            if (rz_new <= stop).all():
                break
            p *= np.divide(rz_new, rz, out=np.zeros_like(rz), where=rz > 0)
            p += z
            rz = rz_new
        yield columns, x, steps


@limits_blas_threads
def leave_one_out_gaps(votes: Votes, options: ScalingOptions, in_fit: np.ndarray,
                       designs: list[SetDesign] | None = None) -> np.ndarray:
    """Per vote, ``s(item_a) - s(item_b)`` under the scale fitted without the vote's worker.

    Parameters
    ----------
    votes : Votes
    options : ScalingOptions
        Method options; the fit is always the MLE in z units without anchors (as screening's).
    in_fit : (W,) bool array
        Workers whose votes make the scale. For a worker outside it, the scale without them is the fit itself.
    designs : list of SetDesign, optional
        :func:`~analysis.scaling.set_designs` of ``votes`` (made when not given).

    Returns
    -------
    (V,) array, NaN for votes outside every design (gold rows).

    Notes
    -----
    Sets up to :data:`~analysis.thurstone.DENSE_LIMIT` items solve for every worker at once with a
    Cholesky factor of the dense Hessian; larger sets by conjugate gradients
    (:func:`worker_solves`), whose cost grows with the data rather than with its square.
    """
    fit_options = replace(options, method="mle", anchors=False, allow_disconnected=True)
    designs = set_designs(votes) if designs is None else designs
    gap = np.full(len(votes), np.nan)
    W = len(votes.worker_ids)
    for d in designs:
        voter = votes.worker[d.votes]
        weight = np.asarray(in_fit, dtype=bool)[voter]
        first, second = d.pairs[d.vote_pair, 0], d.pairs[d.vote_pair, 1]
        s = fit_set(d, fit_options, weights=weight.astype(float))
        diff = s[first] - s[second]
        shift = np.zeros(len(d.votes))
        if weight.any():
            grad, curv = vote_derivatives(diff, d.first_won)
            hess = information_matrix(np.column_stack([first, second])[weight], curv[weight], d.n_items,
                                      fit_options.prior_strength)
            fitted, column = np.unique(voter[weight], return_inverse=True)
            g = grad[weight]
            gradients = sp.coo_matrix((np.concatenate([g, -g]), (np.concatenate([first[weight], second[weight]]),
                                                                 np.concatenate([column, column]))),
                                      shape=(d.n_items, len(fitted))).tocsc()
            column_of = np.full(W, -1)
            column_of[fitted] = np.arange(len(fitted))
            c = column_of[voter]
            # s without worker w = s + H^-1 g_w: one Newton step of the fit without w's votes, whose
            # gradient at s is -g_w (the full fit's gradient is zero there).
            if sp.issparse(hess):
                for columns, delta, _ in worker_solves(hess, gradients):
                    local = np.full(len(fitted), -1)
                    local[columns] = np.arange(len(columns))
                    m = (c >= 0) & (local[np.maximum(c, 0)] >= 0)
                    lc = local[c[m]]
                    shift[m] = delta[first[m], lc] - delta[second[m], lc]
            else:
                delta = scipy.linalg.cho_solve(scipy.linalg.cho_factor(hess), gradients.toarray())
                m = c >= 0
                shift[m] = delta[first[m], c[m]] - delta[second[m], c[m]]
        gap_first = diff + shift
        a_is_first = votes.item_a[d.votes] == d.items[first]
        gap[d.votes] = np.where(a_is_first, gap_first, -gap_first)
    return gap


# --------------------------------------------------------------------------- targeted bias

@dataclass(frozen=True)
class ItemBiasTests:
    """One test per (worker, item ID) with votes; arrays of length G (tests)."""

    worker: np.ndarray      # worker index (into votes.worker_ids)
    item_id: np.ndarray     # item ID (str)
    n: np.ndarray           # votes of the worker on pairs holding the item
    chosen: np.ndarray      # of which the item won
    expected: np.ndarray    # expected wins of an honest observer
    p_value: np.ndarray     # exact two-sided p-value (1 where not testable)
    testable: np.ndarray    # counted in the multiple-comparison control (Tarone)
    rejected: np.ndarray    # significant at the false discovery rate

    def flagged_workers(self, n_workers: int) -> np.ndarray:
        """(W,) bool: workers with at least one significant test."""
        out = np.zeros(n_workers, dtype=bool)
        out[self.worker[self.rejected]] = True
        return out

    def worker_flags(self, n_workers: int) -> list[list[str]]:
        """Per worker, ``favours:ITEM`` / ``disfavours:ITEM`` for each significant test, strongest first."""
        flags: list[list[str]] = [[] for _ in range(n_workers)]
        for k in np.flatnonzero(self.rejected)[np.argsort(self.p_value[self.rejected], kind="stable")]:
            direction = "favours" if self.chosen[k] > self.expected[k] else "disfavours"
            flags[self.worker[k]].append(f"{direction}:{self.item_id[k]}")
        return flags


def _group_keys(key: np.ndarray, n_keys: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(key, return_inverse=True)`` for integer keys below ``n_keys``: by counting where
    the key range is small enough to count in (no sort of millions of keys), else by sorting."""
    if n_keys > 8 * len(key) + 1_000_000:
        return np.unique(key, return_inverse=True)
    present = np.bincount(key, minlength=n_keys) > 0
    index = np.cumsum(present) - 1
    return np.flatnonzero(present), index[key]


def item_bias_tests(votes: Votes, gap_a: np.ndarray, tested: np.ndarray, fdr: float = DEFAULT_BIAS_FDR,
                    lapse: float = DEFAULT_LAPSE) -> ItemBiasTests:
    """Test every (worker, item ID) of the ``tested`` workers for a bias for or against the item.

    ``gap_a`` is :func:`leave_one_out_gaps`. See the module docstring for the test.
    """
    use = np.flatnonzero(np.isfinite(gap_a) & np.asarray(tested, dtype=bool)[votes.worker])
    p_a = honest_choice_probability(gap_a[use], lapse)
    labels, label_of_item = np.unique(votes.item_ids.astype(str), return_inverse=True)
    L = len(labels)
    worker = np.concatenate([votes.worker[use], votes.worker[use]])
    item = np.concatenate([label_of_item[votes.item_a[use]], label_of_item[votes.item_b[use]]])
    won = np.concatenate([votes.a_won[use], ~votes.a_won[use]])
    p = np.concatenate([p_a, 1.0 - p_a])
    keys, group = _group_keys(worker * L + item, len(votes.worker_ids) * L)
    G = len(keys)
    n = np.bincount(group, minlength=G)
    chosen = np.bincount(group, won.astype(float), G).astype(np.int64)
    expected = np.bincount(group, p, G)
    with np.errstate(divide="ignore"):
        all_won = np.exp(np.bincount(group, np.log(p), G))
        all_lost = np.exp(np.bincount(group, np.log1p(-p), G))
    testable = tarone_testable(np.minimum(1.0, 2 * np.minimum(all_won, all_lost)), fdr)
    # Exact tails only where they can matter: most (worker, item) tests of a large study hold a vote
    # or two and can never be significant; their p-values are left at 1.
    counted = testable[group]
    at = np.flatnonzero(testable)
    position = np.full(G, -1)
    position[at] = np.arange(len(at))
    upper, lower = poisson_binomial_tails(p[counted], position[group[counted]], chosen[at], len(at))
    p_value = np.ones(G)
    p_value[at] = np.minimum(1.0, 2 * np.minimum(upper, lower))
    rejected = np.zeros(G, dtype=bool)
    rejected[testable] = benjamini_hochberg(p_value[testable], fdr)
    return ItemBiasTests(worker=(keys // L).astype(np.int64), item_id=labels[keys % L], n=n, chosen=chosen,
                         expected=expected, p_value=p_value, testable=testable, rejected=rejected)


@dataclass(frozen=True)
class TargetedBias:
    """Outcome of :func:`targeted_bias`."""

    flagged: np.ndarray        # (W,) bool
    flags: list[list[str]]     # (W,) favours:/disfavours: items
    tests: ItemBiasTests
    gap_a: np.ndarray          # (V,) leave-one-out gaps of the last round (fit without flagged workers)
    iterations: int
    converged: bool

    def summary(self) -> dict:
        t = self.tests
        return {"tested_workers": int(len(np.unique(t.worker))), "tests": int(len(t.p_value)),
                "testable": int(t.testable.sum()), "significant": int(t.rejected.sum()),
                "flagged_workers": int(self.flagged.sum()), "iterations": self.iterations,
                "converged": self.converged}


@limits_blas_threads
def targeted_bias(votes: Votes, options: ScalingOptions, candidates: np.ndarray, fdr: float = DEFAULT_BIAS_FDR,
                  lapse: float = DEFAULT_LAPSE, max_iterations: int = 10,
                  designs: list[SetDesign] | None = None) -> TargetedBias:
    """Flag ``candidates`` (e.g. the workers screening kept) whose votes favour or disfavour an item.

    Rounds: fit without the flagged workers (none at first), test every candidate against the scale
    without them (:func:`leave_one_out_gaps`, :func:`item_bias_tests`), flag the significant ones;
    stop when a flagged set repeats.

    Parameters
    ----------
    votes : Votes
    options : ScalingOptions
    candidates : (W,) bool array
        Workers to test; they alone make the scale (minus the flagged).
    fdr : float
        False discovery rate of the Benjamini-Hochberg procedure over all (worker, item) tests.
    lapse : float
        Lapse rate of the honest observer.
    designs : list of SetDesign, optional
        :func:`~analysis.scaling.set_designs` of ``votes`` (made when not given).
    """
    if not 0 < fdr < 1:
        raise ValueError(f"the false discovery rate must be in (0, 1), got {fdr}")
    candidates = np.asarray(candidates, dtype=bool)
    W = len(votes.worker_ids)
    designs = set_designs(votes) if designs is None else designs
    flagged = np.zeros(W, dtype=bool)
    seen: list[np.ndarray] = []
    converged, iterations = False, 0
    for iterations in range(1, max_iterations + 1):
        gap = leave_one_out_gaps(votes, options, candidates & ~flagged, designs)
        tests = item_bias_tests(votes, gap, candidates, fdr, lapse)
        new = tests.flagged_workers(W)
        if np.array_equal(new, flagged):
            converged = True
            break
        if any(np.array_equal(new, s) for s in seen):
            flagged = new | flagged  # a cycle: keep every worker flagged in it
            break
        seen.append(new)
        flagged = new
    return TargetedBias(flagged=tests.flagged_workers(W) | flagged, flags=tests.worker_flags(W), tests=tests,
                        gap_a=gap, iterations=iterations, converged=converged)


# --------------------------------------------------------------------------- machine observers

@dataclass(frozen=True)
class MachineAgreement:
    """Per worker (arrays of length W): votes comparable by the machine, agreement, test."""

    n: np.ndarray           # votes on pairs whose two errors are known and differ
    agreement: np.ndarray   # share of them won by the image closer to the reference (NaN: none)
    expected: np.ndarray    # the honest observer's expected share
    p_value: np.ndarray     # one-sided exact p-value (1: not tested)
    flagged: np.ndarray     # significant and at least MACHINE_AGREEMENT_MIN


def item_errors(votes: Votes, errors: dict[tuple[str, str], float]) -> np.ndarray:
    """(I,) error of each item of ``votes`` against its reference from ``{(set_id, item_id): error}`` (NaN: unknown)."""
    sets = votes.set_ids[votes.item_set]
    return np.array([errors.get((str(s), str(i)), np.nan) for s, i in zip(sets, votes.item_ids)], dtype=float)


def machine_agreement(votes: Votes, gap_a: np.ndarray, errors: np.ndarray, tested: np.ndarray,
                      fdr: float = DEFAULT_BIAS_FDR, lapse: float = DEFAULT_LAPSE,
                      minimum: float = MACHINE_AGREEMENT_MIN) -> MachineAgreement:
    """Test each ``tested`` worker for agreement with the machine observer beyond an honest observer's.

    Parameters
    ----------
    votes : Votes
    gap_a : (V,) array
        :func:`leave_one_out_gaps`.
    errors : (I,) array
        Error of each item against its reference (:func:`item_errors`); lower is closer.
    tested : (W,) bool array
    """
    W = len(votes.worker_ids)
    e_a, e_b = errors[votes.item_a], errors[votes.item_b]
    use = np.flatnonzero(np.isfinite(gap_a) & np.isfinite(e_a) & np.isfinite(e_b) & (e_a != e_b)
                         & np.asarray(tested, dtype=bool)[votes.worker])
    a_closer = e_a[use] < e_b[use]
    p_a = honest_choice_probability(gap_a[use], lapse)
    p = np.where(a_closer, p_a, 1.0 - p_a)
    agree = votes.a_won[use] == a_closer
    worker = votes.worker[use]
    n = np.bincount(worker, minlength=W)
    agreed = np.bincount(worker, agree.astype(float), W).astype(np.int64)
    upper, _ = poisson_binomial_tails(p, worker, agreed, W)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(n > 0, agreed / n, np.nan)
        expected = np.where(n > 0, np.bincount(worker, p, W) / n, np.nan)
    has = n > 0
    significant = np.zeros(W, dtype=bool)
    significant[has] = benjamini_hochberg(upper[has], fdr)
    flagged = significant & (np.nan_to_num(share) >= minimum)
    return MachineAgreement(n=n, agreement=share, expected=expected, p_value=np.where(has, upper, 1.0),
                            flagged=flagged)


# --------------------------------------------------------------------------- motion matching

@dataclass(frozen=True)
class MotionPrecision:
    """Per worker (sorted IDs): trials judged, median relative end-point error, flag."""

    worker_id: np.ndarray
    n: np.ndarray
    median_rel_error: np.ndarray
    flagged: np.ndarray

    def lookup(self) -> dict[str, tuple[float, bool]]:
        return {str(w): (float(e), bool(f)) for w, e, f in zip(self.worker_id, self.median_rel_error, self.flagged)}


def superhuman_motion(worker_id, gt_u, gt_v, resp_u, resp_v, floor: float = HUMAN_MOTION_REL_ERROR,
                      min_trials: int = MIN_MOTION_TRIALS) -> MotionPrecision:
    """Flag workers whose motion matches are more precise than a human's (see the module docstring).

    Trials with a true speed of zero (no direction to match) are not used. A worker needs
    ``min_trials`` usable trials to be judged.
    """
    worker_id = np.asarray(worker_id).astype(str)
    gt = np.column_stack([np.asarray(gt_u, float), np.asarray(gt_v, float)])
    resp = np.column_stack([np.asarray(resp_u, float), np.asarray(resp_v, float)])
    speed = np.hypot(gt[:, 0], gt[:, 1])
    ok = (speed > 0) & np.isfinite(resp).all(axis=1) & np.isfinite(gt).all(axis=1)
    rel = np.full(len(speed), np.nan)
    rel[ok] = np.hypot(*(resp[ok] - gt[ok]).T) / speed[ok]
    workers, index = np.unique(worker_id, return_inverse=True)
    n = np.bincount(index[ok], minlength=len(workers))
    median = np.full(len(workers), np.nan)
    order = np.lexsort((rel[ok], index[ok]))
    values, owners = rel[ok][order], index[ok][order]
    starts = np.searchsorted(owners, np.arange(len(workers)))
    for k in np.flatnonzero(n > 0):  # one median per worker: a short loop over workers, not trials
        median[k] = np.median(values[starts[k]:starts[k] + n[k]])
    flagged = (n >= min_trials) & (np.nan_to_num(median, nan=np.inf) < floor)
    return MotionPrecision(worker_id=workers, n=n, median_rel_error=median, flagged=flagged)
