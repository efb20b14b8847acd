"""Coverage of the bootstrap intervals on simulated studies with a known truth.

Each simulated study is one set of 8 items whose true Thurstone scales are drawn
from N(0, spread^2); every worker (an honest Thurstone Case V observer) judges
all 28 pairs once. The study is scaled (MLE, z units, no anchors) and its
workers are bootstrapped as ``perceptlab analyze`` does; every interval method
is applied to the same resamples. An interval covers when it contains the true
scale (centred, as the MLE's scale is: its values sum to zero) or the true rank.

The coverage is the share of (study, item) intervals that cover; its standard
error is computed over studies (the 8 items of a study share their workers, so
their misses are correlated and the binomial SE over items would be too small).

Run: .venv/bin/python benchmarks/interval_coverage.py [--studies 1000] [--boot 1000]
     [--workers 25,100] [--spreads 0.5,1.0] [--seed 0]
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

import numpy as np
from scipy.special import ndtr

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from analysis.bootstrap import INTERVAL_METHODS, bootstrap_sets, interval_bounds, ranks_descending  # noqa: E402
from analysis.scaling import ScalingOptions, SetDesign, fit_set  # noqa: E402
from benchmarks._common import print_table  # noqa: E402


def simulate_complete_set(rng: np.random.Generator, n_items: int, n_workers: int,
                          spread: float) -> tuple[SetDesign, np.ndarray, np.ndarray]:
    """One set in which every worker judges every pair once.

    Returns
    -------
    design : SetDesign
    vote_worker : (V,) worker of each vote
    truth : (n_items,) true scale, centred (z units)
    """
    truth = rng.normal(0.0, spread, n_items)
    pairs = np.array(list(combinations(range(n_items), 2)))
    first_won = rng.random((n_workers, len(pairs))) < ndtr(truth[pairs[:, 0]] - truth[pairs[:, 1]])
    n_votes = first_won.size
    design = SetDesign(0, "simulated", np.arange(n_items), np.arange(n_votes), pairs,
                       np.tile(np.arange(len(pairs)), n_workers), first_won.ravel())
    return design, np.repeat(np.arange(n_workers), len(pairs)), truth - truth.mean()


@dataclass(frozen=True)
class Coverage:
    """Per-study shares of the items whose interval covered the truth."""

    scale: np.ndarray   # (studies,) share of scale intervals containing the true scale
    rank: np.ndarray    # (studies,) share of rank intervals containing the true rank
    width: np.ndarray   # (studies,) mean scale-interval width (z units)

    @property
    def rate(self) -> float:
        return float(self.scale.mean())

    @property
    def standard_error(self) -> float:
        """Monte Carlo SE of :attr:`rate`, over studies (items of a study are not independent)."""
        return float(self.scale.std(ddof=1) / np.sqrt(len(self.scale)))


def measure_coverage(n_workers: int, n_studies: int, n_boot: int = 1000, spread: float = 0.5, n_items: int = 8,
                     confidence: float = 0.95, methods=INTERVAL_METHODS, seed: int = 0) -> dict[str, Coverage]:
    """Coverage of each interval method over ``n_studies`` simulated studies (seeded, deterministic)."""
    rng = np.random.default_rng(seed)
    options = ScalingOptions(anchors=False)
    kept = np.ones(n_workers, dtype=bool)
    results = {m: np.empty((3, n_studies)) for m in methods}
    for study in range(n_studies):
        design, vote_worker, truth = simulate_complete_set(rng, n_items, n_workers, spread)
        raw = fit_set(design, options)
        iv = bootstrap_sets([design], [raw], options, vote_worker, kept, n_boot=n_boot, confidence=confidence,
                            seed=rng, progress=False, method=methods[0])[0]
        true_rank = ranks_descending(truth)
        for method in methods:
            low, high, r_low, r_high = interval_bounds(iv.samples, raw, iv.n_units, method, confidence)
            results[method][:, study] = (((low <= truth) & (truth <= high)).mean(),
                                         ((r_low <= true_rank) & (true_rank <= r_high)).mean(),
                                         (high - low).mean())
    return {m: Coverage(*r) for m, r in results.items()}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--studies", type=int, default=1000, help="simulated studies per row")
    parser.add_argument("--boot", type=int, default=1000, help="bootstrap resamples per study")
    parser.add_argument("--workers", default="25,100")
    parser.add_argument("--spreads", default="0.5,1.0", help="SDs of the true scales (z units)")
    parser.add_argument("--items", type=int, default=8)
    parser.add_argument("--confidence", type=float, default=0.95)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(f"{args.items} items, every worker judges all {args.items * (args.items - 1) // 2} pairs; "
          f"{args.studies} studies x {args.boot} worker resamples per row; nominal {args.confidence:.0%}")
    rows = []
    for workers in (int(w) for w in args.workers.split(",")):
        for spread in (float(s) for s in args.spreads.split(",")):
            started = time.perf_counter()
            result = measure_coverage(workers, args.studies, args.boot, spread, args.items, args.confidence,
                                      seed=args.seed)
            seconds = time.perf_counter() - started
            for method, c in result.items():
                rows.append([workers, spread, method, f"{c.rate:.4f}", f"{c.standard_error:.4f}",
                             f"{c.rank.mean():.4f}", f"{c.width.mean():.3f}", f"{seconds:.0f}"])
    print_table(["workers", "truth SD", "method", "scale coverage", "SE", "rank coverage", "mean width",
                 "seconds"], rows)


if __name__ == "__main__":
    main()
