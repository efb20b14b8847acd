"""``perceptlab analyze-motion`` and the pipeline behind it, on synthetic observers with a known bias."""
import csv
import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

from analysis.formats import read_table
from analysis.motion import TABLE_METRICS, read_motion_csv
from analysis.motion_report import (PROBES_COLUMNS, MotionAnalysisError, MotionOptions, analyze_motion,
                                    run_analyze_motion)
from server.cli import cli

HEADER = ["worker_id", "clip_id", "probe_id", "repetition", "gt_u", "gt_v", "resp_u", "resp_v", "cycles", "rt_ms",
          "frame_drops", "onset_err_mean_ms", "onset_err_sd_ms", "dataset", "probe_x", "probe_y", "probe_frame",
          "trial_id", "timing_flagged", "practice"]


def synthetic_study(folder, seed=0, n_probes=12, observers=4, repetitions=4, drop_every=17):
    """motion.csv with observers = GT + per-probe bias + noise, and two model CSVs.

    ``illusion.csv`` predicts GT + the human bias; ``accurate.csv`` predicts GT
    + independent noise of the same size. Returns (paths, truth).
    """
    rng = np.random.default_rng(seed)
    probes = []
    for clip, dataset in (("c1", "alpha"), ("c2", "beta")):
        for p in range(n_probes):
            gt = rng.uniform(-8, 8, 2)
            bias = rng.normal(0, 3, 2)              # the probe's "flow illusion", shared by all observers
            probes.append((clip, f"p{p:02d}", dataset, gt, bias, rng.uniform(40, 600), rng.uniform(40, 400)))
    rows, trial = [], 0
    for w in range(observers):
        for clip, probe, dataset, gt, bias, x, y in probes:
            for rep in range(1, repetitions + 1):
                trial += 1
                resp = gt + bias + rng.normal(0, 1, 2)
                drops = 1 if trial % drop_every == 0 else 0
                rows.append([f"w{w}", clip, probe, rep, *gt, *resp, 3, 9000 + rep, drops,
                             rng.normal(0, 1), abs(rng.normal(2, 0.5)), dataset, x, y, 7, trial, drops, 0])
    # two practice rows with absurd responses: must not count
    rows.append(["w0", "c1", "p00", 1, *probes[0][3], 19.0, 19.0, 3, 9000, 0, 0, 1, "alpha", 10, 10, 7, 0, 0, 1])
    rows.append(["w1", "c1", "p00", 1, *probes[0][3], -19.0, 19.0, 3, 9000, 0, 0, 1, "alpha", 10, 10, 7, 0, 0, 1])
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"motion": folder / "motion.csv", "illusion": folder / "illusion.csv", "accurate": folder / "accurate.csv"}
    with open(paths["motion"], "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(HEADER)
        writer.writerows(rows)
    noise_rng = np.random.default_rng(seed + 1)
    for name, make in (("illusion", lambda gt, bias: gt + bias),
                       ("accurate", lambda gt, bias: gt + noise_rng.normal(0, 3, 2))):
        with open(paths[name], "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["clip_id", "probe_id", "pred_u", "pred_v"])
            writer.writerows([clip, probe, *make(gt, bias)] for clip, probe, _, gt, bias, _, _ in probes)
    return paths, {"probes": probes, "rows": rows}


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    return synthetic_study(tmp_path_factory.mktemp("motion") / "study")


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def test_cli_writes_every_output_and_ranks_the_human_like_model_higher(study, tmp_path):
    paths, _ = study
    out = tmp_path / "analysis"
    result = run("analyze-motion", paths["motion"], "--out", out, "--model", f"illusion={paths['illusion']}",
                 "--model", paths["accurate"])
    assert result.exit_code == 0, result.output
    assert "model illusion: rho_uv" in result.output and "human vs GT" in result.output
    names = {p.name for p in out.iterdir()}
    assert {"probes.csv", "observer_probes.csv", "model_probes.csv", "observers.csv", "tables", "epe_by_property.csv",
            "summary.json", "plots"} <= names
    tables = {p.name for p in (out / "tables").iterdir()}
    assert "table_overall.csv" in tables and "rho_uv_by_dataset.csv" in tables and len(tables) == 13
    assert not any(name.startswith("table_S") for name in tables)   # named after content, not a supplement
    plots = {p.name for p in (out / "plots").iterdir()}
    assert {"field_c1.png", "field_c2.png", "scatter_uv.png", "epe_vs_gt_speed.png"} <= plots
    assert {p.replace(".png", ".pdf") for p in plots if p.endswith(".png")} <= plots   # a vector PDF beside each

    overall = {r["model"]: r for r in read_table(out / "tables" / "table_overall.csv",
                                                 ("model", "n_probes") + tuple(TABLE_METRICS),
                                                 numeric=tuple(TABLE_METRICS))}
    assert set(overall) == {"Ground truth", "illusion", "accurate"}
    ill, acc = overall["illusion"], overall["accurate"]
    # the model that shares the observers' bias is the human-like one, by both measures
    assert ill["rho_uv"] > acc["rho_uv"] + 0.3 and ill["rho_uv"] > 0.8
    assert ill["rci"] > acc["rci"] + 0.1
    assert ill["epe_human"] < acc["epe_human"]
    assert math.isnan(overall["Ground truth"]["rho_uv"]) and overall["Ground truth"]["r_gt_uv"] == 1.0

    s1 = read_table(out / "tables" / "rho_uv_by_dataset.csv", ("model", "alpha", "beta", "All datasets"),
                    numeric=("alpha", "beta", "All datasets"))
    assert [r["model"] for r in s1] == ["Ground truth", "illusion", "accurate"]
    assert s1[1]["All datasets"] == pytest.approx(ill["rho_uv"])


def test_probe_means_exclusions_and_summary(study, tmp_path):
    paths, truth = study
    out = tmp_path / "a"
    result = run("analyze-motion", paths["motion"], "--out", out, "--no-plots")
    assert result.exit_code == 0, result.output
    assert not (out / "plots").exists()
    rows = truth["rows"]
    kept = [r for r in rows if r[19] == 0 and r[10] == 0]
    summary = json.loads((out / "summary.json").read_text())
    c = summary["counts"]
    assert c["rows"] == len(rows) and c["practice_excluded"] == 2
    assert c["dropped_excluded"] == sum(r[10] > 0 for r in rows) > 0 and c["trials_used"] == len(kept)
    assert c["observers"] == 4 and c["probes"] == 24 and c["datasets"] == ["alpha", "beta"]
    assert summary["timing"]["trials_with_drops"] == c["dropped_trials"]
    assert summary["inter_observer"]["n_pairs"] == 6 and summary["inter_observer"]["mean"] > 0.5
    assert summary["library_version"]
    probes = read_table(out / "probes.csv", PROBES_COLUMNS, numeric=("mean_u", "mean_v", "gt_u", "epe", "n"))
    assert len(probes) == 24
    # probe c1/p00 by hand from the kept rows
    mine = np.array([[r[6], r[7]] for r in kept if r[1] == "c1" and r[2] == "p00"])
    p00 = next(p for p in probes if p["clip_id"] == "c1" and p["probe_id"] == "p00")
    assert p00["n"] == len(mine) and p00["mean_u"] == pytest.approx(mine[:, 0].mean())
    gt = truth["probes"][0][3]
    assert p00["epe"] == pytest.approx(math.hypot(mine[:, 0].mean() - gt[0], mine[:, 1].mean() - gt[1]))
    human = summary["human_vs_gt"]["All datasets"]
    assert 0.5 < human["r_uv"] < 1 and human["fig_s2"]["slope"] > 0.5
    per_obs = read_table(out / "observer_probes.csv", ("worker_id", "clip_id", "probe_id", "mean_u", "n"),
                         numeric=("mean_u", "n"))
    mine_w0 = [r[6] for r in kept if r[0] == "w0" and r[1] == "c1" and r[2] == "p00"]
    w0 = next(r for r in per_obs if (r["worker_id"], r["clip_id"], r["probe_id"]) == ("w0", "c1", "p00"))
    assert w0["n"] == len(mine_w0) and w0["mean_u"] == pytest.approx(np.mean(mine_w0))
    assert len(per_obs) == 4 * 24
    observers = read_table(out / "observers.csv", ("worker_id", "n_trials", "r_uv_gt"), numeric=("n_trials",))
    assert sum(o["n_trials"] for o in observers) == len(kept)

    kept_out = tmp_path / "b"
    assert run("analyze-motion", paths["motion"], "--out", kept_out, "--no-plots", "--keep-dropped").exit_code == 0
    kept_summary = json.loads((kept_out / "summary.json").read_text())
    assert kept_summary["counts"]["trials_used"] == len(rows) - 2 and kept_summary["counts"]["dropped_excluded"] == 0


def test_frames_csv_gives_a_drop_rate(study, tmp_path):
    paths, _ = study
    frames = tmp_path / "frames.csv"
    frames.write_text("worker_id,trial_id,clip_id,probe_id,repetition,cycle,phase,raf_index,t_ms,stim_frame,"
                      "interval_ms,dropped,onset_err_ms\n"
                      "w0,1,c1,p00,1,3,movie,0,0,0,,0,0.5\n"
                      "w0,1,c1,p00,1,3,movie,1,16.7,0,16.7,0,\n"
                      "w0,1,c1,p00,1,3,movie,2,50.0,1,33.3,1,-0.5\n"
                      "w0,1,c1,p00,1,3,movie,3,66.7,2,16.7,0,1.5\n")
    out = tmp_path / "t"
    result = run("analyze-motion", paths["motion"], "--out", out, "--no-plots", "--frames", frames)
    assert result.exit_code == 0, result.output
    timing = json.loads((out / "summary.json").read_text())["timing"]
    assert timing["source"] == "frames.csv" and timing["n_intervals"] == 3
    assert timing["frame_drop_rate"] == pytest.approx(1 / 3) and timing["onset_err_mean_ms"] == pytest.approx(0.5)
    assert "drop rate 33.333%" in result.output


@pytest.mark.parametrize("content, message", [
    ("worker_id,clip_id\nw,c\n", "line 1: missing columns"),
    (",".join(HEADER[:13]) + "\nw1,c1,p1,1,1,1,x,1,3,9000,0,0,0\n", "line 2, column resp_u: 'x' is not a number"),
])
def test_cli_bad_files_give_one_line_errors(tmp_path, content, message):
    path = tmp_path / "motion.csv"
    path.write_text(content)
    result = run("analyze-motion", path, "--out", tmp_path / "out")
    assert result.exit_code != 0
    assert message in result.output and result.output.count("\n") == 1
    assert "Traceback" not in result.output


def test_cli_option_errors(study, tmp_path):
    paths, _ = study
    result = run("analyze-motion", paths["motion"], "--out", tmp_path / "o", "--machine-observers")
    assert result.exit_code != 0 and "--machine-observers needs --clips" in result.output
    result = run("analyze-motion", paths["motion"], "--out", tmp_path / "o", "--model", "=x.csv")
    assert result.exit_code != 0 and "NAME=preds.csv" in result.output
    result = run("analyze-motion", paths["motion"], "--out", tmp_path / "o", "--model", tmp_path / "missing.csv")
    assert result.exit_code != 0 and "missing.csv: cannot read" in result.output


def test_only_practice_trials_is_an_error(tmp_path):
    path = tmp_path / "motion.csv"
    path.write_text(",".join(HEADER) + "\nw1,c1,p1,1,1,1,1,1,3,9000,0,0,0,d,1,1,7,1,0,1\n")
    trials = read_motion_csv(path)
    with pytest.raises(MotionAnalysisError, match="no trials left"):
        analyze_motion(trials, MotionOptions())


def test_clips_and_machine_observers_on_the_demo(tmp_path, motion_clips):
    from stimuli.motion_clips import load_clip_manifest

    manifest_path = motion_clips  # the motion demo's clips (built once per test run, only read here)
    manifest = load_clip_manifest(manifest_path)
    rng = np.random.default_rng(7)
    # no dataset column and no probe positions: both must come from the manifest
    lines = [",".join(HEADER[:13])]
    for w in range(3):
        for clip in manifest.clips:
            for p in clip.probes:
                for rep in (1, 2):
                    u, v = p.gt_u + rng.normal(0, 1), p.gt_v + rng.normal(0, 1)
                    lines.append(f"w{w},{clip.clip_id},{p.probe_id},{rep},{p.gt_u},{p.gt_v},{u},{v},3,9000,0,0,1")
    motion = tmp_path / "motion.csv"
    motion.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    result, _ = run_analyze_motion(motion, out, clips=manifest_path,
                                   options=MotionOptions(machine_observers=True))
    assert set(result.tables) == {"Ground truth", "farneback", "dis"}
    assert result.summary["counts"]["probes_gt_differs_from_manifest"] == 0
    assert result.summary["counts"]["probes_missing_from_manifest"] == 0
    assert result.tables["dis"]["demo"]["r_gt_uv"] > 0.5            # DIS tracks the exact flow of the demo
    probes = read_table(out / "probes.csv", PROBES_COLUMNS, numeric=("image_gradient", "x"))
    assert all(p["dataset"] == "demo" for p in probes)
    assert all(np.isfinite(p["image_gradient"]) and p["image_gradient"] > 0 for p in probes)
    assert all(np.isfinite(p["x"]) for p in probes)
    plots = {p.name for p in (out / "plots").iterdir()}
    assert {"field_demo_objects.png", "field_demo_camera.png", "epe_vs_image_gradient.png"} <= plots
    bins = read_table(out / "epe_by_property.csv", ("property", "source", "n"), numeric=("n",))
    assert {"image_gradient", "gt_speed"} == {b["property"] for b in bins}
    assert {"human", "farneback", "dis"} == {b["source"] for b in bins}
    assert sum(b["n"] for b in bins if b["property"] == "image_gradient" and b["source"] == "human") == 20


def _one_dataset_csv(path, gts, responses):
    """motion.csv with one observer answering probe k of clip c1 with ``responses[k]`` (GT ``gts[k]``)."""
    lines = [",".join(HEADER[:14])]
    for k, (gt, resp) in enumerate(zip(gts, responses)):
        lines.append(f"w0,c1,p{k},1,{gt[0]},{gt[1]},{resp[0]},{resp[1]},3,9000,0,0,1,d")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("gts, responses, stat, reason", [
    ([(2, 1)], [(2.5, 1)], "r_spd", "1 probes (at least 2 needed)"),
    ([(1, 1), (1, 1)], [(2.5, 1), (0, 1)], "r_uv", "every ground-truth u and v equal (no variance)"),
    ([(2, 1), (4, 2), (6, 3)], [(2, 1), (3, 1.5), (6, 3)], "r_dir_circ",
     "every human direction equal or opposite (no spread around the circular mean)"),
    ([(3, 4), (4, 3), (0, 5)], [(3, 4), (4, 2), (0, 6)], "r_spd", "every ground-truth speed equal (no variance)"),
    ([(1, 0), (0, 0), (0, 0)], [(1, 0), (2, 1), (0, 3)], "r_dir_circ",
     "1 probes with motion in both (at least 2 needed)"),
])
def test_undefined_correlations_say_why(tmp_path, gts, responses, stat, reason):
    motion = _one_dataset_csv(tmp_path / "motion.csv", gts, responses)
    out = tmp_path / "out"
    result = run("analyze-motion", motion, "--out", out, "--no-plots")
    assert result.exit_code == 0, result.output
    label = {"r_uv": "r_uv", "r_dir_circ": "r_dir(circ)", "r_spd": "r_spd"}[stat]
    assert f"{label} undefined ({reason})" in result.output
    human = json.loads((out / "summary.json").read_text())["human_vs_gt"]["All datasets"]
    assert human[stat] is None and human["undefined"][stat] == reason
    defined = [s for s in ("r_uv", "r_dir_circ", "r_spd") if human[s] is not None]
    assert not set(defined) & set(human["undefined"])      # a reason only where the value is missing


def test_a_script_matching_the_true_motion_is_flagged_in_observers_csv(study, tmp_path):
    """A script that answers the true vector (as from an RDK's dot steps, r = 0.99999985 in issue 29) is
    flagged superhuman; the synthetic people (illusion plus 1 px/frame of noise) are not."""
    paths, truth = study
    rng = np.random.default_rng(4)
    rows = [list(r) for r in truth["rows"]]
    script = []
    for k, (clip, probe, dataset, gt, _, x, y) in enumerate(truth["probes"]):
        script.append(["script", clip, probe, 1, *gt, *(gt + rng.normal(0, 1e-4, 2)), 3, 4000, 0, 0, 1, dataset,
                       x, y, 7, 10_000 + k, 0, 0])
    motion = tmp_path / "motion.csv"
    with open(motion, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(HEADER)
        writer.writerows(rows + script)
    out = tmp_path / "analysis"
    result = run("analyze-motion", motion, "--out", out, "--no-plots")
    assert result.exit_code == 0, result.output
    assert "1 observer(s) match the motion more precisely than a person can" in result.output
    observers = {r["worker_id"]: r for r in csv.DictReader((out / "observers.csv").open())}
    assert observers["script"]["flags"] == "superhuman_precision"
    assert float(observers["script"]["median_rel_error"]) < 1e-3
    assert all(observers[f"w{k}"]["flags"] == "" and float(observers[f"w{k}"]["median_rel_error"]) > 0.05
               for k in range(4))
    assert json.loads((out / "summary.json").read_text())["counts"]["superhuman_observers"] == 1
