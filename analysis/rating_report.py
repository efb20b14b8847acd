"""``perceptlab analyze-ratings``: screen the workers of a rating study, score its stimuli, write the files.

The steps (each in its own module):

1. read ratings.csv (:mod:`analysis.ratings`); gold rows only screen;
2. screen the workers by the rules of :mod:`analysis.rating_screening` on their non-gold ratings;
3. fit the P.913 model (:mod:`analysis.rating_models`) to every worker's non-gold ratings: the bias
   and inconsistency columns of workers.csv (and the plot of workers) describe every worker, kept or not;
4. score each stimulus from the kept workers' ratings: ``mos`` (the mean: MOS for ACR, the DMOS of DCR,
   the CMOS of CCR; with ``dmos``, the mean ACR-HR differential score) with a t or worker-bootstrap
   interval, or ``p913`` (the model's quality of an average worker refitted to the kept workers, with
   the model's normal interval or a worker bootstrap that refits the model to each resample), or ``mle``
   (sureal's model with content ambiguity, :mod:`analysis.rating_content_model`, the content of a
   stimulus being its ``reference_id``, else the stimulus itself; the model's normal interval).
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from scipy.special import ndtri
from tqdm.auto import tqdm

from . import __version__
from .formats import atomic_write_text, json_text, table_csv
from .rating_content_model import fit_content_model
from .rating_models import P913Fit, fit_p913
from .rating_screening import RULES, SCREENING_COLUMNS, RatingScreening, ScreeningOptions, screen_ratings
from .ratings import (INTERVAL_METHOD_NAMES, SCORE_KINDS, Ratings, bounded_intervals, check_interval,
                      differential_ratings, moderated_t_halfwidths, mos_scores)
from .threads import limits_blas_threads

MODELS = ("mos", "p913", "mle")
SCORES_COLUMNS = ("stimulus_id", "score", "ci_low", "ci_high", "n_ratings", "n_workers", "rank", "ci_reason")
RATING_WORKERS_COLUMNS = ("worker_id", "n_ratings", "bias", "inconsistency", "kept")
FLAG_COLUMNS = tuple(f"flag_{rule}" for rule in RULES)
RATING_WORKERS_EXTRA_COLUMNS = ("n_gold", "bias_se", "inconsistency_low", "inconsistency_high",
                                *SCREENING_COLUMNS, *FLAG_COLUMNS, "flags")


@dataclass(frozen=True)
class RatingOptions:
    """Everything ``perceptlab analyze-ratings`` can be told."""

    model: str = "mos"
    interval: str = "t"
    n_boot: int = 1000
    confidence: float = 0.95
    seed: int = 0
    dmos: bool = False          # ACR-HR differential scores from hidden references
    screening: ScreeningOptions = field(default_factory=ScreeningOptions)
    progress: bool | None = None

    def __post_init__(self):
        if self.model not in MODELS:
            raise ValueError(f"model must be one of {', '.join(MODELS)}; got {self.model!r}")
        check_interval(self.interval)
        if not 0 < self.confidence < 1:
            raise ValueError(f"confidence must be in (0, 1), got {self.confidence}")
        if self.model == "mle" and self.interval == "bootstrap":
            raise ValueError("--model mle gives the model's normal interval only (a refit takes about a second, "
                             "a bootstrap would take many minutes): use --interval t, or --model p913")
        if self.interval == "bootstrap" and self.n_boot < 2:
            raise ValueError("the bootstrap interval needs at least 2 resamples")


@dataclass
class RatingAnalysis:
    scores: list[dict]
    workers: list[dict]
    summary: dict
    screening: RatingScreening
    fit: P913Fit | None             # the model fitted to every worker (workers.csv)
    references: tuple[str, ...] = ()  # stimuli that are some rating's hidden reference (drawn apart in scores.png)
    ratings: Ratings | None = None    # what was analysed (sureal_dataset.py)


def _compact(index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct values of ``index`` and each entry's position among them."""
    values, position = np.unique(index, return_inverse=True)
    return values, position.astype(np.int64)


def hidden_reference_rows(ratings: Ratings) -> np.ndarray:
    """Rows rating a hidden reference: a stimulus that some row names as its reference, or a comparison of
    a reference with itself (``stimulus_id == reference_id``, DCR and CCR)."""
    named = {str(r) for r in ratings.reference_id if r}
    is_reference = np.array([str(s) in named for s in ratings.stimulus_ids], dtype=bool)
    same = ratings.reference_id.astype(str) == ratings.stimulus_ids[ratings.stimulus].astype(str)
    return is_reference[ratings.stimulus] | same


def content_keys(ratings: Ratings) -> np.ndarray:
    """The content (source) of each stimulus for ``--model mle``: the ``reference_id`` of its rows (the first
    non-empty one), else the stimulus itself (so a reference and its test stimuli share their content)."""
    keys = ratings.stimulus_ids.astype(str).astype(object)
    rows = np.flatnonzero(ratings.reference_id.astype(str) != "")
    stimuli, first = np.unique(ratings.stimulus[rows], return_index=True)
    keys[stimuli] = ratings.reference_id[rows[first]]
    return keys


def fit_stimuli(stimulus: np.ndarray, worker: np.ndarray, values: np.ndarray, n_stimuli: int) -> tuple[P913Fit, np.ndarray, np.ndarray]:
    """:func:`fit_p913` on the stimuli and workers present; returns the fit and their original indices."""
    stimuli, s = _compact(stimulus)
    workers, w = _compact(worker)
    return fit_p913(s, w, values, len(stimuli), len(workers)), stimuli, workers


def p913_bootstrap(stimulus: np.ndarray, worker: np.ndarray, values: np.ndarray, n_stimuli: int, n_boot: int,
                   seed: int | np.random.Generator | None, progress: bool | None) -> np.ndarray:
    """The P.913 qualities of ``n_boot`` worker resamples, each refitted (NaN for a stimulus not drawn).

    Each drawn worker is a new worker of the resample (drawn twice: two workers with the same ratings).
    """
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    order = np.argsort(worker, kind="stable")
    workers, starts, lengths = np.unique(worker[order], return_index=True, return_counts=True)
    out = np.full((n_boot, n_stimuli), np.nan)
    for b in tqdm(range(n_boot), desc="bootstrap", unit="fit", leave=False,
                  disable=None if progress is None else not progress):
        drawn = rng.integers(0, len(workers), len(workers))
        size = lengths[drawn]
        # rows of every drawn worker, one run per draw: run start + offset inside the run
        run = np.repeat(np.arange(len(drawn)), size)
        offset = np.arange(size.sum()) - np.repeat(np.cumsum(size) - size, size)
        rows = order[starts[drawn][run] + offset]
        fit, stimuli, _ = fit_stimuli(stimulus[rows], run, values[rows], n_stimuli)
        out[b, stimuli] = fit.quality
    return out


JACKKNIFE_GROUPS = 50  # at most this many refits of the P.913 model for its intervals
# Stopping rule of a jackknife refit (sureal's: 1e-8): a change of psi below 1e-5 in norm over every stimulus moves
# no replicate by more than about 1e-4, three orders below a crowd's standard errors, in half the rounds.
JACKKNIFE_THRESHOLD = 1e-5


def p913_jackknife(stimulus: np.ndarray, worker: np.ndarray, values: np.ndarray, fit: P913Fit,
                   groups: int = JACKKNIFE_GROUPS, seed: int | np.random.Generator | None = 0) -> np.ndarray:
    """The delete-a-group jackknife variance over workers of each stimulus' P.913 quality (Kott 2001, "The
    delete-a-group jackknife", J. Official Statistics 17; with one worker a group, Quenouille-Tukey's
    delete-one jackknife).

    The workers (compact indices ``0..I-1`` of ``fit``) are split at random into ``G = min(groups, I)`` groups;
    the model is refitted without each group, warm-started from ``fit``, and
    ``var_j = (G - 1) / G sum_g (psi_j(-g) - mean_g psi_j(-g))^2`` over the groups whose removal leaves the
    stimulus rated. Unlike the model's standard error ``sigma_j / sqrt(n_j)`` this includes the error of every
    rater's estimated bias and of the weights ``1 / upsilon_i^2``, which on a crowd's 12-24 ratings a worker are
    far from known (the model's standard error then undercovers: about 89 % for a nominal 95 %).

    Parameters
    ----------
    stimulus, worker : (n,) compact int arrays of ``fit``
    values : (n,) float array
    fit : P913Fit
    groups : int
    seed : int or Generator

    Returns
    -------
    (J,) float array, NaN for a stimulus with fewer than two groups among its raters
    """
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    I, J = len(fit.bias), len(fit.quality)
    if I < 2:   # nothing to leave out
        return np.full(J, np.nan)
    G = min(groups, I)
    group = rng.permutation(I) % G
    replicates = np.full((G, J), np.nan)
    for g in range(G):
        rows = group[worker] != g
        stimuli, s = _compact(stimulus[rows])
        workers, w = _compact(worker[rows])
        part = fit_p913(s, w, values[rows], len(stimuli), len(workers), threshold=JACKKNIFE_THRESHOLD,
                        init=(fit.quality[stimuli], fit.bias[workers]))
        replicates[g, stimuli] = part.quality
    present = np.isfinite(replicates)
    raters = np.zeros((G, J), dtype=bool)
    raters[group[worker], stimulus] = True
    usable = (raters.sum(axis=0) >= 2) & present.all(axis=0)
    with np.errstate(invalid="ignore"):
        centre = np.nanmean(replicates, axis=0)
        variance = (G - 1) / G * np.nansum((replicates - centre) ** 2, axis=0)
    return np.where(usable, variance, np.nan)


def model_scores(ratings: Ratings, options: RatingOptions, stimulus: np.ndarray, worker: np.ndarray,
                 values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, object, list[dict] | None]:
    """Scores and intervals of ``--model p913`` or ``mle`` from the kept ``values`` (over every stimulus of
    ``ratings``; NaN for those without a value), the fit, and the contents of ``mle`` (else None).

    Raises
    ------
    ValueError
        ``mle`` without contents shared by several stimuli, or without finite scores.
    """
    J = len(ratings.stimulus_ids)
    stimuli, si = _compact(stimulus)
    workers, wi = _compact(worker)
    contents = None
    if options.model == "p913":
        fit = fit_p913(si, wi, values, len(stimuli), len(workers))
    else:
        keys, content = np.unique(content_keys(ratings)[stimuli], return_inverse=True)
        if len(keys) == len(stimuli):
            raise ValueError("--model mle models the ambiguity of each source content, and every stimulus is a "
                             "content of its own: name each stimulus' source in reference_id, or use --model p913")
        fit = fit_content_model(si, wi, content, values, len(stimuli), len(workers))
        if not np.isfinite(fit.quality).all():
            raise ValueError(f"the content model gave no finite scores after {fit.iterations} rounds "
                             "(a worker or content without spread); use --model p913")
        contents = [{"content_id": str(k), "ambiguity": float(a),
                     "ambiguity_se": float(se) if np.isfinite(se) else None}   # no information: null
                    for k, a, se in zip(keys, fit.ambiguity, fit.ambiguity_se)]
    score = np.full(J, np.nan)
    score[stimuli] = fit.quality
    low, high = np.full(J, np.nan), np.full(J, np.nan)
    if options.interval == "t" and options.model == "p913":
        # The jackknife variance over workers, as the variance of a mean of n_j ratings (n_j times it),
        # moderated across the stimuli with n_j - 1 degrees of freedom, with Student's quantile.
        variance = p913_jackknife(si, wi, values, fit, seed=options.seed) * fit.n_stimulus
        half = moderated_t_halfwidths(fit.n_stimulus, variance, options.confidence)
        low[stimuli], high[stimuli] = fit.quality - half, fit.quality + half
    elif options.interval == "t":
        half = float(ndtri(0.5 + options.confidence / 2)) * fit.quality_se
        low[stimuli], high[stimuli] = fit.quality - half, fit.quality + half
    else:
        samples = p913_bootstrap(stimulus, worker, values, J, options.n_boot, options.seed, options.progress)
        alpha = (1 - options.confidence) / 2
        drawn = np.isfinite(samples).any(axis=0)
        low[drawn], high[drawn] = np.nanquantile(samples[:, drawn], [alpha, 1 - alpha], axis=0)
    return score, low, high, fit, contents


@limits_blas_threads
def analyze_ratings(ratings: Ratings, options: RatingOptions = RatingOptions()) -> RatingAnalysis:
    """Screen, fit and score a rating study (the module docstring's steps).

    Raises
    ------
    ValueError
        Only gold rows, no worker kept, DMOS asked of a file without hidden references, or no stimulus
        left to score.
    """
    started = time.perf_counter()
    main = ~ratings.is_gold
    if not main.any():
        raise ValueError("every row is a gold question: there are no ratings to score")
    J, W = len(ratings.stimulus_ids), len(ratings.worker_ids)
    s, w, x = ratings.stimulus[main], ratings.worker[main], ratings.rating[main]
    gold = ratings.is_gold
    screening = screen_ratings(s, w, x, J, W, ratings.low, ratings.high, gold_worker=ratings.worker[gold],
                               gold_rating=ratings.rating[gold], gold_low=ratings.gold_low[gold],
                               gold_high=ratings.gold_high[gold], hidden_reference=hidden_reference_rows(ratings)[main],
                               options=options.screening)
    kept = screening.kept
    if not kept.any():
        raise ValueError("screening flags every worker (see --rules to switch rules off, or --no-screening)")
    everyone, _, fitted_workers = fit_stimuli(s, w, x, J)
    kept_rows = main & kept[ratings.worker]
    dv_dropped = None
    if options.dmos:
        dv = differential_ratings(ratings, kept_rows)
        ks, kw, kx, dv_dropped = dv.stimulus, dv.worker, dv.dv, dv.without_reference
        if not kx.size:
            raise ValueError("no kept worker rated both a test stimulus and its hidden reference: no DMOS")
    else:
        ks, kw, kx = ratings.stimulus[kept_rows], ratings.worker[kept_rows], ratings.rating[kept_rows]
    bounds = score_bounds(ratings, options)
    plain = mos_scores(ks, kw, kx, J, W, options.interval if options.model == "mos" else "t", options.confidence,
                       options.n_boot, options.seed, options.progress, low=bounds[0], high=bounds[1])
    score, low, high, reason = plain.score, plain.ci_low, plain.ci_high, plain.reason
    model_fit = contents = None
    if options.model != "mos":
        score, low, high, model_fit, contents = model_scores(ratings, options, ks, kw, kx)
        low, high, reason = bounded_intervals(low, high, *bounds, plain.n_workers)
    scored = np.flatnonzero(plain.n_ratings > 0)
    order = scored[np.argsort(-score[scored], kind="stable")]
    scores = [{"stimulus_id": str(ratings.stimulus_ids[j]), "score": float(score[j]), "ci_low": float(low[j]),
               "ci_high": float(high[j]), "n_ratings": int(plain.n_ratings[j]), "n_workers": int(plain.n_workers[j]),
               "rank": rank, "ci_reason": str(reason[j])} for rank, j in enumerate(order, start=1)]
    workers = _worker_rows(ratings, screening, everyone, fitted_workers)
    summary = _summary(ratings, options, screening, everyone, model_fit, scores, dv_dropped,
                       int(kept_rows.sum()), time.perf_counter() - started)
    summary["contents"] = contents
    named = {str(r) for r in ratings.reference_id if str(r)}
    references = tuple(str(x) for x in ratings.stimulus_ids if str(x) in named)
    return RatingAnalysis(scores, workers, summary, screening, everyone, references, ratings)


def score_bounds(ratings: Ratings, options: RatingOptions) -> tuple[float, float]:
    """The range every score and interval lies in: the scale, or for ACR-HR differential scores
    ``V(test) - V(reference) + 5`` its range ``low - high + 5 .. high - low + 5`` (1..9 on ACR)."""
    if options.dmos:
        return ratings.low - ratings.high + 5.0, ratings.high - ratings.low + 5.0
    return ratings.low, ratings.high


def _worker_rows(ratings: Ratings, screening: RatingScreening, fit: P913Fit, fitted: np.ndarray) -> list[dict]:
    W = len(ratings.worker_ids)
    columns = {name: np.full(W, np.nan) for name in ("bias", "bias_se", "inconsistency", "inconsistency_low",
                                                     "inconsistency_high")}
    columns["bias"][fitted], columns["bias_se"][fitted] = fit.bias, fit.bias_se
    columns["inconsistency"][fitted] = fit.inconsistency
    columns["inconsistency_low"][fitted], columns["inconsistency_high"][fitted] = (fit.inconsistency_low,
                                                                                    fit.inconsistency_high)
    n_gold = np.bincount(ratings.worker[ratings.is_gold], minlength=W)
    kept = screening.kept
    rows = []
    for k, worker_id in enumerate(ratings.worker_ids):
        row = {"worker_id": str(worker_id), "n_ratings": int(screening.n_ratings[k]), "kept": int(kept[k]),
               "n_gold": int(n_gold[k]), **{name: float(v[k]) for name, v in columns.items()},
               **{name: float(screening.statistics[name][k]) for name in SCREENING_COLUMNS},
               "bt500_p": int(screening.statistics["bt500_p"][k]), "bt500_q": int(screening.statistics["bt500_q"][k]),
               **{f"flag_{rule}": int(screening.flags[rule][k]) for rule in RULES},
               "flags": ";".join(screening.reasons(k))}
        rows.append(row)
    return rows


ESTIMANDS = {
    "mos": "the expected rating of a typical rater of the kept crowd (the mean over raters of each one's expected "
           "rating, bias, inconsistency and rounding included)",
    "p913": "the latent quality psi_j of ITU-T P.913 clause 12.6 (the score of a rater of zero bias, before "
            "inconsistency and rounding)",
    "mle": "the latent quality of sureal's model with content ambiguity (a rater of zero bias)",
}


def interval_description(options: RatingOptions, bounds: tuple[float, float] | None = None) -> dict:
    """How ci_low and ci_high of scores.csv were made, for what estimand, and within which bounds."""
    common = {"confidence": options.confidence, "estimand": ESTIMANDS[options.model],
              "bounded_to": list(bounds) if bounds else None,
              "blank_when": "fewer than 2 workers rated the stimulus, no spread, or a score outside the scale whose "
                            "interval does not reach it (ci_reason says which)",
              "conditional_on_screening": True}
    if options.interval == "bootstrap":
        how = ("percentile interval of the scores of worker resamples (workers drawn with replacement, each with "
               "all their kept ratings" + ("; the P.913 model refitted to each" if options.model == "p913" else "")
               + "), intersected with the scale")
        return {"method": "bootstrap", "method_name": INTERVAL_METHOD_NAMES["bootstrap"], "n_boot": options.n_boot,
                "unit": "worker", "description": how, **common}
    how = {"mos": "score +/- Student t(d0 + n - 1) x sqrt(moderated variance / n), the stimulus' variance of its "
                  "ratings shrunk toward the study's typical one (Smyth 2004), intersected with the scale",
           "p913": "score +/- Student t(d0 + n - 1) x sqrt(moderated variance / n), the variance n times the "
                   "delete-a-group jackknife variance of the score over the kept workers (at most 50 groups, each a "
                   "refit of the P.913 model; Kott 2001) shrunk toward the study's typical one (Smyth 2004), "
                   "intersected with the scale",
           "mle": "score +/- Phi^-1 x the content model's standard error (sureal's: 1 / sqrt(sum of 1 / (v_s^2 + "
                  "a_c^2))), intersected with the scale"}[options.model]
    method = "normal" if options.model == "mle" else "moderated t"
    name = {"mle": "normal (sureal's standard error), intersected with the scale",
            "p913": "Student t with a moderated worker-jackknife variance (Kott 2001, Smyth 2004), intersected with "
                    "the scale",
            "mos": INTERVAL_METHOD_NAMES["t"]}[options.model]
    return {"method": method, "method_name": name, "description": how, **common}


def _summary(ratings: Ratings, options: RatingOptions, screening: RatingScreening, everyone: P913Fit,
             model_fit, scores: list[dict], dv_dropped: int | None, kept_ratings: int,
             seconds: float) -> dict:
    kind = "DMOS (ACR-HR)" if options.dmos else SCORE_KINDS[ratings.scale]
    return {
        "library": "perceptlab", "version": __version__,
        "scale": {"name": ratings.scale, "low": ratings.low, "high": ratings.high},
        "score": {"mos": kind, "p913": f"P.913 quality of an average worker ({kind} scale)",
                  "mle": f"quality of an average worker, content ambiguity modelled ({kind} scale)"}[options.model],
        "model": options.model,
        "parameters": {"model": options.model, "interval": options.interval, "n_boot": options.n_boot,
                       "confidence": options.confidence, "seed": options.seed, "dmos": options.dmos,
                       "screening": asdict(options.screening)},
        "intervals": interval_description(options, score_bounds(ratings, options)),
        "counts": {"ratings": len(ratings), "gold_ratings": int(ratings.is_gold.sum()),
                   "stimuli": len(ratings.stimulus_ids), "scored_stimuli": len(scores),
                   "workers": len(ratings.worker_ids), "kept_workers": int(screening.kept.sum()),
                   "kept_ratings": kept_ratings, "dv_without_reference": dv_dropped},
        "screening": screening.summary(),
        "p913": {"all_workers": {"iterations": everyone.iterations, "converged": everyone.converged}},
        "model_fit": (None if model_fit is None else
                      {"iterations": model_fit.iterations, "converged": model_fit.converged}),
        "seconds": round(seconds, 3),
    }


def write_rating_results(result: RatingAnalysis, out: str | os.PathLike, plots: bool = True) -> list[Path]:
    """Write scores.csv, workers.csv, summary.json, sureal_dataset.py (:mod:`analysis.sureal_dataset`) and the
    plots into ``out``; all of them or none."""
    out = Path(out)
    parent = out.parent if out.parent.exists() else Path.cwd()
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=parent))
    try:
        atomic_write_text(staging / "scores.csv", table_csv(SCORES_COLUMNS, result.scores))
        atomic_write_text(staging / "workers.csv",
                          table_csv(RATING_WORKERS_COLUMNS + RATING_WORKERS_EXTRA_COLUMNS, result.workers))
        atomic_write_text(staging / "summary.json", json_text(result.summary))
        if result.ratings is not None:
            from .sureal_dataset import sureal_dataset, sureal_dataset_text
            dataset = sureal_dataset(result.ratings, content_keys(result.ratings))
            atomic_write_text(staging / "sureal_dataset.py", sureal_dataset_text(dataset))
        if plots:
            from .rating_plots import plot_rating_scores, plot_worker_bias
            plot_rating_scores(result.scores, staging / "scores.png", result.summary, references=result.references)
            plot_worker_bias(result.workers, staging / "workers.png")
        out.mkdir(parents=True, exist_ok=True)
        written = []
        for path in sorted(staging.iterdir()):
            os.replace(path, out / path.name)
            written.append(out / path.name)
        return written
    finally:
        shutil.rmtree(staging, ignore_errors=True)
