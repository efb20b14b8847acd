"""A seeded simulator of crowd-shaped rating studies with their estimands, for the screening and coverage tests.

The shape of issue 37's measurement: 80 workers, 20 % of them careless (every answer drawn uniformly from the
scale's whole points), the honest ones P.913 raters (ITU-T P.913 clause 12.6: ``quality + bias + inconsistency X``,
rounded to a scale point and clipped) with a lab-like bias SD of 0.3 and inconsistencies uniform in 0.4-0.9, each
worker rating one or two pages of 12 of 60 stimuli whose qualities span a narrow range (2 to 4 on ACR's 1..5).

The biases are a sample of a population of mean zero (not centred), so the sampled crowd differs from study to
study as a real one does. Two estimands per stimulus:

``expected``  the MOS estimand: the expected rating of a typical honest rater, ``E[clip(round(q + b + u X))]``
              over the honest population's bias ``b ~ N(0, bias_sd^2)``, inconsistency ``u ~ U(lo, hi)`` and
              ``X ~ N(0, 1)``, computed exactly (a fine grid over ``u``, normal CDFs for the rest).
``quality``   the P.913 estimand: the latent quality ``q``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr

PAGE = 12


@dataclass(frozen=True)
class Crowd:
    stimulus: np.ndarray      # (n,) stimulus index of each rating
    worker: np.ndarray        # (n,) worker index
    rating: np.ndarray        # (n,) whole scale points
    quality: np.ndarray       # (J,) latent quality (the P.913 estimand)
    expected: np.ndarray      # (J,) a typical honest rater's expected rating (the MOS estimand)
    honest: np.ndarray        # (W,) bool
    n_stimuli: int
    n_workers: int

    def columns(self) -> dict[str, np.ndarray]:
        """The ratings as ratings.csv columns."""
        return {"worker_id": np.array([f"w{k:03d}" for k in self.worker]),
                "stimulus_id": np.array([f"s{k:03d}" for k in self.stimulus]),
                "rating": np.array([f"{v:g}" for v in self.rating])}


def expected_rating(quality: np.ndarray, bias_sd: float, inconsistency: tuple[float, float], low: int = 1,
                    high: int = 5, grid: int = 200) -> np.ndarray:
    """``E[clip(round(q + b + u X), low, high)]`` over ``b ~ N(0, bias_sd^2)``, ``u ~ U(*inconsistency)``.

    ``E[clip(round(Y))] = low + sum_{k=low}^{high-1} P(Y > k + 1/2)`` for ``Y ~ N(q, bias_sd^2 + u^2)``, averaged
    over a midpoint grid of ``u``."""
    u = inconsistency[0] + (np.arange(grid) + 0.5) / grid * (inconsistency[1] - inconsistency[0])
    sd = np.sqrt(bias_sd ** 2 + u ** 2)[:, None, None]
    cuts = (np.arange(low, high) + 0.5)[None, None, :]
    above = ndtr((np.asarray(quality, float)[None, :, None] - cuts) / sd)
    return low + above.sum(axis=2).mean(axis=0)


def simulate_crowd(seed: int | np.random.Generator = 0, *, n_stimuli: int = 60, n_workers: int = 80,
                   careless: float = 0.2, bias_sd: float = 0.3, inconsistency: tuple[float, float] = (0.4, 0.9),
                   quality_range: tuple[float, float] = (1.5, 4.5), pages: tuple[int, ...] = (1, 2),
                   low: int = 1, high: int = 5) -> Crowd:
    """One crowd study (see the module docstring); each worker rates ``PAGE`` x a page count drawn from
    ``pages`` distinct stimuli, the least-rated first (ties at random), as the server allocates them."""
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    quality = rng.uniform(*quality_range, n_stimuli)
    bias = rng.normal(0.0, bias_sd, n_workers)
    spread = rng.uniform(*inconsistency, n_workers)
    honest = np.ones(n_workers, dtype=bool)
    honest[rng.choice(n_workers, round(careless * n_workers), replace=False)] = False
    counts = np.zeros(n_stimuli)
    stimulus, worker = [], []
    for w in range(n_workers):
        k = min(PAGE * int(rng.choice(pages)), n_stimuli)
        chosen = np.lexsort((rng.random(n_stimuli), counts))[:k]
        counts[chosen] += 1
        stimulus.append(chosen)
        worker.append(np.full(k, w))
    stimulus, worker = np.concatenate(stimulus), np.concatenate(worker)
    value = np.clip(np.round(quality[stimulus] + bias[worker] + spread[worker] * rng.standard_normal(stimulus.size)),
                    low, high)
    value = np.where(honest[worker], value, rng.integers(low, high + 1, stimulus.size))
    return Crowd(stimulus, worker, value.astype(float), quality,
                 expected_rating(quality, bias_sd, inconsistency, low, high), honest, n_stimuli, n_workers)


def crowd_figures(options=None, seeds=range(10), **shape) -> dict:
    """Screening and interval figures of ``analyze_ratings`` with ``options`` over seeded crowds: the share of
    honest workers kept and of careless ones dropped, the coverage of each stated estimand by the intervals of
    ``--model mos`` and ``p913``, and the counts of zero-width intervals and of intervals reaching outside the scale.

    Run: ``.venv/bin/python -c "from tests.analysis.crowd_support import crowd_figures; print(crowd_figures())"``.
    """
    from dataclasses import replace

    from analysis.rating_report import RatingOptions, analyze_ratings
    from analysis.ratings import build_ratings

    options = options or RatingOptions()
    kept_honest = honest = dropped_careless = careless = 0
    hits = {"mos": [0, 0], "p913": [0, 0]}
    zero = outside = blank = 0
    for seed in seeds:
        crowd = simulate_crowd(seed, **shape)
        c = crowd.columns()
        ratings = build_ratings(c["worker_id"], c["stimulus_id"], c["rating"], scale="acr")
        for model, truth in (("mos", crowd.expected), ("p913", crowd.quality)):
            result = analyze_ratings(ratings, replace(options, model=model))
            if model == "mos":
                kept = np.zeros(crowd.n_workers, bool)
                for row in result.workers:
                    kept[int(row["worker_id"][1:])] = bool(row["kept"])
                kept_honest += int((kept & crowd.honest).sum())
                honest += int(crowd.honest.sum())
                dropped_careless += int((~kept & ~crowd.honest).sum())
                careless += int((~crowd.honest).sum())
            for row in result.scores:
                low, high = row["ci_low"], row["ci_high"]
                if not (np.isfinite(low) and np.isfinite(high)):
                    blank += 1
                    continue
                j = int(row["stimulus_id"][1:])
                hits[model][0] += int(low <= truth[j] <= high)
                hits[model][1] += 1
                zero += int(high - low <= 0)
                outside += int(low < 1 or high > 5)
    return {"honest_kept": kept_honest / honest, "careless_dropped": dropped_careless / careless,
            "coverage_mos": hits["mos"][0] / max(hits["mos"][1], 1),
            "coverage_p913": hits["p913"][0] / max(hits["p913"][1], 1),
            "intervals": hits["mos"][1] + hits["p913"][1], "zero_width": zero, "outside_scale": outside,
            "blank": blank}


# --------------------------------------------------------------------------- paired comparison

@dataclass(frozen=True)
class PairedCrowd:
    votes: object                 # analysis.formats.Votes
    truth: dict[str, np.ndarray]  # set_id -> centred true scale (Thurstone z) of items "i00".."i<n-1>"
    honest: dict[str, bool]       # worker_id -> honest


def simulate_paired_crowd(seed: int | np.random.Generator = 0, *, n_sets: int = 2, n_items: int = 10,
                          n_workers: int = 60, careless: float = 0.2, scale_sd: float = 0.5,
                          votes_per_page: int = 15, pages: tuple[int, ...] = (1, 2)) -> PairedCrowd:
    """A crowd-shaped paired-comparison study: each worker answers one or two pages of ``votes_per_page`` distinct
    pairs of one set (a set drawn per page); honest workers are Thurstone Case V observers (``P(a) =
    Phi(s_a - s_b)``), careless ones click either side with probability 1/2; true scales ``N(0, scale_sd^2)`` (a
    narrow range: many pairs close)."""
    from analysis.formats import build_votes

    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    truth = {f"set{k}": rng.normal(0.0, scale_sd, n_items) for k in range(n_sets)}
    honest = np.ones(n_workers, dtype=bool)
    honest[rng.choice(n_workers, round(careless * n_workers), replace=False)] = False
    a_all, b_all = np.triu_indices(n_items, 1)
    rows = []
    for w in range(n_workers):
        for _ in range(int(rng.choice(pages))):
            set_id = f"set{int(rng.integers(n_sets))}"
            chosen = rng.choice(len(a_all), votes_per_page, replace=False)
            a, b = a_all[chosen], b_all[chosen]
            swap = rng.random(len(a)) < 0.5
            a, b = np.where(swap, b, a), np.where(swap, a, b)
            p = ndtr(truth[set_id][a] - truth[set_id][b]) if honest[w] else np.full(len(a), 0.5)
            a_won = rng.random(len(a)) < p
            rows += [(f"w{w:03d}", set_id, f"i{x:02d}", f"i{y:02d}", f"i{x:02d}" if won else f"i{y:02d}")
                     for x, y, won in zip(a, b, a_won)]
    votes = build_votes(*zip(*rows))
    return PairedCrowd(votes, {k: v - v.mean() for k, v in truth.items()},
                       {f"w{w:03d}": bool(honest[w]) for w in range(n_workers)})


def paired_figures(options=None, seeds=range(10), **shape) -> dict:
    """Screening and interval figures of ``perceptlab analyze`` (``analysis.pipeline.analyze``, z units without
    anchors so that the estimand, the centred Thurstone scale of the honest observers, is on the reported scale)
    over seeded paired crowds.

    Run: ``.venv/bin/python -c "from tests.analysis.crowd_support import paired_figures; print(paired_figures())"``.
    """
    from analysis.pipeline import AnalysisOptions, analyze
    from analysis.scaling import ScalingOptions

    options = options or AnalysisOptions(scaling=ScalingOptions(anchors=False, units="z"), n_boot=200)
    kept_honest = honest = dropped = careless = hits = intervals = zero = blank = 0
    for seed in seeds:
        crowd = simulate_paired_crowd(seed, **shape)
        result = analyze(crowd.votes, options)
        for row in result.workers:
            h = crowd.honest[row["worker_id"]]
            honest += h
            careless += not h
            kept_honest += h and bool(row["kept"])
            dropped += (not h) and not row["kept"]
        for row in result.scales:
            low, high = row["ci_low"], row["ci_high"]
            if not (np.isfinite(low) and np.isfinite(high)):
                blank += 1
                continue
            truth = crowd.truth[row["set_id"]][int(row["item_id"][1:])]
            hits += int(low <= truth <= high)
            intervals += 1
            zero += int(high - low <= 0)
    return {"honest_kept": kept_honest / honest, "careless_dropped": dropped / max(careless, 1),
            "coverage": hits / max(intervals, 1), "intervals": intervals, "zero_width": zero, "blank": blank}
