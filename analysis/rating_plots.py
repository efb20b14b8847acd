"""Plots of rating studies and of the comparison of protocols: PNG at 200 dpi with a vector PDF beside
each (:func:`analysis.plots.save_figure`; matplotlib is imported only when a plot is drawn)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .plots import LABEL_ALL_UP_TO, _pyplot, item_rows, names_as_text, save_figure, short_label


def plot_rating_scores(scores: list[dict], path: str | Path, summary: dict, references=()):
    """Each stimulus' score with its interval, sorted best first (scores.csv as drawn).

    Up to :data:`analysis.plots.LABEL_ALL_UP_TO` stimuli every row is named; above that the best and
    worst ten are and the others are a band between them (as scales.png does). Hidden references are
    drawn apart, below the test stimuli and in another colour: they are checks of the raters, not
    conditions under test. The x axis is the rating scale (with a small margin, and widened only for
    scores beyond it, as ACR-HR differential scores above 5 are): an interval reaching past it is cut at
    the axis' edge.

    Parameters
    ----------
    scores : list of dict
        Rows of scores.csv, best first.
    path : path-like
        The PNG; a PDF of the same stem is written beside it.
    summary : dict
        summary.json of the analysis (score kind, scale, interval method).
    references : collection of str
        Stimulus IDs that are hidden references.

    Returns
    -------
    matplotlib.figure.Figure
        The (closed) figure.
    """
    plt = _pyplot()
    references = {str(r) for r in references}
    is_ref = np.array([str(r["stimulus_id"]) in references for r in scores], dtype=bool)
    groups = [np.flatnonzero(~is_ref), np.flatnonzero(is_ref)]      # test stimuli first, then references
    value = np.array([r["score"] for r in scores], float)
    low = np.array([r["ci_low"] for r in scores], float)
    high = np.array([r["ci_high"] for r in scores], float)
    has = np.isfinite(low) & np.isfinite(high)
    labels = [f"{k}. {short_label(r['stimulus_id'])}" for k, r in enumerate(scores, start=1)]
    blocks, start = [], 0.0
    for members in groups:
        rows, named = item_rows(len(members))
        blocks.append((members, rows + start, named))
        if len(members):
            start += rows.max() + 1 + REFERENCE_GAP_ROWS
    bottom = max((rows.max() for members, rows, _ in blocks if len(members)), default=0.0)
    height = 1.2 + 0.17 * (bottom + 1)
    with names_as_text([r["stimulus_id"] for r in scores]):
        fig, ax = plt.subplots(figsize=(6.4, max(height, 2.5)))
        ticks, texts = [], []
        styles = (dict(fmt="o", color="tab:blue", label="test stimuli"),
                  dict(fmt="D", color="tab:orange", label="hidden references"))
        for (members, rows, named), style in zip(blocks, styles):
            if not len(members):
                continue
            v, lo, hi, ok = value[members], low[members], high[members], has[members]
            # a model's latent score may lie beyond the scale its interval is bounded to: no negative error bar
            bars = [np.where(ok, np.maximum(v - lo, 0.0), 0.0)[named], np.where(ok, np.maximum(hi - v, 0.0), 0.0)[named]]
            ax.errorbar(v[named], rows[named], xerr=bars,
                        ms=3 if style["fmt"] == "o" else 3.5, elinewidth=1, capsize=0,
                        label=f"{style['label']} ({len(members)})", fmt=style["fmt"], color=style["color"])
            ticks += list(rows[named])
            texts += [labels[j] for j, keep in zip(members, named) if keep]
            middle = ~named
            if middle.any():
                ax.fill_betweenx(rows[middle], np.where(ok, lo, v)[middle], np.where(ok, hi, v)[middle],
                                 color="0.6", alpha=0.35, lw=0)
                ax.plot(v[middle], rows[middle], color="0.35", lw=1)
                ticks.append(float(rows[middle].mean()))
                texts.append(f"\u2026 {int(middle.sum())} more \u2026")
        if all(len(members) for members in groups):
            ax.axhline(blocks[1][1].min() - (1 + REFERENCE_GAP_ROWS) / 2, color="0.7", lw=0.8, ls="--")
            ax.legend(fontsize=7.5, loc="lower right")
        ax.set_yticks(ticks, texts, fontsize=7.5)
        ax.set_ylim(bottom + 0.6, -0.6)
        scale = summary["scale"]
        ax.set_xlim(*score_axis(scale["low"], scale["high"], value))
        ax.grid(axis="x", color="0.9", lw=0.6)
        ax.set_xlabel(f"{summary['score']} ({scale['name'].upper()} {scale['low']:g}..{scale['high']:g})", fontsize=9)
        interval = summary["intervals"]
        ax.set_title(f"{len(scores)} stimuli, best first; {interval['confidence']:.0%} {interval['method']} intervals"
                     + ("" if len(scores) <= LABEL_ALL_UP_TO else "; the middle stimuli as a band"), fontsize=9)
        fig.tight_layout()
        save_figure(fig, path)
        plt.close(fig)
    return fig


REFERENCE_GAP_ROWS = 1.0
"""Empty rows between the test stimuli and the hidden references of scores.png."""


def score_axis(low: float, high: float, scores: np.ndarray, margin: float = 0.04) -> tuple[float, float]:
    """x range of a score plot: the rating scale ``low..high``, widened only as far as the scores reach.

    Interval ends never widen it: one wild interval (a stimulus rated by two workers) used to stretch a
    1..5 axis from -2 to 11 and squeeze every other stimulus into its middle.
    """
    finite = np.asarray(scores, float)
    finite = finite[np.isfinite(finite)]
    lo, hi = min([low, *finite.tolist()]), max([high, *finite.tolist()])
    pad = margin * (hi - lo) if hi > lo else 0.5
    return lo - pad, hi + pad


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
                   *, pc_unit: str, score_name: str, title: str, pc_interval=None, score_interval=None) -> None:
    """Scatter of PC scale values (x) against rating scores (y) with the fitted monotonic mapping.

    ``pc_interval`` and ``score_interval`` are (low, high) arrays: each stimulus gets both its
    paired-comparison interval (horizontal bar) and its rating interval (vertical bar), as in
    comparison.csv. A missing (NaN) end draws no bar on that side.
    """
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.6, 4.4))
    x, y = np.asarray(pc_scale, float), np.asarray(score, float)

    def bars(centre, interval):
        if interval is None:
            return None
        lo, hi = (np.asarray(v, float) for v in interval)
        return [np.nan_to_num(np.clip(centre - lo, 0, None)), np.nan_to_num(np.clip(hi - centre, 0, None))]

    xerr, yerr = bars(x, pc_interval), bars(y, score_interval)
    drawn = [name for name, err in (("paired comparison", xerr), ("rating", yerr)) if err is not None]
    label = f"stimuli ({len(y)})" + (f"; bars: {' and '.join(drawn)} intervals" if drawn else "")
    ax.errorbar(x, y, xerr=xerr, yerr=yerr, fmt="o", ms=4, color="tab:blue", ecolor="tab:blue", elinewidth=0.8,
                capsize=0, alpha=0.85, label=label)
    ax.plot(mapped[0], mapped[1], color="tab:red", lw=1.5, label="fitted mapping")
    ax.set_xlabel(f"paired-comparison scale ({pc_unit})")
    ax.set_ylabel(score_name)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(color="0.92", lw=0.6)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
