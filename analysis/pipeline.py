"""The whole analysis of a votes file: screen, scale, bootstrap, rank, export.

:func:`analyze` computes everything in memory; :func:`write_results` writes
scales.csv, overall.csv, workers.csv, summary.json (and pareto.csv,
rerank.csv and the plots when they apply) into a staging folder and moves
them into place only once all of them exist, so a failure leaves no partial
output behind.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from . import __version__
from .bootstrap import DEFAULT_INTERVAL_METHOD, bootstrap_sets, check_interval_method, ranks_descending
from .formats import (OVERALL_COLUMNS, SCALES_COLUMNS, WORKERS_COLUMNS, Votes, atomic_write_text,
                      json_text, table_csv)
from .ranking import Reranking, overall_scores, pareto_groups, rerank
from .scaling import ScalingOptions, fit_set, reported, set_designs, unit_description
from .screening import DEFAULT_GOLD_ACCURACY, ScreeningResult, screen_workers
from .threads import limits_blas_threads

WORKERS_EXTRA_COLUMNS = ("gold_accuracy", "gold_failed", "honest_posterior")


@dataclass(frozen=True)
class AnalysisOptions:
    """Everything ``perceptlab analyze`` can be told; defaults match server/default_config.toml."""

    scaling: ScalingOptions = field(default_factory=ScalingOptions)
    keep: str | float = "auto"
    min_tpr: float | None = None
    gold_threshold: float | None = DEFAULT_GOLD_ACCURACY
    n_boot: int = 1000
    bootstrap_unit: str = "worker"
    confidence: float = 0.95
    interval_method: str = DEFAULT_INTERVAL_METHOD  # "t", "basic" or "percentile" (analysis/bootstrap.py)
    seed: int = 0
    progress: bool | None = None

    def __post_init__(self):
        check_interval_method(self.interval_method)
        self.scaling.check_units()


@dataclass
class AnalysisResult:
    scales: list[dict]
    overall: list[dict]
    workers: list[dict]
    summary: dict
    screening: ScreeningResult
    pareto: list[dict] | None = None
    reranking: Reranking | None = None
    plot_data: dict = field(default_factory=dict)


@limits_blas_threads
def analyze(votes: Votes, options: AnalysisOptions = AnalysisOptions(),
            objective: dict[str, float] | None = None, objective_lower_is_better: bool = True) -> AnalysisResult:
    """Screen workers, scale every set, bootstrap intervals, rank across sets."""
    started = time.perf_counter()
    so = options.scaling
    screening = screen_workers(votes, so, keep=options.keep, min_tpr=options.min_tpr,
                               gold_threshold=options.gold_threshold)
    designs = set_designs(votes)
    kept_vote = screening.kept[votes.worker]
    raws = [fit_set(d, so, weights=kept_vote[d.votes].astype(float), item_ids=votes.item_ids[d.items])
            for d in designs]
    intervals = None
    if options.n_boot > 0:
        intervals = bootstrap_sets(designs, raws, so, votes.worker, screening.kept, n_boot=options.n_boot,
                                   unit=options.bootstrap_unit, confidence=options.confidence,
                                   seed=options.seed, progress=options.progress, method=options.interval_method)
    scales, set_scales, plot_sets, proportions = [], {}, [], []
    for k, (design, raw) in enumerate(zip(designs, raws)):
        value = reported(raw, design, so)
        rank = ranks_descending(value)
        wins = design.wins(kept_vote[design.votes].astype(float))
        total = wins.sum(axis=1)
        n_votes = (np.bincount(design.pairs[:, 0], total, design.n_items)
                   + np.bincount(design.pairs[:, 1], total, design.n_items)).astype(int)
        nan = np.full(design.n_items, np.nan)
        iv = intervals[k] if intervals else None
        ids = votes.item_ids[design.items]
        for j in np.argsort(rank, kind="stable"):
            scales.append({"set_id": design.set_id, "item_id": str(ids[j]), "scale": float(value[j]),
                           "ci_low": float(iv.scale_low[j]) if iv else nan[j],
                           "ci_high": float(iv.scale_high[j]) if iv else nan[j],
                           "rank": int(rank[j]), "n_votes": int(n_votes[j]),
                           "rank_ci_low": int(iv.rank_low[j]) if iv else "",
                           "rank_ci_high": int(iv.rank_high[j]) if iv else "", "unit": so.unit})
        set_scales[design.set_id] = dict(zip(map(str, ids), value.tolist()))
        plot_sets.append({"set_id": design.set_id, "items": [str(i) for i in ids], "scale": value,
                          "ci_low": iv.scale_low if iv else value, "ci_high": iv.scale_high if iv else value,
                          "n_votes": n_votes})
        proportions.append(wins[total > 0, 0] / total[total > 0])
    overall = overall_scores(set_scales)
    pareto = _pareto_records(set_scales) if len(set_scales) > 1 else None
    reranking = rerank(overall, objective, objective_lower_is_better, n_boot=max(options.n_boot, 100),
                       confidence=options.confidence, seed=options.seed) if objective else None
    workers = _worker_records(votes, screening)
    summary = _summary(votes, options, screening, designs, scales, reranking, time.perf_counter() - started)
    return AnalysisResult(scales, overall, workers, summary, screening, pareto, reranking,
                          {"sets": plot_sets, "proportions": np.concatenate(proportions)})


def interval_description(options: AnalysisOptions) -> dict | None:
    """How the ci_low/ci_high and rank_ci_* columns were made (None without a bootstrap)."""
    if options.n_boot <= 0:
        return None
    return {"method": options.interval_method, "confidence": options.confidence, "n_boot": options.n_boot,
            "unit": options.bootstrap_unit, "conditional_on_screening": True}


def _pareto_records(set_scales: dict[str, dict[str, float]]) -> list[dict] | None:
    shared = sorted(set.intersection(*(set(s) for s in set_scales.values())))
    if len(shared) < 2:
        return None
    matrix = np.array([[set_scales[s][item] for s in set_scales] for item in shared])
    groups = pareto_groups(matrix)
    return [{"item_id": item, "group": int(g)} for g, item in sorted(zip(groups, shared))]


def _worker_records(votes: Votes, screening: ScreeningResult) -> list[dict]:
    posterior = screening.honest_posterior
    return [{"worker_id": str(w), "n_votes": int(screening.n_votes[k]), "tpr": float(screening.tpr[k]),
             "kept": int(screening.kept[k]), "gold_accuracy": float(screening.gold_accuracy[k]),
             "gold_failed": int(screening.gold_failed[k]),
             "honest_posterior": float(posterior[k]) if posterior is not None else float("nan")}
            for k, w in enumerate(votes.worker_ids)]


def _summary(votes, options, screening, designs, scales, reranking, seconds) -> dict:
    so = options.scaling
    values = np.array([r["scale"] for r in scales])
    return {
        "library": "perceptlab", "version": __version__,
        "parameters": {**asdict(so), "keep": options.keep, "min_tpr": options.min_tpr,
                       "gold_threshold": options.gold_threshold, "bootstrap": options.n_boot,
                       "bootstrap_unit": options.bootstrap_unit, "confidence": options.confidence,
                       "interval_method": options.interval_method, "seed": options.seed},
        "intervals": interval_description(options),
        "unit": so.unit,
        "units": unit_description(so.unit),
        "anchors": ({"votes_per_item_per_anchor": so.anchor_votes,
                     "items_outside_0_1": (int(((values < 0) | (values > 1)).sum()) if so.unit == "anchored"
                                           else None)} if so.anchors else None),
        "counts": {"votes": len(votes), "gold_votes": int(votes.is_gold.sum()), "sets": len(designs),
                   "items": int(sum(d.n_items for d in designs)), "workers": len(votes.worker_ids),
                   "pairs": int(sum(len(d.pairs) for d in designs))},
        "screening": screening.summary(),
        "sets": [{"set_id": d.set_id, "items": d.n_items, "pairs": len(d.pairs),
                  "kept_votes": int(screening.kept[votes.worker[d.votes]].sum())} for d in designs],
        "reranking": reranking.srocc if reranking else None,
        "seconds": round(seconds, 3),
    }


def write_results(result: AnalysisResult, out: str | os.PathLike, plots: bool = True) -> list[Path]:
    """Write every output file of ``result`` into ``out``; all of them or none."""
    out = Path(out)
    parent = out.parent if out.parent.exists() else Path.cwd()
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=parent))
    try:
        files = {
            "scales.csv": table_csv(SCALES_COLUMNS, result.scales),
            "overall.csv": table_csv(OVERALL_COLUMNS, result.overall),
            "workers.csv": table_csv(WORKERS_COLUMNS + WORKERS_EXTRA_COLUMNS, result.workers),
            "summary.json": json_text(result.summary),
        }
        if result.pareto:
            files["pareto.csv"] = table_csv(("item_id", "group"), result.pareto)
        if result.reranking:
            files["rerank.csv"] = table_csv(("item_id", "subjective_rank", "objective_rank", "rank_difference",
                                             "mean_scale", "objective"), result.reranking.rows)
        for name, text in files.items():
            atomic_write_text(staging / name, text)
        if plots:
            _write_plots(result, staging)
        out.mkdir(parents=True, exist_ok=True)
        written = []
        for path in sorted(staging.iterdir()):
            os.replace(path, out / path.name)
            written.append(out / path.name)
        return written
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _write_plots(result: AnalysisResult, folder: Path) -> None:
    from .plots import plot_scales, plot_tpr_histogram, plot_win_proportions
    parameters = result.summary["parameters"]
    unit = {"anchored": "scale (anchored: worst anchor 0, best 1)", "jod": "scale (JOD; 1 JOD = 75 % preference)",
            "z": "scale (Thurstone z units)"}[result.summary["unit"]]
    plot_scales(result.plot_data["sets"], folder / "scales.png", unit,
                parameters["confidence"] if parameters["bootstrap"] else None, parameters["interval_method"],
                include=(0.0, 1.0) if result.summary["unit"] == "anchored" else ())
    s = result.screening
    plot_tpr_histogram(s.tpr, s.kept, s.threshold_tpr, folder / "worker_tpr.png")
    plot_win_proportions(result.plot_data["proportions"], folder / "win_proportions.png")
