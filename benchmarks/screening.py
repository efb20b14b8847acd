"""Screening quality and the cost of a full StudyMB 2.0-sized analysis.

1. Timing: 8 sets x 155 items, 465 pairs per set, 20 votes per pair, 25 %
   random clickers (+ 5 % always-left clickers): screening + scaling +
   1,000 worker bootstraps with the default options (target: < 10 s).
2. Accuracy: mean SROCC over sets against the true scales for
   naive (all votes), oracle (only the honest workers' votes), perceptlab's
   default screening (auto) and the paper's fixed 60 % rule, at 10 %, 25 % and
   40 % random clickers plus 5 % always-left clickers (target: auto within
   0.01 of the oracle), averaged over --seeds simulated studies.

Run: .venv/bin/python benchmarks/screening.py [--seeds 3]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from analysis.correlation import srocc  # noqa: E402
from analysis.pipeline import AnalysisOptions, analyze  # noqa: E402
from analysis.scaling import ScalingOptions, fit_set, set_designs  # noqa: E402
from analysis.screening import screen_workers  # noqa: E402
from analysis.simulate import simulate_study  # noqa: E402
from benchmarks._common import peak_rss_mb, print_table, timer  # noqa: E402


def mean_srocc(study, kept_workers: np.ndarray) -> float:
    """Mean SROCC over sets of the MLE scale of the kept workers' votes against the truth."""
    votes, options = study.votes, ScalingOptions()
    values = []
    for design in set_designs(votes):
        weights = kept_workers[votes.worker[design.votes]].astype(float)
        scale = fit_set(design, options, weights=weights)[:design.n_items]
        index = {item: k for k, item in enumerate(study.item_ids)}
        truth = study.truth[design.set_id][[index[i] for i in votes.item_ids[design.items]]]
        values.append(srocc(scale, truth))
    return float(np.mean(values))


def timing() -> None:
    study = simulate_study(random_clickers=0.25, left_clickers=0.05, seed=0)
    analyze(simulate_study(n_sets=1, n_items=20, n_workers=30, seed=1).votes,
            AnalysisOptions(n_boot=10, progress=False))  # warm-up: imports
    with timer() as t:
        result = analyze(study.votes, AnalysisOptions(n_boot=1000, progress=False))
    s = result.summary["screening"]
    print(f"StudyMB 2.0-sized study: {len(study.votes)} votes, 8 sets x 155 items, 300 workers")
    print(f"  screening ({s['rule']}, {s['iterations']} iterations) + scaling + 1,000 worker bootstraps: "
          f"{t['seconds']:.2f} s (target < 10 s); peak RSS {peak_rss_mb():.0f} MB\n")


def accuracy(seeds: int) -> None:
    rows = []
    for share in (0.10, 0.25, 0.40):
        scores = {"naive": [], "oracle": [], "auto": [], "keep 0.6": []}
        for seed in range(seeds):
            study = simulate_study(random_clickers=share, left_clickers=0.05, seed=100 + seed)
            everyone = np.ones(len(study.votes.worker_ids), dtype=bool)
            scores["naive"].append(mean_srocc(study, everyone))
            scores["oracle"].append(mean_srocc(study, study.honest_mask))
            for rule, keep in (("auto", "auto"), ("keep 0.6", 0.6)):
                kept = screen_workers(study.votes, ScalingOptions(), keep=keep).kept
                scores[rule].append(mean_srocc(study, kept))
        mean = {k: np.mean(v) for k, v in scores.items()}
        rows.append([f"{share:.0%} + 5% left", f"{mean['naive']:.4f}", f"{mean['oracle']:.4f}",
                     f"{mean['auto']:.4f}", f"{mean['auto'] - mean['oracle']:+.4f}", f"{mean['keep 0.6']:.4f}"])
        print(f"  done {share:.0%}", flush=True)
    print()
    print_table(["random clickers", "naive", "oracle", "perceptlab auto", "auto - oracle", "keep 0.6 (paper)"],
                rows)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=3, help="simulated studies per setting")
    args = parser.parse_args(argv)
    timing()
    accuracy(args.seeds)


if __name__ == "__main__":
    main()
