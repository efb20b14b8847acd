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
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from . import __version__
from .bootstrap import (DEFAULT_INTERVAL_METHOD, bootstrap_sets, check_interval_method, interval_reasons,
                        item_workers, ranks_descending)
from .collusion import (DEFAULT_BIAS_FDR, MachineAgreement, TargetedBias, item_errors, leave_one_out_gaps,
                        machine_agreement, targeted_bias)
from .formats import (OVERALL_COLUMNS, SCALES_COLUMNS, WORKERS_COLUMNS, Votes, atomic_write_text,
                      json_text, table_csv)
from .ranking import Reranking, overall_scores, pareto_groups, rerank
from .scaling import ScalingOptions, fit_set, reported, set_designs, unit_description
from .screening import DEFAULT_GOLD_ACCURACY, ScreeningResult, SoftWeights, scale_weights, screen_workers
from .sockpuppets import SHORT_LIVED_VOTES, CoordinatedItems, coordinated_identities
from .threads import limits_blas_threads

WORKERS_EXTRA_COLUMNS = ("gold_accuracy", "gold_failed", "honest_posterior", "vote_weight", "machine_agreement",
                         "flags")
# Why a worker is flagged (workers.csv ``flags``, ";"-separated; favours:/disfavours: name an item).
# Each of the first four, and targeted bias unless kept on request, is also why a worker is not kept.
FLAG_NO_VOTES = "no_scaling_votes"      # gold or quiz rows only
FLAG_GOLD = "gold_failed"               # below the gold accuracy threshold
FLAG_SCREENED = "screened_out"          # dropped by TPR screening
FLAG_MACHINE = "machine_agreement"      # agrees with the machine observer beyond an honest observer


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
    bias_test: bool = True          # test kept workers for a bias for or against single items
    exclude_biased: bool = True     # leave workers with a targeted bias out of the scales
    bias_fdr: float = DEFAULT_BIAS_FDR
    # With the auto rule, weigh each judged worker's votes by its posterior of being careful (analysis/screening.py,
    # "Soft screening"); off: the kept workers' votes alone, unweighted.
    soft_screening: bool = True
    # Set aside short-lived identities' votes on items they favour as a group (analysis/sockpuppets.py).
    sockpuppet_test: bool = True
    short_lived_votes: int = SHORT_LIVED_VOTES
    # Further units of every scale record (``scale_<unit>``, ``ci_low_<unit>``, ``ci_high_<unit>``; not in
    # scales.csv), their intervals from the same resamples (analysis/bootstrap.py ``also_units``): the running
    # scales' JOD for [stopping].
    also_units: tuple[str, ...] = ()

    def __post_init__(self):
        check_interval_method(self.interval_method)
        if not 0 < self.bias_fdr < 1:
            raise ValueError(f"bias_fdr must be in (0, 1), got {self.bias_fdr}")
        if self.short_lived_votes < 1:
            raise ValueError(f"short_lived_votes must be at least 1, got {self.short_lived_votes}")
        self.scaling.check_units()
        for unit in self.also_units:
            replace(self.scaling, units=unit).check_units()  # also an unknown unit: ScalingOptions refuses it


@dataclass
class AnalysisResult:
    scales: list[dict]
    overall: list[dict]
    workers: list[dict]
    summary: dict
    screening: ScreeningResult
    kept: np.ndarray | None = None          # (W,) workers whose votes make the scales (screening, bias)
    bias: TargetedBias | None = None
    machine: MachineAgreement | None = None
    pareto: list[dict] | None = None
    reranking: Reranking | None = None
    plot_data: dict = field(default_factory=dict)
    sockpuppets: CoordinatedItems | None = None   # short-lived identities' set-aside votes (analysis/sockpuppets.py)
    weights: SoftWeights | None = None            # soft screening's weights (analysis/screening.py)


@limits_blas_threads
def analyze(votes: Votes, options: AnalysisOptions = AnalysisOptions(),
            objective: dict[str, float] | None = None, objective_lower_is_better: bool = True,
            machine_errors: dict[tuple[str, str], float] | None = None,
            fingerprints: Mapping[str, Mapping[str, str]] | None = None) -> AnalysisResult:
    """Screen workers, test them for collusion, scale every set, bootstrap intervals, rank across sets.

    ``machine_errors`` (``{(set_id, item_id): error against the reference}``) turns on the
    machine-agreement test (:mod:`analysis.collusion`). ``fingerprints`` (``{column: {worker_id: value}}``,
    :func:`analysis.sockpuppets.read_fingerprints` of workers.csv) are the sock-puppet test's evidence.
    """
    started = time.perf_counter()
    so = options.scaling
    screening = screen_workers(votes, so, keep=options.keep, min_tpr=options.min_tpr,
                               gold_threshold=options.gold_threshold)
    by_worker = {name: [values.get(str(w), "") for w in votes.worker_ids]
                 for name, values in (fingerprints or {}).items()}
    sock = (coordinated_identities(votes, so, screening.kept, short_votes=options.short_lived_votes,
                                   fingerprints=by_worker)
            if options.sockpuppet_test else None)
    all_votes = votes
    if sock is not None and sock.set_aside.any():  # the rest of the analysis never sees the set-aside votes
        votes = votes.subset(~sock.set_aside)
    designs = set_designs(votes)
    bias = (targeted_bias(votes, so, screening.kept, fdr=options.bias_fdr, designs=designs)
            if options.bias_test else None)
    kept = screening.kept & ~bias.flagged if bias is not None and options.exclude_biased else screening.kept.copy()
    if not kept.any():
        raise ValueError("the targeted-bias test flags every kept worker; rerun with --keep-biased to see them")
    machine = None
    if machine_errors:
        gap = bias.gap_a if bias is not None else leave_one_out_gaps(votes, so, screening.kept, designs)
        machine = machine_agreement(votes, gap, item_errors(votes, machine_errors), screening.n_votes > 0,
                                    fdr=options.bias_fdr)
    kept_vote = kept[votes.worker]
    # Soft screening: every worker the auto rule judged and no later test excluded, weighted by its posterior.
    judged = ~bias.flagged if bias is not None and options.exclude_biased else np.ones(len(kept), dtype=bool)
    weight, soft = scale_weights(screening, judged, so, votes, designs, soft=options.soft_screening)
    vote_weight = weight[votes.worker]
    raws = [fit_set(d, so, weights=vote_weight[d.votes], item_ids=votes.item_ids[d.items],
                    links=kept_vote[d.votes].astype(float)) for d in designs]
    intervals = None
    if options.n_boot > 0:
        intervals = bootstrap_sets(designs, raws, so, votes.worker, kept, n_boot=options.n_boot,
                                   unit=options.bootstrap_unit, confidence=options.confidence,
                                   seed=options.seed, progress=options.progress, method=options.interval_method,
                                   also_units=options.also_units, soft=soft)
    also = {unit: replace(so, units=unit) for unit in options.also_units}
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
        n_workers = item_workers(design, votes.worker, kept)
        reason = interval_reasons(iv.scale_low if iv else None, iv.scale_high if iv else None, n_workers)
        blank = reason != ""
        ids = votes.item_ids[design.items]
        also_values = {unit: reported(raw, design, other) for unit, other in also.items()}
        for j in np.argsort(rank, kind="stable"):
            shown = iv is not None and not blank[j]
            record = {"set_id": design.set_id, "item_id": str(ids[j]), "scale": float(value[j]),
                      "ci_low": float(iv.scale_low[j]) if shown else nan[j],
                      "ci_high": float(iv.scale_high[j]) if shown else nan[j],
                      "rank": int(rank[j]), "n_votes": int(n_votes[j]),
                      "rank_ci_low": int(iv.rank_low[j]) if shown else "",
                      "rank_ci_high": int(iv.rank_high[j]) if shown else "", "unit": so.unit,
                      "n_workers": int(n_workers[j]), "ci_reason": str(reason[j])}
            for unit, values in also_values.items():
                record.update(_also_record(unit, values, iv if shown else None, j))
            scales.append(record)
        set_scales[design.set_id] = dict(zip(map(str, ids), value.tolist()))
        plot_sets.append({"set_id": design.set_id, "items": [str(i) for i in ids], "scale": value,
                          "ci_low": np.where(blank, value, iv.scale_low) if iv else value,
                          "ci_high": np.where(blank, value, iv.scale_high) if iv else value,
                          "n_votes": n_votes})
        proportions.append(wins[total > 0, 0] / total[total > 0])
    overall = overall_scores(set_scales)
    pareto = _pareto_records(set_scales) if len(set_scales) > 1 else None
    reranking = rerank(overall, objective, objective_lower_is_better, n_boot=max(options.n_boot, 100),
                       confidence=options.confidence, seed=options.seed) if objective else None
    flags = worker_flags(screening, kept, bias, machine, sock)
    workers = _worker_records(votes, screening, kept, machine, flags, weight)
    summary = _summary(votes, options, screening, kept, bias, machine, flags, designs, scales, reranking,
                       time.perf_counter() - started)
    summary["counts"]["votes"] = len(all_votes)
    summary["sockpuppets"] = sock.summary() if sock is not None else None
    summary["weighting"] = (soft.summary(kept) if soft is not None else
                            {"method": "hard screening: the kept workers' votes, each of weight 1"})
    return AnalysisResult(scales, overall, workers, summary, screening, kept, bias, machine, pareto, reranking,
                          {"sets": plot_sets, "proportions": np.concatenate(proportions)}, sockpuppets=sock,
                          weights=soft)


def _also_record(unit: str, values: np.ndarray, intervals, j: int) -> dict[str, float]:
    """Item ``j``'s value and interval in a further unit (``also_units``); NaN bounds without a bootstrap."""
    low, high = intervals.also[unit] if intervals else (None, None)
    return {f"scale_{unit}": float(values[j]), f"ci_low_{unit}": float(low[j]) if low is not None else np.nan,
            f"ci_high_{unit}": float(high[j]) if high is not None else np.nan}


def interval_description(options: AnalysisOptions) -> dict | None:
    """How the ci_low/ci_high and rank_ci_* columns were made (None without a bootstrap)."""
    if options.n_boot <= 0:
        return None
    return {"method": options.interval_method, "confidence": options.confidence, "n_boot": options.n_boot,
            "unit": options.bootstrap_unit, "conditional_on_screening": True}


# What summary.json ``intervals`` adds to :func:`interval_description`: the estimand and when an interval is blank.
INTERVAL_ESTIMAND = {
    "estimand": "the scale of the set's items an honest observer's choices follow (Thurstone Case V, or its "
                "anchored or JOD rescaling), as the screened votes give it (weighted as `weighting` says)",
    "blank_when": "fewer than 2 kept workers voted on a pair holding the item, or the resamples do not spread "
                  "(ci_reason says which)"}


def _pareto_records(set_scales: dict[str, dict[str, float]]) -> list[dict] | None:
    shared = sorted(set.intersection(*(set(s) for s in set_scales.values())))
    if len(shared) < 2:
        return None
    matrix = np.array([[set_scales[s][item] for s in set_scales] for item in shared])
    groups = pareto_groups(matrix)
    return [{"item_id": item, "group": int(g)} for g, item in sorted(zip(groups, shared))]


def worker_flags(screening: ScreeningResult, kept: np.ndarray, bias: TargetedBias | None,
                 machine: MachineAgreement | None, sock: CoordinatedItems | None = None) -> list[list[str]]:
    """Per worker, every reason they are flagged (see the ``FLAG_*`` names), in a fixed order."""
    flags: list[list[str]] = []
    for k in range(len(kept)):
        reasons = []
        if screening.n_votes[k] == 0:
            reasons.append(FLAG_NO_VOTES)
        if screening.gold_failed[k]:
            reasons.append(FLAG_GOLD)
        if screening.n_votes[k] > 0 and not screening.gold_failed[k] and not screening.kept[k]:
            reasons.append(FLAG_SCREENED)
        if bias is not None:
            reasons.extend(bias.flags[k])
        if machine is not None and machine.flagged[k]:
            reasons.append(FLAG_MACHINE)
        if sock is not None:
            reasons.extend(sock.flags[k])
        flags.append(reasons)
    return flags


def _worker_records(votes: Votes, screening: ScreeningResult, kept: np.ndarray, machine: MachineAgreement | None,
                    flags: list[list[str]], weight: np.ndarray) -> list[dict]:
    posterior = screening.honest_posterior
    return [{"worker_id": str(w), "n_votes": int(screening.n_votes[k]), "tpr": float(screening.tpr[k]),
             "kept": int(kept[k]), "gold_accuracy": float(screening.gold_accuracy[k]),
             "gold_failed": int(screening.gold_failed[k]),
             "honest_posterior": float(posterior[k]) if posterior is not None else float("nan"),
             "vote_weight": float(weight[k]) if screening.n_votes[k] > 0 else float("nan"),
             "machine_agreement": float(machine.agreement[k]) if machine is not None else float("nan"),
             "flags": ";".join(flags[k])}
            for k, w in enumerate(votes.worker_ids)]


def _worker_counts(screening: ScreeningResult, kept: np.ndarray, bias: TargetedBias | None,
                   machine: MachineAgreement | None, flags: list[list[str]]) -> dict:
    """The counts of workers.csv: every row once in ``workers``, and how many carry each flag."""
    biased = np.array([any(f.startswith(("favours:", "disfavours:")) for f in fl) for fl in flags], dtype=bool)
    W = len(kept)
    return {"workers": W, "with_scaling_votes": int((screening.n_votes > 0).sum()), "kept": int(kept.sum()),
            "kept_fraction": float(kept.sum() / max(W, 1)),
            "kept_votes": int(screening.n_votes[kept].sum()),
            "kept_vote_fraction": float(screening.n_votes[kept].sum() / max(screening.n_votes.sum(), 1)),
            "flagged": {FLAG_NO_VOTES: int((screening.n_votes == 0).sum()),
                        FLAG_GOLD: int(screening.gold_failed.sum()),
                        FLAG_SCREENED: int(((screening.n_votes > 0) & ~screening.gold_failed & ~screening.kept).sum()),
                        "targeted_bias": int(biased.sum()),
                        FLAG_MACHINE: int(machine.flagged.sum()) if machine is not None else None},
            "targeted_bias_excluded": int((biased & screening.kept & ~kept).sum()),
            "bias_test": bias.summary() if bias is not None else None}


def _summary(votes, options, screening, kept, bias, machine, flags, designs, scales, reranking, seconds) -> dict:
    so = options.scaling
    values = np.array([r["scale"] for r in scales])
    return {
        "library": "perceptlab", "version": __version__,
        "parameters": {**asdict(so), "keep": options.keep, "min_tpr": options.min_tpr,
                       "gold_threshold": options.gold_threshold, "bootstrap": options.n_boot,
                       "bootstrap_unit": options.bootstrap_unit, "confidence": options.confidence,
                       "interval_method": options.interval_method, "seed": options.seed,
                       "bias_test": options.bias_test, "exclude_biased": options.exclude_biased,
                       "bias_fdr": options.bias_fdr, "machine_errors": machine is not None,
                       "soft_screening": options.soft_screening,
                       "sockpuppet_test": options.sockpuppet_test, "short_lived_votes": options.short_lived_votes},
        "intervals": ({**interval_description(options), **INTERVAL_ESTIMAND} if options.n_boot > 0 else None),
        "unit": so.unit,
        "units": unit_description(so.unit),
        "anchors": ({"votes_per_item_per_anchor": so.anchor_votes,
                     "items_outside_0_1": (int(((values < 0) | (values > 1)).sum()) if so.unit == "anchored"
                                           else None)} if so.anchors else None),
        "counts": {"votes": len(votes), "gold_votes": int(votes.is_gold.sum()), "checks": int(votes.is_check.sum()),
                   "sets": len(designs),
                   "items": int(sum(d.n_items for d in designs)), "workers": len(votes.worker_ids),
                   "pairs": int(sum(len(d.pairs) for d in designs))},
        "screening": screening.summary(),
        "workers": _worker_counts(screening, kept, bias, machine, flags),
        "sets": [{"set_id": d.set_id, "items": d.n_items, "pairs": len(d.pairs),
                  "kept_votes": int(kept[votes.worker[d.votes]].sum())} for d in designs],
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
    plot_tpr_histogram(s.tpr, result.kept, s.threshold_tpr, folder / "worker_tpr.png",
                       reasons=[r["flags"] for r in result.workers])
    plot_win_proportions(result.plot_data["proportions"], folder / "win_proportions.png")
