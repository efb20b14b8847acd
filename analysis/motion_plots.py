"""Plots of a motion-matching analysis: PNG at 200 dpi with a vector PDF beside each (matplotlib's Agg
backend: no display needed).

* :func:`plot_vector_field`: human mean vs ground-truth vectors over the probe
  frame, EPE as circle diameter (HuPerFlow Fig. 1 and 3);
* :func:`plot_uv_scatter`: human vs GT u and v per dataset with r, r², slope
  and R² against the identity line in the corner (Fig. S2);
* :func:`plot_epe_by_property`: binned EPE against GT speed or image gradient (Fig. 4).

Vectors are in image coordinates (v down); the field plots draw on an image
axis whose y axis points down, so vectors are drawn as they are.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from .motion import EpeBins, agreement_stats
from .plots import _pyplot, save_figure

HUMAN_COLOUR = "#22c55e"   # green, like the paper's perceived vectors
GT_COLOUR = "#ef4444"
# Probe names: all of them up to NAME_ALL_PROBES probes, else the NAME_WORST_PROBES of largest EPE
# (155 names over one frame would hide the arrows).
NAME_ALL_PROBES = 20
NAME_WORST_PROBES = 10


def _arrow_scale(vectors: np.ndarray, width: float) -> float:
    """Magnification so that the longest vector spans about 8% of the image width (at least 1x)."""
    longest = float(np.nanmax(np.hypot(vectors[:, 0], vectors[:, 1]))) if vectors.size else 0.0
    return max(1.0, 0.08 * width / longest) if longest > 0 else 1.0


def plot_vector_field(path: str | Path, x, y, gt, human, *, image: np.ndarray | None = None,
                      size: tuple[int, int] | None = None, epe_circles: bool = True, title: str = "",
                      names=None) -> float:
    """Human mean vectors (green) and GT vectors (red) at the probes over the probe frame.

    Parameters
    ----------
    path : path-like
        PNG to write (a PDF of the same stem is written beside it).
    x, y : array_like, shape (n,)
        Probe positions in image pixels.
    gt, human : array_like, shape (n, 2)
        Ground-truth and mean perceived vectors (px/frame, v down).
    image : numpy.ndarray, optional
        The probe frame (H×W or H×W×3/4); without it a blank grey canvas.
    size : (width, height), optional
        Canvas size without an image; default the probes' extent plus a margin.
    epe_circles : bool
        Draw a circle of diameter EPE (scaled like the arrows) at each probe, as in Fig. 3.
    title : str
        Axis title.
    names : array_like of str, shape (n,), optional
        Probe IDs written beside the probes: all of them up to
        :data:`NAME_ALL_PROBES` probes, else the :data:`NAME_WORST_PROBES` with
        the largest EPE.

    Returns
    -------
    float
        The arrow magnification used (noted in the plot).
    """
    plt = _pyplot()
    x, y = np.asarray(x, float), np.asarray(y, float)
    gt, human = np.asarray(gt, float).reshape(-1, 2), np.asarray(human, float).reshape(-1, 2)
    if image is not None:
        height, width = image.shape[:2]
    elif size is not None:
        width, height = size
    else:
        width = math.ceil(np.nanmax(x, initial=1) + 60)
        height = math.ceil(np.nanmax(y, initial=1) + 60)
    scale = _arrow_scale(np.vstack([gt, human]), width)
    fig, ax = plt.subplots(figsize=(8, 8 * height / max(width, 1) + 0.6))
    if image is not None:
        # the frame dimmed towards white, so that the green and red arrows stand out on any scene
        ax.imshow(image, cmap="gray" if image.ndim == 2 else None, extent=(0, width, height, 0),
                  interpolation="antialiased", alpha=0.75)
    else:
        ax.add_patch(plt.Rectangle((0, 0), width, height, color="0.85"))
    common = {"angles": "xy", "scale_units": "xy", "scale": 1 / scale, "width": 0.004, "headwidth": 3.5}
    ax.quiver(x, y, gt[:, 0], gt[:, 1], color=GT_COLOUR, label="ground truth", **common)
    ax.quiver(x, y, human[:, 0], human[:, 1], color=HUMAN_COLOUR, label="human mean", **common)
    if epe_circles:
        from matplotlib.collections import EllipseCollection

        err = np.hypot(*(human - gt).T) * scale
        show = np.isfinite(err) & (err > 0)
        # one collection for every circle (diameters in data units), not a patch per probe
        ax.add_collection(EllipseCollection(err[show], err[show], np.zeros(show.sum()), units="xy",
                                            offsets=np.column_stack([x[show], y[show]]),
                                            offset_transform=ax.transData, facecolors="none",
                                            edgecolors=HUMAN_COLOUR, linewidths=0.8, alpha=0.8))
    named = _name_probes(ax, x, y, gt, human, names) if names is not None else ""
    ax.set_xlim(0, width)
    ax.set_ylim(height, 0)
    ax.set_aspect("equal")
    note = f"arrows x{scale:.1f}; circle diameter = EPE{named}"
    ax.set_title(f"{title}\n({note})" if title else note, fontsize=9)
    # below the frame: inside it the legend hid probes in the top-right corner
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.06), ncol=2, fontsize=8, frameon=False)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
    return scale


def _name_probes(ax, x: np.ndarray, y: np.ndarray, gt: np.ndarray, human: np.ndarray, names) -> str:
    """Write probe IDs beside the probes (all, or the largest EPEs); returns a note for the title.

    Each name sits on the side opposite the probe's arrows so it covers neither
    them nor, usually, a close neighbour's name (whose arrows point elsewhere).
    """
    names = [str(n) for n in names]
    if len(names) <= NAME_ALL_PROBES:
        pick, note = np.arange(len(names)), ""
    else:
        err = np.nan_to_num(np.hypot(*(human - gt).T), nan=-np.inf)
        pick = np.argsort(-err, kind="stable")[:NAME_WORST_PROBES]
        note = f"; the {len(pick)} of largest EPE named"
    away = -np.nan_to_num(gt + human)
    away[:, 1] *= -1               # image v points down, text offsets point up
    for i in pick:
        length = float(np.hypot(*away[i]))
        dx, dy = away[i] / length * 5 if length > 0 else (4.0, 4.0)
        ax.annotate(names[i], (x[i], y[i]), xytext=(dx, dy), textcoords="offset points", fontsize=7,
                    ha="left" if dx >= 0 else "right", va="bottom" if dy >= 0 else "top",
                    bbox={"boxstyle": "round,pad=0.15", "fc": "white", "alpha": 0.75, "lw": 0})
    return note


def plot_uv_scatter(path: str | Path, panels: list[dict]) -> None:
    """Human vs GT u and v, one panel per dataset (HuPerFlow Fig. S2).

    ``panels``: dicts with ``title``, ``gt`` and ``human`` ((n, 2) arrays; each
    point is one observer's mean at one probe, or the pooled mean). The
    corner shows r, r², the regression slope and R² relative to y = x
    (:func:`analysis.motion.agreement_stats`).
    """
    plt = _pyplot()
    cols = min(len(panels), 4) or 1
    rows = max(1, math.ceil(len(panels) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 3.6 * rows), squeeze=False)
    for ax, panel in zip(axes.flat, panels):
        gt, human = np.asarray(panel["gt"], float), np.asarray(panel["human"], float)
        ax.scatter(gt[:, 0], human[:, 0], s=8, alpha=0.6, color="tab:blue", label="u")
        ax.scatter(gt[:, 1], human[:, 1], s=8, alpha=0.6, color="tab:orange", label="v")
        values = np.concatenate([gt.ravel(), human.ravel()])
        lim = float(np.nanmax(np.abs(values))) * 1.1 if np.isfinite(values).any() else 1.0
        lim = lim or 1.0
        ax.plot([-lim, lim], [-lim, lim], color="0.4", lw=0.8, ls="--")
        s = agreement_stats(gt, human)
        if np.isfinite(s["slope"]):
            g = np.concatenate([gt[:, 0], gt[:, 1]])
            h = np.concatenate([human[:, 0], human[:, 1]])
            intercept = np.nanmean(h) - s["slope"] * np.nanmean(g)
            ax.plot([-lim, lim], [intercept - s["slope"] * lim, intercept + s["slope"] * lim], color="tab:red", lw=1)
        ax.text(0.03, 0.97, f"r = {s['r']:.3f}\nr² = {s['r2']:.3f}\nslope = {s['slope']:.3f}\n"
                f"R² (y=x) = {s['R2_identity']:.3f}\nn = {s['n']}", transform=ax.transAxes, va="top", fontsize=7,
                bbox={"boxstyle": "round", "fc": "white", "alpha": 0.8})
        ax.set_xlim(-lim, lim)
        ax.set_ylim(-lim, lim)
        ax.set_aspect("equal")
        ax.set_title(str(panel["title"]), fontsize=10)
        ax.set_xlabel("ground truth (px/frame)")
        ax.set_ylabel("human (px/frame)")
    axes.flat[0].legend(loc="lower right", fontsize=7)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


def plot_epe_by_property(path: str | Path, series: dict[str, EpeBins], xlabel: str) -> None:
    """Mean EPE ± SE per bin of a flow property, one line per source (human, models; Fig. 4)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for k, (label, bins) in enumerate(series.items()):
        show = bins.n > 0
        centre = np.where(np.isfinite(bins.mean_value), bins.mean_value, (bins.edges[:-1] + bins.edges[1:]) / 2)
        ax.errorbar(centre[show], bins.mean_epe[show], yerr=np.nan_to_num(bins.se[show]), marker="o", ms=4,
                    capsize=3, lw=1.5 if k == 0 else 1.0, color=HUMAN_COLOUR if k == 0 else None, label=label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("EPE vs ground truth (px/frame)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
