"""compare-protocols' numbers (analysis/protocols.py): the join, correlations with intervals, the mapping."""
import json

import numpy as np
import pytest

from analysis.protocols import (ProtocolInputError, compare_protocols, correlations, fit_mapping, join_studies,
                                logistic4, write_comparison)
from stimuli.csv_safety import csv_text

TRUE_MAPPING = (4.6, 1.4, 0.5, 0.15)     # b1, b2, b3, b4: a PC scale in [0, 1] to a 1..5 rating score


def simulate_protocols(n, seed, pc_noise=0.04, rating_noise=0.15):
    """True qualities in [0, 1]; a PC scale = truth + noise; a rating score = the logistic of the truth + noise."""
    rng = np.random.default_rng(seed)
    truth = rng.uniform(0.05, 0.95, n)
    pc = truth + rng.normal(0, pc_noise, n)
    score = logistic4(truth, *TRUE_MAPPING) + rng.normal(0, rating_noise, n)
    return pc, score


def write_pair(folder, pc, score, *, names="scene"):
    sets = [f"scene{k % 3}" for k in range(len(pc))]
    items = [f"m{k:03d}" for k in range(len(pc))]
    (folder / "scales.csv").write_text(csv_text(
        ["set_id", "item_id", "scale", "ci_low", "ci_high", "rank", "n_votes", "unit"],
        [[s, i, float(v), float(v - 0.05), float(v + 0.05), 1, 10, "anchored"] for s, i, v in zip(sets, items, pc)]))
    ids = [f"{s}/{i}" if names == "scene" else i for s, i in zip(sets, items)]
    (folder / "scores.csv").write_text(csv_text(["stimulus_id", "score", "ci_low", "ci_high", "n_ratings"],
                                                [[k, float(v), float(v - 0.2), float(v + 0.2), 20]
                                                 for k, v in zip(ids, score)]))
    return folder / "scales.csv", folder / "scores.csv"


def test_recovers_a_known_monotonic_relation(tmp_path):
    pc, score = simulate_protocols(80, seed=0)
    joined = join_studies(*write_pair(tmp_path, pc, score))
    assert joined.rule == "set_id/item_id" and joined.pc_unmatched == joined.ratings_unmatched == 0
    result = compare_protocols(joined, n_boot=500, seed=1)
    s = result.summary
    assert s["mapping"]["kind"] == "logistic4" and s["mapping"]["fallback_reason"] is None
    grid = np.linspace(0.1, 0.9, 50)
    assert np.max(np.abs(result.mapping(grid) - logistic4(grid, *TRUE_MAPPING))) < 0.3
    assert s["srocc"]["r"] > 0.9 and s["plcc"]["r"] > 0.9 and s["n"] == 80
    # the residuals around the mapping are the rating noise (0.15) and the PC noise through the slope
    assert 0.1 < s["rmse"] < 0.35 and s["rmse_p1401"] == pytest.approx(s["rmse"] * np.sqrt(80 / 76))
    written = write_comparison(result, tmp_path / "out")
    assert {p.name for p in written} == {"comparison.csv", "summary.json", "comparison.png", "comparison.pdf"}
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["join"]["rule"] == "set_id/item_id"


def test_intervals_contain_the_population_correlations():
    """The truth: SROCC and PLCC of 200,000 draws of the same process; 40 studies of 60 items."""
    pc, score = simulate_protocols(200_000, seed=99)
    stats = correlations(pc, score, n_boot=0)
    truth = {"srocc": stats["srocc"]["r"], "plcc": stats["plcc"]["r"]}
    hits = {(name, kind): [] for name in truth for kind in ("fisher", "bootstrap")}
    for seed in range(40):
        pc, score = simulate_protocols(60, seed=seed)
        c = correlations(pc, score, n_boot=400, seed=seed)
        for name in truth:
            for kind in ("fisher", "bootstrap"):
                hits[name, kind].append(c[name][f"{kind}_low"] <= truth[name] <= c[name][f"{kind}_high"])
    coverage = {key: np.mean(v) for key, v in hits.items()}
    assert all(value >= 0.85 for value in coverage.values()), coverage


def test_falls_back_to_a_line_and_says_why():
    x = np.array([0.0, 1.0, 2.0, 3.0])
    mapping = fit_mapping(x, 2 * x + 1)
    assert mapping.kind == "linear" and "at least 5" in mapping.reason
    assert mapping.parameters == pytest.approx({"slope": 2.0, "intercept": 1.0})
    line = np.linspace(0, 1, 30)
    assert fit_mapping(line, 3 - line).kind in ("linear", "logistic4")   # decreasing relations are fitted too
    assert np.allclose(fit_mapping(line, 3 - line)(line), 3 - line, atol=1e-3)


def test_constant_scores_are_refused(tmp_path):
    pc, _ = simulate_protocols(10, seed=4)
    joined = join_studies(*write_pair(tmp_path, pc, np.full(10, 3.0)))
    with pytest.raises(ValueError, match="every joined rating score is 3: nothing to correlate"):
        compare_protocols(joined)


def test_join_by_item_id_and_by_a_map(tmp_path):
    pc, score = simulate_protocols(12, seed=3)
    scales, scores = write_pair(tmp_path, pc, score, names="item")
    assert join_studies(scales, scores).rule == "item_id"
    mapping = tmp_path / "map.csv"
    mapping.write_text("stimulus_id,set_id,item_id\n" + "".join(
        f"m{k:03d},scene{(k + 1) % 3},m{(k + 1) % 12:03d}\n" for k in range(12)))
    joined = join_studies(scales, scores, mapping)
    assert joined.rule == "map"
    assert list(joined.item_id[:2]) == ["m001", "m002"] and list(joined.stimulus_id[:2]) == ["m000", "m001"]


@pytest.mark.parametrize("scales, scores, fragment", [
    ("set_id,item_id\ns,a\n", "stimulus_id,score\ns/a,3\n", "line 1: missing column scale"),
    ("set_id,item_id,scale\ns,a,high\n", "stimulus_id,score\ns/a,3\n", "line 2: scale 'high' is not a number"),
    ("set_id,item_id,scale\ns,a,0.1\ns,b,0.2\n", "stimulus_id,score\nx,3\ny,2\n", "only 0 of its 2 stimuli join"),
])
def test_bad_input_is_one_line(tmp_path, scales, scores, fragment):
    (tmp_path / "scales.csv").write_text(scales)
    (tmp_path / "scores.csv").write_text(scores)
    with pytest.raises(ProtocolInputError) as error:
        join_studies(tmp_path / "scales.csv", tmp_path / "scores.csv")
    assert fragment in str(error.value) and "\n" not in str(error.value)
