"""Screening of workers in rating studies: six rules, each with its own columns in workers.csv.

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
``careless``  the P.913 model's inconsistency of each worker, with its uncertainty: is the worker's residual
           spread more likely that of a careless rater than that of the crowd's honest raters? Residuals
           ``r_ij = u_ij - psi_j - delta_i`` of the P.913 fit to every worker (:mod:`analysis.rating_models`;
           its weights make careless workers count little in ``psi``). Two hypotheses for a worker's ``n_i``
           residuals (``n_i - 1`` degrees of freedom, the bias being fitted), each normal:
           *honest*, of SD ``v_h``, the honest raters' pooled inconsistency (estimated below); *careless*, of
           SD ``v_c`` with ``v_c^2`` the variance of a uniformly random rating on the scale (``(K^2 - 1) / 12``
           for ``K`` whole points, ``(high - low)^2 / 12`` for a slider) plus the variance of the fitted
           qualities (a careless rating ignores the quality). The share ``pi`` of honest workers and ``v_h``
           are estimated by EM over the workers (the mixture likelihood, as ``perceptlab analyze``'s ``auto``
           rule classifies paired-comparison workers against guessing, analysis/screening.py), and a worker is
           flagged when their posterior of being careless exceeds ``careless_posterior`` (1/2: the likelier
           hypothesis). Because it is a likelihood ratio of ``n_i - 1`` residuals, a worker with few ratings
           needs a clearer excess spread to be flagged: the rule accounts for how much each worker rated. It
           needs no correlation, so it works on a narrow range of qualities, where an honest worker's
           correlation with the others is low. Undefined (empty, not flagged) below ``min_model_ratings`` (4).
``correlation``  a one-sided test of the Pearson correlation of a worker's ratings (means over repeats) with
           the MOS of the *other* workers on the same stimuli (left out so that the worker does not correlate
           with their own share of the MOS), by Fisher's z (``atanh(r) sqrt(k - 3)``, ``k`` the shared
           stimuli): the worker is flagged when the correlation is significantly below
           ``correlation_threshold`` at level ``correlation_alpha``, i.e. when the upper one-sided
           ``1 - alpha`` bound ``tanh(atanh(r) + z_{1-alpha} / sqrt(k - 3))`` is below the threshold. The
           default (threshold 0, alpha 0.05) flags workers who rate significantly *against* the others (a
           reversed scale); with few shared stimuli no worker is flagged by chance more often than alpha.
           VQEG HDTV Annex I's fixed rule (flag ``r < 0.75``; ITU-T P.913's subject screening uses the same
           threshold) is threshold 0.75 with alpha 0.5 (``z = 0``); it assumes the complete lab design of
           those standards, and on a crowd (12-24 ratings a worker, a narrow range of qualities) it flags
           about half of the honest workers. Defined with at least ``min_common`` (5) shared stimuli and
           some spread on both sides; undefined (empty, not flagged) otherwise.
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
from scipy.special import expit, logit, ndtri

from .rating_models import fit_p913

RULES = ("bt500", "careless", "correlation", "straight_liner", "gold", "hidden_reference")
# VQEG HDTV Annex I's fixed correlation threshold (the correlation rule with alpha 0.5; the forecast's --screen).
DEFAULT_CORRELATION = 0.75
DEFAULT_CORRELATION_THRESHOLD = 0.0
DEFAULT_CORRELATION_ALPHA = 0.05
DEFAULT_MIN_COMMON = 5
DEFAULT_CARELESS_POSTERIOR = 0.5
DEFAULT_MIN_MODEL_RATINGS = 4
DEFAULT_STRAIGHT_FRACTION = 0.05
DEFAULT_MIN_RATINGS = 10
DEFAULT_GOLD_ACCURACY = 0.7
IMPAIRED_QUARTER = 0.25
EM_ITERATIONS = 200
# Where each rule comes from, for summary.json (the thresholds are ScreeningOptions').
RULE_SOURCES = {
    "bt500": "ITU-R BT.500-14 Annex 2 clause 2.3.1 (beta2 kurtosis test; reject when (P+Q)/N > 0.05 and "
             "|P-Q|/(P+Q) < 0.3)",
    "careless": "ITU-T P.913 clause 12.6 subject model (inconsistency per worker) in a two-component mixture: "
                "honest raters against uniformly random ones, by likelihood ratio with EM over the workers",
    "correlation": "Pearson r with the others' MOS (VQEG HDTV Annex I, ITU-T P.913), tested one-sided by Fisher's z "
                   "with the worker's shared stimuli",
    "straight_liner": "perceptlab: one answer for everything (SD of the worker's ratings)",
    "gold": "perceptlab: share of gold answers inside their range (StudyMB 1.0 uses 70 % for paired gold)",
    "hidden_reference": "ITU-T P.910 ACR-HR: hidden references rated below clearly impaired stimuli",
}
# The columns of workers.csv the rules fill, besides each rule's flag.
SCREENING_COLUMNS = ("bt500_p", "bt500_q", "careless_posterior", "careless_llr", "correlation",
                     "correlation_bound", "n_common", "rating_sd", "gold_accuracy", "hidden_reference_mean",
                     "impaired_mean")


@dataclass(frozen=True)
class ScreeningOptions:
    """Which rules flag workers and their thresholds (see the module docstring)."""

    rules: tuple[str, ...] = RULES
    correlation_threshold: float = DEFAULT_CORRELATION_THRESHOLD
    correlation_alpha: float = DEFAULT_CORRELATION_ALPHA
    min_common: int = DEFAULT_MIN_COMMON
    careless_posterior: float = DEFAULT_CARELESS_POSTERIOR
    min_model_ratings: int = DEFAULT_MIN_MODEL_RATINGS
    straight_fraction: float = DEFAULT_STRAIGHT_FRACTION
    min_ratings: int = DEFAULT_MIN_RATINGS
    gold_accuracy: float = DEFAULT_GOLD_ACCURACY

    def __post_init__(self):
        unknown = [r for r in self.rules if r not in RULES]
        if unknown:
            raise ValueError(f"unknown screening rule {unknown[0]!r}; choose from {', '.join(RULES)}")
        if not 0 < self.correlation_alpha < 1:
            raise ValueError(f"correlation_alpha must be in (0, 1), got {self.correlation_alpha}")
        if not 0 < self.careless_posterior < 1:
            raise ValueError(f"careless_posterior must be in (0, 1), got {self.careless_posterior}")


@dataclass(frozen=True)
class RatingScreening:
    """Per-worker screening statistics and flags (arrays over the workers)."""

    n_ratings: np.ndarray
    flags: dict[str, np.ndarray]        # rule -> (W,) bool (every rule, switched on or not)
    statistics: dict[str, np.ndarray]   # SCREENING_COLUMNS -> (W,) float (NaN where undefined)
    rules: tuple[str, ...] = RULES
    options: ScreeningOptions = field(default_factory=ScreeningOptions)
    mixture: CarelessMixture | None = None

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
                "careless_mixture": None if self.mixture is None else {
                    "honest_sd": _number(self.mixture.honest_sd), "careless_sd": _number(self.mixture.careless_sd),
                    "honest_share": _number(self.mixture.honest_share)},
                "sources": {rule: RULE_SOURCES[rule] for rule in RULES},
                "thresholds": {"careless_posterior": self.options.careless_posterior,
                               "min_model_ratings": self.options.min_model_ratings,
                               "correlation": self.options.correlation_threshold,
                               "correlation_alpha": self.options.correlation_alpha,
                               "min_common": self.options.min_common,
                               "straight_sd_fraction_of_range": self.options.straight_fraction,
                               "min_ratings": self.options.min_ratings,
                               "gold_accuracy": self.options.gold_accuracy}}


def _number(value: float) -> float | None:
    return None if not np.isfinite(value) else round(float(value), 6)


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


def shared_stimuli(stimulus: np.ndarray, worker: np.ndarray, n_stimuli: int, n_workers: int) -> np.ndarray:
    """(W,) how many distinct stimuli each worker shares with at least one other worker."""
    pairs = np.unique(worker * n_stimuli + stimulus)
    rows, cols = pairs // n_stimuli, pairs % n_stimuli
    raters = np.bincount(cols, minlength=n_stimuli)
    return np.bincount(rows, raters[cols] > 1, n_workers).astype(np.int64)


def correlation_upper_bound(r: np.ndarray, k: np.ndarray, alpha: float = DEFAULT_CORRELATION_ALPHA) -> np.ndarray:
    """Fisher's z one-sided upper ``1 - alpha`` bound of a correlation ``r`` over ``k`` pairs (NaN where ``r`` is
    NaN or ``k < 4``): ``tanh(atanh(r) + z_{1-alpha} / sqrt(k - 3))``; ``alpha = 0.5`` gives ``r`` itself."""
    r, k = np.asarray(r, float), np.asarray(k, float)
    with np.errstate(invalid="ignore", divide="ignore"):
        z = np.arctanh(np.clip(r, -1 + 1e-12, 1 - 1e-12)) + ndtri(1 - alpha) / np.sqrt(k - 3)
    return np.where(np.isfinite(r) & (k > 3), np.tanh(z), np.nan)


@dataclass(frozen=True)
class CarelessMixture:
    """The ``careless`` rule's fit: per worker a posterior and log-likelihood ratio, and the mixture's parameters."""

    posterior: np.ndarray       # (W,) posterior of being careless (NaN: too few ratings)
    llr: np.ndarray             # (W,) log-likelihood ratio careless vs honest (NaN: too few ratings)
    inconsistency: np.ndarray   # (W,) the worker's residual SD over n_i - 1 degrees of freedom (NaN: none)
    honest_sd: float            # v_h, the honest raters' pooled inconsistency
    careless_sd: float          # v_c, the SD of a uniformly random rater around the qualities
    honest_share: float


def careless_mixture(stimulus: np.ndarray, worker: np.ndarray, x: np.ndarray, n_stimuli: int, n_workers: int,
                     low: float, high: float, min_ratings: int = DEFAULT_MIN_MODEL_RATINGS) -> CarelessMixture:
    """The ``careless`` rule of the module docstring: honest P.913 raters against uniformly random ones.

    Parameters
    ----------
    stimulus, worker, x : (n,) arrays
        The non-gold ratings.
    n_stimuli, n_workers : int
    low, high : float
        The scale; whole-point ratings are taken as ``K = high - low + 1`` categories.
    min_ratings : int
        Workers with fewer ratings get no posterior (NaN) and are not flagged.
    """
    nan = np.full(n_workers, np.nan)
    if len(x) == 0:
        return CarelessMixture(nan, nan.copy(), nan.copy(), float("nan"), float("nan"), float("nan"))
    stimuli, s = np.unique(stimulus, return_inverse=True)
    workers, w = np.unique(worker, return_inverse=True)
    fit = fit_p913(s, w, x, len(stimuli), len(workers))
    residual = x - fit.quality[s] - fit.bias[w]
    ss = np.bincount(w, residual * residual, len(workers))
    df = (fit.n_worker - 1).astype(float)
    if np.all(x == np.round(x)):
        points = round(high - low) + 1
        uniform = (points * points - 1) / 12.0
    else:
        uniform = (high - low) ** 2 / 12.0
    v_c2 = uniform + float(np.var(fit.quality))
    usable = fit.n_worker >= max(min_ratings, 2)
    posterior, llr = nan.copy(), nan.copy()
    spread = nan.copy()
    with np.errstate(invalid="ignore", divide="ignore"):
        spread[workers] = np.where(df > 0, np.sqrt(ss / df), np.nan)
    if not usable.any():
        return CarelessMixture(posterior, llr, spread, float("nan"), float(np.sqrt(v_c2)), float("nan"))
    ss_u, df_u = ss[usable], df[usable]
    # Start from the median worker as the honest level (a majority is honest) and an even share.
    v_h2 = min(max(float(np.median(ss_u / df_u)), 1e-6), v_c2)
    share = 0.5
    for _ in range(EM_ITERATIONS):
        ratio = 0.5 * df_u * np.log(v_h2 / v_c2) + 0.5 * ss_u * (1.0 / v_h2 - 1.0 / v_c2)
        p_careless = expit(ratio + logit(1.0 - share))
        honest = 1.0 - p_careless
        new_share = float(np.clip(honest.mean(), 1e-3, 1 - 1e-3))
        # The honest variance: the pooled residual variance of the workers weighted by their honest posterior,
        # never above the careless one (else the two hypotheses swap their roles).
        new_v_h2 = float(min(np.sum(honest * ss_u) / max(np.sum(honest * df_u), 1e-12), v_c2))
        done = abs(new_share - share) < 1e-10 and abs(new_v_h2 - v_h2) < 1e-12
        share, v_h2 = new_share, max(new_v_h2, 1e-6)
        if done:
            break
    ratio = 0.5 * df_u * np.log(v_h2 / v_c2) + 0.5 * ss_u * (1.0 / v_h2 - 1.0 / v_c2)
    llr[workers[usable]] = ratio
    posterior[workers[usable]] = expit(ratio + logit(1.0 - share))
    return CarelessMixture(posterior, llr, spread, float(np.sqrt(v_h2)), float(np.sqrt(v_c2)), share)


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
    common = shared_stimuli(stimulus, worker, n_stimuli, W)
    bound = correlation_upper_bound(r, common, options.correlation_alpha)
    mixture = careless_mixture(stimulus, worker, x, n_stimuli, W, low, high, options.min_model_ratings)
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
    flags = {"bt500": bt500,
             "careless": np.isfinite(mixture.posterior) & (mixture.posterior > options.careless_posterior),
             "correlation": np.isfinite(bound) & (bound < options.correlation_threshold),
             "straight_liner": straight, "gold": gold_failed, "hidden_reference": hidden_failed}
    statistics = {"bt500_p": P.astype(float), "bt500_q": Q.astype(float), "careless_posterior": mixture.posterior,
                  "careless_llr": mixture.llr, "correlation": r, "correlation_bound": bound,
                  "n_common": common.astype(float), "rating_sd": sd,
                  "gold_accuracy": accuracy, "hidden_reference_mean": ref_mean, "impaired_mean": impaired_mean}
    return RatingScreening(n.astype(np.int64), flags, statistics, tuple(options.rules), options, mixture)
