"""analyze-ratings writes sureal's dataset file: sureal reads it, its mean opinion scores are scores.csv's
under --no-screening, hidden references are sureal's reference videos, and IDs stay literals."""
from __future__ import annotations

import contextlib
import io
import warnings

import numpy as np
import pytest
from click.testing import CliRunner

from analysis.formats import read_table
from analysis.rating_models import simulate_ratings
from analysis.rating_report import SCORES_COLUMNS
from server.cli import cli

from .rating_support import NFLX_CSV, write_ratings


def _sureal(path):
    from sureal.dataset_reader import RawDatasetReader
    from sureal.tools.misc import import_python_file
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)     # sureal's loader uses load_module()
        dataset = import_python_file(str(path))
    return dataset, RawDatasetReader(dataset)


def _mos(reader) -> dict[str, float]:
    scores = reader.opinion_score_3darray            # stimuli x workers x repetitions, NaN where missing
    return {video["path"]: float(np.nanmean(scores[k])) for k, video in enumerate(reader.dis_videos)}


def test_sparse_crowd_ratings_round_trip_through_sureal(tmp_path):
    sim = simulate_ratings(24, 30, ratings_per_stimulus=6, careless=0.2, seed=4)
    path = write_ratings(tmp_path / "ratings.csv", sim)
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["analyze-ratings", str(path), "--out", str(out), "--no-screening",
                                      "--no-plots"])
    assert result.exit_code == 0, result.output
    dataset, reader = _sureal(out / "sureal_dataset.py")
    scores = read_table(out / "scores.csv", SCORES_COLUMNS, numeric=("score",))
    mos = _mos(reader)
    assert set(mos) == {r["stimulus_id"] for r in scores}
    for row in scores:
        assert mos[row["stimulus_id"]] == pytest.approx(row["score"], abs=1e-12)
    # sparse: each stimulus is rated by its 6 workers only, keyed by worker
    assert all(len(v["os"]) == 6 for v in dataset.dis_videos)
    assert reader.num_observers == len(set(sim.worker_ids[sim.worker]))


def test_hidden_references_are_sureals_reference_videos(tmp_path):
    """The public NFLX ratings (ACR-HR): sureal's differential scores come out of our file."""
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["analyze-ratings", str(NFLX_CSV), "--out", str(out), "--no-screening",
                                      "--no-plots"])
    assert result.exit_code == 0, result.output
    dataset, reader = _sureal(out / "sureal_dataset.py")
    is_ref = reader.disvideo_is_refvideo
    assert 0 < sum(is_ref) < len(is_ref)
    refs = {v["path"] for v in dataset.ref_videos}
    assert {v["path"] for v, r in zip(dataset.dis_videos, is_ref) if r} <= refs


def test_ids_are_written_as_literals(tmp_path):
    evil = "x'];import os;os._exit(3);#"
    path = tmp_path / "ratings.csv"
    path.write_text("worker_id,stimulus_id,rating\n" + "".join(f"w{k},{evil},{1 + k % 5}\nw{k},plain,3\n"
                                                               for k in range(4)))
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["analyze-ratings", str(path), "--out", str(out), "--no-screening",
                                      "--no-plots"])
    assert result.exit_code == 0, result.output
    dataset, _ = _sureal(out / "sureal_dataset.py")
    assert {v["path"] for v in dataset.dis_videos} == {evil, "plain"}
