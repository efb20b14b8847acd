"""Per-item plots name their items: scales.png (items as rows, best and worst named above 40 items) and the
motion vector fields (probe IDs, the largest errors when there are many)."""
from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from analysis.motion_plots import NAME_ALL_PROBES, NAME_WORST_PROBES, _name_probes, plot_vector_field
from analysis.pipeline import AnalysisOptions, analyze, write_results
from analysis.plots import (DPI, LABEL_ENDS, N_LABEL, _pyplot, _scale_panel, item_rows, plot_scales, row_labels,
                            short_label)


def _set(n: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    scale = rng.normal(size=n)
    return {"set_id": f"set{n}", "items": [f"item_{i:03d}" for i in range(n)], "scale": scale,
            "ci_low": scale - 0.2, "ci_high": scale + 0.2}


def _labels(s: dict) -> list[str]:
    plt = _pyplot()
    fig, ax = plt.subplots()
    _scale_panel(ax, s, "scale", item_rows(len(s["scale"]))[0].max() + 1)
    labels = row_labels(ax)
    plt.close(fig)
    return labels


def test_item_rows_name_every_item_up_to_40_then_the_ends():
    rows, named = item_rows(8)
    assert named.all() and list(rows) == list(range(8))
    rows, named = item_rows(155)
    assert named.sum() == 2 * LABEL_ENDS and named[:LABEL_ENDS].all() and named[-LABEL_ENDS:].all()
    assert np.all(np.diff(rows) > 0) and rows[-1] < 30  # best on top, 155 items in under 30 rows


def test_small_sets_name_every_item_best_first():
    s = _set(8)
    order = np.argsort(-s["scale"])
    assert _labels(s) == [f"{k}. item_{i:03d}" for k, i in enumerate(order, start=1)]


def test_large_sets_name_the_best_and_worst_ten():
    s = _set(155)
    order = np.argsort(-s["scale"])
    labels = _labels(s)
    assert len(labels) == 2 * LABEL_ENDS + 1 and "135 more" in labels[-1]
    assert labels[0] == f"1. item_{order[0]:03d}" and f"155. item_{order[-1]:03d}" in labels


def test_long_names_keep_both_ends():
    name = "method_with_a_rather_long_name_017.png"
    short = short_label(name)
    assert len(short) == 24 and short.startswith("method_with") and short.endswith("017.png")
    assert short_label("m017") == "m017"


def test_scales_png_grows_with_items_but_stays_bounded(tmp_path):
    sizes = {}
    for n in (8, 40, 155):
        plot_scales([_set(n)], tmp_path / f"{n}.png", "scale", confidence=0.95)
        sizes[n] = Image.open(tmp_path / f"{n}.png").size
    assert sizes[8][1] < sizes[40][1]
    assert sizes[155][1] < sizes[40][1] < 10 * DPI   # the 155-item set names only its ends


def test_analyze_passes_item_names_to_scales_png(tmp_path):
    from analysis.simulate import simulate_study

    study = simulate_study(n_sets=2, n_items=8, degree=4, votes_per_pair=6, n_workers=12, seed=1)
    result = analyze(study.votes, AnalysisOptions(n_boot=20))
    for plotted in result.plot_data["sets"]:
        by_name = {r["item_id"]: r["scale"] for r in result.scales if r["set_id"] == plotted["set_id"]}
        assert dict(zip(plotted["items"], plotted["scale"].tolist())) == pytest.approx(by_name)
    write_results(result, tmp_path / "out")
    assert Image.open(tmp_path / "out" / "scales.png").size[1] > 200


@pytest.mark.parametrize("n", [8, 155])
def test_vector_field_names_probes(n, tmp_path):
    rng = np.random.default_rng(n)
    x, y = rng.uniform(0, 600, n), rng.uniform(0, 400, n)
    gt = rng.normal(size=(n, 2))
    human = gt + rng.normal(size=(n, 2))
    names = [f"p{i}" for i in range(n)]
    plt = _pyplot()
    fig, ax = plt.subplots()
    note = _name_probes(ax, x, y, gt, human, names)
    shown = [t.get_text() for t in ax.texts]
    plt.close(fig)
    if n <= NAME_ALL_PROBES:
        assert sorted(shown) == sorted(names) and note == ""
    else:
        worst = np.argsort(-np.hypot(*(human - gt).T))[:NAME_WORST_PROBES]
        assert sorted(shown) == sorted(names[i] for i in worst) and "largest EPE" in note
    plot_vector_field(tmp_path / "field.png", x, y, gt, human, size=(600, 400), names=names)
    assert (tmp_path / "field.png").stat().st_size > 0


def test_every_analysis_plot_is_a_200_dpi_png_with_a_pdf_beside_it(tmp_path):
    from analysis.simulate import simulate_study

    study = simulate_study(n_sets=3, n_items=12, degree=4, votes_per_pair=6, n_workers=16, seed=4)
    written = write_results(analyze(study.votes, AnalysisOptions(n_boot=30)), tmp_path / "out")
    pngs = sorted(p for p in written if p.suffix == ".png")
    assert {p.name for p in pngs} == {"scales.png", "worker_tpr.png", "win_proportions.png"}
    for png in pngs:
        assert png.with_suffix(".pdf") in written
        assert png.with_suffix(".pdf").read_bytes()[:5] == b"%PDF-"
        with Image.open(png) as image:
            assert min(image.info["dpi"]) >= 200 - 0.01
        assert DPI >= 200


def test_scales_panels_share_one_x_axis_with_n_per_item(tmp_path):
    narrow, wide = _set(8, seed=1), _set(30, seed=2)
    narrow.update(scale=narrow["scale"] * 0.1, ci_low=narrow["scale"] * 0.1 - 0.05,
                  ci_high=narrow["scale"] * 0.1 + 0.05, n_votes=np.arange(8) + 40)
    wide.update(scale=wide["scale"] * 3, ci_low=wide["scale"] * 3 - 1, ci_high=wide["scale"] * 3 + 1,
                n_votes=np.full(30, 120))
    fig = plot_scales([narrow, wide], tmp_path / "scales.png", "scale (JOD)", confidence=0.95)
    limits = {ax.get_xlim() for ax in fig.axes}
    assert len(fig.axes) == 2 and len(limits) == 1       # one range although the sets' spreads differ 30-fold
    low, high = limits.pop()
    assert low < min(wide["ci_low"].min(), narrow["ci_low"].min())
    assert high > max(wide["ci_high"].max(), narrow["ci_high"].max())
    narrow_axis = fig.axes[0]
    best = int(np.argmax(narrow["scale"]))
    counts = row_labels(narrow_axis, N_LABEL)
    assert counts[0] == f"n {narrow['n_votes'][best]}" and len(counts) == 8   # n of the best item at the top
    # the interval bars are the sets' intervals: one errorbar per panel, a segment per named item
    bars = [c for c in narrow_axis.collections if len(c.get_segments()) == 8]
    assert bars and sorted(round(s[0][0], 9) for s in bars[0].get_segments()) == \
        sorted(np.round(narrow["ci_low"], 9))
    assert (tmp_path / "scales.pdf").is_file()


def test_anchored_scales_show_both_anchors_on_the_shared_axis(tmp_path):
    s = _set(8)
    s.update(scale=np.linspace(0.3, 0.6, 8), ci_low=np.linspace(0.25, 0.55, 8), ci_high=np.linspace(0.35, 0.65, 8))
    fig = plot_scales([s], tmp_path / "a.png", "scale", include=(0.0, 1.0))
    low, high = fig.axes[0].get_xlim()
    assert low < 0 and high > 1
