"""Bootstrap confidence intervals on scale values and ranks.

Unit of resampling
------------------
``"worker"`` (default, as pwcmp): draw the kept workers with replacement; a
drawn worker brings all their votes in every set, so the correlation between
one worker's answers is kept and intervals widen when workers disagree.
``"vote"``: draw each set's votes with replacement (stratified by set); this
ignores worker effects and gives narrower intervals.

Screening is not repeated inside resamples: the intervals are conditional on
the kept workers. Each resample is warm-started from the full-data solution
and all resamples of a set are solved together
(:func:`analysis.thurstone.thurstone_mle_batch`). Intervals are percentile
intervals.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import rankdata
from tqdm.auto import tqdm

from .scaling import ScalingOptions, SetDesign, anchored, fit_set_batch
from .threads import limits_blas_threads

CHUNK = 250  # resamples solved together; bounds memory at (CHUNK x votes in a set)


@dataclass(frozen=True)
class SetIntervals:
    scale_low: np.ndarray
    scale_high: np.ndarray
    rank_low: np.ndarray
    rank_high: np.ndarray
    samples: np.ndarray  # (B, n) reported-unit scale of every resample


def ranks_descending(values: np.ndarray) -> np.ndarray:
    """Rank 1 = highest value, along the last axis; ties share the lowest rank ('min')."""
    return rankdata(-values, method="min", axis=-1)


def resample_weights(unit: str, n_boot: int, rng: np.random.Generator, vote_worker: np.ndarray,
                     kept_workers: np.ndarray, set_votes: list[np.ndarray]) -> "callable":
    """A function ``(start, stop) -> list of (stop-start, V_s) weight arrays``, one per set."""
    if unit == "worker":
        pool = np.flatnonzero(kept_workers)
        n_workers = len(kept_workers)
        draws = rng.multinomial(len(pool), np.full(len(pool), 1.0 / len(pool)), size=n_boot)
        counts = np.zeros((n_boot, n_workers))
        counts[:, pool] = draws

        def weights(start, stop):
            return [counts[start:stop][:, vote_worker[v]] for v in set_votes]
        return weights
    if unit == "vote":
        kept_votes = [kept_workers[vote_worker[v]] for v in set_votes]
        draws = [rng.multinomial(int(k.sum()), k / k.sum(), size=n_boot).astype(float) for k in kept_votes]

        def weights(start, stop):
            return [d[start:stop] for d in draws]
        return weights
    raise ValueError(f"bootstrap unit must be 'worker' or 'vote', got {unit!r}")


@limits_blas_threads
def bootstrap_sets(designs: list[SetDesign], raws: list[np.ndarray], options: ScalingOptions,
                   vote_worker: np.ndarray, kept_workers: np.ndarray, n_boot: int = 1000,
                   unit: str = "worker", confidence: float = 0.95,
                   seed: int | np.random.Generator | None = 0, progress: bool | None = None) -> list[SetIntervals]:
    """Percentile intervals of every set's reported scale values and ranks.

    Parameters
    ----------
    designs, raws
        The sets and their full-data raw scales (warm starts).
    vote_worker : (V,) worker index of every vote; kept_workers : (W,) bool
    n_boot : int
        Number of resamples (1,000 by default, as in StudyMB 1.0).
    progress : bool or None
        Show a progress bar (None: only on a terminal).
    """
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    weights = resample_weights(unit, n_boot, rng, vote_worker, kept_workers, [d.votes for d in designs])
    samples = [np.empty((n_boot, d.n_items)) for d in designs]
    with tqdm(total=n_boot * len(designs), desc="bootstrap", unit="fit", leave=False,
              disable=None if progress is None else not progress) as bar:
        for start in range(0, n_boot, CHUNK):
            stop = min(start + CHUNK, n_boot)
            for design, raw, w, out in zip(designs, raws, weights(start, stop), samples):
                fitted = fit_set_batch(design, options, w, init=raw)
                out[start:stop] = anchored(fitted, design, options)
                bar.update(stop - start)
    alpha = (1 - confidence) / 2
    intervals = []
    for sample in samples:
        low, high = np.quantile(sample, [alpha, 1 - alpha], axis=0)
        ranks = ranks_descending(sample)
        r_low, r_high = np.quantile(ranks, [alpha, 1 - alpha], axis=0, method="nearest")
        intervals.append(SetIntervals(low, high, r_low, r_high, sample))
    return intervals
