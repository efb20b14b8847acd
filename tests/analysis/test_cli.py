import json
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from analysis.correlation import srocc
from analysis.formats import OVERALL_COLUMNS, SCALES_COLUMNS, WORKERS_COLUMNS, read_table
from server.cli import cli


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    out = tmp_path_factory.mktemp("sim")
    result = CliRunner().invoke(cli, ["simulate-votes", "--out", str(out), "--sets", "3", "--items", "30",
                                      "--workers", "50", "--votes-per-pair", "12", "--seed", "4"])
    assert result.exit_code == 0, result.output
    return out


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def test_analyze_writes_every_output_and_recovers_the_truth(simulated, tmp_path):
    out = tmp_path / "analysis"
    result = run("analyze", simulated / "votes.csv", "--out", out, "--bootstrap", "200")
    assert result.exit_code == 0, result.output
    names = {p.name for p in out.iterdir()}
    assert {"scales.csv", "overall.csv", "workers.csv", "summary.json", "pareto.csv",
            "scales.png", "worker_tpr.png", "win_proportions.png"} <= names
    scales = read_table(out / "scales.csv", SCALES_COLUMNS, numeric=("scale", "ci_low", "ci_high", "rank"))
    truth = read_table(simulated / "truth.csv", ("set_id", "item_id", "true_scale"), numeric=("true_scale",))
    for set_id in {r["set_id"] for r in truth}:
        est = {r["item_id"]: r["scale"] for r in scales if r["set_id"] == set_id}
        tru = {r["item_id"]: r["true_scale"] for r in truth if r["set_id"] == set_id}
        assert srocc([est[k] for k in tru], list(tru.values())) > 0.9
    values = np.array([r["scale"] for r in scales])
    assert ((values > 0) & (values < 1)).all()
    assert all(r["ci_low"] <= r["scale"] <= r["ci_high"] for r in scales)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["parameters"]["bootstrap"] == 200 and summary["screening"]["rule"] == "auto"
    workers = read_table(out / "workers.csv", WORKERS_COLUMNS)
    kinds = {r["worker_id"]: r["type"] for r in read_table(simulated / "workers_truth.csv", ("worker_id", "type"))}
    assert all(kinds[w["worker_id"]] == "honest" for w in workers if w["kept"] == "1")
    assert len(read_table(out / "overall.csv", OVERALL_COLUMNS)) == 30


def test_analyze_options_keep_fraction_ls_and_objective(simulated, tmp_path):
    objective = tmp_path / "rmse.csv"
    objective.write_text("item_id,rmse\n" + "".join(f"m{k:03d},{k}\n" for k in range(30)))
    out = tmp_path / "a"
    result = run("analyze", simulated / "votes.csv", "--out", out, "--method", "ls", "--keep", "0.6",
                 "--no-anchors", "--bootstrap", "0", "--objective", objective, "--no-plots")
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["screening"]["rule"] == "fraction" and summary["parameters"]["method"] == "ls"
    assert summary["screening"]["kept_vote_fraction"] >= 0.6
    assert summary["unit"] == "z" and "Thurstone" in summary["units"] and summary["reranking"]["n"] == 30
    rerank = read_table(out / "rerank.csv", ("item_id", "rank_difference"))
    assert len(rerank) == 30
    assert not any(p.suffix == ".png" for p in out.iterdir())


@pytest.mark.parametrize("content, fragment", [
    (b"", "file is empty"),
    (b"worker_id,set_id,item_a,winner\nw,s,a,a\n", "line 1: missing column item_b"),
    (b"worker_id,set_id,item_a,item_b,winner\nw,s,a,b,z\n", "line 2: winner 'z' is neither"),
    (b"worker_id,set_id,item_a,item_b,winner\nw,s,a,b,a\nw,t,q,q,q\n", "line 3: set 't' has only one item"),
    (b"worker_id,set_id,item_a,item_b,winner\nw,s,\xff,b,b\n", "line 2: not valid UTF-8"),
    (b"worker_id,set_id,item_a,item_b,winner\nw,s,a,b,a\nw,s,c,d,c\n", "disconnected components"),
])
def test_bad_input_gives_one_error_line_exit_2_and_no_output(tmp_path, content, fragment):
    votes = tmp_path / "votes.csv"
    votes.write_bytes(content)
    out = tmp_path / "out"
    result = run("analyze", votes, "--out", out, "--bootstrap", "10")
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0]
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["votes.csv"]  # no staging folder left behind


def test_missing_file_and_bad_keep(tmp_path):
    result = run("analyze", tmp_path / "nope.csv", "--out", tmp_path / "o")
    assert result.exit_code == 2 and "cannot read" in result.output
    (tmp_path / "v.csv").write_text("worker_id,set_id,item_a,item_b,winner\nw,s,a,b,a\n")
    result = run("analyze", tmp_path / "v.csv", "--out", tmp_path / "o", "--keep", "1.5")
    assert result.exit_code == 2 and "(0, 1]" in result.output


def test_allow_disconnected_scales_anyway(tmp_path):
    votes = tmp_path / "votes.csv"
    votes.write_text("worker_id,set_id,item_a,item_b,winner\nw,s,a,b,a\nw,s,c,d,c\n")
    result = run("analyze", votes, "--out", tmp_path / "o", "--allow-disconnected", "--bootstrap", "0",
                 "--keep", "none", "--no-plots")
    assert result.exit_code == 0, result.output


def test_console_script_is_installed():
    result = subprocess.run([sys.executable, "-m", "server.cli", "--help"], capture_output=True, text=True)
    assert result.returncode == 0 and "analyze" in result.stdout and "simulate-votes" in result.stdout
