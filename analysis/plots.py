"""Plots of an analysis: PNG at 200 dpi with a vector PDF beside each (matplotlib's Agg backend: no display
needed; matplotlib is imported only when a plot is drawn)."""
from __future__ import annotations

import contextlib
import functools
import math
import textwrap
import warnings
from pathlib import Path

import numpy as np


def _pyplot():
    """matplotlib.pyplot on the Agg backend, imported on first use (0.5 s: never at module import)."""
    import matplotlib
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    return plt


DPI = 200
"""Resolution of every PNG plot; each also gets a vector PDF beside it (:func:`save_figure`)."""


PDF_FONT_TYPE = 42
"""Fonts embedded in the PDFs as TrueType (Type 42): publishers' checks (IEEE PDF eXpress, Elsevier) reject
the Type 3 fonts matplotlib embeds by default."""


def save_figure(fig, path: str | Path) -> list[Path]:
    """Write ``fig`` as ``path`` (PNG, :data:`DPI` dots per inch) and as a vector PDF of the same stem.

    The PDF keeps text as text, in TrueType (Type 42) fonts (:data:`PDF_FONT_TYPE`). Returns both paths.
    """
    import matplotlib

    path = Path(path)
    pdf = path.with_suffix(".pdf")
    # At 200 dpi hinting buys nothing visible and costs a fifth of the PNG's drawing time.
    with matplotlib.rc_context({"text.hinting": "no_hinting"}):
        # zlib level 1: a fifth larger than the default 6 and several times faster on a mostly white plot
        fig.savefig(path, dpi=DPI, pil_kwargs={"compress_level": 1})
    with matplotlib.rc_context({"pdf.fonttype": PDF_FONT_TYPE}):
        fig.savefig(pdf, metadata={"Creator": "perceptlab", "CreationDate": None})
    return [path, pdf]


class PlotFontWarning(UserWarning):
    """Some characters of the names in a plot are in no installed font: they are drawn as empty boxes."""


@functools.lru_cache(maxsize=None)
def _charmap(font_file: str) -> frozenset[int]:
    from matplotlib.ft2font import FT2Font
    try:
        return frozenset(FT2Font(font_file).get_charmap())
    except (OSError, RuntimeError, ValueError):
        return frozenset()


@functools.lru_cache(maxsize=None)
def _installed_fonts() -> tuple[tuple[str, str], ...]:
    """(family, file) of every installed TrueType/OpenType font file, each family once.

    The system's font folders are scanned afresh (matplotlib's font cache does not see fonts installed
    after it was built), then matplotlib's own fonts are added. Collections (.ttc) are left out: the PDF
    embeds single TrueType files only. matplotlib's "Last Resort" font is left out too: it has every
    character, but as a box.
    """
    from matplotlib import font_manager
    from matplotlib.ft2font import FT2Font
    files = sorted(set(font_manager.findSystemFonts()) | {f.fname for f in font_manager.fontManager.ttflist})
    seen, fonts = set(), []
    for file in files:
        if not file.lower().endswith((".ttf", ".otf")):
            continue
        try:
            font = FT2Font(file)
        except (OSError, RuntimeError, ValueError):
            continue
        family = font.family_name
        if family in seen or family.startswith("Last Resort"):
            continue
        # Regular styles first: the fallback draws names, not emphasis.
        if font.style_name.lower() not in ("regular", "book", "normal", "roman"):
            continue
        seen.add(family)
        fonts.append((family, file))
    return tuple(fonts)


def font_families(texts) -> tuple[list[str], str]:
    """The font families that draw ``texts``, and the characters that none of them can.

    matplotlib's default font (DejaVu Sans) first; when it lacks characters of the texts (CJK item names,
    say), installed fonts that cover them are added, the one covering most first, as matplotlib's
    per-character fallback.

    Parameters
    ----------
    texts : iterable of str
        Every text the plot draws from the data (item, stimulus and set names).

    Returns
    -------
    families : list of str
        For ``rcParams["font.family"]``.
    missing : str
        The characters (sorted, once each) that no installed font draws.
    """
    import matplotlib
    from matplotlib import font_manager
    default = matplotlib.rcParams["font.sans-serif"][0]
    chars = {ord(c) for t in texts for c in str(t) if not c.isspace()}
    default_file = font_manager.findfont(font_manager.FontProperties(family=default), fallback_to_default=True)
    lacking = chars - _charmap(default_file)
    families = [default]
    while lacking:
        best = max(((len(lacking & _charmap(file)), family) for family, file in _installed_fonts()
                    if family not in families), default=(0, ""))
        if best[0] == 0:
            break
        families.append(best[1])
        covered = next(file for family, file in _installed_fonts() if family == best[1])
        font_manager.fontManager.addfont(covered)     # known by name even when installed after matplotlib's cache
        lacking -= _charmap(covered)
    return families, "".join(chr(c) for c in sorted(lacking))


@contextlib.contextmanager
def names_as_text(texts):
    """Draw data names (items, stimuli, sets) as they are, in fonts that cover them.

    A ``$`` in a file name must not start mathtext; characters no installed font has are named once in a
    :class:`PlotFontWarning` (matplotlib's own warning per missing glyph is silenced instead).
    """
    import matplotlib
    families, missing = font_families(texts)
    if missing:
        warnings.warn(f"no installed font draws the characters {missing!r} of the names in the plots: they show as "
                      "boxes (install a font that covers them, such as Debian's fonts-droid-fallback or "
                      "fonts-noto-cjk; the CSV files keep the names)", PlotFontWarning, stacklevel=3)
    with matplotlib.rc_context({"text.parse_math": False, "font.family": families}), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Glyph \d+ .*missing from", category=UserWarning)
        yield


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


# Layout of scales.png in inches: one character of a 7.5-pt label is at most ~0.065 in wide (DejaVu Sans),
# so the panels are placed from the labels' lengths, without tight_layout's extra drawing passes.
CHAR_INCHES = 0.065
PLOT_INCHES = 2.6        # width of the data area of each panel
PANEL_GAP = 0.25
TITLE_INCHES = 0.5       # figure title
TITLE_LINE_INCHES = 0.18  # each further line of a wrapped figure title
PANEL_TOP, PANEL_BOTTOM = 0.3, 0.5   # panel title above, x tick labels and axis label below


ITEM_LABEL, N_LABEL = "item-label", "n-label"   # gids of the row texts (see :func:`row_labels`)


def row_labels(ax, gid: str = ITEM_LABEL) -> list[str]:
    """The row texts of a scales panel, top to bottom: item names (``"rank. name"``) or, with
    ``gid=N_LABEL``, the n of each row."""
    rows = ax.get_yaxis_transform()
    return [t.get_text() for t in ax.figure.texts if t.get_gid() == gid and t.get_transform() is rows]


def shared_limits(sets: list[dict], include: tuple[float, ...] = ()) -> tuple[float, float]:
    """One x range for every panel: all scales and interval ends, and the values of ``include``, with 4 % margins."""
    values = np.concatenate([np.asarray(s[k], float).ravel() for s in sets for k in ("scale", "ci_low", "ci_high")]
                            + [np.asarray(include, float)])
    values = values[np.isfinite(values)]
    if not values.size:
        return 0.0, 1.0
    low, high = float(values.min()), float(values.max())
    pad = 0.04 * (high - low) if high > low else 0.5
    return low - pad, high + pad


def plot_scales(sets: list[dict], path: str | Path, unit: str, confidence: float | None = 0.95,
                method: str = "t", include: tuple[float, ...] = ()):
    """Scale values with confidence intervals and votes per item, one panel per set, on one shared x axis.

    Items are rows sorted best first. Sets of more than :data:`LABEL_ALL_UP_TO`
    items name only the best and worst :data:`LABEL_ENDS`; the items between
    them are drawn as a band squeezed into a few rows (their values are in
    scales.csv). Every panel has the same x range (:func:`shared_limits`), so
    positions and interval widths compare across sets. The right edge of a
    panel gives each named item's n (kept votes; the n range of the band).

    Parameters
    ----------
    sets : list of dict
        ``set_id``, ``items`` (names) and ``scale``, ``ci_low``, ``ci_high`` arrays,
        optionally ``n_votes`` (kept votes per item).
    path : path-like
        The PNG (:data:`DPI` dpi); a vector PDF of the same stem is written beside it.
    unit : str
        x axis label.
    confidence : float or None
        Interval level; None means there are no intervals (the bounds equal the scale).
    method : str
        Interval method named in the title (see :mod:`analysis.bootstrap`).
    include : tuple of float
        Values the shared x range must contain (0 and 1 for anchored scales: the anchors).

    Returns
    -------
    matplotlib.figure.Figure
        The (closed) figure, for checks of its axes.
    """
    plt = _pyplot()
    names = [str(s["set_id"]) for s in sets] + [str(n) for s in sets for n in s["items"]]
    with names_as_text(names):
        return _draw_scales(plt, sets, path, unit, confidence, method, include)


MAX_COLUMNS = 4
PAGE_ASPECT = 1.4
"""Width over height the grid of panels aims at: a landscape figure, as a page or a slide holds it."""


def grid_columns(n_panels: int, panel_w: float, panel_h: float, title_h: float = 0.0,
                 max_columns: int = MAX_COLUMNS) -> int:
    """Columns of a grid of ``n_panels`` equal panels whose figure is closest to :data:`PAGE_ASPECT`.

    Four sets in one row made a 19 x 2.5 in strip that no page holds; with the aspect chosen they make a
    2 x 2 grid. Ratios are compared on a log scale (twice as wide is as far off as twice as tall).
    """
    def off(cols: int) -> float:
        rows = math.ceil(n_panels / cols)
        return abs(math.log(cols * panel_w / (rows * panel_h + title_h)) - math.log(PAGE_ASPECT))
    return min(range(1, max(1, min(n_panels, max_columns)) + 1), key=lambda cols: (off(cols), -cols))


def _draw_scales(plt, sets, path, unit, confidence, method, include):
    n_rows = max(item_rows(len(s["scale"]))[0].max() + 1 for s in sets)
    label_chars = max(max(len(short_label(name)) for s in sets for name in s["items"]) + 5,   # + "155. "
                      max(len(f"\u2026 {int((~item_rows(len(s['scale']))[1]).sum())} more \u2026") for s in sets))
    has_n = all(s.get("n_votes") is not None for s in sets)
    left_w = CHAR_INCHES * label_chars + 0.3     # + tick and padding
    n_chars = max(len(f"n {int(np.max(s['n_votes'], initial=0))}") * 2 for s in sets) if has_n else 0  # "n 66–96"
    right_w = CHAR_INCHES * n_chars + 0.15
    panel_w = left_w + PLOT_INCHES + right_w + PANEL_GAP
    data_h = ROW_INCHES * n_rows + 0.2
    panel_h = PANEL_TOP + data_h + PANEL_BOTTOM
    cols = grid_columns(len(sets), panel_w, panel_h, TITLE_INCHES)
    grid_rows = math.ceil(len(sets) / cols)
    bars = f"{confidence:.0%} bootstrap {method} intervals" if confidence else "no intervals (no bootstrap)"
    n_note = "; right: n = kept votes of the item" if has_n else ""
    # The title wraps to the grid's width (10-pt characters are at most ~0.085 in wide).
    title = textwrap.wrap(f"Scale values per set, {bars}; best at the top; one x axis for all sets{n_note}",
                          max(30, int(panel_w * cols / 0.085)))
    title_h = TITLE_INCHES + TITLE_LINE_INCHES * (len(title) - 1)
    width, height = panel_w * cols, panel_h * grid_rows + title_h
    fig = plt.figure(figsize=(width, height))
    xlim = shared_limits(sets, include)
    for k, s in enumerate(sets):
        row, col = divmod(k, cols)
        x0 = col * panel_w + left_w
        y0 = height - title_h - (row + 1) * panel_h + PANEL_BOTTOM
        ax = fig.add_axes((x0 / width, y0 / height, PLOT_INCHES / width, data_h / height))
        _scale_panel(ax, s, unit, n_rows)
        ax.set_xlim(xlim)
        if k + cols < len(sets):     # a panel below shows the shared axis' numbers and unit
            ax.tick_params(axis="x", labelbottom=False)
            ax.set_xlabel("")
    fig.suptitle("\n".join(title), y=1 - 0.15 / height, va="top", fontsize=10)
    save_figure(fig, path)
    plt.close(fig)
    return fig


def _scale_panel(ax, s: dict, unit: str, n_rows: float) -> None:
    """One set: named items as points with interval bars (one errorbar call), unnamed middle items as a
    grey band; with ``n_votes``, each named item's n on the right."""
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
        ax.hlines([rows[middle].min() - 0.5, rows[middle].max() + 0.5], 0, 1, transform=ax.get_yaxis_transform(),
                  color="0.8", lw=0.6, ls=":")
    # Row labels as plain texts (x in axes fractions, y in rows), not y ticks: a tick is five artists,
    # and creating and drawing 170 of them was a third of the time of a large scales.png.
    # They belong to the figure (never clipped), placed by the panel's transform: an Axes text is
    # given the axes' clip path, which cost as much as the rest of building the figure.
    ax.set_yticks([])
    at_rows, fig = ax.get_yaxis_transform(), ax.figure
    colours = ["black"] * int(named.sum()) + ["0.4"] * bool(middle.any())
    for row, text, colour in zip(ticks, labels, colours):
        fig.text(-0.02, row, text, transform=at_rows, fontsize=7.5, color=colour, va="center", ha="right",
                 gid=ITEM_LABEL)
    if s.get("n_votes") is not None:
        n = np.asarray(s["n_votes"])[order]
        counts = [f"n {v}" for v in n[named]]
        if middle.any():
            counts.append(f"n {n[middle].min()}\u2013{n[middle].max()}")
        for row, text in zip(ticks, counts):
            fig.text(1.02, row, text, transform=at_rows, fontsize=7, color="0.35", va="center", ha="left",
                     gid=N_LABEL)
    ax.set_ylim(n_rows - 0.4, -0.6)
    ax.grid(axis="x", color="0.9", lw=0.6)
    # Title and axis labels at fixed places: left to matplotlib, each draw measures every tick label of
    # the panel to place them (a third of the drawing time of a large scales.png).
    ax.set_title(str(s["set_id"]), fontsize=10, y=1.0, pad=4)
    ax.set_xlabel(unit, fontsize=8.5)
    axes_inches = ax.get_position().height * ax.figure.get_size_inches()[1]
    ax.xaxis.set_label_coords(0.5, -0.24 / axes_inches)       # just below the 8-pt tick labels
    ax.tick_params(axis="x", labelsize=8)


# Margins of the 6.4 x 3.8 in histograms (fractions of the figure): room for 8-10 pt tick and axis labels.
SMALL_PLOT_MARGINS = {"left": 0.1, "right": 0.98, "bottom": 0.14, "top": 0.92}


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
    ax.yaxis.get_major_locator().set_params(integer=True)  # counts of workers: no 0.5 ticks
    missing = int((~valid).sum())
    ax.set_title(f"{len(tpr)} workers" + (f"; {missing} without scaling votes (not drawn, not kept)" if missing else ""),
                 fontsize=9)
    labels = [t.get_text() for t in ax.legend(fontsize=8).get_texts()]
    fig.subplots_adjust(**SMALL_PLOT_MARGINS)
    save_figure(fig, path)
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
    fig.subplots_adjust(**SMALL_PLOT_MARGINS)
    save_figure(fig, path)
    plt.close(fig)
