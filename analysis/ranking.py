"""Rankings across sets: overall scores, re-ranking against an objective ranking, Pareto groups."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .bootstrap import ranks_descending
from .correlation import bootstrap_srocc, correlate


def overall_scores(set_scales: dict[str, dict[str, float]]) -> list[dict]:
    """Mean anchored scale per item ID over the sets it appears in (StudyMB's 'Average').

    Parameters
    ----------
    set_scales : {set_id: {item_id: scale}}

    Returns
    -------
    records ``item_id, mean_scale, rank, n_sets`` sorted by rank (1 = best).
    """
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for scales in set_scales.values():
        for item, value in scales.items():
            sums[item] = sums.get(item, 0.0) + value
            counts[item] = counts.get(item, 0) + 1
    items = np.array(sorted(sums))
    means = np.array([sums[i] / counts[i] for i in items])
    ranks = ranks_descending(means)
    order = np.lexsort((items, ranks))
    return [{"item_id": str(items[k]), "mean_scale": float(means[k]), "rank": int(ranks[k]),
             "n_sets": counts[items[k]]} for k in order]


@dataclass(frozen=True)
class Reranking:
    rows: list[dict]     # item_id, subjective_rank, objective_rank, rank_difference, mean_scale, objective
    srocc: dict          # correlation of subjective and objective ranks, with intervals


def rerank(overall: list[dict], objective: dict[str, float], lower_is_better: bool = True,
           n_boot: int = 1000, confidence: float = 0.95, seed: int = 0) -> Reranking:
    """Compare the subjective overall ranking with an objective one (StudyMB 1.0 Tables VI/VII).

    Parameters
    ----------
    overall : records from :func:`overall_scores`
    objective : {item_id: value}, e.g. RMSE (lower is better) or an objective rank
    lower_is_better : bool
        Direction of the objective values.

    ``rank_difference = objective_rank - subjective_rank``: positive when the
    subjective study ranks an item better than the objective measure did.
    Only items present in both rankings are ranked (ranks 1..n among them).
    """
    common = [r for r in overall if r["item_id"] in objective]
    if len(common) < 2:
        raise ValueError(f"the objective ranking shares {len(common)} item IDs with the votes; need at least 2")
    subjective = np.array([r["mean_scale"] for r in common])
    values = np.array([objective[r["item_id"]] for r in common], dtype=float)
    s_rank = ranks_descending(subjective)
    o_rank = ranks_descending(-values if lower_is_better else values)
    rows = [{"item_id": r["item_id"], "subjective_rank": int(sr), "objective_rank": int(orank),
             "rank_difference": int(orank - sr), "mean_scale": r["mean_scale"], "objective": float(v)}
            for r, sr, orank, v in sorted(zip(common, s_rank, o_rank, values), key=lambda t: t[1])]
    corr = correlate(-s_rank, -o_rank, "srocc", confidence)
    stats = {"srocc": corr.r, "fisher_ci": [corr.ci_low, corr.ci_high], "disagreement": corr.disagreement,
             "n": corr.n}
    if len(common) >= 4:
        boot = bootstrap_srocc(-s_rank, -o_rank, n_boot=n_boot, confidence=confidence, seed=seed)
        stats.update(bootstrapped_srocc=boot.mean, bootstrapped_fisher_ci=[boot.fisher_low, boot.fisher_high],
                     bootstrapped_percentile_ci=[boot.percentile_low, boot.percentile_high], n_boot=n_boot)
    return Reranking(rows, stats)


def pareto_groups(scores: np.ndarray, higher_is_better: bool = True) -> np.ndarray:
    """Partition items into Pareto A*-groups (Cabezas et al., partitioningAndGrouping).

    Group 1 holds the items no other item dominates; removing them, group 2
    holds the non-dominated items of the rest, and so on. ``p`` dominates
    ``q`` when ``p`` is at least as good in every set and strictly better in
    one. Every item of group ``n > 1`` is dominated by some item of group
    ``n - 1``. (The paper's pseudo-code never sets its ``q_DomFlag``; this is
    the partition its text and eq. (18) describe: repeated non-dominated sorting.)

    Parameters
    ----------
    scores : (n_items, n_sets) array, one score vector per item
    higher_is_better : bool
        False for error measures.

    Returns
    -------
    (n_items,) int array of group labels starting at 1.
    """
    x = np.asarray(scores, dtype=float)
    if x.ndim != 2:
        raise ValueError("scores must be a 2-D array (items x sets)")
    if np.isnan(x).any():
        raise ValueError("scores contain NaN: Pareto dominance needs every item scored in every set")
    if not higher_is_better:
        x = -x
    groups = np.zeros(len(x), dtype=int)
    remaining = np.ones(len(x), dtype=bool)
    label = 0
    while remaining.any():
        label += 1
        members = np.flatnonzero(remaining)
        front = members[~_dominated(x[members])]
        groups[front] = label
        remaining[front] = False
    return groups


def _dominated(x: np.ndarray, block: int = 512) -> np.ndarray:
    """For each row q of ``x``: is some row p >= q everywhere and > q somewhere? (blocked to bound memory)"""
    out = np.empty(len(x), dtype=bool)
    for start in range(0, len(x), block):
        q = x[start:start + block]
        geq = (x[:, None, :] >= q[None, :, :]).all(axis=2)
        gt = (x[:, None, :] > q[None, :, :]).any(axis=2)
        out[start:start + block] = (geq & gt).any(axis=0)
    return out
