import json

import numpy as np
import pytest
from click.testing import CliRunner

from analysis.active_replay import RecordedOutcomes, replay_study, replay_votes
from analysis.formats import read_votes
from server.cli import cli


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.fixture(scope="module")
def dense(tmp_path_factory):
    """Two sets of 8 items, every pair voted 6 times by honest Thurstone workers."""
    out = tmp_path_factory.mktemp("dense")
    result = run("simulate-votes", "--out", out, "--sets", "2", "--items", "8", "--degree", "7",
                 "--votes-per-pair", "6", "--workers", "12", "--random-clickers", "0", "--left-clickers", "0",
                 "--seed", "2")
    assert result.exit_code == 0, result.output
    return out / "votes.csv"


def test_replay_active_prints_a_table_and_writes_json(dense, tmp_path):
    report = tmp_path / "replay.json"
    result = run("replay-active", dense, "--budgets", "1,0.5", "--repeats", "3", "--seed", "1",
                 "--json-out", report)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("2 set(s), 3 repeat(s)")
    assert "random SROCC" in lines[1] and "active RMSE" in lines[1]
    assert [line.split()[0] for line in lines[3:5]] == ["0.5", "1"]
    assert "ms per batch" in lines[5]
    figures = json.loads(report.read_text())
    assert figures["budgets"] == [0.5, 1.0]
    for strategy in ("random", "active"):
        assert len(figures[strategy]["srocc"]) == len(figures[strategy]["rmse"]) == 2
        assert all(-1 <= r <= 1 for r in figures[strategy]["srocc"])
        assert all(e >= 0 for e in figures[strategy]["rmse"])
    assert figures["selection_ms_per_batch"] > 0 and figures["sets"] == ["set01", "set02"]


def test_replay_is_determined_by_its_seed(dense):
    votes = read_votes(dense)
    one = replay_votes(votes, [0.5, 1], 2, seed=4).to_json()
    two = replay_votes(votes, [1, 0.5], 2, seed=4).to_json()
    other = replay_votes(votes, [0.5, 1], 2, seed=5).to_json()
    for key in ("random", "active"):
        np.testing.assert_array_equal(one[key]["srocc"], two[key]["srocc"])
    assert one["random"] != other["random"]


def test_sparse_sets_are_refused_with_one_error_line(tmp_path):
    out = tmp_path / "sparse"
    assert run("simulate-votes", "--out", out, "--sets", "1", "--items", "30", "--degree", "4",
               "--votes-per-pair", "2", "--workers", "10", "--seed", "0").exit_code == 0
    result = run("replay-active", out / "votes.csv", "--repeats", "1")
    assert result.exit_code == 2
    assert result.output.strip().count("\n") == 0
    assert "set 'set01' is not densely compared: 60 of 435 pairs (13.8%)" in result.output


@pytest.mark.parametrize("content, args, fragment", [
    (b"worker_id,set_id,item_a,winner\nw,s,a,a\n", [], "missing column item_b"),
    (b"worker_id,set_id,item_a,item_b,winner\nw,s,a,b,z\n", [], "line 2: winner 'z' is neither"),
    (b"worker_id,set_id,item_a,item_b,winner\nw,s,a,b,a\nw,s,b,a,a\n", [], "at least 3"),
    (b"worker_id,set_id,item_a,item_b,winner\nw,s,a,b,a\nw,s,b,c,b\nw,s,a,c,a\n", ["--budgets", "1,x"],
     "not a comma-separated list"),
    (b"worker_id,set_id,item_a,item_b,winner\nw,s,a,b,a\nw,s,b,c,b\nw,s,a,c,a\n", ["--budgets", "0,1"],
     "positive"),
])
def test_bad_input_gives_a_clear_error_and_exit_2(tmp_path, content, args, fragment):
    votes = tmp_path / "votes.csv"
    votes.write_bytes(content)
    result = run("replay-active", votes, "--repeats", "1", *args)
    assert result.exit_code == 2
    assert fragment in result.output


def test_budgets_beyond_the_recorded_votes_are_flagged(dense):
    result = CliRunner().invoke(cli, ["replay-active", str(dense), "--budgets", "5", "--repeats", "1"])
    assert result.exit_code == 0, result.output
    assert "note: 2 set(s) (set01, set02) have fewer than 10 votes per pair" in result.output


@pytest.mark.parametrize("pair_limit", [True, False])
def test_active_replay_asks_a_pair_at_most_as_often_as_it_was_recorded(pair_limit):
    n = 8
    i, j = np.triu_indices(n, 1)
    truth = np.linspace(-1, 1, n)
    outcomes = RecordedOutcomes.from_votes(i, j, truth[i] > truth[j])  # every pair recorded once
    study = replay_study(n, outcomes, truth, [1.0], "active", np.random.default_rng(0), pair_limit=pair_limit)
    assert study.asked.sum() == 28
    assert bool(study.asked.max() == 1) == pair_limit
