"""perceptlab analyze-ratings and compare-protocols end to end (server/paradigms/rating/cli.py)."""
import json

import numpy as np
import pytest
from click.testing import CliRunner

from analysis.formats import read_table
from analysis.protocols import COMPARISON_COLUMNS
from analysis.rating_models import simulate_ratings
from analysis.rating_report import RATING_WORKERS_COLUMNS, RATING_WORKERS_EXTRA_COLUMNS, SCORES_COLUMNS
from analysis.rating_screening import RULES
from server.cli import cli
from server.paradigms.rating.cli import SCREENING_RULES

from .rating_support import NFLX_CSV, write_ratings


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    sim = simulate_ratings(30, 24, quality_sd=1.3, inconsistency_range=(0.2, 0.5), careless=0.125,
                           straight_liners=0.0834, seed=8)
    gold = np.zeros(len(sim.rating), dtype=int)
    return sim, write_ratings(tmp_path_factory.mktemp("ratings") / "ratings.csv", sim, {"is_gold": gold})


def test_the_cli_names_the_rules_of_the_analysis():
    assert SCREENING_RULES == RULES


@pytest.mark.parametrize("model, interval", [("mos", "t"), ("mos", "bootstrap"), ("p913", "t"), ("p913", "bootstrap")])
def test_analyze_ratings_writes_the_documented_files_and_screens_the_bad_workers(simulated, tmp_path, model, interval):
    sim, path = simulated
    out = tmp_path / "out"
    result = run("analyze-ratings", path, "--out", out, "--model", model, "--interval", interval, "--n-boot", 200)
    assert result.exit_code == 0, result.output
    assert {p.name for p in out.iterdir()} == {"scores.csv", "workers.csv", "summary.json", "scores.png",
                                               "scores.pdf", "workers.png", "workers.pdf", "sureal_dataset.py"}
    scores = read_table(out / "scores.csv", SCORES_COLUMNS, numeric=("score", "ci_low", "ci_high", "n_ratings"))
    assert len(scores) == 30
    truth = dict(zip(sim.stimulus_ids, sim.true_quality))
    estimate = np.array([r["score"] for r in scores])
    assert np.corrcoef(estimate, [truth[r["stimulus_id"]] for r in scores])[0, 1] > 0.95
    assert all(r["ci_low"] <= r["score"] <= r["ci_high"] for r in scores)
    assert (np.diff(estimate) <= 0).all()                      # best first
    workers = read_table(out / "workers.csv", RATING_WORKERS_COLUMNS + RATING_WORKERS_EXTRA_COLUMNS)
    kind = dict(zip(sim.worker_ids, sim.worker_type))
    assert {w["worker_id"] for w in workers if w["kept"] == "0"} == {w for w, k in kind.items() if k != "honest"}
    # a straight-liner ignores the quality, so the careless rule flags them too
    assert all("straight_liner" in w["flags"].split(";") for w in workers if kind[w["worker_id"]] == "straight")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["model"] == model and summary["parameters"]["interval"] == interval
    assert summary["counts"]["kept_workers"] == 19 and summary["scale"]["name"] == "acr"


def test_dmos_of_the_public_nflx_dataset(tmp_path):
    result = run("analyze-ratings", NFLX_CSV, "--out", tmp_path, "--dmos", "--no-screening", "--no-plots")
    assert result.exit_code == 0, result.output
    assert "DMOS (ACR-HR)" in result.output
    scores = read_table(tmp_path / "scores.csv", SCORES_COLUMNS, numeric=("score", "n_ratings"))
    assert len(scores) == 70 and all(r["n_ratings"] == 26 for r in scores)
    assert not any(r["stimulus_id"].endswith("fps") for r in scores)    # the references are not scored


@pytest.mark.parametrize("content, fragment", [
    (b"", "file is empty"),
    (b"worker_id,stimulus_id\nw,a\n", "line 1: missing column rating"),
    (b"worker_id,stimulus_id,rating\nw,a,x\n", "line 2: rating 'x' is not a number"),
    (b"worker_id,stimulus_id,rating\nw,a,7\n", "line 2: rating '7' is outside the ACR scale 1..5"),
    (b"worker_id,stimulus_id,rating,is_gold\nw,a,3,1\n", "every row is a gold question"),
    (b"worker_id,stimulus_id,rating\nw,a,3\n", "no reference_id names a rated stimulus"),
])
def test_bad_input_gives_one_error_line_exit_2_and_no_output(tmp_path, content, fragment):
    path = tmp_path / "ratings.csv"
    path.write_bytes(content)
    result = run("analyze-ratings", path, "--out", tmp_path / "out", "--dmos")
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], result.output
    assert not (tmp_path / "out").exists()


def test_the_content_model_on_the_nflx_contents(tmp_path):
    result = run("analyze-ratings", NFLX_CSV, "--out", tmp_path, "--model", "mle", "--no-plots")
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert len(summary["contents"]) == 9 and summary["model_fit"]["converged"]
    assert all(c["ambiguity"] >= 0 for c in summary["contents"])
    scores = read_table(tmp_path / "scores.csv", SCORES_COLUMNS, numeric=("score", "ci_low", "ci_high"))
    # a latent quality may lie beyond the scale (0.99 on 1..5); its interval stays on the scale
    assert len(scores) == 79 and all(r["ci_low"] < min(max(r["score"], 1.0), 5.0) < r["ci_high"]
                                     or r["ci_low"] == 1.0 for r in scores)
    assert all(1.0 <= r["ci_low"] < r["ci_high"] <= 5.0 for r in scores)


@pytest.mark.parametrize("args, fragment", [(["--interval", "bootstrap"], "normal interval only"),
                                            ([], "every stimulus is a content of its own")])
def test_the_content_model_refuses_what_it_cannot_do(simulated, tmp_path, args, fragment):
    result = run("analyze-ratings", simulated[1], "--out", tmp_path / "out", "--model", "mle", *args)
    assert result.exit_code == 2 and result.output.count("\n") == 1 and fragment in result.output, result.output


def test_compare_protocols_end_to_end(simulated, tmp_path):
    sim, path = simulated
    assert run("analyze-ratings", path, "--out", tmp_path / "ratings", "--no-plots").exit_code == 0
    # a PC study of the same stimuli: a scale that is a monotonic (non-linear) function of the truth plus noise
    rng = np.random.default_rng(0)
    pc = np.exp(sim.true_quality / 2) + rng.normal(0, 0.05, len(sim.true_quality))
    rows = "".join(f"set1,{s},{v!r},,,1,10,z\n" for s, v in zip(sim.stimulus_ids, map(float, pc)))
    (tmp_path / "scales.csv").write_text("set_id,item_id,scale,ci_low,ci_high,rank,n_votes,unit\n" + rows)
    result = run("compare-protocols", "--pc", tmp_path / "scales.csv", "--ratings", tmp_path / "ratings" / "scores.csv",
                 "--out", tmp_path / "cmp", "--n-boot", 300)
    assert result.exit_code == 0, result.output
    assert "30 stimuli joined (item_id" in result.output
    rows = read_table(tmp_path / "cmp" / "comparison.csv", COMPARISON_COLUMNS, numeric=("pc_scale", "score"))
    assert len(rows) == 30
    summary = json.loads((tmp_path / "cmp" / "summary.json").read_text())
    assert summary["srocc"]["r"] > 0.9 and summary["srocc"]["bootstrap_low"] < summary["srocc"]["r"]
    assert {"comparison.png", "comparison.pdf"} <= {p.name for p in (tmp_path / "cmp").iterdir()}
    bad = run("compare-protocols", "--pc", tmp_path / "scales.csv", "--ratings", tmp_path / "scales.csv",
              "--out", tmp_path / "bad")
    assert bad.exit_code == 2 and bad.output.count("\n") == 1 and "missing columns stimulus_id, score" in bad.output


def test_the_command_line_finds_the_rating_commands_without_importing_paradigms_or_numerics():
    """server/cli/__init__.py imports each server/paradigms/<package>/cli.py by its file: listing the commands
    imports neither the paradigms (nor the database layer) nor the analysis numerics."""
    import subprocess
    import sys

    heavy = ("numpy", "sqlalchemy", "flask", "server.paradigms.core", "server.models", "analysis.ratings")
    code = ("import sys, server.cli; print(' '.join(sorted(server.cli.cli.commands))); "
            f"print([m for m in {heavy!r} if m in sys.modules])")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    commands, imported = result.stdout.splitlines()
    assert {"analyze-ratings", "compare-protocols", "analyze"} <= set(commands.split())
    assert imported == "[]"


def test_a_paired_comparison_study_and_a_rating_study_of_the_same_images_join_by_scene_and_method(tmp_path):
    """The whole flow: `analyze` of simulated votes, `analyze-ratings` of simulated ACR ratings of the same
    items named SCENE/METHOD, then `compare-protocols` with the default join."""
    from analysis.simulate import simulate_study, write_study
    from stimuli.csv_safety import csv_text

    study = simulate_study(n_sets=2, n_items=16, degree=6, votes_per_pair=10, n_workers=30, random_clickers=0,
                           left_clickers=0, seed=5)
    paths = write_study(study, tmp_path / "pc")
    assert run("analyze", paths["votes"], "--out", tmp_path / "pc_out", "--bootstrap", "0", "--no-plots",
               "--no-bias-test").exit_code == 0
    rng = np.random.default_rng(6)
    rows = []
    for set_id, truth in study.truth.items():
        quality = 3 + 1.4 * np.tanh(truth / 1.5)                  # a monotonic, non-linear relation
        for worker in range(15):
            bias = rng.normal(0, 0.2)
            for item, q in zip(study.item_ids, quality):
                value = float(np.clip(np.round(q + bias + rng.normal(0, 0.4)), 1, 5))
                rows.append([f"w{worker}", f"{set_id}/{item}", value])
    (tmp_path / "ratings.csv").write_text(csv_text(["worker_id", "stimulus_id", "rating"], rows))
    assert run("analyze-ratings", tmp_path / "ratings.csv", "--out", tmp_path / "r_out", "--no-plots").exit_code == 0
    result = run("compare-protocols", "--pc", tmp_path / "pc_out" / "scales.csv", "--ratings",
                 tmp_path / "r_out" / "scores.csv", "--out", tmp_path / "cmp", "--n-boot", 200, "--no-plots")
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "cmp" / "summary.json").read_text())
    assert summary["join"] == {"rule": "set_id/item_id", "pc_items_unmatched": 0, "stimuli_unmatched": 0}
    assert summary["n"] == 32 and summary["srocc"]["r"] > 0.85
    assert summary["srocc"]["bootstrap_low"] < summary["srocc"]["r"] < summary["srocc"]["bootstrap_high"]
