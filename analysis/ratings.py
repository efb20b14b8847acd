"""Rating studies (ITU-T ACR, DCR, CCR): ratings.csv in, MOS, DMOS and CMOS with intervals out.

ratings.csv
-----------
One row per rating: ``worker_id,stimulus_id,rating``; optional ``reference_id`` (the reference the
stimulus was compared with, or its hidden reference in ACR-HR), ``is_gold`` (1 for a gold question:
used to screen workers, never in a score), ``gold_low``, ``gold_high`` (the range a gold answer must
fall in), ``trial_id``, ``created_at``, ``scale`` (``acr``, ``dcr`` or ``ccr``, the same on every row).
Other columns are ignored. Ratings may be whole scale points or continuous slider values.

Scales and what a score means
-----------------------------
``acr``  Absolute Category Rating, 1 (bad) .. 5 (excellent): the score is the MOS.
``dcr``  Degradation Category Rating, 1 (very annoying) .. 5 (imperceptible), of a stimulus shown
         after its reference: the MOS of DCR ratings is already a degradation score (DMOS).
``ccr``  Comparison Category Rating, -3 (much worse) .. +3 (much better): the score is the CMOS, positive
         when the test stimulus is better than its reference (the exporter writes every rating with
         that sign, whichever side the test was shown on).

ACR with hidden references (ITU-T P.910's ACR-HR) gives a differential score too: each rating of a
test stimulus becomes ``DV = V(test) - V(reference) + 5`` with the same worker's rating of the hidden
reference (``reference_id`` names it; it is a stimulus of the file), and the DMOS is the mean DV
(:func:`differential_ratings`). Values above 5 (a test rated above its reference) are kept.

What an interval is for (the estimand)
--------------------------------------
A MOS interval (:func:`mos_scores`) is for the expected rating of a typical rater of the kept crowd: the mean
over the population of raters of each one's expected rating of the stimulus (bias, inconsistency and the
rounding to scale points included). The workers who rated a stimulus are a sample of that population, so
their ratings are independent draws of it and the interval is over them.

Intervals (:func:`mos_scores`)
------------------------------
``t`` (default)  Student's t with an empirical-Bayes moderated variance, bounded by the scale:
    ``mean +/- t_{d0 + n - 1} sqrt(s~^2 / n)`` with ``s~^2 = (d0 s0^2 + (n - 1) s^2) / (d0 + n - 1)``, the
    stimulus' variance ``s^2`` shrunk toward the variance ``s0^2`` typical of the study's stimuli with the
    weight ``d0`` (prior degrees of freedom) estimated from the spread of the stimuli's variances (Smyth 2004,
    "Linear models and empirical Bayes methods for assessing differential expression", the moderated t of
    limma; :func:`moderated_variances`). With few ratings a stimulus' own SD is very uncertain (five equal
    ratings have SD 0, hence the zero-width interval of the plain t); the study's other stimuli say how much
    ratings spread. The interval is then intersected with the scale (:func:`bounded_intervals`): the
    estimand, an expected rating, lies on the scale, so the intersection loses no coverage and no bound lies
    outside it.
``bootstrap``  a bootstrap over workers (resample the workers with replacement, each with all their ratings,
    seeded): the percentile interval of the resampled means (inside the scale by construction). The bootstrap
    is one sparse product per block of resamples (counts of each worker in each resample times the workers'
    rating sums per stimulus).

Either interval is blank, with the reason in ``ci_reason``, for a stimulus rated by fewer than two distinct
workers (one worker's ratings are not independent observations of the population: :data:`FEWER_THAN_TWO`),
when there is no spread to measure (:data:`NO_SPREAD`), or, for a model's score outside the scale with an
interval that does not reach it (:data:`OUTSIDE_SCALE`). An interval is never of zero width.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
from scipy import sparse
from scipy.special import digamma, polygamma, stdtrit
from tqdm.auto import tqdm

from .formats import read_csv_table

REQUIRED_RATING_COLUMNS = ("worker_id", "stimulus_id", "rating")
OPTIONAL_RATING_COLUMNS = ("reference_id", "is_gold", "gold_low", "gold_high", "trial_id", "created_at", "scale")
SCALES = {"acr": (1.0, 5.0), "dcr": (1.0, 5.0), "ccr": (-3.0, 3.0)}
# Scale names (not paradigm kinds: a rating paradigm may offer all three), compared by name below.
ACR, CCR = "acr", "ccr"
SCORE_KINDS = {"acr": "MOS", "dcr": "DMOS", "ccr": "CMOS"}
INTERVALS = ("t", "bootstrap")
# Why an interval is blank (scores.csv ci_reason; empty with an interval).
FEWER_THAN_TWO = "fewer than 2 workers"
NO_SPREAD = "no spread"
OUTSIDE_SCALE = "score outside the scale"
INTERVAL_METHOD_NAMES = {
    "t": "Student t with moderated variance (Smyth 2004), intersected with the scale",
    "bootstrap": "worker bootstrap, percentile, inside the scale",
}
BOOTSTRAP_CHUNK = 250  # resamples per sparse product; bounds memory at (chunk x stimuli)
_TRUE = {"1", "true", "yes", "y", "t"}
_FALSE = {"0", "false", "no", "n", "f", ""}


class RatingsFormatError(ValueError):
    """A ratings file that cannot be analysed; ``str()`` is one line naming the file and line."""

    def __init__(self, path: str, line: int | None, message: str):
        self.path, self.line = path, line
        super().__init__(f"{path}, line {line}: {message}" if line is not None else f"{path}: {message}")


@dataclass(frozen=True)
class Ratings:
    """Ratings as integer-indexed arrays (one entry per row of ratings.csv)."""

    worker: np.ndarray        # (n,) index into worker_ids
    stimulus: np.ndarray      # (n,) index into stimulus_ids
    rating: np.ndarray        # (n,) float
    is_gold: np.ndarray       # (n,) bool
    reference_id: np.ndarray  # (n,) str, "" without a reference
    gold_low: np.ndarray      # (n,) float, NaN without a gold range
    gold_high: np.ndarray     # (n,) float
    worker_ids: np.ndarray    # (W,) str
    stimulus_ids: np.ndarray  # (J,) str
    scale: str                # "acr", "dcr" or "ccr"
    line: np.ndarray          # (n,) line in the file
    extra: dict[str, np.ndarray] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.rating)

    @property
    def low(self) -> float:
        return SCALES[self.scale][0]

    @property
    def high(self) -> float:
        return SCALES[self.scale][1]

    def subset(self, mask: np.ndarray) -> "Ratings":
        """The rows where ``mask`` is true, with the same ID tables."""
        pick = lambda a: a[mask]  # noqa: E731
        return Ratings(pick(self.worker), pick(self.stimulus), pick(self.rating), pick(self.is_gold),
                       pick(self.reference_id), pick(self.gold_low), pick(self.gold_high), self.worker_ids,
                       self.stimulus_ids, self.scale, pick(self.line), {k: pick(v) for k, v in self.extra.items()})


def _numbers(values, line, path, name, *, allow_empty: bool = False) -> np.ndarray:
    text = np.char.strip(np.asarray(values, dtype=str))
    out = np.full(text.shape, np.nan)
    for k, cell in enumerate(text):  # one float() per cell: the same parse as everywhere in the project
        if allow_empty and cell == "":
            continue
        try:
            out[k] = float(cell)
        except ValueError:
            raise RatingsFormatError(path, int(line[k]), f"{name} {str(values[k])!r} is not a number") from None
        if not np.isfinite(out[k]):
            raise RatingsFormatError(path, int(line[k]), f"{name} {str(values[k])!r} is not a finite number")
    return out


def _scale_of(columns: dict, ratings: np.ndarray, line: np.ndarray, path: str, scale: str | None) -> str:
    if "scale" in columns:
        named = np.char.lower(np.char.strip(np.asarray(columns["scale"], dtype=str)))
        unknown = np.flatnonzero(~np.isin(named, list(SCALES)))
        if unknown.size:
            k = unknown[0]
            raise RatingsFormatError(path, int(line[k]), f"scale {str(columns['scale'][k])!r} is not one of "
                                     f"{', '.join(SCALES)}")
        other = np.flatnonzero(named != named[0])
        if other.size:
            raise RatingsFormatError(path, int(line[other[0]]), f"scale {str(named[other[0]])!r} differs from "
                                     f"the first row's {str(named[0])!r} (one scale per file)")
        if scale is not None and scale != named[0]:
            raise RatingsFormatError(path, int(line[0]), f"the file's scale is {str(named[0])!r}, "
                                     f"not {scale!r} as asked")
        return str(named[0])
    if scale is not None:
        return scale
    # No column and no choice: ratings below 1 can only be CCR; otherwise ACR (DCR reads the same way).
    return CCR if (ratings < 1).any() else ACR


def build_ratings(worker_id, stimulus_id, rating, *, reference_id=None, is_gold=None, gold_low=None,
                  gold_high=None, scale: str | None = None, scale_column=None, extra: dict | None = None,
                  line=None, path: str = "ratings") -> Ratings:
    """Index and validate string columns into :class:`Ratings`.

    Raises
    ------
    RatingsFormatError
        No rows, an empty ID, a rating that is not a number or lies outside the scale, an unknown or
        mixed ``scale``, a bad ``is_gold``, or a gold range that is not a pair of numbers.
    """
    workers = np.asarray(worker_id, dtype=str)
    stimuli = np.asarray(stimulus_id, dtype=str)
    n = len(workers)
    line = np.arange(2, n + 2) if line is None else np.asarray(line)
    if n == 0:
        raise RatingsFormatError(path, None, "no ratings (the file has a header but no data rows)")
    for name, values in (("worker_id", workers), ("stimulus_id", stimuli)):
        empty = np.flatnonzero(np.char.str_len(np.char.strip(values)) == 0)
        if empty.size:
            raise RatingsFormatError(path, int(line[empty[0]]), f"empty {name}")
    values = _numbers(rating, line, path, "rating")
    if scale is not None and scale not in SCALES:
        raise ValueError(f"scale must be one of {', '.join(SCALES)}; got {scale!r}")
    columns = {} if scale_column is None else {"scale": scale_column}
    chosen = _scale_of(columns, values, line, path, scale)
    low, high = SCALES[chosen]
    outside = np.flatnonzero((values < low) | (values > high))
    if outside.size:
        k = outside[0]
        raise RatingsFormatError(path, int(line[k]), f"rating {str(rating[k])!r} is outside the {chosen.upper()} "
                                 f"scale {low:g}..{high:g}")
    gold = np.zeros(n, dtype=bool)
    if is_gold is not None:
        text = np.char.lower(np.char.strip(np.asarray(is_gold, dtype=str)))
        bad = np.flatnonzero(~(np.isin(text, list(_TRUE)) | np.isin(text, list(_FALSE))))
        if bad.size:
            raise RatingsFormatError(path, int(line[bad[0]]), f"is_gold {str(is_gold[bad[0]])!r} is not a boolean "
                                     "(use 1/0 or true/false)")
        gold = np.isin(text, list(_TRUE))
    g_low = np.full(n, np.nan) if gold_low is None else _numbers(gold_low, line, path, "gold_low", allow_empty=True)
    g_high = np.full(n, np.nan) if gold_high is None else _numbers(gold_high, line, path, "gold_high",
                                                                    allow_empty=True)
    wrong = np.flatnonzero((np.isfinite(g_low) != np.isfinite(g_high)) | (g_low > g_high))
    if wrong.size:
        raise RatingsFormatError(path, int(line[wrong[0]]), "gold_low and gold_high must both be given, low <= high")
    reference = np.full(n, "", dtype=object) if reference_id is None else \
        np.char.strip(np.asarray(reference_id, dtype=str)).astype(object)
    worker_ids, worker_index = np.unique(workers, return_inverse=True)
    stimulus_ids, stimulus_index = np.unique(stimuli, return_inverse=True)
    return Ratings(worker=worker_index.astype(np.int64), stimulus=stimulus_index.astype(np.int64), rating=values,
                   is_gold=gold, reference_id=reference, gold_low=g_low, gold_high=g_high,
                   worker_ids=worker_ids.astype(object), stimulus_ids=stimulus_ids.astype(object), scale=chosen,
                   line=line, extra={k: np.asarray(v, dtype=str) for k, v in (extra or {}).items()})


def read_ratings(path: str | os.PathLike, scale: str | None = None) -> Ratings:
    """Read and validate a ratings.csv (the module docstring's format).

    Parameters
    ----------
    path : path-like
    scale : "acr", "dcr", "ccr" or None
        The scale; None takes the file's ``scale`` column, else CCR when a rating is below 1, else ACR.
    """
    name, wanted, rows, lines = read_csv_table(path, REQUIRED_RATING_COLUMNS, OPTIONAL_RATING_COLUMNS,
                                               RatingsFormatError)
    columns = dict(zip(wanted, zip(*rows))) if rows else {c: () for c in wanted}
    if ("gold_low" in columns) != ("gold_high" in columns):
        raise RatingsFormatError(name, 1, "gold_low and gold_high come together (the header has one of them)")
    return build_ratings(columns["worker_id"], columns["stimulus_id"], columns["rating"],
                         reference_id=columns.get("reference_id"), is_gold=columns.get("is_gold"),
                         gold_low=columns.get("gold_low"), gold_high=columns.get("gold_high"), scale=scale,
                         scale_column=columns.get("scale"),
                         extra={c: columns[c] for c in ("trial_id", "created_at") if c in columns},
                         line=np.asarray(lines, dtype=np.int64), path=name)


# --------------------------------------------------------------------------- differential scores

@dataclass(frozen=True)
class DifferentialRatings:
    """ACR-HR differential viewer scores: one per rating of a test stimulus with its worker's reference rating."""

    stimulus: np.ndarray   # (m,) stimulus index of the test stimulus
    worker: np.ndarray     # (m,)
    dv: np.ndarray         # (m,) V(test) - V(reference) + 5
    without_reference: int  # ratings of test stimuli whose worker never rated their reference (left out)
    references: np.ndarray  # (J,) bool: stimuli that are some rating's hidden reference


def differential_ratings(ratings: Ratings, rows: np.ndarray | None = None) -> DifferentialRatings:
    """ITU-T P.910 ACR-HR: ``DV = V(test) - V(hidden reference) + 5`` per worker and test stimulus.

    Parameters
    ----------
    ratings : Ratings
        ACR ratings whose ``reference_id`` names, for each test stimulus, its hidden reference (a
        stimulus of the same file).
    rows : bool array, optional
        The rows to use (default: every non-gold row). A worker's reference rating is the mean of their
        used ratings of the reference.

    Raises
    ------
    ValueError
        Not ACR, or no ``reference_id`` names a stimulus of the file.
    """
    if ratings.scale != ACR:
        raise ValueError(f"differential scores from hidden references need ACR ratings, not {ratings.scale.upper()}")
    rows = ~ratings.is_gold if rows is None else np.asarray(rows, bool)
    lookup = {str(s): k for k, s in enumerate(ratings.stimulus_ids)}
    reference = np.array([lookup.get(str(r), -1) for r in ratings.reference_id], dtype=np.int64)
    if not (reference >= 0).any():
        raise ValueError("no reference_id names a rated stimulus: ACR-HR needs the hidden references rated in the "
                         "same file")
    J, W = len(ratings.stimulus_ids), len(ratings.worker_ids)
    references = np.zeros(J, dtype=bool)
    references[reference[reference >= 0]] = True
    counts = sparse.csr_matrix((rows.astype(float), (ratings.worker, ratings.stimulus)), shape=(W, J))
    sums = sparse.csr_matrix((np.where(rows, ratings.rating, 0.0), (ratings.worker, ratings.stimulus)), shape=(W, J))
    test = rows & (reference >= 0) & (reference != ratings.stimulus)
    w, ref = ratings.worker[test], reference[test]
    n_ref = np.asarray(counts[w, ref]).ravel()
    has = n_ref > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        ref_value = np.asarray(sums[w, ref]).ravel() / n_ref
    dv = ratings.rating[test][has] - ref_value[has] + 5.0
    return DifferentialRatings(ratings.stimulus[test][has], w[has], dv, int((~has).sum()), references)


# --------------------------------------------------------------------------- scores and intervals

@dataclass(frozen=True)
class Scores:
    """Per-stimulus scores with their intervals (NaN where a stimulus has too few ratings)."""

    score: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    n_ratings: np.ndarray
    n_workers: np.ndarray
    samples: np.ndarray | None = None   # (B, J) bootstrap means, with the bootstrap
    reason: np.ndarray | None = None    # (J,) why an interval is blank ("" with an interval)


def check_interval(interval: str) -> str:
    if interval not in INTERVALS:
        raise ValueError(f"interval must be one of {', '.join(INTERVALS)}; got {interval!r}")
    return interval


def t_interval(stimulus: np.ndarray, values: np.ndarray, n_stimuli: int, confidence: float = 0.95):
    """Mean, Student-t interval and count of ``values`` per stimulus (NaN interval below two values).

    Returns
    -------
    mean, low, high : (J,) float arrays
    n : (J,) int array
    """
    n = np.bincount(stimulus, minlength=n_stimuli).astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.bincount(stimulus, values, n_stimuli) / n
        deviation = values - mean[stimulus]
        sd = np.sqrt(np.bincount(stimulus, deviation * deviation, n_stimuli) / (n - 1))
        half = stdtrit(np.maximum(n - 1, 1), 0.5 + confidence / 2) * sd / np.sqrt(n)
    half[n < 2] = np.nan
    return mean, mean - half, mean + half, n.astype(np.int64)


def mos_intervals(n: np.ndarray, total: np.ndarray, squares: np.ndarray,
                  confidence: float = 0.95) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(means, SDs of one rating, t half-widths) from per-stimulus counts, sums and sums of squares: the MOS
    intervals a rating study's ``[stopping]`` measures (server/paradigms/rating/precision.py) and
    :mod:`analysis.rating_forecast` simulates. Any leading axes broadcast (replicates x stimuli, say).

    Stimuli with fewer than two ratings have NaN SD and half-width."""
    n = np.asarray(n, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = total / n
        var = np.maximum(squares - n * mean ** 2, 0.0) / (n - 1)
        sd = np.where(n >= 2, np.sqrt(var), np.nan)
        t = stdtrit(np.maximum(n - 1, 1), 0.5 + confidence / 2)
        half = np.where(n >= 2, t * sd / np.sqrt(n), np.nan)
    return mean, sd, half


def _trigamma_inverse(x: float) -> float:
    """``y`` with ``trigamma(y) = x`` (Newton's method as limma's ``trigammaInverse``)."""
    if x > 1e7:
        return 1.0 / np.sqrt(x)
    if x < 1e-6:
        return 1.0 / x
    y = 0.5 + 1.0 / x
    for _ in range(50):
        tri = float(polygamma(1, y))
        step = tri * (1.0 - tri / x) / float(polygamma(2, y))
        y += step
        if -step / y < 1e-8:
            break
    return y


def moderated_variances(variance: np.ndarray, df: np.ndarray) -> tuple[np.ndarray, np.ndarray, float, float]:
    """Empirical-Bayes moderated variances (Smyth 2004; limma's ``squeezeVar`` by the method of moments).

    Each ``variance[j]`` (an unbiased sample variance on ``df[j]`` degrees of freedom) is taken as a draw of
    ``s0^2 chi2_{d0}/d0``-distributed true variances, observed with their own chi-square noise; ``s0^2`` and
    ``d0`` are estimated from the spread of the log variances beyond what their degrees of freedom explain.

    Parameters
    ----------
    variance, df : (J,) arrays
        Sample variances (NaN or ``df < 1``: not used for the prior, moderated to the prior alone).

    Returns
    -------
    posterior : (J,) ``(d0 s0^2 + df s^2) / (d0 + df)``
    posterior_df : (J,) ``d0 + df`` (capped at 10^6 where the variances agree beyond their noise)
    prior_variance, prior_df : float
        ``s0^2`` and ``d0`` (NaN without two positive variances, and then the posterior is the variance itself).
    """
    variance = np.asarray(variance, float)
    df = np.asarray(df, float)
    usable = np.isfinite(variance) & (df >= 1)
    positive = usable & (variance > 0)
    if positive.sum() < 2:
        with np.errstate(invalid="ignore"):
            return np.where(usable, variance, np.nan), np.where(usable, df, np.nan), float("nan"), float("nan")
    d = df[positive]
    e = np.log(variance[positive]) - digamma(d / 2) + np.log(d / 2)
    mean_e = float(e.mean())
    excess = float(np.var(e, ddof=1) - np.mean(polygamma(1, d / 2)))
    if excess > 0:
        d0 = min(2.0 * _trigamma_inverse(excess), 1e6)
        s0 = float(np.exp(mean_e + digamma(d0 / 2) - np.log(d0 / 2)))
    else:   # the variances differ no more than their noise: pool them
        d0, s0 = 1e6, float(np.exp(mean_e))
    safe = np.where(usable, variance, 0.0)
    used = np.where(usable, df, 0.0)
    return (d0 * s0 + used * safe) / (d0 + used), d0 + used, s0, d0


def bounded_intervals(ci_low: np.ndarray, ci_high: np.ndarray, low: float | None, high: float | None,
                      n_workers: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Intervals ``[ci_low, ci_high]`` intersected with the scale ``[low, high]``, blank (NaN) with a reason where
    they cannot be given: fewer than two workers, no spread (not finite, or of zero width), or nothing left
    inside the scale.

    Returns
    -------
    ci_low, ci_high : (J,) float arrays
    reason : (J,) object array of str, "" where there is an interval
    """
    lo, hi = np.array(ci_low, dtype=float), np.array(ci_high, dtype=float)
    with np.errstate(invalid="ignore"):
        # rounding leaves identical bootstrap means ~1e-15 apart: a width that small is no spread
        spread = np.isfinite(lo) & np.isfinite(hi) & (hi - lo > 1e-9 * (1.0 + np.abs(hi) + np.abs(lo)))
        if low is not None:
            lo = np.maximum(lo, low)
        if high is not None:
            hi = np.minimum(hi, high)
        outside = spread & ~(hi > lo)
    reason = np.full(lo.shape, "", dtype=object)
    reason[~spread] = NO_SPREAD
    reason[outside] = OUTSIDE_SCALE
    reason[np.asarray(n_workers) < 2] = FEWER_THAN_TWO
    blank = reason != ""
    lo[blank], hi[blank] = np.nan, np.nan
    return lo, hi, reason


def moderated_t_halfwidths(n: np.ndarray, variance: np.ndarray, confidence: float = 0.95) -> np.ndarray:
    """Half-widths ``t_{d0 + n - 1} sqrt(s~^2 / n)`` of the moderated t interval of means of ``n`` values with
    sample variances ``variance`` (NaN where ``n < 2``), the moderation over every stimulus with two values."""
    n = np.asarray(n, float)
    with np.errstate(invalid="ignore", divide="ignore"):
        posterior, df, _, _ = moderated_variances(np.where(n >= 2, variance, np.nan), n - 1)
        half = stdtrit(np.maximum(df, 1), 0.5 + confidence / 2) * np.sqrt(posterior / n)
    return np.where(n >= 2, half, np.nan)


def worker_bootstrap_means(stimulus: np.ndarray, worker: np.ndarray, values: np.ndarray, n_stimuli: int,
                           n_workers: int, n_boot: int = 1000, seed: int | np.random.Generator | None = 0,
                           progress: bool | None = None) -> np.ndarray:
    """Per-stimulus means of ``n_boot`` resamples of the workers (with replacement, all their ratings).

    A resample is a vector of counts ``c_w`` (how often each worker was drawn; multinomial over the
    workers who gave a value); its mean of stimulus ``j`` is ``sum_w c_w S_wj / sum_w c_w N_wj`` with
    ``S`` and ``N`` the workers' sums and counts per stimulus (sparse). A block of resamples is two
    sparse products. A stimulus that no drawn worker rated is NaN in that resample.

    Returns
    -------
    (n_boot, J) float array
    """
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    present = np.unique(worker)
    S = sparse.csr_matrix((values, (worker, stimulus)), shape=(n_workers, n_stimuli))
    N = sparse.csr_matrix((np.ones_like(values), (worker, stimulus)), shape=(n_workers, n_stimuli))
    St, Nt = S.T.tocsr(), N.T.tocsr()
    out = np.empty((n_boot, n_stimuli))
    with tqdm(total=n_boot, desc="bootstrap", unit="resample", leave=False,
              disable=None if progress is None else not progress) as bar:
        for start in range(0, n_boot, BOOTSTRAP_CHUNK):
            stop = min(start + BOOTSTRAP_CHUNK, n_boot)
            counts = np.zeros((n_workers, stop - start))
            counts[present] = rng.multinomial(len(present), np.full(len(present), 1.0 / len(present)),
                                              size=stop - start).T
            with np.errstate(invalid="ignore", divide="ignore"):
                out[start:stop] = (St @ counts / (Nt @ counts)).T
            bar.update(stop - start)
    return out


def mos_scores(stimulus: np.ndarray, worker: np.ndarray, values: np.ndarray, n_stimuli: int, n_workers: int,
               interval: str = "t", confidence: float = 0.95, n_boot: int = 1000,
               seed: int | np.random.Generator | None = 0, progress: bool | None = None, *,
               low: float | None = None, high: float | None = None) -> Scores:
    """Mean score per stimulus with a moderated-t or worker-bootstrap interval (see the module docstring).

    Parameters
    ----------
    stimulus, worker : (n,) int arrays
    values : (n,) float array
        Ratings (MOS, DMOS of DCR, CMOS) or differential viewer scores (ACR-HR).
    n_stimuli, n_workers : int
    interval : "t" or "bootstrap"
    confidence : float
    n_boot : int
        Resamples of the bootstrap.
    seed, progress
        The bootstrap's generator; a progress bar (None: only on a terminal).
    low, high : float, optional
        The scale the intervals are bounded by (None: unbounded on that side).

    Returns
    -------
    Scores
        With ``reason`` saying why an interval is blank (fewer than two workers, no spread).
    """
    check_interval(interval)
    n = np.bincount(stimulus, minlength=n_stimuli)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.bincount(stimulus, values, n_stimuli) / n
        deviation = values - mean[stimulus]
        variance = np.bincount(stimulus, deviation * deviation, n_stimuli) / (n - 1)
    pairs = np.unique(stimulus * n_workers + worker)
    n_workers_of = np.bincount(pairs // n_workers, minlength=n_stimuli)
    samples = None
    if interval == "bootstrap":
        samples = worker_bootstrap_means(stimulus, worker, values, n_stimuli, n_workers, n_boot, seed, progress)
        alpha = (1 - confidence) / 2
        ci_low, ci_high = np.full(n_stimuli, np.nan), np.full(n_stimuli, np.nan)
        drawn = np.isfinite(samples).any(axis=0)  # a stimulus of one rare worker may be missed by every resample
        if drawn.any():
            ci_low[drawn], ci_high[drawn] = np.nanquantile(samples[:, drawn], [alpha, 1 - alpha], axis=0)
    else:
        half = moderated_t_halfwidths(n, variance, confidence)
        ci_low, ci_high = mean - half, mean + half
    ci_low, ci_high, reason = bounded_intervals(ci_low, ci_high, low, high, n_workers_of)
    return Scores(mean, ci_low, ci_high, n.astype(np.int64), n_workers_of.astype(np.int64), samples, reason)
