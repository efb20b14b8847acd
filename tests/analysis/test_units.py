"""Units of the reported scales: anchored, JOD (1 JOD = 75 % preference, as pwcmp) and z, with intervals
converted alike; checked on votes whose preference rates are known and on a simulated crowd."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from scipy.special import ndtr

from analysis.formats import SCALES_COLUMNS, build_votes, read_table
from analysis.pipeline import AnalysisOptions, analyze
from analysis.scaling import ScalingOptions
from analysis.simulate import simulate_study, write_study
from analysis.thurstone import JOD_PER_Z
from server.cli import cli


def _chain_votes(n_votes: int = 2000, share: float = 0.75):
    """a beats b and b beats c in ``share`` of ``n_votes`` votes each (one vote per worker)."""
    rows = []
    for better, worse in (("a", "b"), ("b", "c")):
        wins = int(round(share * n_votes))
        rows += [(better, worse, better)] * wins + [(better, worse, worse)] * (n_votes - wins)
    item_a, item_b, winner = map(list, zip(*rows))
    workers = [f"w{k}" for k in range(len(rows))]
    return build_votes(workers, ["s"] * len(rows), item_a, item_b, winner)


def _scales(result) -> dict[str, float]:
    return {r["item_id"]: r["scale"] for r in result.scales}


def test_the_jod_factor_puts_75_percent_preference_at_one_jod():
    # P(i preferred to j) = Phi(s_i - s_j) in z units (analysis.thurstone): 1 JOD must give 0.75.
    assert ndtr(1 / JOD_PER_Z) == pytest.approx(0.75, abs=1e-12)
    assert JOD_PER_Z == pytest.approx(1.4826, abs=1e-4)


@pytest.mark.parametrize("method", ["mle", "ls"])
def test_75_percent_preference_is_one_jod_apart(method):
    votes = _chain_votes()
    options = AnalysisOptions(scaling=ScalingOptions(method=method, anchors=False, units="jod"), keep="none",
                              gold_threshold=None, n_boot=0)
    s = _scales(analyze(votes, options))
    assert s["a"] - s["b"] == pytest.approx(1.0, abs=0.02)
    assert s["b"] - s["c"] == pytest.approx(1.0, abs=0.02)
    assert s["a"] + s["b"] + s["c"] == pytest.approx(0.0, abs=1e-9)   # centred on the set's mean
    z = _scales(analyze(votes, AnalysisOptions(scaling=ScalingOptions(method=method, anchors=False, units="z"),
                                               keep="none", gold_threshold=None, n_boot=0)))
    assert z["a"] - z["b"] == pytest.approx(0.6745, abs=0.015)       # Phi^-1(0.75) z units


def test_jod_recovers_a_simulated_crowds_true_differences():
    # Many votes per pair: the probit MLE's small-sample bias (differences too large) fades.
    study = simulate_study(n_sets=2, n_items=20, degree=6, votes_per_pair=300, n_workers=300, random_clickers=0,
                           left_clickers=0, seed=3)
    result = analyze(study.votes, AnalysisOptions(scaling=ScalingOptions(anchors=False, units="jod"),
                                                  keep="none", gold_threshold=None, n_boot=0))
    for set_id, truth_z in study.truth.items():
        estimate = {r["item_id"]: r["scale"] for r in result.scales if r["set_id"] == set_id}
        jod = np.array([estimate[i] for i in study.item_ids])
        true_jod = (truth_z - truth_z.mean()) * JOD_PER_Z
        slope = np.polyfit(true_jod, jod, 1)[0]
        assert slope == pytest.approx(1.0, abs=0.04)
        assert np.abs(jod - true_jod).mean() < 0.1
        assert np.polyfit(true_jod, jod / JOD_PER_Z, 1)[0] < 0.7   # the same scale in z units would not do


def test_intervals_convert_with_the_values_and_files_say_the_unit(tmp_path):
    study = simulate_study(n_sets=2, n_items=10, degree=4, votes_per_pair=8, n_workers=30, seed=2)
    runner, outs = CliRunner(), {}
    votes_csv = write_study(study, tmp_path / "study")["votes"]
    for unit in ("z", "jod", "anchored"):
        out = tmp_path / unit
        result = runner.invoke(cli, ["analyze", str(votes_csv), "--out", str(out), "--units", unit,
                                     "--bootstrap", "60", "--no-plots"])
        assert result.exit_code == 0, result.output
        assert "scales in " + {"z": "z:", "jod": "JOD:", "anchored": "anchored:"}[unit] in result.output
        summary = json.loads((out / "summary.json").read_text())
        assert summary["unit"] == unit and summary["parameters"]["units"] == unit
        rows = read_table(out / "scales.csv", SCALES_COLUMNS, numeric=("scale", "ci_low", "ci_high"))
        assert {r["unit"] for r in rows} == {unit}
        outs[unit] = {(r["set_id"], r["item_id"]): r for r in rows}
    for key, z in outs["z"].items():
        jod = outs["jod"][key]
        for column in ("scale", "ci_low", "ci_high"):
            assert jod[column] == pytest.approx(z[column] * JOD_PER_Z, rel=1e-9, abs=1e-12)
        assert jod["rank_ci_low"] == z["rank_ci_low"] and jod["rank_ci_high"] == z["rank_ci_high"]
    anchored = np.array([r["scale"] for r in outs["anchored"].values()])
    assert anchored.min() > 0 and anchored.max() < 1


def test_default_unit_follows_the_anchors_and_anchored_needs_them(tmp_path):
    assert ScalingOptions().unit == "anchored" and ScalingOptions(anchors=False).unit == "z"
    with pytest.raises(ValueError, match="anchored units need the virtual anchors"):
        AnalysisOptions(scaling=ScalingOptions(anchors=False, units="anchored"))
    with pytest.raises(ValueError, match="units must be one of"):
        ScalingOptions(units="jnd")
    votes_csv = tmp_path / "votes.csv"
    votes_csv.write_text("worker_id,set_id,item_a,item_b,winner\nw,s,a,b,a\nv,s,b,c,b\n")
    result = CliRunner().invoke(cli, ["analyze", str(votes_csv), "--out", str(tmp_path / "o"), "--no-anchors",
                                      "--units", "anchored"])
    assert result.exit_code == 2 and "--units anchored needs the virtual anchors" in result.output
    assert not (tmp_path / "o").exists()


def test_further_units_come_from_the_same_resamples_and_leave_the_files_alone(tmp_path):
    """``also_units`` (the running scales' JOD for [stopping]): each resample's raw fit reported in the further
    unit, so its interval is the one an analysis reporting in that unit gives with the same seed; scales.csv is
    byte for byte the one without them."""
    from analysis.pipeline import write_results

    votes = simulate_study(n_sets=2, n_items=8, degree=4, votes_per_pair=6, n_workers=24, seed=5).votes
    both = analyze(votes, AnalysisOptions(n_boot=50, seed=3, also_units=("jod", "z"), progress=False))
    plain = analyze(votes, AnalysisOptions(n_boot=50, seed=3, progress=False))
    for unit in ("jod", "z"):
        alone = analyze(votes, AnalysisOptions(scaling=ScalingOptions(units=unit), n_boot=50, seed=3,
                                               progress=False))
        for record, other in zip(both.scales, alone.scales, strict=True):
            assert (record["set_id"], record["item_id"]) == (other["set_id"], other["item_id"])
            for column in ("scale", "ci_low", "ci_high"):
                assert record[f"{column}_{unit}"] == pytest.approx(other[column], rel=1e-9, abs=1e-12)
            assert record[f"ci_high_{unit}"] > record[f"ci_low_{unit}"]
    for record in both.scales:
        assert record["ci_high_jod"] - record["ci_low_jod"] == pytest.approx(
            (record["ci_high_z"] - record["ci_low_z"]) * JOD_PER_Z, rel=1e-9)
    assert not any(key.endswith("_jod") for key in plain.scales[0])  # the default analysis computes none
    write_results(both, tmp_path / "both", plots=False)
    write_results(plain, tmp_path / "plain", plots=False)
    assert (tmp_path / "both" / "scales.csv").read_text() == (tmp_path / "plain" / "scales.csv").read_text()
    with pytest.raises(ValueError, match="anchored units need the virtual anchors"):
        AnalysisOptions(scaling=ScalingOptions(anchors=False), also_units=("anchored",))
    with pytest.raises(ValueError, match="units must be one of"):
        AnalysisOptions(also_units=("mos",))
