"""A forecast before launch for rating studies (ACR, DCR, CCR): how many ratings, participants, dollars and hours
bring the stimuli's MOS intervals to a target half-width, from a pilot. The rating counterpart of
:mod:`analysis.forecast` (paired comparison), whose pay rules (:class:`~analysis.forecast.StudyPlan`), result
(:class:`~analysis.forecast.Forecast`, "votes" counting ratings here) and JSON report it shares.

The target
----------
A rating study's ``[stopping] halfwidth`` is in rating points: the 95 % Student t half-width of each stimulus'
mean rating, ``t_{n-1} s / sqrt(n)`` over its ratings by non-pilot participants (``mos_intervals`` of
:mod:`analysis.ratings`, the very function server/paradigms/rating/precision.py measures with). Like the
server, the forecast counts every rating of the test stimuli (quality checks and hidden references aside) and
screens nobody out; ``screen=True`` instead leaves out, at every checkpoint, the workers whom VQEG's fixed
correlation rule flags (r < 0.75: :data:`analysis.rating_screening.DEFAULT_CORRELATION`; ``analyze-ratings``
defaults to other rules since issue 37).

Fit
---
:func:`fit_rating_pilot` reads off the pilot's non-gold ratings of test stimuli, by EM over workers of a
two-component mixture:

* honest workers follow the P.913 subject model (:mod:`analysis.rating_models`): ``psi_j + delta_i +
  upsilon_i X``, rounded to the scale's points (when every rating is a whole point) and clipped to the scale;
  careless ones answer uniformly at random over the scale. Each worker's likelihood ratio of honest over
  careless, under the current scores, their shrunk bias and the pooled inconsistency, gives their posterior
  of being honest and the careless share;
* the inconsistency: its RMS by maximum likelihood of the honest-weighted ratings under that rounding and
  clipping (a plain residual SD would read the ends' clipped ratings as consistency, and the simulation clips
  again), corrected for the degrees of freedom the scores and the shrunk biases take; a log-normal spread
  of ``upsilon`` from the spread of the workers' residual variances beyond their chi-square sampling noise;
  the bias SD from the spread of the workers' mean residuals beyond their noise (method of moments);
* each stimulus' true quality: an empirical-Bayes normal posterior of its honest-weighted, bias-corrected
  mean (shrunk toward the mean of all stimuli by the spread the pilot's means show beyond their noise);
  stimuli the pilot never rated (``stimuli``) draw from the prior;
* seconds per rating (``created_at`` gaps, else ``rt_ms``: :func:`analysis.forecast.response_seconds`) and
  ratings per worker (the pilot's counts).

Simulation
----------
:func:`forecast_ratings` runs ``replicates`` simulated studies. Each first refits the stimuli's qualities on the
pilot with its workers resampled (:func:`resampled_pilot_fit`) and scales the workers' noise by the posterior of a
variance seen in ``W - 1`` degrees of freedom (:func:`crowd_noise_draw`), so that the band carries the pilot's
size; it draws each stimulus' noise multiplier from its posterior (:func:`_stimulus_noise`: stimuli differ in
ambiguity, and a target on most of them waits for the noisiest), a truth from the qualities' posteriors and a
crowd: the pilot's workers resampled with replacement (their rating counts and posteriors of being honest; the
resampling carries the pilot's uncertainty about its careless share into the band), each new worker honest with its
posterior, with a bias and an inconsistency drawn from the fitted distributions. The pilot's ratings are answered
anew by its own workers, then the stimuli get ratings in turn, least-rated first (ties at random), as the server's
allocation fills them toward ``ratings_per_stimulus``; each new worker takes the next ratings of that stream, as
many as the pilot worker they resample gave (a run that crosses from one round of the stimuli to the next may,
unlike the server, give a worker a stimulus twice: at most once per round, rarely). At checkpoints growing by
``growth`` the ratings so far give the stimuli's MOS half-widths (:func:`halfwidths`), and the point where the
``q``-quantile of the half-widths (over every stimulus, and per set) reaches the target is found by log-log
interpolation between checkpoints (:func:`analysis.forecast._crossing`). The forecast is the median over
replicates, the band their 10th to 90th percentile widened to the prediction interval of one further study
(:func:`analysis.forecast.prediction_band`). Every rating of a replicate is drawn at once (vectorised); a
checkpoint is a few ``bincount`` passes, so a replicate takes milliseconds.

Measured: ``benchmarks/forecast.py --only rating`` and ``--only nflx`` (its docstring has the figures). Before the
stimulus noise and the pilot bootstrap, the replay of the public NFLX ratings (a pilot of 4 of its 26 subjects)
was 29-40 % low with 0 of 6 needs inside bands a few percent wide.
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import minimize_scalar
from scipy.special import expit, log_ndtr

from .forecast import (BAND, DEFAULT_GROWTH, DEFAULT_MAX_MULTIPLE, DEFAULT_QUANTILES, Forecast,
                       ForecastInputError, _crossing, checked_target, response_seconds, usable_seconds)
from .rating_screening import DEFAULT_CORRELATION, DEFAULT_MIN_COMMON, correlation_with_others
from .ratings import Ratings, build_ratings, mos_intervals

UNITS = "points"
WHOLE_SET = "all"          # the set of stimulus IDs without "<set>/"
EM_ITERATIONS = 200
MIN_SPREAD = 0.05          # smallest SD of the true qualities and of a worker's inconsistency (points)
SHEPPARD = 1.0 / 12.0      # variance a rounding to whole points adds
ASSUMED_CARELESS_START = 0.2
MAX_RATINGS_PER_STIMULUS = 200  # the default cap of a simulated study is at least this many ratings per stimulus
# Simulated studies of a ratings forecast by default. A replicate costs milliseconds, and a small pilot's replicates
# spread widely (a 4-subject NFLX pilot's 10-90 % band spans about 4:1): the median of 20 of them is itself off by
# about 10 % (1.25 times their log SD over sqrt(20)), which was half of the NFLX replays' median error.
RATING_REPLICATES = 200


# --------------------------------------------------------------------------- the pilot

@dataclass
class RatingPilotFit:
    """What :func:`fit_rating_pilot` reads off a pilot (see the module docstring). Arrays over the pilot's
    test stimuli ``J`` (plus any unrated ``stimuli`` asked for) and its workers ``W``."""

    stimulus_ids: np.ndarray       # (J,) str
    set_ids: list[str]             # the sets (scenes: the part of a stimulus ID before "/"), in order
    stimulus_set: np.ndarray       # (J,) index into set_ids
    stimulus: np.ndarray           # (n,) the pilot's ratings, in file order: stimulus index
    worker: np.ndarray             # (n,) worker index
    rating: np.ndarray             # (n,)
    quality_mean: np.ndarray       # (J,) posterior mean of each stimulus' true quality (points)
    quality_sd: np.ndarray         # (J,) its posterior SD
    quality_spread: float          # SD of the true qualities (the prior's)
    bias_sd: float                 # SD of the honest workers' biases
    inconsistency_rms: float       # root mean square of the honest workers' inconsistencies (upsilon)
    inconsistency_log_sd: float    # SD of log(upsilon) (log-normal)
    worker_ratings: np.ndarray     # (W,) ratings of each pilot worker
    honest_posterior: np.ndarray   # (W,) posterior of being honest
    careless_share: float          # the mixture's share of careless workers
    screened_share: float | None   # share of workers the correlation rule flags (None: undefined for all)
    halfwidths: np.ndarray         # (J,) the pilot's own MOS half-widths (NaN below two ratings)
    low: float
    high: float
    discrete: bool                 # every rating a whole point: simulated ratings are rounded too
    scale: str
    seconds_per_trial: float | None
    seconds_source: str
    # Each stimulus' noise multiplier (its ambiguity: honest ratings of it are this many times as spread as the
    # pooled inconsistency says): a grid of multipliers and each stimulus' posterior over it (None: every
    # stimulus as noisy as the average one, a known crowd), with the log-normal prior's location and SD.
    noise_grid: np.ndarray | None = None
    noise_posterior: np.ndarray | None = None      # (J, G), rows sum to 1
    stimulus_noise_log_mean: float = 0.0
    stimulus_noise_log_sd: float = 0.0
    seconds_warning: str | None = None

    @property
    def worker_votes(self) -> np.ndarray:
        """Ratings per worker under the name :func:`analysis.forecast.costs` reads."""
        return self.worker_ratings

    @property
    def n_votes(self) -> int:
        return len(self.rating)

    @property
    def inconsistency_median(self) -> float:
        """Median upsilon of the log-normal whose mean square is ``inconsistency_rms ** 2``."""
        return float(self.inconsistency_rms * np.exp(-self.inconsistency_log_sd ** 2))

    def summary(self) -> dict:
        has = self.worker_ratings > 0
        return {"votes": self.n_votes, "ratings": self.n_votes, "workers": int(has.sum()), "sets": len(self.set_ids),
                "items": len(self.stimulus_ids), "scale": self.scale,
                "careless_share": round(self.careless_share, 4), "careless_source": "mixture",
                "careless_share_screening": None if self.screened_share is None else round(self.screened_share, 4),
                "votes_per_worker": round(float(self.worker_ratings[has].mean()), 2),
                "quality_sd": round(self.quality_spread, 4), "bias_sd": round(self.bias_sd, 4),
                "inconsistency_rms": round(self.inconsistency_rms, 4),
                "inconsistency_log_sd": round(self.inconsistency_log_sd, 4),
                "stimulus_noise_log_sd": round(self.stimulus_noise_log_sd, 4),
                "seconds_per_trial": None if self.seconds_per_trial is None else round(self.seconds_per_trial, 2),
                "seconds_source": self.seconds_source}


def counted_rows(ratings: Ratings) -> np.ndarray:
    """The rows a rating study's precision counts: not gold, and not of a hidden reference (a stimulus some row
    names as its ``reference_id``, or a reference compared with itself)."""
    named = {str(r) for r in ratings.reference_id if r}
    is_reference = np.array([str(s) in named for s in ratings.stimulus_ids], dtype=bool)
    same = ratings.reference_id.astype(str) == ratings.stimulus_ids[ratings.stimulus].astype(str)
    return ~ratings.is_gold & ~is_reference[ratings.stimulus] & ~same


def set_of(stimulus_id: str) -> str:
    """A stimulus' set: ``<set>/<item>`` as a rating study exports it; IDs without a "/" are all in one set,
    :data:`WHOLE_SET`."""
    return str(stimulus_id).rsplit("/", 1)[0] if "/" in str(stimulus_id) else WHOLE_SET


def fit_rating_pilot(ratings: Ratings, *, stimuli: Sequence[str] | None = None, rt_ms: Sequence | None = None,
                     screen: bool = False, confidence: float = 0.95) -> RatingPilotFit:
    """Fit the crowd and the stimuli's qualities from a pilot's ratings (see the module docstring).

    Parameters
    ----------
    ratings : Ratings
        The pilot (:func:`analysis.ratings.read_ratings`); gold rows and hidden references are left out.
    stimuli : sequence of str, optional
        Every test stimulus of the study, rated by the pilot or not (default: those the pilot rated).
    rt_ms : sequence, optional
        Each row's response time (an export's ``rt_ms``), used when ``created_at`` is missing.
    screen : bool
        The pilot's own half-widths without the workers the correlation rule flags (as :func:`halfwidths`).

    Raises
    ------
    ForecastInputError
        Fewer than 2 workers, or no stimulus rated twice.
    """
    rows = counted_rows(ratings)
    if not rows.any():
        raise ForecastInputError("the pilot has no ratings of test stimuli (only gold rows and hidden references)")
    present = np.unique(ratings.stimulus[rows])
    ids = [str(ratings.stimulus_ids[j]) for j in present]
    if stimuli is not None:
        ids += [str(s) for s in stimuli if str(s) not in set(ids)]
    index = {s: k for k, s in enumerate(ids)}
    position = np.full(len(ratings.stimulus_ids), -1, dtype=np.int64)
    position[present] = [index[str(ratings.stimulus_ids[j])] for j in present]
    s = position[ratings.stimulus[rows]]
    workers, w = np.unique(ratings.worker[rows], return_inverse=True)
    x = ratings.rating[rows]
    J, W = len(ids), len(workers)
    if W < 2:
        raise ForecastInputError("the pilot needs ratings of at least 2 workers")
    if np.bincount(s, minlength=J).max() < 2:
        raise ForecastInputError("the pilot needs a stimulus rated at least twice (a t interval needs 2 ratings)")
    discrete = bool(np.all(x == np.round(x)))
    mixture = _mixture(s, w, x, J, W, ratings.low, ratings.high, discrete)
    half = halfwidths(s, w, x, J, W, screen=screen, confidence=confidence)
    r = correlation_with_others(s, w, x, J, W, DEFAULT_MIN_COMMON)
    defined = np.isfinite(r)
    screened = float((r[defined] < DEFAULT_CORRELATION).mean()) if defined.any() else None
    seconds, source, warning = usable_seconds(*response_seconds(
        ratings.worker[rows], None if "created_at" not in ratings.extra else ratings.extra["created_at"][rows],
        None if rt_ms is None else np.asarray(rt_ms, dtype=object)[rows]))
    sets = [set_of(i) for i in ids]
    set_ids = list(dict.fromkeys(sets))
    return RatingPilotFit(np.array(ids, dtype=object), set_ids, np.array([set_ids.index(k) for k in sets]), s, w, x,
                          mixture.quality_mean, mixture.quality_sd, mixture.quality_spread, mixture.bias_sd,
                          mixture.inconsistency_rms, mixture.inconsistency_log_sd, np.bincount(w, minlength=W),
                          mixture.honest, mixture.careless_share, screened, half, ratings.low, ratings.high, discrete,
                          ratings.scale, seconds, source, *mixture.noise, seconds_warning=warning)


@dataclass
class _Mixture:
    quality_mean: np.ndarray
    quality_sd: np.ndarray
    quality_spread: float
    bias_sd: float
    inconsistency_rms: float
    inconsistency_log_sd: float
    honest: np.ndarray
    careless_share: float
    noise: tuple | None  # _stimulus_noise's (grid, posterior, log mean, log SD); None: not fitted


def _points(low: float, high: float) -> int:
    return int(round(high - low)) + 1


def _honest_log_likelihood(x: np.ndarray, mean: np.ndarray, sd: float, low: float, high: float,
                           discrete: bool) -> np.ndarray:
    """Log-probability of each rating under the honest model: a normal of ``mean`` and ``sd`` clipped to the
    scale (a rating at an end is the whole tail beyond it) and, when ``discrete``, rounded to whole points;
    otherwise (a slider) its density inside the scale."""
    half = 0.5 if discrete else 0.0
    upper = np.where(x >= high, np.inf, (x + half - mean) / sd)
    lower = np.where(x <= low, -np.inf, (x - half - mean) / sd)
    inside = np.isfinite(upper) & np.isfinite(lower)
    if not discrete:
        density = -0.5 * ((x - mean) / sd) ** 2 - np.log(sd * np.sqrt(2.0 * np.pi))
        return np.where(inside, density, np.where(np.isfinite(upper), log_ndtr(upper), log_ndtr(-lower)))
    # log(Phi(upper) - Phi(lower)), computed on the side of the tail that keeps its precision
    flip = lower > 0
    a, b = np.where(flip, -upper, lower), np.where(flip, -lower, upper)
    log_b = log_ndtr(b)
    return log_b + np.log1p(-np.exp(np.minimum(log_ndtr(a) - log_b, -1e-16)))


def _inconsistency(x: np.ndarray, mean: np.ndarray, weight: np.ndarray, low: float, high: float,
                   discrete: bool) -> float:
    """The honest raters' pooled inconsistency (SD) by maximum likelihood under rounding and clipping: a
    moment estimate would read the ends' clipped ratings as consistency, and the simulation clips again."""
    result = minimize_scalar(lambda sd: -float(weight @ _honest_log_likelihood(x, mean, sd, low, high, discrete)),
                             bounds=(MIN_SPREAD, high - low), method="bounded", options={"xatol": 1e-4})
    return float(result.x)


def _mixture(s: np.ndarray, w: np.ndarray, x: np.ndarray, J: int, W: int, low: float, high: float,
             discrete: bool, iterations: int = EM_ITERATIONS, tolerance: float = 1e-6,
             with_noise: bool = True) -> _Mixture:
    """EM over workers of honest P.913 raters and uniformly careless ones (the module docstring); ``with_noise``
    False leaves the stimuli's noise unfitted (``noise`` None)."""
    n_w = np.bincount(w, minlength=W).astype(float)
    careless_log = -np.log(_points(low, high)) if discrete else -np.log(high - low)
    honest = np.full(W, 1.0 - ASSUMED_CARELESS_START)
    share = ASSUMED_CARELESS_START
    bias = np.zeros(W)
    bias_var = 0.0
    rounding = SHEPPARD if discrete else 0.0
    for _ in range(iterations):
        h = honest[w]
        weight_j = np.maximum(np.bincount(s, h, J), 1e-12)
        psi = np.bincount(s, h * (x - bias[w]), J) / weight_j
        residual = x - psi[s]
        mean_residual = np.bincount(w, residual, W) / np.maximum(n_w, 1)
        within = residual - mean_residual[w]
        sd = _inconsistency(x, psi[s] + bias[w], h, low, high, discrete)
        # the residuals have lost the degrees of freedom of the scores and the (shrunk) biases fitted to them
        shrink = n_w / (n_w + (sd * sd + rounding) / max(bias_var, 1e-12))  # each bias's share of a free parameter
        fitted = np.sum(np.bincount(s, h, J) > 0) + np.sum(honest * shrink)
        sd *= np.sqrt(max(h.sum(), 1.0) / max(h.sum() - fitted, 1.0))
        # the biases' spread beyond their noise (moments of the honest workers' mean residuals)
        noise = sd * sd + rounding
        # divided by the honest workers less one: the scores absorb the biases' mean (a pilot of 4 workers
        # would otherwise read three quarters of the spread)
        bias_var = max(float(np.sum(honest * (mean_residual ** 2 - noise / np.maximum(n_w, 1)))
                             / max(honest.sum() - 1.0, 1.0)), 0.0)
        bias = np.bincount(w, residual, W) / (n_w + noise / max(bias_var, 1e-12))
        log_ratio = np.bincount(w, _honest_log_likelihood(x, psi[s] + bias[w], sd, low, high, discrete)
                                - careless_log, W)
        share_clipped = float(np.clip(share, 1e-6, 1 - 1e-6))
        honest = expit(log_ratio + np.log1p(-share_clipped) - np.log(share_clipped))
        new = float(np.clip(1.0 - honest.mean(), 0.0, 1.0))
        converged = abs(new - share) < tolerance
        share = new
        if converged:
            break
    model_variance = sd * sd
    # log-normal spread of the inconsistencies: the log residual variances' spread beyond chi-square noise
    enough = (n_w >= 3) & (honest > 0.5)
    log_sd = 0.0
    if enough.sum() >= 3:
        per_worker = np.bincount(w, within ** 2, W)[enough] / (n_w[enough] - 1)
        logs = np.log(np.maximum(per_worker, 1e-6))
        excess = float(np.var(logs) - np.mean(2.0 / (n_w[enough] - 1)))
        log_sd = float(np.sqrt(max(excess, 0.0)) / 2.0)
    # the true qualities: honest-weighted, bias-corrected means shrunk by their spread beyond their noise
    h = honest[w]
    n_j = np.bincount(s, h, J)
    rated = n_j > 0.5
    mean_j = np.bincount(s, h * (x - bias[w]), J) / np.maximum(n_j, 1e-12)
    noise = model_variance + rounding
    centre = float(np.mean(mean_j[rated])) if rated.any() else (low + high) / 2.0
    spread2 = max(float(np.var(mean_j[rated]) - np.mean(noise / n_j[rated])) if rated.sum() > 1 else 0.0,
                  MIN_SPREAD ** 2)
    precision = 1.0 / spread2 + np.where(rated, n_j, 0.0) / noise
    post_mean = (centre / spread2 + np.where(rated, n_j * mean_j, 0.0) / noise) / precision
    noise = _stimulus_noise(s, w, x, psi[s] + bias[w], honest[w], float(np.sqrt(model_variance)), J, low, high,
                            discrete) if with_noise else None
    return _Mixture(post_mean, 1.0 / np.sqrt(precision), float(np.sqrt(spread2)), float(np.sqrt(bias_var)),
                    float(np.sqrt(model_variance)), log_sd, honest, share, noise)


NOISE_GRID = np.exp(np.linspace(np.log(0.2), np.log(5.0), 49))  # stimulus noise multipliers
NOISE_LOG_MEANS = np.linspace(-1.0, 1.0, 21)
NOISE_LOG_SDS = np.linspace(0.0, 1.2, 25)


def _stimulus_noise(s: np.ndarray, w: np.ndarray, x: np.ndarray, mean: np.ndarray, h: np.ndarray, sd: float, J: int,
                    low: float, high: float, discrete: bool) -> tuple:
    """Each stimulus' noise multiplier ``a_j`` (honest ratings of stimulus ``j`` have SD ``a_j`` times the pooled
    inconsistency): real stimuli differ in how ambiguous they are (P.913's content ambiguity), and the widest
    intervals, which a target on most stimuli waits for, are those of the most ambiguous ones.

    ``log a_j`` is normal (location and SD fitted by marginal likelihood over a grid); each stimulus' likelihood
    over the grid is that of its honest-weighted ratings under the rounding and clipping of the rating model,
    its SD shrunk by ``sqrt((n_j - 1) / n_j)`` because the stimulus' own mean was fitted to the same ratings
    (so the grid's maximum is the unbiased ``SS / (n - 1)``, not the ML ``SS / n``), and its log raised to the
    power ``(n_j - 1) / n_j``, so that it is as sharp as ``n_j - 1`` degrees of freedom make it (as REML counts
    them; a stimulus rated once says nothing of its noise). Counted as ``n_j``, the chi-square scatter of 4
    ratings' spreads read as stimuli differing: a log SD of 0.26 on average over 4-rater pilots whose stimuli
    were equally noisy, 0.40 where the truth was 0.20 (now 0.11 and 0.18), and a 4-subject NFLX pilot's forecasts
    for every sequence came out high (``benchmarks/forecast.py``). The posterior of each
    stimulus over the grid carries how little a few ratings say about its noise into the simulation, which
    draws ``a_j`` from it in every replicate. Returns ``(grid, posterior (J, G), log mean, log SD)``.
    """
    n_j = np.bincount(s, h, J)
    shrink = np.sqrt(np.clip((n_j - 1.0) / np.maximum(n_j, 1e-12), 0.05, 1.0))[s]
    log_lik = np.stack([np.bincount(s, h * _honest_log_likelihood(x, mean, sd * g * shrink, low, high, discrete), J)
                        for g in NOISE_GRID])  # (G, J)
    log_lik *= np.clip(n_j - 1.0, 0.0, None) / np.maximum(n_j, 1e-12)  # n_j - 1 degrees of freedom, not n_j
    log_lik -= log_lik.max(axis=0)
    lik = np.exp(log_lik)
    logs = np.log(NOISE_GRID)
    best, best_prior = -np.inf, None
    for tau in NOISE_LOG_SDS:
        for mu in NOISE_LOG_MEANS:
            prior = _grid_prior(logs, mu, tau)
            value = float(np.sum(np.log(np.maximum(prior @ lik, 1e-300))))
            if value > best + 1e-9:
                best, best_prior, fitted = value, prior, (float(mu), float(tau))
    posterior = best_prior[None, :] * lik.T
    posterior /= posterior.sum(axis=1, keepdims=True)
    return NOISE_GRID, posterior, fitted[0], fitted[1]


def _grid_prior(logs: np.ndarray, mu: float, tau: float) -> np.ndarray:
    """A normal of ``mu`` and ``tau`` over the log grid (tau 0: the grid point nearest ``mu``)."""
    if tau <= 0:
        prior = np.zeros(len(logs))
        prior[np.argmin(np.abs(logs - mu))] = 1.0
        return prior
    prior = np.exp(-0.5 * ((logs - mu) / tau) ** 2)
    return prior / prior.sum()


def crowd_noise_draw(drawn: "RatingPilotFit", fit: "RatingPilotFit", rng: np.random.Generator) -> "RatingPilotFit":
    """``drawn`` with its workers' noise (bias SD and inconsistency) scaled by one draw of how far the crowd's noise
    variance may lie from what ``fit``'s pilot of ``W`` honest workers shows: ``(W - 1) / chi2(W - 1)``, the
    posterior of a variance seen in ``W - 1`` degrees of freedom (Jeffreys prior). Its median is above 1 and
    falls to 1 as the pilot grows (1.27 for 4 workers, 1.04 for 20): a small pilot's forecast leans high, as
    it should where a low forecast (a budget that runs out) is the worse error. A known crowd is returned as is."""
    if not len(fit.rating):
        return drawn
    dof = max(float(fit.honest_posterior.sum()) - 1.0, 1.0)
    scale = float(np.sqrt(dof / rng.chisquare(dof)))
    return replace(drawn, bias_sd=drawn.bias_sd * scale, inconsistency_rms=drawn.inconsistency_rms * scale)


def draw_stimulus_noise(fit: "RatingPilotFit", rng: np.random.Generator) -> np.ndarray:
    """One draw of every stimulus' noise multiplier from its posterior (ones for a fit without one)."""
    J = len(fit.stimulus_ids)
    if fit.noise_posterior is None:
        return np.ones(J)
    cdf = np.cumsum(fit.noise_posterior, axis=1)
    pick = (cdf < rng.random(J)[:, None] * cdf[:, -1:]).sum(axis=1)
    return fit.noise_grid[np.minimum(pick, len(fit.noise_grid) - 1)]


def resampled_pilot_fit(fit: "RatingPilotFit", rng: np.random.Generator) -> "RatingPilotFit":
    """The stimuli's qualities refitted on the pilot with its workers resampled with replacement (a bootstrap of
    the pilot: where a pilot of as many other workers would have put them), keeping the pilot's own ratings and
    workers for the simulation's replay. A fit without pilot ratings (a known crowd) is returned as it is.

    The noise stays the pilot's: how far it may be off is :func:`crowd_noise_draw`'s (the workers') and
    :func:`draw_stimulus_noise`'s (each stimulus') to draw. Refitted on a resample it came out biased, because a
    worker drawn twice rates the same stimuli twice alike. The spread of the stimuli's log noise multipliers read
    0.35-0.65 where the pilot's was 0.10-0.25 (the simulated crowd's 0), with a lower location: the rating
    study's forecasts for every stimulus 8-17 % high, 3 of 8 outside the band, the NFLX replays' 90 % forecasts
    1-42 % low at 7 of 8 seeds. The workers' noise read low: on the 4-subject NFLX pilots the simulated rating
    variance per stimulus was 0.25-0.53 against the pilots' own 0.35-0.77 (0.33-0.65 without the refit).
    """
    W = len(fit.worker_ratings)
    if not len(fit.rating) or W < 2:
        return fit
    pick = rng.integers(0, W, W)
    rows = [np.flatnonzero(fit.worker == k) for k in pick]
    index = np.concatenate(rows)
    worker = np.repeat(np.arange(W), [len(r) for r in rows])
    J = len(fit.stimulus_ids)
    m = _mixture(fit.stimulus[index], worker, fit.rating[index], J, W, fit.low, fit.high, fit.discrete,
                 with_noise=False)
    return replace(fit, quality_mean=m.quality_mean, quality_sd=m.quality_sd, quality_spread=m.quality_spread)


# --------------------------------------------------------------------------- half-widths

def halfwidths(stimulus: np.ndarray, worker: np.ndarray, rating: np.ndarray, n_stimuli: int, n_workers: int, *,
               screen: bool = False, confidence: float = 0.95) -> np.ndarray:
    """Each stimulus' MOS t half-width (``mos_intervals``, NaN below two ratings), of every rating, or with
    ``screen`` of the workers the correlation rule keeps (flagged below 0.75 with the leave-one-out MOS)."""
    keep = np.ones(len(rating), dtype=bool)
    if screen:
        r = correlation_with_others(stimulus, worker, rating, n_stimuli, n_workers, DEFAULT_MIN_COMMON)
        keep = ~(np.isfinite(r) & (r < DEFAULT_CORRELATION))[worker]
    n = np.bincount(stimulus[keep], minlength=n_stimuli)
    total = np.bincount(stimulus[keep], rating[keep], n_stimuli)
    squares = np.bincount(stimulus[keep], rating[keep] ** 2, n_stimuli)
    return mos_intervals(n, total, squares, confidence)[2]


def _quantile_of(half: np.ndarray, q: float) -> float:
    """The half-width of the ``ceil(q n)``-th narrowest of ``n`` stimuli, a stimulus without an interval (NaN)
    counting as infinitely wide: the item [stopping] compares with its target (server/stopping.py, set_status)."""
    if not len(half):
        return float("nan")
    needed = max(int(np.ceil(q * len(half) - 1e-9)), 1)
    return float(np.partition(np.where(np.isfinite(half), half, np.inf), needed - 1)[needed - 1])


# --------------------------------------------------------------------------- simulated studies

@dataclass(frozen=True)
class RatingStudy:
    """One simulated study's ratings in order (pilot replay first), with each worker's type."""

    stimulus: np.ndarray
    worker: np.ndarray
    rating: np.ndarray
    honest: np.ndarray        # (workers,) bool
    truth: np.ndarray         # (J,) true qualities
    pilot_length: int

    def ratings(self, fit: RatingPilotFit, upto: int | None = None, seconds_per_rating: float | None = None) -> Ratings:
        """The first ``upto`` ratings as :class:`~analysis.ratings.Ratings` (workers ``w<k>``, ``fit``'s stimulus
        IDs; with ``seconds_per_rating``, ``created_at`` stamps that far apart in each worker's run)."""
        k = len(self.rating) if upto is None else int(upto)
        extra = None
        if seconds_per_rating is not None:
            start = np.datetime64("2026-01-01T00:00:00")
            stamps = start + (np.arange(k) * seconds_per_rating * 1000).astype("timedelta64[ms]")
            extra = {"created_at": [str(t) for t in stamps]}
        return build_ratings(np.char.add("w", self.worker[:k].astype(str)), fit.stimulus_ids[self.stimulus[:k]],
                             [repr(float(v)) for v in self.rating[:k]], scale=fit.scale, extra=extra)


def simulate_rating_study(fit: RatingPilotFit, total: int, rng: np.random.Generator, *,
                          ratings_per_worker: float | None = None, draw_truth: bool = True,
                          resample_crowd: bool = True) -> RatingStudy:
    """A study of ``total`` ratings continuing ``fit``'s pilot (the module docstring's simulation).

    ``draw_truth`` False uses the posterior means as the truth and ``resample_crowd`` False the pilot's workers
    as the pool itself (a known crowd: :func:`known_rating_crowd`)."""
    J, W = len(fit.stimulus_ids), len(fit.worker_ratings)
    truth = fit.quality_mean + (fit.quality_sd * rng.standard_normal(J) if draw_truth else 0.0)
    pool = rng.integers(0, W, W) if resample_crowd else np.arange(W)
    counts = fit.worker_ratings.astype(float)
    if ratings_per_worker is not None:  # the pilot's spread of counts around the planned mean
        counts = counts * (ratings_per_worker / counts[pool].mean())
    counts = np.clip(np.round(counts), 1, J).astype(np.int64)
    pilot_n = fit.n_votes
    new = max(int(total) - pilot_n, 0)
    # new workers: resampled from the pool until their counts cover the new ratings
    drawn = pool[rng.integers(0, W, max(1, int(np.ceil(new / max(counts[pool].mean(), 1))) * 2 + 4))]
    while counts[drawn].sum() < new:
        drawn = np.concatenate([drawn, pool[rng.integers(0, W, len(drawn))]])
    ends = np.cumsum(counts[drawn])
    drawn = drawn[:int(np.searchsorted(ends, new, side="left")) + 1] if new else drawn[:0]
    honest = np.concatenate([rng.random(W) < fit.honest_posterior,
                             rng.random(len(drawn)) < fit.honest_posterior[drawn]])
    n_workers = W + len(drawn)
    bias = fit.bias_sd * rng.standard_normal(n_workers)
    upsilon = fit.inconsistency_median * np.exp(fit.inconsistency_log_sd * rng.standard_normal(n_workers))
    ambiguity = draw_stimulus_noise(fit, rng)
    stimulus = np.concatenate([fit.stimulus, _least_rated_stream(np.bincount(fit.stimulus, minlength=J), new, rng)])
    worker = np.concatenate([fit.worker, W + np.searchsorted(np.cumsum(counts[drawn]), np.arange(new), side="right")])
    rating = _answer(truth[stimulus], bias[worker], upsilon[worker] * ambiguity[stimulus], honest[worker], fit, rng)
    return RatingStudy(stimulus, worker, rating, honest, truth, pilot_n)


def _least_rated_stream(start: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` stimuli in the order least-rated-first allocation hands them out from counts ``start``: level by
    level (a stimulus with ``c`` ratings takes a slot at every level from ``c`` on), ties at random."""
    J = len(start)
    if n == 0:
        return np.empty(0, dtype=np.int64)
    top = int(start.max()) + int(np.ceil((n + start.sum()) / J)) + 1
    level = np.arange(top)[None, :].repeat(J, 0)
    ok = level >= start[:, None]
    slots_level, slots_j = level[ok], np.nonzero(ok)[0]
    order = np.lexsort((rng.random(len(slots_j)), slots_level))[:n]
    return slots_j[order]


def _answer(quality: np.ndarray, bias: np.ndarray, upsilon: np.ndarray, honest: np.ndarray, fit: RatingPilotFit,
            rng: np.random.Generator) -> np.ndarray:
    """Ratings of honest P.913 raters (rounded and clipped as the pilot's) and of careless uniform ones."""
    n = len(quality)
    value = quality + bias + upsilon * rng.standard_normal(n)
    if fit.discrete:
        careless = fit.low + rng.integers(0, _points(fit.low, fit.high), n)
        value = np.round(value)
    else:
        careless = rng.uniform(fit.low, fit.high, n)
    return np.clip(np.where(honest, value, careless), fit.low, fit.high)


def known_rating_crowd(truth: np.ndarray, stimulus_ids: Sequence[str], honest: np.ndarray, worker_ratings: np.ndarray,
                       *, bias_sd: float, inconsistency_rms: float, inconsistency_log_sd: float = 0.0,
                       low: float = 1.0, high: float = 5.0, discrete: bool = True,
                       scale: str = "acr") -> RatingPilotFit:
    """A :class:`RatingPilotFit` that knows its crowd and truth, without a pilot: :func:`simulate_rating_study`
    with ``draw_truth=False, resample_crowd=False`` then runs a whole study of it (tests, benchmarks)."""
    sets = [set_of(i) for i in stimulus_ids]
    set_ids = list(dict.fromkeys(sets))
    empty = np.empty(0, dtype=np.int64)
    J = len(truth)
    return RatingPilotFit(np.asarray(stimulus_ids, dtype=object), set_ids, np.array([set_ids.index(k) for k in sets]),
                          empty, empty, np.empty(0), np.asarray(truth, dtype=float), np.zeros(J),
                          float(np.std(truth)), bias_sd, inconsistency_rms, inconsistency_log_sd,
                          np.asarray(worker_ratings, dtype=np.int64), np.asarray(honest, dtype=float),
                          float(1 - np.mean(honest)), None, np.full(J, np.nan), low, high, discrete, scale, None,
                          "unknown")


def simulate_whole_study(n_sets: int = 3, per_set: int = 40, n_workers: int = 400, *, careless: float = 0.25,
                         ratings_per_worker: tuple[int, int] = (10, 40), bias_sd: float = 0.35,
                         inconsistency_rms: float = 0.7, inconsistency_log_sd: float = 0.25, quality_sd: float = 0.9,
                         share_rated: float = 0.95, seed: int = 0) -> tuple[RatingPilotFit, RatingStudy]:
    """A whole 1..5 rating study of a known crowd to replay a forecast against (tests, ``benchmarks/forecast.py``):
    ``n_sets`` scenes of ``per_set`` stimuli (``scene<k>/m<j>``), workers careless with probability ``careless``,
    each giving a number of ratings uniform in ``ratings_per_worker``, the study stopping at ``share_rated`` of
    their ratings. Returns the crowd and the study (least-rated first, as :func:`forecast_ratings` simulates)."""
    rng = np.random.default_rng(seed)
    J = n_sets * per_set
    truth = np.clip(3.0 + quality_sd * rng.standard_normal(J), 1.3, 4.7)
    ids = [f"scene{k % n_sets}/m{k:03d}" for k in range(J)]
    counts = rng.integers(ratings_per_worker[0], ratings_per_worker[1] + 1, n_workers)
    crowd = known_rating_crowd(truth, ids, rng.random(n_workers) >= careless, counts, bias_sd=bias_sd,
                               inconsistency_rms=inconsistency_rms, inconsistency_log_sd=inconsistency_log_sd)
    study = simulate_rating_study(crowd, int(counts.sum() * share_rated), rng, draw_truth=False, resample_crowd=False)
    return crowd, study


# --------------------------------------------------------------------------- the forecast

def _checkpoints(start: int, cap: int, growth: float) -> list[int]:
    sizes = [max(start, 2)]
    while sizes[-1] < cap:
        sizes.append(min(cap, int(np.ceil(sizes[-1] * growth))))
    return sizes


def forecast_ratings(fit: RatingPilotFit, target: float, *, quantiles: Sequence[float] = DEFAULT_QUANTILES,
                     replicates: int = RATING_REPLICATES, seed: int = 0, confidence: float = 0.95,
                     growth: float = DEFAULT_GROWTH, max_ratings: int | None = None,
                     ratings_per_worker: float | None = None, screen: bool = False,
                     pilot_bootstrap: bool = True) -> Forecast:
    """Simulate ``replicates`` studies continuing the pilot and find the ratings that reach ``target``.

    Parameters
    ----------
    fit : RatingPilotFit
    target : float
        MOS half-width to reach, in rating points.
    quantiles : sequence of float in (0, 1]
        Share of stimuli that must reach it (1: every stimulus).
    replicates, seed
        Simulated studies (default :data:`RATING_REPLICATES`); each draws its truth and crowd from the fit (a seeded
        ``numpy.random.Generator`` each).
    growth : float
        Ratio of consecutive checkpoints (ratings).
    max_ratings : int, optional
        Stop a replicate here (default :data:`~analysis.forecast.DEFAULT_MAX_MULTIPLE` times the pilot's ratings, at
        least :data:`MAX_RATINGS_PER_STIMULUS` per stimulus: a small pilot of a large study is still forecast).
    ratings_per_worker : float, optional
        Mean ratings a simulated worker gives (default: as many as the pilot's workers gave).
    screen : bool
        Leave out the workers the correlation rule flags at every checkpoint (:func:`halfwidths`).
    pilot_bootstrap : bool
        Each replicate refits the crowd on the pilot with its workers resampled (:func:`resampled_pilot_fit`), so
        that the band carries how much a pilot of this size can be off; False: every replicate simulates the
        pilot's own fit (a narrower band that a small pilot's truth often falls outside).

    Returns
    -------
    Forecast
        ``needed`` counts ratings (pilot included; ``work_unit`` "ratings"); ``inconsistency`` is the pilot's
        half-width quantile over that of its replay by the fitted crowd (1: the model reproduces the pilot;
        reported, not applied), ``needed_model`` equals ``needed``.
    """
    started = time.perf_counter()
    quantiles = checked_target(target, quantiles)
    if replicates < 1 or not growth > 1:
        raise ForecastInputError("need replicates >= 1 and growth > 1")
    pilot = fit.n_votes
    cap = int(max_ratings) if max_ratings is not None else \
        int(max(DEFAULT_MAX_MULTIPLE * pilot, MAX_RATINGS_PER_STIMULUS * len(fit.stimulus_ids)))
    if cap < pilot:
        raise ForecastInputError(f"max_votes ({cap}) is below the pilot's {pilot} ratings")
    J, S, Q = len(fit.stimulus_ids), len(fit.set_ids), len(quantiles)
    needed = np.full((replicates, Q), np.inf)
    per_set = np.full((replicates, Q, S), np.inf)
    ratio = np.ones((replicates, Q))
    checkpoints = []
    for r in range(replicates):
        rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(3, r)))
        drawn = crowd_noise_draw(resampled_pilot_fit(fit, rng), fit, rng) if pilot_bootstrap else fit
        study = simulate_rating_study(drawn, cap, rng, ratings_per_worker=ratings_per_worker)
        at, pooled, by_set, set_counts = [], [], [], []
        n_workers = len(study.honest)
        for size in _checkpoints(pilot, cap, growth):
            s, w, x = study.stimulus[:size], study.worker[:size], study.rating[:size]
            half = halfwidths(s, w, x, J, n_workers, screen=screen, confidence=confidence)
            at.append(size)
            pooled.append([_quantile_of(half, q) for q in quantiles])
            by_set.append([[_quantile_of(half[fit.stimulus_set == k], q) for k in range(S)] for q in quantiles])
            set_counts.append(np.bincount(fit.stimulus_set[s], minlength=S))
            if all(p <= target for p in pooled[-1]) and all(v <= target for row in by_set[-1] for v in row):
                break
        ratio[r] = _pilot_ratio(fit, study, quantiles, screen, confidence)
        checkpoints.append(at)
        for q in range(Q):
            needed[r, q] = _crossing(at, [p[q] for p in pooled], target)
            for k in range(S):
                per_set[r, q, k] = _crossing([int(c[k]) for c in set_counts], [b[q][k] for b in by_set], target)
    interval = ("t interval of each stimulus' mean rating (MOS); " + (
        "workers the correlation rule flags left out" if screen else "every rating counts, as [stopping] measures it"))
    return Forecast(quantiles, needed, per_set, ratio, list(fit.set_ids), fit, float(target), UNITS,
                    "least-rated first", confidence, cap, 0, checkpoints, needed.copy(),
                    time.perf_counter() - started, work_unit="ratings", interval=interval,
                    assumes=rating_assumptions(fit, pilot_bootstrap))


def rating_assumptions(fit: RatingPilotFit, pilot_bootstrap: bool) -> tuple[str, ...]:
    """What a ratings forecast takes for granted, in words (the report's ``model``, the CLI's "assumes:")."""
    honest_workers = float(fit.honest_posterior.sum())
    stimulus = ("every stimulus as noisy as the average one" if fit.noise_posterior is None else
                f"stimuli differ in noise (log-normal, SD {fit.stimulus_noise_log_sd:.2f} in log units; each "
                "stimulus drawn from its posterior given its pilot ratings, unrated ones from the spread)")
    return (f"honest raters follow P.913: quality + a worker's bias (SD {fit.bias_sd:.2f}) + noise, the worker's "
            f"inconsistency (RMS {fit.inconsistency_rms:.2f}, log-normal SD {fit.inconsistency_log_sd:.2f} across "
            f"workers) times the stimulus' multiplier; {stimulus}",
            f"careless raters ({100 * fit.careless_share:.0f} % in the pilot) answer uniformly at random",
            (f"the pilot's {honest_workers:.0f} honest workers are a random sample of the crowd: each simulated study "
             "draws the crowd's noise from what so many workers can show (a variance seen in "
             f"{max(honest_workers - 1.0, 1.0):.0f} degrees of freedom) and the stimuli's qualities from the pilot "
             "with its workers resampled (the band carries the pilot's size)" if pilot_bootstrap else
             "the pilot's fit is the crowd (no bootstrap of the pilot)"),
            "new workers give as many ratings as the pilot's (or --pages-per-worker), stimuli rated least-rated "
            "first; the crowd does not change over the study")


def _pilot_ratio(fit: RatingPilotFit, study: RatingStudy, quantiles: list[float], screen: bool,
                 confidence: float) -> np.ndarray:
    """Per quantile: the pilot's half-width over its simulated replay's, over the stimuli both give an interval
    (1 where none: nothing to compare)."""
    replay = halfwidths(study.stimulus[:study.pilot_length], study.worker[:study.pilot_length],
                        study.rating[:study.pilot_length], len(fit.stimulus_ids), len(study.honest), screen=screen,
                        confidence=confidence)
    both = np.isfinite(fit.halfwidths) & np.isfinite(replay) & (replay > 0)
    if not both.any():
        return np.ones(len(quantiles))
    return np.array([_quantile_of(fit.halfwidths[both], q) / _quantile_of(replay[both], q) for q in quantiles])


def ratings_needed_by_study(stimulus: np.ndarray, worker: np.ndarray, rating: np.ndarray, n_stimuli: int,
                            target: float, *, quantiles: Sequence[float] = DEFAULT_QUANTILES, start: int | None = None,
                            growth: float = DEFAULT_GROWTH, screen: bool = False, confidence: float = 0.95) -> dict:
    """The ratings a recorded (or fully simulated) study needed to reach ``target``: its prefixes in order,
    analysed at checkpoints growing by ``growth`` from ``start`` (default 15 %) to the end, interpolated as
    :func:`forecast_ratings` does. ``{"needed": [per quantile, inf when not reached], "checkpoints", "halfwidths"}``."""
    total = len(rating)
    n_workers = int(worker.max()) + 1 if total else 0
    at, widths = [], []
    for size in _checkpoints(int(start if start is not None else total * 0.15), total, growth):
        half = halfwidths(stimulus[:size], worker[:size], rating[:size], n_stimuli, n_workers, screen=screen,
                          confidence=confidence)
        at.append(size)
        widths.append([_quantile_of(half, q) for q in quantiles])
        if all(v <= target for v in widths[-1]):
            break
    return {"needed": [_crossing(at, [v[q] for v in widths], target) for q in range(len(quantiles))],
            "checkpoints": at, "halfwidths": widths}


__all__ = ["BAND", "RatingPilotFit", "RatingStudy", "counted_rows", "fit_rating_pilot", "forecast_ratings",
           "halfwidths", "known_rating_crowd", "ratings_needed_by_study", "simulate_rating_study",
           "simulate_whole_study"]
