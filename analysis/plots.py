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


# Item rows: every item is named up to LABEL_ALL_UP_TO items per set; above that only the best and
# worst LABEL_ENDS are (one name per row needs ~0.17 in, so 155 named rows would be a 27 in tall panel).
LABEL_ALL_UP_TO = 40
LABEL_ENDS = 10
MIDDLE_ROWS = 5          # rows the unnamed middle items are squeezed into
ROW_INCHES = 0.17
MAX_LABEL_CHARS = 24


def short_label(name: str, limit: int = MAX_LABEL_CHARS) -> str:
    """``name``, or its start and end around an ellipsis when longer than ``limit`` characters.

    The end is kept because item names tend to differ there (numbers, file suffixes).
    """
    name = str(name)
    if len(name) <= limit:
        return name
    head = (limit - 1) // 2
    return name[:head] + "\u2026" + name[-(limit - 1 - head):]


def item_rows(n: int, label_all_up_to: int = LABEL_ALL_UP_TO, ends: int = LABEL_ENDS,
              middle_rows: int = MIDDLE_ROWS) -> tuple[np.ndarray, np.ndarray]:
    """Row positions of ``n`` items sorted best first, and which of them are named.

    Parameters
    ----------
    n : int
        Number of items.
    label_all_up_to, ends, middle_rows : int
        Up to ``label_all_up_to`` items every item gets a row of its own; above
        that the best and worst ``ends`` do, and the others share
        ``middle_rows`` rows evenly between them.

    Returns
    -------
    rows : numpy.ndarray, shape (n,)
        Row coordinate of each item (0 = best, at the top of the panel).
    named : numpy.ndarray of bool, shape (n,)
        Whether the item's name is shown.
    """
    if n <= max(label_all_up_to, 2 * ends):
        return np.arange(n, dtype=float), np.ones(n, dtype=bool)
    middle = n - 2 * ends
    rows = np.empty(n)
    rows[:ends] = np.arange(ends)
    rows[ends:n - ends] = ends + np.linspace(0, middle_rows - 1, middle)
    rows[n - ends:] = ends + middle_rows + np.arange(ends)
    named = np.zeros(n, dtype=bool)
    named[:ends] = named[n - ends:] = True
    return rows, named


def plot_scales(sets: list[dict], path: str | Path, unit: str, confidence: float | None = 0.95,
                method: str = "t") -> None:
    """Scale values with confidence intervals, one panel per set, items named on the y axis.

    Items are rows sorted best first. Sets of more than :data:`LABEL_ALL_UP_TO`
    items name only the best and worst :data:`LABEL_ENDS`; the items between
    them are drawn as a band squeezed into a few rows (their values are in
    scales.csv).

    ``sets``: dicts with ``set_id``, ``items`` (names) and ``scale``, ``ci_low``,
    ``ci_high`` arrays; ``confidence`` None means there are no intervals
    (the bounds equal the scale); ``method`` names the interval method in the
    title (see :mod:`analysis.bootstrap`). Labels read "rank. name".
    """
    plt = _pyplot()
    cols = min(len(sets), 4)
    grid_rows = math.ceil(len(sets) / cols)
    n_rows = max(item_rows(len(s["scale"]))[0].max() + 1 for s in sets)
    label_chars = max(len(short_label(name)) for s in sets for name in s["items"]) + 5   # + "155. "
    panel_w = 2.6 + 0.065 * label_chars
    panel_h = 0.9 + ROW_INCHES * n_rows
    fig, axes = plt.subplots(grid_rows, cols, figsize=(panel_w * cols, panel_h * grid_rows + 0.5), squeeze=False)
    for ax, s in zip(axes.flat, sets):
        _scale_panel(ax, s, unit, n_rows)
    for ax in list(axes.flat)[len(sets):]:
        ax.axis("off")
    bars = f"{confidence:.0%} bootstrap {method} intervals" if confidence else "no intervals (no bootstrap)"
    fig.suptitle(f"Scale values per set, {bars}; best at the top")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _scale_panel(ax, s: dict, unit: str, n_rows: float) -> None:
    """One set: named items as points with interval bars, unnamed middle items as a grey band."""
    order = np.argsort(-np.asarray(s["scale"], float), kind="stable")
    scale, low, high = (np.asarray(s[k], float)[order] for k in ("scale", "ci_low", "ci_high"))
    names = [f"{k}. {short_label(s['items'][i])}" for k, i in enumerate(order, start=1)]
    rows, named = item_rows(len(order))
    ax.errorbar(scale[named], rows[named], xerr=[scale[named] - low[named], high[named] - scale[named]],
                fmt="o", ms=3, color="tab:blue", ecolor="tab:blue", elinewidth=1, capsize=0)
    ticks, labels = list(rows[named]), [n for n, keep in zip(names, named) if keep]
    middle = ~named
    if middle.any():
        ax.fill_betweenx(rows[middle], low[middle], high[middle], color="0.6", alpha=0.35, lw=0)
        ax.plot(scale[middle], rows[middle], color="0.35", lw=1)
        centre = float(rows[middle].mean())
        ticks.append(centre)
        labels.append(f"\u2026 {int(middle.sum())} more \u2026")
        for edge in (rows[middle].min() - 0.5, rows[middle].max() + 0.5):
            ax.axhline(edge, color="0.8", lw=0.6, ls=":")
    ax.set_yticks(ticks, labels, fontsize=7.5)
    if middle.any():
        ax.get_yticklabels()[-1].set_color("0.4")
    ax.set_ylim(n_rows - 0.4, -0.6)
    ax.grid(axis="x", color="0.9", lw=0.6)
    ax.set_title(str(s["set_id"]), fontsize=10)
    ax.set_xlabel(unit)


# Worker groups of worker_tpr.png, drawn in this order (a worker in the first group that holds them).
TPR_GROUPS = (("kept", "tab:green"), ("targeted bias", "tab:red"), ("gold failed", "tab:orange"),
              ("screened out (TPR)", "tab:gray"), ("removed", "0.55"))


def _tpr_group(kept: bool, reasons: str) -> str:
    if kept:
        return "kept"
    if "favours:" in reasons:  # favours: and disfavours:
        return "targeted bias"
    if "gold_failed" in reasons:
        return "gold failed"
    if "screened_out" in reasons:
        return "screened out (TPR)"
    return "removed"


def plot_tpr_histogram(tpr: np.ndarray, kept: np.ndarray, threshold: float, path: str | Path,
                       reasons: list[str] | None = None) -> list[str]:
    """Histogram of worker TPR with the screening threshold (StudyMB 2.0 Fig. 9).

    Workers are stacked by why they were kept or removed (``reasons``: workers.csv's ``flags``, one
    string per worker); the legend names only groups that have a bar, with their counts. Workers
    without a TPR (no scaling votes: gold or quiz rows only) cannot be placed on the axis: the title
    counts them. Returns the legend's labels.
    """
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    bins = np.linspace(0, 1, 41)
    tpr, kept = np.asarray(tpr, float), np.asarray(kept, bool)
    reasons = reasons if reasons is not None else [""] * len(tpr)
    valid = np.isfinite(tpr)
    group = np.array([_tpr_group(k, r) for k, r in zip(kept, reasons)], dtype=object)
    drawn = [(name, colour) for name, colour in TPR_GROUPS if (valid & (group == name)).any()]
    if drawn:
        ax.hist([tpr[valid & (group == name)] for name, _ in drawn], bins=bins, stacked=True,
                color=[colour for _, colour in drawn],
                label=[f"{name} ({int((valid & (group == name)).sum())})" for name, _ in drawn])
    if np.isfinite(threshold):
        ax.axvline(threshold, color="tab:purple", lw=1.5, label=f"threshold TPR {threshold:.4f}")
    ax.axvline(0.5, color="tab:blue", lw=1.2, ls="--", label="guessing (0.5)")
    ax.set_xlabel("TPR of all votes of a worker")
    ax.set_ylabel("workers")
    missing = int((~valid).sum())
    ax.set_title(f"{len(tpr)} workers" + (f"; {missing} without scaling votes (not drawn, not kept)" if missing else ""),
                 fontsize=9)
    labels = [t.get_text() for t in ax.legend(fontsize=8).get_texts()]
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return labels


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
