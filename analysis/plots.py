"""PNG plots of an analysis (matplotlib's Agg backend: no display needed)."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np


def _pyplot():
    import matplotlib
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    return plt


def plot_scales(sets: list[dict], path: str | Path, unit: str) -> None:
    """Scale values with confidence intervals, one panel per set, items sorted by scale.

    ``sets``: dicts with ``set_id``, ``scale``, ``ci_low``, ``ci_high`` arrays.
    """
    plt = _pyplot()
    cols = min(len(sets), 4)
    rows = math.ceil(len(sets) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
    for ax, s in zip(axes.flat, sets):
        order = np.argsort(s["scale"])
        x = np.arange(len(order))
        scale = s["scale"][order]
        ax.fill_between(x, s["ci_low"][order], s["ci_high"][order], color="tab:blue", alpha=0.25, lw=0,
                        label="95% CI" if s is sets[0] else None)
        ax.plot(x, scale, ".", color="tab:blue", ms=3)
        ax.set_title(str(s["set_id"]), fontsize=10)
        ax.set_xlabel("items, sorted")
        ax.set_ylabel(unit)
    for ax in list(axes.flat)[len(sets):]:
        ax.axis("off")
    fig.suptitle("Scale values per set with bootstrap intervals")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_tpr_histogram(tpr: np.ndarray, kept: np.ndarray, threshold: float, path: str | Path) -> None:
    """Histogram of worker TPR with the screening threshold (StudyMB 2.0 Fig. 9)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    bins = np.linspace(0, 1, 41)
    valid = np.isfinite(tpr)
    ax.hist([tpr[valid & kept], tpr[valid & ~kept]], bins=bins, stacked=True,
            color=["tab:green", "tab:gray"], label=["kept", "removed"])
    if np.isfinite(threshold):
        ax.axvline(threshold, color="tab:red", lw=1.5, label=f"threshold TPR {threshold:.4f}")
    ax.axvline(0.5, color="tab:blue", lw=1.2, ls="--", label="guessing (0.5)")
    ax.set_xlabel("TPR of all votes of a worker")
    ax.set_ylabel("workers")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_win_proportions(proportions: np.ndarray, path: str | Path) -> None:
    """Density of pairwise win proportions of the kept votes (StudyMB 2.0 Fig. 14)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    ax.hist(proportions, bins=np.linspace(0, 1, 22), density=True, color="tab:purple", alpha=0.8)
    ax.set_xlabel("proportion of votes for the first item of a pair")
    ax.set_ylabel("density")
    ax.set_title(f"{len(proportions)} pairs")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
