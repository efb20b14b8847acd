"""Plots fit for a paper: TrueType fonts in the PDFs, several sets as a grid rather than a strip, hidden
references apart from test stimuli on a score axis that is the rating scale, comparison plots with both
intervals, and item names drawn in a font that has their characters (or one warning naming those none has)."""
from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
from PIL import Image

from analysis.plots import PlotFontWarning, font_families, grid_columns, plot_scales
from analysis.rating_plots import plot_protocols, plot_rating_scores, score_axis


def _sets(k: int, n: int = 6, names=None) -> list[dict]:
    rng = np.random.default_rng(k)
    out = []
    for j in range(k):
        scale = rng.normal(size=n)
        items = names or [f"item_{i}" for i in range(n)]
        out.append({"set_id": f"scene{j}", "items": items, "scale": scale, "ci_low": scale - 0.2,
                    "ci_high": scale + 0.2})
    return out


def _font_subtypes(pdf: bytes) -> set[str]:
    return set(re.findall(rb"/Subtype\s*/(Type3|TrueType|Type1|CIDFontType2|Type0)", pdf))


def test_pdfs_embed_truetype_fonts_never_type3(tmp_path):
    plot_scales(_sets(2), tmp_path / "scales.png", "scale (JOD)")
    subtypes = _font_subtypes((tmp_path / "scales.pdf").read_bytes())
    assert b"Type3" not in subtypes
    assert subtypes & {b"TrueType", b"CIDFontType2"}


def test_four_sets_make_a_grid_not_a_strip(tmp_path):
    plot_scales(_sets(4), tmp_path / "scales.png", "scale (JOD)")
    with Image.open(tmp_path / "scales.png") as image:
        width, height = image.size
    assert width / height < 3.0, (width, height)        # it was 3,784 x 504 px: 7.5
    assert grid_columns(4, 5.3, 1.9) == 2
    assert grid_columns(1, 5.3, 1.9) == 1
    assert grid_columns(12, 5.3, 5.0) <= 4


def test_grid_columns_aim_at_a_landscape_page():
    # tall panels (155 items each) go side by side; flat ones stack
    assert grid_columns(3, 5.0, 20.0) == 3
    assert grid_columns(3, 5.0, 1.0) == 1


def _scores(names, values, lows, highs):
    return [{"stimulus_id": n, "score": v, "ci_low": lo, "ci_high": hi, "n_ratings": 5, "n_workers": 5, "rank": k}
            for k, (n, v, lo, hi) in enumerate(zip(names, values, lows, highs), start=1)]


SUMMARY = {"scale": {"name": "acr", "low": 1, "high": 5}, "score": "MOS",
           "intervals": {"confidence": 0.95, "method": "t"}}


def test_score_axis_is_the_scale_not_a_wild_interval():
    assert score_axis(1, 5, np.array([2.0, 4.5])) == pytest.approx((0.84, 5.16))
    low, high = score_axis(1, 5, np.array([2.0, 6.5]))        # an ACR-HR differential score above 5 is shown
    assert high > 6.5 and low < 1


def test_rating_scores_draw_references_apart(tmp_path):
    names = ["a/q30", "camera/__reference__", "a/q50", "b/__reference__", "b/q10"]
    values = [4.0, 4.5, 3.2, 4.8, 1.5]
    scores = _scores(names, values, [3.5, -1.85, 2.9, 4.2, 1.1], [4.5, 10.85, 3.5, 5.0, 1.9])
    fig = plot_rating_scores(scores, tmp_path / "scores.png", SUMMARY,
                             references={"camera/__reference__", "b/__reference__"})
    ax = fig.axes[0]
    assert ax.get_xlim()[0] > 0.5 and ax.get_xlim()[1] < 5.5           # it ran from -2 to 11
    labels = [t.get_text() for t in ax.get_yticklabels()]
    rows = dict(zip(labels, ax.get_yticks()))
    test_rows = [rows[k] for k in labels if "__reference__" not in k]
    ref_rows = [rows[k] for k in labels if "__reference__" in k]
    assert len(test_rows) == 3 and len(ref_rows) == 2
    assert min(ref_rows) > max(test_rows) + 1                             # below the tests, with a gap
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["test stimuli (3)", "hidden references (2)"]


def test_rating_scores_without_references_have_no_legend(tmp_path):
    scores = _scores(["x", "y"], [3.0, 2.0], [2.5, 1.5], [3.5, 2.5])
    fig = plot_rating_scores(scores, tmp_path / "scores.png", SUMMARY)
    assert fig.axes[0].get_legend() is None


def test_comparison_plot_has_both_intervals(tmp_path):
    x = np.array([0.0, 0.5, 1.0])
    y = np.array([1.5, 3.0, 4.5])
    captured = {}
    import matplotlib.axes
    original = matplotlib.axes.Axes.errorbar

    def spy(self, *args, **kwargs):
        captured.update(kwargs)
        return original(self, *args, **kwargs)

    matplotlib.axes.Axes.errorbar = spy
    try:
        plot_protocols(x, y, (x, y), tmp_path / "comparison.png", pc_unit="JOD", score_name="MOS", title="t",
                       pc_interval=(x - 0.1, x + 0.2), score_interval=(y - 0.3, y + np.array([0.4, np.nan, 0.4])))
    finally:
        matplotlib.axes.Axes.errorbar = original
    np.testing.assert_allclose(captured["xerr"], [[0.1] * 3, [0.2] * 3])
    np.testing.assert_allclose(captured["yerr"], [[0.3] * 3, [0.4, 0.0, 0.4]])
    assert (tmp_path / "comparison.pdf").exists()


def test_cjk_names_get_a_font_that_has_them_or_one_warning_naming_them(tmp_path):
    names = ["猫_q30", "犬_q50", "plain"]
    families, missing = font_families(names)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plot_scales(_sets(1, 3, names), tmp_path / "scales.png", "scale (JOD)")
    ours = [w for w in caught if issubclass(w.category, PlotFontWarning)]
    glyph_noise = [w for w in caught if "missing from" in str(w.message)]
    assert not glyph_noise                                   # never one warning per glyph
    if missing:
        assert len(ours) == 1 and all(c in str(ours[0].message) for c in missing)
    else:
        assert len(families) >= 2 and not ours               # a fallback font draws them
    _, none_missing = font_families(["plain ascii"])
    assert none_missing == ""


def test_characters_no_font_has_are_named_once(tmp_path):
    private = "\U000f0000"               # a private-use plane character: no font draws it
    with pytest.warns(PlotFontWarning, match=re.escape(repr(private)[1:-1])):
        plot_scales(_sets(1, 2, ["a" + private, "b"]), tmp_path / "scales.png", "scale")
