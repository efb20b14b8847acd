"""Screening of workers in rating studies: five rules, each with its own column in workers.csv.

Every rule looks at the non-gold ratings (gold rows only for the gold rule) and flags a worker; a
worker is kept when no rule that is switched on flags them. Each rule is one pass over all workers
(no iteration), so a flag never depends on which other workers another rule removed.

``bt500``  ITU-R BT.500-14 Annex 2, 2.3.1 (observer screening by the beta2 test). For each stimulus:
           mean, standard deviation ``s`` (``n - 1``) and kurtosis ``beta2 = m4 / m2^2`` (moments over
           ``n``). Its ratings are taken as normal when ``2 <= beta2 <= 4``; then a rating at or above
           ``mean + 2 s`` adds one to the worker's ``P``, at or below ``mean - 2 s`` one to ``Q``, and
           otherwise the bounds are ``mean +/- sqrt(20) s``. A worker is rejected when
           ``(P + Q) / N > 0.05`` and ``|(P - Q) / (P + Q)| < 0.3``, ``N`` the worker's ratings (the
           standard's ``J K R`` for a worker who rated everything). Stimuli whose ratings all agree
           (``s = 0``) count for nobody.
``correlation``  the Pearson correlation of a worker's ratings (means over repeats) with the MOS of the
           *other* workers on the same stimuli (left out so that the worker does not correlate with
           their own share of the MOS; ITU-T P.913's subject screening uses the MOS of all subjects and
           rejects a subject below 0.75 at the level of single stimuli). Flagged below
           ``correlation_threshold`` (0.75) with at least ``min_common`` (5) shared stimuli and some
           spread on both sides; undefined (empty, not flagged) otherwise.
``straight_liner``  the SD of a worker's ratings is at most ``straight_sd`` (5 % of the scale's range,
           0.2 points on a 5-point scale) over at least ``min_ratings`` (10) ratings: one answer for
           everything.
``gold``   gold rows with a range (``gold_low``, ``gold_high``): a worker whose share of gold answers
           inside their range is below ``gold_accuracy`` (0.7) is flagged.
``hidden_reference``  a worker's mean rating of hidden references (stimuli named by some row's
           ``reference_id``, and DCR/CCR rows comparing a reference with itself) is below their mean
           rating of clearly impaired stimuli (the other stimuli whose MOS over all workers is in the
           bottom quarter of the scale): they cannot tell an unimpaired stimulus from a bad one.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

RULES = ("bt500", "correlation", "straight_liner", "gold", "hidden_reference")
DEFAULT_CORRELATION = 0.75
DEFAULT_MIN_COMMON = 5
DEFAULT_STRAIGHT_FRACTION = 0.05
DEFAULT_MIN_RATINGS = 10
DEFAULT_GOLD_ACCURACY = 0.7
IMPAIRED_QUARTER = 0.25
# The columns of workers.csv the rules fill, besides each rule's flag.
SCREENING_COLUMNS = ("bt500_p", "bt500_q", "correlation", "rating_sd", "gold_accuracy",
                     "hidden_reference_mean", "impaired_mean")


@dataclass(frozen=True)
class ScreeningOptions:
    """Which rules flag workers and their thresholds (see the module docstring)."""

    rules: tuple[str, ...] = RULES
    correlation_threshold: float = DEFAULT_CORRELATION
    min_common: int = DEFAULT_MIN_COMMON
    straight_fraction: float = DEFAULT_STRAIGHT_FRACTION
    min_ratings: int = DEFAULT_MIN_RATINGS
    gold_accuracy: float = DEFAULT_GOLD_ACCURACY

    def __post_init__(self):
        unknown = [r for r in self.rules if r not in RULES]
        if unknown:
            raise ValueError(f"unknown screening rule {unknown[0]!r}; choose from {', '.join(RULES)}")


@dataclass(frozen=True)
class RatingScreening:
    """Per-worker screening statistics and flags (arrays over the workers)."""

    n_ratings: np.ndarray
    flags: dict[str, np.ndarray]        # rule -> (W,) bool (every rule, switched on or not)
    statistics: dict[str, np.ndarray]   # SCREENING_COLUMNS -> (W,) float (NaN where undefined)
    rules: tuple[str, ...] = RULES
    options: ScreeningOptions = field(default_factory=ScreeningOptions)

    @property
    def kept(self) -> np.ndarray:
        """Workers with non-gold ratings whom no switched-on rule flags."""
        flagged = np.zeros(len(self.n_ratings), dtype=bool)
        for rule in self.rules:
            flagged |= self.flags[rule]
        return (self.n_ratings > 0) & ~flagged

    def reasons(self, k: int) -> list[str]:
        """The switched-on rules that flag worker ``k`` (``no_ratings`` without non-gold ratings)."""
        if self.n_ratings[k] == 0:
            return ["no_ratings"]
        return [rule for rule in self.rules if self.flags[rule][k]]

    def summary(self) -> dict:
        return {"rules": list(self.rules), "kept": int(self.kept.sum()), "workers": len(self.n_ratings),
                "flagged": {rule: int(self.flags[rule].sum()) for rule in RULES},
                "no_ratings": int((self.n_ratings == 0).sum()),
                "thresholds": {"correlation": self.options.correlation_threshold,
                               "min_common": self.options.min_common,
                               "straight_sd_fraction_of_range": self.options.straight_fraction,
                               "min_ratings": self.options.min_ratings,
                               "gold_accuracy": self.options.gold_accuracy}}


def bt500_counts(stimulus: np.ndarray, worker: np.ndarray, x: np.ndarray, n_stimuli: int,
                 n_workers: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """BT.500-14 Annex 2 2.3.1: each worker's ``P`` and ``Q`` counts and whether they are rejected.

    Returns
    -------
    P, Q : (W,) int arrays
    rejected : (W,) bool array
    """
    n = np.bincount(stimulus, minlength=n_stimuli).astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.bincount(stimulus, x, n_stimuli) / n
        d = x - mean[stimulus]
        m2 = np.bincount(stimulus, d ** 2, n_stimuli) / n
        m4 = np.bincount(stimulus, d ** 4, n_stimuli) / n
        s = np.sqrt(m2 * n / (n - 1))
        beta2 = m4 / m2 ** 2
    factor = np.where((beta2 >= 2) & (beta2 <= 4), 2.0, np.sqrt(20.0))
    usable = (n > 1) & (m2 > 0)
    bound = (factor * s)[stimulus]
    ok = usable[stimulus]
    P = np.bincount(worker, ok & (x >= mean[stimulus] + bound), n_workers).astype(np.int64)
    Q = np.bincount(worker, ok & (x <= mean[stimulus] - bound), n_workers).astype(np.int64)
    N = np.bincount(worker, minlength=n_workers)
    with np.errstate(invalid="ignore", divide="ignore"):
        rejected = ((P + Q) / N > 0.05) & (np.abs((P - Q) / (P + Q)) < 0.3)
    return P, Q, rejected & (N > 0)


def correlation_with_others(stimulus: np.ndarray, worker: np.ndarray, x: np.ndarray, n_stimuli: int,
                            n_workers: int, min_common: int = DEFAULT_MIN_COMMON) -> np.ndarray:
    """Pearson r of each worker's ratings with the leave-one-out MOS of the others (NaN where undefined)."""
    pairs, pair = np.unique(worker * n_stimuli + stimulus, return_inverse=True)
    own_sum, own_n = np.bincount(pair, x), np.bincount(pair).astype(float)
    rows, cols = pairs // n_stimuli, pairs % n_stimuli
    total_sum = np.bincount(stimulus, x, n_stimuli)
    total_n = np.bincount(stimulus, minlength=n_stimuli).astype(float)
    others_n = total_n[cols] - own_n
    has = others_n > 0
    a = own_sum[has] / own_n[has]
    b = (total_sum[cols][has] - own_sum[has]) / others_n[has]
    w = rows[has]
    k = np.bincount(w, minlength=n_workers).astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        ma, mb = np.bincount(w, a, n_workers) / k, np.bincount(w, b, n_workers) / k
        da, db = a - ma[w], b - mb[w]
        sab = np.bincount(w, da * db, n_workers)
        saa, sbb = np.bincount(w, da * da, n_workers), np.bincount(w, db * db, n_workers)
        r = sab / np.sqrt(saa * sbb)
    spread = (saa > 1e-12) & (sbb > 1e-12)
    return np.where((k >= min_common) & spread, r, np.nan)


def screen_ratings(stimulus: np.ndarray, worker: np.ndarray, x: np.ndarray, n_stimuli: int, n_workers: int,
                   low: float, high: float, *, gold_worker: np.ndarray | None = None,
                   gold_rating: np.ndarray | None = None, gold_low: np.ndarray | None = None,
                   gold_high: np.ndarray | None = None, hidden_reference: np.ndarray | None = None,
                   options: ScreeningOptions = ScreeningOptions()) -> RatingScreening:
    """Apply every rule of the module docstring to the workers.

    Parameters
    ----------
    stimulus, worker, x : (n,) arrays
        The non-gold ratings.
    n_stimuli, n_workers : int
    low, high : float
        The scale.
    gold_worker, gold_rating, gold_low, gold_high : (g,) arrays, optional
        Gold rows and their answer ranges (rows without a range are ignored).
    hidden_reference : (n,) bool array, optional
        Which of the non-gold ratings are of a hidden reference.
    options : ScreeningOptions

    Returns
    -------
    RatingScreening
    """
    W = n_workers
    n = np.bincount(worker, minlength=W)
    P, Q, bt500 = bt500_counts(stimulus, worker, x, n_stimuli, W)
    r = correlation_with_others(stimulus, worker, x, n_stimuli, W, options.min_common)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.bincount(worker, x, W) / n
        sd = np.sqrt(np.bincount(worker, (x - mean[worker]) ** 2, W) / n)
    straight = (n >= options.min_ratings) & (sd <= options.straight_fraction * (high - low))
    accuracy = np.full(W, np.nan)
    gold_failed = np.zeros(W, dtype=bool)
    if gold_worker is not None and len(gold_worker):
        ranged = np.isfinite(gold_low) & np.isfinite(gold_high)
        gw = gold_worker[ranged]
        inside = (gold_rating[ranged] >= gold_low[ranged]) & (gold_rating[ranged] <= gold_high[ranged])
        answered = np.bincount(gw, minlength=W)
        with np.errstate(invalid="ignore", divide="ignore"):
            accuracy = np.where(answered > 0, np.bincount(gw, inside, W) / answered, np.nan)
        gold_failed = (answered > 0) & (accuracy < options.gold_accuracy)
    ref_mean, impaired_mean = np.full(W, np.nan), np.full(W, np.nan)
    if hidden_reference is not None and hidden_reference.any():
        m = np.bincount(stimulus, minlength=n_stimuli)
        with np.errstate(invalid="ignore", divide="ignore"):
            mos = np.bincount(stimulus, x, n_stimuli) / m
        reference_stimuli = np.zeros(n_stimuli, dtype=bool)
        reference_stimuli[stimulus[hidden_reference]] = True
        impaired = (~reference_stimuli & (mos <= low + IMPAIRED_QUARTER * (high - low)))[stimulus] & ~hidden_reference
        with np.errstate(invalid="ignore", divide="ignore"):
            ref_mean = np.bincount(worker, np.where(hidden_reference, x, 0), W) / np.bincount(worker, hidden_reference, W)
            impaired_mean = np.bincount(worker, np.where(impaired, x, 0), W) / np.bincount(worker, impaired, W)
    hidden_failed = np.isfinite(ref_mean) & np.isfinite(impaired_mean) & (ref_mean < impaired_mean)
    flags = {"bt500": bt500, "correlation": np.isfinite(r) & (r < options.correlation_threshold),
             "straight_liner": straight, "gold": gold_failed, "hidden_reference": hidden_failed}
    statistics = {"bt500_p": P.astype(float), "bt500_q": Q.astype(float), "correlation": r, "rating_sd": sd,
                  "gold_accuracy": accuracy, "hidden_reference_mean": ref_mean, "impaired_mean": impaired_mean}
    return RatingScreening(n.astype(np.int64), flags, statistics, tuple(options.rules), options)
