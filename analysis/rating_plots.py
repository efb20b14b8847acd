"""Plots of rating studies and of the comparison of protocols: PNG at 200 dpi with a vector PDF beside
each (:func:`analysis.plots.save_figure`; matplotlib is imported only when a plot is drawn)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .plots import LABEL_ALL_UP_TO, _pyplot, item_rows, save_figure, short_label


def plot_rating_scores(scores: list[dict], path: str | Path, summary: dict):
    """Each stimulus' score with its interval, sorted best first (scores.csv as drawn).

    Up to :data:`analysis.plots.LABEL_ALL_UP_TO` stimuli every row is named; above that the best and
    worst ten are and the others are a band between them (as scales.png does).

    Parameters
    ----------
    scores : list of dict
        Rows of scores.csv, best first.
    path : path-like
        The PNG; a PDF of the same stem is written beside it.
    summary : dict
        summary.json of the analysis (score kind, scale, interval method).

    Returns
    -------
    matplotlib.figure.Figure
        The (closed) figure.
    """
    plt = _pyplot()
    import matplotlib

    value = np.array([r["score"] for r in scores], float)
    low = np.array([r["ci_low"] for r in scores], float)
    high = np.array([r["ci_high"] for r in scores], float)
    rows, named = item_rows(len(scores))
    height = 1.2 + 0.17 * (rows.max() + 1 if len(rows) else 1)
    with matplotlib.rc_context({"text.parse_math": False}):
        fig, ax = plt.subplots(figsize=(6.4, max(height, 2.5)))
        has = np.isfinite(low) & np.isfinite(high)
        lo = np.where(has, value - low, 0.0)
        hi = np.where(has, high - value, 0.0)
        ax.errorbar(value[named], rows[named], xerr=[lo[named], hi[named]], fmt="o", ms=3, color="tab:blue",
                    elinewidth=1, capsize=0)
        middle = ~named
        labels = [f"{k}. {short_label(r['stimulus_id'])}" for k, r in enumerate(scores, start=1)]
        ticks, texts = list(rows[named]), [t for t, keep in zip(labels, named) if keep]
        if middle.any():
            ax.fill_betweenx(rows[middle], np.where(has, low, value)[middle], np.where(has, high, value)[middle],
                             color="0.6", alpha=0.35, lw=0)
            ax.plot(value[middle], rows[middle], color="0.35", lw=1)
            ticks.append(float(rows[middle].mean()))
            texts.append(f"\u2026 {int(middle.sum())} more \u2026")
        ax.set_yticks(ticks, texts, fontsize=7.5)
        ax.set_ylim((rows.max() if len(rows) else 0) + 0.6, -0.6)
        scale = summary["scale"]
        ends = np.concatenate([[scale["low"], scale["high"]], low[has], high[has]])
        pad = 0.03 * (ends.max() - ends.min())
        ax.set_xlim(ends.min() - pad, ends.max() + pad)   # the whole scale and every interval
        ax.grid(axis="x", color="0.9", lw=0.6)
        ax.set_xlabel(f"{summary['score']} ({scale['name'].upper()} {scale['low']:g}..{scale['high']:g})", fontsize=9)
        interval = summary["intervals"]
        ax.set_title(f"{len(scores)} stimuli, best first; {interval['confidence']:.0%} {interval['method']} intervals"
                     + ("" if len(scores) <= LABEL_ALL_UP_TO else "; the middle stimuli as a band"), fontsize=9)
        fig.tight_layout()
        save_figure(fig, path)
        plt.close(fig)
    return fig


def plot_worker_bias(workers: list[dict], path: str | Path) -> list[str]:
    """P.913 bias against inconsistency of every worker, kept and screened out in two colours.

    Returns the legend's labels.
    """
    plt = _pyplot()
    bias = np.array([r["bias"] for r in workers], float)
    inconsistency = np.array([r["inconsistency"] for r in workers], float)
    kept = np.array([int(r["kept"]) == 1 for r in workers], dtype=bool)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    shown = np.isfinite(bias) & np.isfinite(inconsistency)
    for mask, colour, label in ((kept, "tab:green", "kept"), (~kept, "tab:red", "screened out")):
        if (mask & shown).any():
            ax.scatter(bias[mask & shown], inconsistency[mask & shown], s=14, color=colour, alpha=0.8,
                       label=f"{label} ({int((mask & shown).sum())})")
    ax.axvline(0.0, color="0.6", lw=0.8, ls="--")
    ax.set_xlabel("bias (rating points; mean 0 over the workers)")
    ax.set_ylabel("inconsistency (SD, rating points)")
    ax.set_title(f"P.913 worker model, {int(shown.sum())} workers", fontsize=9)
    labels = [t.get_text() for t in ax.legend(fontsize=8).get_texts()] if shown.any() else []
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
    return labels


def plot_protocols(pc_scale: np.ndarray, score: np.ndarray, mapped: tuple[np.ndarray, np.ndarray], path: str | Path,
                   *, pc_unit: str, score_name: str, title: str) -> None:
    """Scatter of PC scale values (x) against rating scores (y) with the fitted monotonic mapping."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.6, 4.4))
    ax.scatter(pc_scale, score, s=16, color="tab:blue", alpha=0.8, label=f"stimuli ({len(score)})")
    ax.plot(mapped[0], mapped[1], color="tab:red", lw=1.5, label="fitted mapping")
    ax.set_xlabel(f"paired-comparison scale ({pc_unit})")
    ax.set_ylabel(score_name)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(color="0.92", lw=0.6)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
