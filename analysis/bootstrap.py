"""Bootstrap confidence intervals on scale values and ranks.

Unit of resampling
------------------
``"worker"`` (default, as pwcmp): draw the kept workers (under soft screening
every judged worker) with replacement; a
drawn worker brings all their votes in every set, so the correlation between
one worker's answers is kept and intervals widen when workers disagree.
``"vote"``: draw each set's votes with replacement (stratified by set); this
ignores worker effects and gives narrower intervals.

Screening's hard cut is not repeated inside resamples: the intervals are
conditional on the workers it judged. Each resample is warm-started from the
full-data solution and all resamples of a set are solved together
(:func:`analysis.thurstone.thurstone_mle_batch`).

Soft screening (``soft``, :class:`analysis.screening.SoftWeights`)
------------------------------------------------------------------
The full-data scale weighs each judged worker's votes by its posterior of being
careful, after EM steps from the hard classification. A worker resample
repeats those steps: each step's scale for the resample's drawn workers (the
kept ones first, as screening fits them; then the weighted ones), each drawn
worker's likelihood ratio of careful over careless under it, the careless share
by EM over the drawn workers, and the posteriors; the resample's scale is then
fitted with them. A step's scale is linearised, one Newton step from the full
data's scale of that step with its Hessian factorised once
(:func:`analysis.scaling.fit_set_linearised`): the weights need a resample's
first-order deviation, and exact fits would double the bootstrap's cost.
Keeping each worker's full-data weight instead would cost nothing, but it holds
fixed what the data chose: on the sparse crowds of
``tests/analysis/crowd_support.py`` (seeds 10-29 / 100-199) fixed weights
covered the true scale 91.8 % / 92.8 % of the time (the hard cut 90.3 % /
93.0 %), re-estimated ones 95.3 % / 95.5 %. The vote bootstrap keeps each
vote's full-data weight (it ignores worker effects anyway).

Interval methods
----------------
With ``n`` resampling units behind a set (its kept workers, or its kept votes),
``theta`` the full-data value, ``theta*`` the resamples and ``alpha = 1 - confidence``:

``"t"`` (default)
    ``theta -/+ t_{n-1}(1 - alpha/2) * sqrt(n / (n - 1)) * sd(theta*)``. The
    bootstrap variance of a mean of ``n`` units is the plug-in variance over
    ``n``, ``(n - 1) / n`` of the unbiased one, so the bootstrap SD is too small
    by about ``sqrt((n - 1) / n)``; and an SD estimated from a few dozen
    workers calls for Student's quantile with ``n - 1`` degrees of freedom.
``"basic"``
    ``[2 theta - q(1 - alpha/2), 2 theta - q(alpha/2)]``, ``q`` the quantiles of ``theta*``.
``"percentile"``
    ``[q(alpha/2), q(1 - alpha/2)]`` (pwcmp, StudyMB 1.0).

Measured coverage of the true scale at nominal 95 % (``benchmarks/interval_coverage.py``:
8 items, every worker judges all 28 pairs once, Thurstone observers, 1,000 worker
resamples, 1,000 simulated studies per cell (Monte Carlo SE 0.002-0.004), true
scales drawn from N(0, 0.5^2) / N(0, 1)):

==========  ===============  ===============
method      25 workers       100 workers
==========  ===============  ===============
t           0.953 / 0.949    0.949 / 0.944
basic       0.940 / 0.934    0.943 / 0.939
percentile  0.930 / 0.914    0.942 / 0.937
==========  ===============  ===============

The percentile interval keeps the bootstrap's narrowness and falls short with
few workers; the t interval stays in [0.93, 0.97] from 25 workers on
(``tests/analysis/test_interval_coverage.py`` checks it at 25). BCa (worker
jackknife) was measured too, 0.931 / 0.928 at 25 workers, and is not offered: it
corrects bias and skewness, not the narrowness.

Rank intervals are the (nearest-rank) quantiles of the ranks of pseudo-resamples
whose percentile interval is the method's scale interval: ``theta*`` for
``"percentile"``, ``2 theta - theta*`` for ``"basic"``, and for ``"t"`` the
resamples' deviations from their mean stretched by the t interval's widening,
``theta + (theta* - mean(theta*)) * t_{n-1} sqrt(n/(n-1)) / z``. They are
integers in ``1..n_items`` whatever the method, and they cover the true rank
more often than the nominal level (ranks are discrete): 0.989-0.997 in the
benchmark above, with every method.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
from scipy.special import ndtri, stdtrit
from tqdm.auto import tqdm

from .scaling import ScalingOptions, SetDesign, fit_set_batch, fit_set_batch_setup, fit_set_linearised, reported
from .screening import SoftWeights, soft_step
from .threads import limits_blas_threads

CHUNK = 100  # resamples solved together: few enough that their (pairs x CHUNK) arrays stay in cache
# Why an item's interval is blank (scales.csv ci_reason; empty with an interval).
FEWER_THAN_TWO = "fewer than 2 workers"
NO_SPREAD = "no spread"
NO_BOOTSTRAP = "no bootstrap"
INTERVAL_METHODS = ("t", "basic", "percentile")
DEFAULT_INTERVAL_METHOD = "t"


@dataclass(frozen=True)
class SetIntervals:
    scale_low: np.ndarray
    scale_high: np.ndarray
    rank_low: np.ndarray
    rank_high: np.ndarray
    samples: np.ndarray  # (B, n) reported-unit scale of every resample
    method: str = DEFAULT_INTERVAL_METHOD
    n_units: int = 0     # resampling units (kept workers or kept votes) behind the set
    # Further units (``also_units`` of :func:`bootstrap_sets`) -> (scale_low, scale_high) from the same resamples.
    also: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)


def ranks_descending(values: np.ndarray) -> np.ndarray:
    """Rank 1 = highest value, along the last axis; ties share the lowest rank ('min').

    The same as ``scipy.stats.rankdata(-values, method="min", axis=-1)`` for finite
    values (NaN ranks last), in numpy alone: scipy.stats costs 0.4 s to import, more than
    the ranking itself in ``perceptlab analyze``.
    """
    x = -np.asarray(values, dtype=float)
    order = np.argsort(x, axis=-1, kind="stable")
    ordered = np.take_along_axis(x, order, axis=-1)
    position = np.broadcast_to(np.arange(x.shape[-1]), x.shape)
    starts = np.ones(x.shape, dtype=bool)
    starts[..., 1:] = ordered[..., 1:] != ordered[..., :-1]
    # every element of a run of ties takes the position of the run's first element
    first = np.maximum.accumulate(np.where(starts, position, 0), axis=-1)
    ranks = np.empty(x.shape, dtype=np.int64)
    np.put_along_axis(ranks, order, first + 1, axis=-1)
    return ranks


def check_interval_method(method: str) -> str:
    """Return ``method`` if it is one of :data:`INTERVAL_METHODS`, else raise ValueError."""
    if method not in INTERVAL_METHODS:
        raise ValueError(f"interval method must be one of {', '.join(INTERVAL_METHODS)}; got {method!r}")
    return method


def t_widening(n_units: int, confidence: float = 0.95) -> float:
    """Half-width of the ``"t"`` interval in bootstrap SDs: ``t_{n-1}(1 - alpha/2) * sqrt(n / (n - 1))``.

    One unit (or none) gives no spread to correct; it is treated as two.
    """
    n = max(int(n_units), 2)
    return float(stdtrit(n - 1, 0.5 + confidence / 2) * np.sqrt(n / (n - 1)))


def interval_bounds(samples: np.ndarray, estimate: np.ndarray, n_units: int, method: str = DEFAULT_INTERVAL_METHOD,
                    confidence: float = 0.95) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Scale and rank intervals of one set from its bootstrap resamples.

    Parameters
    ----------
    samples : (B, n) array
        The resamples' scale values (reported units).
    estimate : (n,) array
        The full-data scale values the intervals are built around.
    n_units : int
        Resampling units behind the set (workers with votes in it, or votes);
        sets the ``"t"`` method's degrees of freedom and its variance correction.
    method : "t", "basic" or "percentile"
        See the module docstring.
    confidence : float
        Nominal two-sided coverage.

    Returns
    -------
    scale_low, scale_high : (n,) float arrays
    rank_low, rank_high : (n,) int arrays in ``1..n`` (rank 1 = highest scale)
    """
    check_interval_method(method)
    samples = np.asarray(samples, dtype=float)
    estimate = np.asarray(estimate, dtype=float)
    alpha = (1 - confidence) / 2
    if method == "t":
        widening = t_widening(n_units, confidence)
        half = widening * samples.std(axis=0, ddof=1 if len(samples) > 1 else 0)  # one resample: no spread
        low, high = estimate - half, estimate + half
        # Stretched deviations: their percentile interval is (close to) the t interval.
        pseudo = estimate + (samples - samples.mean(axis=0)) * (widening / ndtri(1 - alpha))
    else:
        q_low, q_high = np.quantile(samples, [alpha, 1 - alpha], axis=0)
        if method == "basic":
            low, high, pseudo = 2 * estimate - q_high, 2 * estimate - q_low, 2 * estimate - samples
        else:
            low, high, pseudo = q_low, q_high, samples
    ranks = ranks_descending(pseudo)
    r_low, r_high = np.quantile(ranks, [alpha, 1 - alpha], axis=0, method="nearest")
    return low, high, r_low.astype(int), r_high.astype(int)


def item_workers(design: SetDesign, vote_worker: np.ndarray, kept_workers: np.ndarray) -> np.ndarray:
    """(n_items,) distinct kept workers with a vote on a pair holding each item of the set."""
    worker = vote_worker[design.votes]
    keep = kept_workers[worker]
    items = design.pairs[design.vote_pair[keep]]          # (kept votes, 2) local items
    n_workers = len(kept_workers)
    keys = np.sort(np.concatenate([items[:, 0], items[:, 1]]) * n_workers + np.tile(worker[keep], 2))
    # The distinct keys by sorting: np.unique's hash table (numpy 2.4) took 2.5 s for the 2.4 M keys of
    # a 1.2 M-vote set, a sort takes 0.03 s.
    distinct = keys[np.concatenate([[True], keys[1:] != keys[:-1]])] if len(keys) else keys
    return np.bincount(distinct // n_workers, minlength=design.n_items)


def interval_reasons(low: np.ndarray | None, high: np.ndarray | None, n_workers: np.ndarray) -> np.ndarray:
    """Why each item's interval is blank, "" where it stands: no bootstrap (``low`` None), fewer than two kept
    workers behind the item (a worker resample of one worker has no spread: an interval of zero width, the
    ``± 0.00`` of a study with one kept worker), or no spread among the resamples."""
    reason = np.full(len(n_workers), "", dtype=object)
    if low is None or high is None:
        reason[:] = NO_BOOTSTRAP
        return reason
    low, high = np.asarray(low, float), np.asarray(high, float)
    with np.errstate(invalid="ignore"):
        # rounding leaves identical resamples ~1e-15 apart: a width that small is no spread
        reason[~(high - low > 1e-9 * (1.0 + np.abs(high) + np.abs(low)))] = NO_SPREAD
    reason[np.asarray(n_workers) < 2] = FEWER_THAN_TWO
    return reason


def set_units(unit: str, designs: list[SetDesign], vote_worker: np.ndarray, kept_workers: np.ndarray) -> list[int]:
    """Resampling units behind each set: kept workers with a vote in it (``"worker"``) or its kept votes
    (``kept_workers``: the resampled workers, those with a positive weight under soft screening)."""
    kept = [kept_workers[vote_worker[d.votes]] for d in designs]
    if unit == "vote":
        return [int(k.sum()) for k in kept]
    return [len(np.unique(vote_worker[d.votes][k])) for d, k in zip(designs, kept)]


def resample_wins(unit: str, n_boot: int, rng: np.random.Generator, vote_worker: np.ndarray,
                  kept_workers: np.ndarray, designs: list[SetDesign], soft: SoftWeights | None = None) -> "callable":
    """A function ``(start, stop) -> list of (stop-start, P_s, 2) win counts``, one per set: the
    resamples ``start`` to ``stop``. With ``soft``, the judged workers (or their votes) are resampled and each
    resample's votes weighted as the full data's were (see the module docstring)."""
    weight = np.asarray(kept_workers, dtype=float) if soft is None else soft.weight
    drawn_from = np.asarray(kept_workers, dtype=bool) if soft is None else soft.judged
    if unit == "worker":
        pool = np.flatnonzero(drawn_from)
        n_workers = len(weight)
        draws = rng.multinomial(len(pool), np.full(len(pool), 1.0 / len(pool)), size=n_boot)
        counts = np.zeros((n_boot, n_workers))
        counts[:, pool] = draws
        # A resample's wins are its worker counts times each worker's wins (a sparse product),
        # not a per-vote weight array gathered for every resample.
        outcomes = [d.outcomes(vote_worker[d.votes], n_workers) for d in designs]
        # Soft screening: the scales its EM steps took the posteriors from, to first order in a resample.
        stage_fits = ([[fit_set_linearised(d, soft.fit_options, scale[d.items], d.wins_batch(w[None, :], o)[0])
                        for d, o in zip(designs, outcomes)] for w, scale in soft.stages] if soft is not None else None)

        def wins(start, stop):
            drawn = counts[start:stop]
            if soft is not None:
                drawn = drawn * _resample_weights(soft, designs, outcomes, stage_fits, drawn)
            return [d.wins_batch(drawn, o) for d, o in zip(designs, outcomes)]
        return wins
    if unit == "vote":
        pools = [drawn_from[vote_worker[d.votes]] for d in designs]
        draws = [rng.multinomial(int(k.sum()), k / k.sum(), size=n_boot) * weight[vote_worker[d.votes]]
                 for d, k in zip(designs, pools)]
        outcomes = [d.outcomes(np.arange(len(d.votes)), len(d.votes)) for d in designs]

        def wins(start, stop):
            return [d.wins_batch(w[start:stop], o) for d, w, o in zip(designs, draws, outcomes)]
        return wins
    raise ValueError(f"bootstrap unit must be 'worker' or 'vote', got {unit!r}")


def _resample_weights(soft: SoftWeights, designs: list[SetDesign], outcomes: list, stage_fits: list,
                      counts: np.ndarray) -> np.ndarray:
    """(B, W) weight of each worker's votes in each of ``B`` worker resamples (``counts``: how often each worker was
    drawn): soft screening's EM steps repeated on the resample (the module docstring); ``stage_fits``: per step,
    each set's linearised fit around the full data's scale of that step (:func:`analysis.scaling.fit_set_linearised`)."""
    weights = np.broadcast_to(soft.stages[0][0], counts.shape)
    for fits in stage_fits:
        fitted = [fit(d.wins_batch(counts * weights, o)) for d, o, fit in zip(designs, outcomes, fits)]
        _, careful = soft_step(designs, outcomes, fitted, counts.T, soft.careless, soft.lapse, soft.bounds)
        weights = careful.T * soft.judged
    return weights


@limits_blas_threads
def bootstrap_sets(designs: list[SetDesign], raws: list[np.ndarray], options: ScalingOptions,
                   vote_worker: np.ndarray, kept_workers: np.ndarray, n_boot: int = 1000,
                   unit: str = "worker", confidence: float = 0.95,
                   seed: int | np.random.Generator | None = 0, progress: bool | None = None,
                   method: str = DEFAULT_INTERVAL_METHOD, also_units: tuple[str, ...] = (),
                   soft: SoftWeights | None = None) -> list[SetIntervals]:
    """Bootstrap intervals of every set's reported scale values and ranks.

    Parameters
    ----------
    designs, raws
        The sets and their full-data raw scales (warm starts).
    vote_worker : (V,) worker index of every vote; kept_workers : (W,) bool
    n_boot : int
        Number of resamples (1,000 by default, as in StudyMB 1.0).
    progress : bool or None
        Show a progress bar (None: only on a terminal).
    method : "t" (default), "basic" or "percentile"
        Interval method (see the module docstring).
    also_units : tuple of "anchored", "jod", "z"
        Further units whose scale intervals (:attr:`SetIntervals.also`) come from the same resamples: each
        resample's raw fit is reported in each unit, so an interval is the one a bootstrap reporting in that
        unit with the same seed gives (the fits never depend on the unit). Their samples are not kept.
    soft : SoftWeights, optional
        Soft screening's weights (``raws`` are fitted with them): its judged workers are resampled, and each
        worker resample re-estimates the weights (module docstring).
    """
    check_interval_method(method)
    also = {u: replace(options, units=u) for u in also_units}
    for other in also.values():
        other.check_units()
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    if soft is not None:
        kept_workers = soft.judged
    wins_of = resample_wins(unit, n_boot, rng, vote_worker, kept_workers, designs, soft)
    samples = [np.empty((n_boot, d.n_items)) for d in designs]
    also_samples = [{u: np.empty((n_boot, d.n_items)) for u in also} for d in designs]
    # Each set's preconditioner (the Hessian of its full-data fit, inverted), made once for all its chunks.
    full_weight = soft.weight if soft is not None else np.asarray(kept_workers, dtype=float)
    setups = [fit_set_batch_setup(d, options, d.wins(full_weight[vote_worker[d.votes]]), raw) if n_boot else None
              for d, raw in zip(designs, raws)]
    with tqdm(total=n_boot * len(designs), desc="bootstrap", unit="fit", leave=False,
              disable=None if progress is None else not progress) as bar:
        for start in range(0, n_boot, CHUNK):
            stop = min(start + CHUNK, n_boot)
            for design, raw, setup, wins, out, others in zip(designs, raws, setups, wins_of(start, stop), samples,
                                                             also_samples):
                fitted = fit_set_batch(design, options, wins, init=raw, setup=setup)
                out[start:stop] = reported(fitted, design, options)
                for u, other in others.items():
                    other[start:stop] = reported(fitted, design, also[u])
                bar.update(stop - start)
    intervals = []
    for design, raw, sample, others, n_units in zip(designs, raws, samples, also_samples,
                                                    set_units(unit, designs, vote_worker, kept_workers)):
        bounds = interval_bounds(sample, reported(raw, design, options), n_units, method, confidence)
        extra = {u: interval_bounds(other, reported(raw, design, also[u]), n_units, method, confidence)[:2]
                 for u, other in others.items()}
        intervals.append(SetIntervals(*bounds, sample, method, n_units, extra))
    return intervals
