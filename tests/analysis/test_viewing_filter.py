"""The [viewing] checks in the analysis (analysis/viewing.py): analyze-ratings and analyze keep only the workers who
passed them, read from workers.csv's viewing_passed."""
import json

import numpy as np
import pytest
from click.testing import CliRunner

from analysis.formats import read_votes
from analysis.rating_models import simulate_ratings
from analysis.viewing import keep_workers, viewing_passed
from server.cli import cli

from .rating_support import write_ratings


def _workers_csv(path, passed, failed, blank=()):
    rows = ["worker_id,viewing_passed,viewing_failed"] + [f"{w},1," for w in passed] + \
        [f"{w},0,colour" for w in failed] + [f"{w},," for w in blank]
    path.write_text("\n".join(rows) + "\n")
    return path


def test_analyze_ratings_keeps_only_the_workers_who_passed(tmp_path):
    sim = simulate_ratings(12, 10, quality_sd=1.3, inconsistency_range=(0.2, 0.4), seed=3)
    ratings = write_ratings(tmp_path / "ratings.csv", sim, {"is_gold": np.zeros(len(sim.rating), dtype=int)})
    ids = list(sim.worker_ids)
    workers = _workers_csv(tmp_path / "workers_meta.csv", ids[:7], ids[7:9], ids[9:])
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["analyze-ratings", str(ratings), "--out", str(out), "--no-plots",
                                      "--no-screening", "--workers", str(workers), "--viewing-passed"])
    assert result.exit_code == 0, result.output
    assert json.loads((out / "summary.json").read_text())["counts"]["workers"] == 7
    refused = CliRunner().invoke(cli, ["analyze-ratings", str(ratings), "--out", str(out), "--viewing-passed"])
    assert refused.exit_code != 0 and "--workers" in refused.output
    plain = _workers_csv(tmp_path / "plain.csv", [], [])
    plain.write_text("worker_id,status\nw1,active\n")
    refused = CliRunner().invoke(cli, ["analyze-ratings", str(ratings), "--out", str(out), "--workers", str(plain),
                                       "--viewing-passed"])
    assert refused.exit_code != 0 and "viewing_passed" in refused.output


def test_votes_of_failed_workers_are_left_out(tmp_path):
    votes_csv = tmp_path / "votes.csv"
    votes_csv.write_text("worker_id,set_id,item_a,item_b,winner\n"
                         "w1,s,a,b,a\nw2,s,a,b,b\nw3,s,b,c,c\nw1,s,a,c,a\n")
    votes = read_votes(votes_csv)
    kept = keep_workers(votes, viewing_passed(_workers_csv(tmp_path / "w.csv", ["w1", "w3"], ["w2"])))
    assert sorted(kept.worker_ids[kept.worker]) == ["w1", "w1", "w3"]
    with pytest.raises(ValueError, match="viewing_passed"):
        viewing_passed(votes_csv)
