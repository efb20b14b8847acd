"""`perceptlab forecast` (server/cli/cmd_forecast.py): a votes file, a study file, a stored study's pilots, errors."""
from __future__ import annotations

import json

import numpy as np
from click.testing import CliRunner
from sqlalchemy import select

from analysis.formats import write_votes
from analysis.simulate import simulate_study
from server.cli import cli
from server.models import Study, Worker
from server.pilot import mark_pilot
from server.services import app_services

from .conftest import WorkerClient, write_study_file

SECRET = "test-secret"  # make_test_app's secret key


def _pilot_csv(tmp_path, **kwargs):
    study = simulate_study(n_sets=2, n_items=12, degree=4, votes_per_pair=8, n_workers=24, seed=3, **kwargs)
    path = tmp_path / "pilot.csv"
    write_votes(path, study.votes.subset(np.arange(len(study.votes)) < 0.4 * len(study.votes)))
    return path


def _run(*args, env=None):
    return CliRunner().invoke(cli, ["forecast", *args], env=env)


def test_a_bare_votes_file_gives_the_table_and_the_json(tmp_path):
    out = tmp_path / "forecast.json"
    result = _run("--pilot", str(_pilot_csv(tmp_path)), "--halfwidth", "1.5", "--units", "jod", "--replicates", "2",
                  "--bootstrap", "20", "--seconds-per-trial", "10", "--arrivals-per-hour", "20",
                  "--json-out", str(out))
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("pilot: ") and lines[1].startswith("target: half-width 1.5 jod")
    assert lines[2].split()[:3] == ["items", "votes", "(band)"]
    assert lines[3].startswith("100 %") and lines[4].startswith("90 %")
    doc = json.loads(out.read_text())
    assert set(doc["votes_needed"]) >= {"total", "low", "high", "per_set"}
    assert set(doc["votes_needed"]["per_set"]) == {"set01", "set02"}
    assert [f["quantile"] for f in doc["forecasts"]] == [1.0, 0.9]
    assert doc["target"] == {**doc["target"], "halfwidth": 1.5, "units": "jod", "sampling": "random"}
    assert doc["assumptions"]["seconds_per_trial"] == 10 and doc["assumptions"]["seconds_source"] == "given"
    if doc["votes_needed"]["total"] is not None:
        assert doc["worker_hours"]["total"] is not None and doc["wall_clock_hours"]["total"] is not None


def test_one_quantile_and_a_study_file_set_the_pay_and_the_sampling(tmp_path, demo_stimuli):
    toml = write_study_file(tmp_path, demo_stimuli, pages={"pairs_per_page": 10, "reward_per_page": "2.00",
                                                           "bonus_per_page": "0.50", "min_pages": 2},
                            quality={"gold_rate": 0.1}, design={"sampling": "active"})
    out = tmp_path / "f.json"
    result = _run(str(toml), "--pilot", str(_pilot_csv(tmp_path)), "--halfwidth", "2", "--quantile", "0.5",
                  "--replicates", "1", "--bootstrap", "20", "--json-out", str(out))
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert [f["quantile"] for f in doc["forecasts"]] == [0.5] and doc["quantile"] == 0.5
    assert doc["target"]["sampling"] == "active"
    a = doc["assumptions"]
    assert (a["pairs_per_page"], a["gold_per_page"], a["votes_per_page"], a["reward"], a["bonus_per_page"],
            a["min_pages"]) == (10, 1, 9, 2.0, 0.5, 2)


def test_bad_input_is_one_error_line(tmp_path, rating_manifest):
    from .rating_support import write_rating_study

    pilot = _pilot_csv(tmp_path)
    ratings = tmp_path / "ratings.csv"
    ratings.write_text("worker_id,stimulus_id,rating\nw1,s1,4\nw2,s1,5\n")
    broken = tmp_path / "broken.csv"
    broken.write_text("worker_id,set_id,item_a,item_b\nw1,s,a,b\n")
    motion = tmp_path / "motion.toml"
    motion.write_text('[study]\nkind = "motion"\nslug = "m"\n')
    rating = write_rating_study(tmp_path, rating_manifest)  # a valid study file without pages of pairs
    cases = [
        (["--halfwidth", "1"], "give the pilot"),
        (["--pilot", str(pilot), "--study", "demo", "--halfwidth", "1"], "give the pilot"),
        (["--pilot", str(ratings), "--halfwidth", "1"], "paired-comparison votes only"),
        (["--pilot", str(broken), "--halfwidth", "1"], "missing column winner"),
        (["--pilot", str(tmp_path / "none.csv"), "--halfwidth", "1"], "cannot read"),
        ([str(motion), "--pilot", str(pilot), "--halfwidth", "1"], "study.clips is required"),
        ([str(rating), "--pilot", str(pilot), "--halfwidth", "1"], "paired comparison) only"),
        (["--pilot", str(pilot), "--halfwidth", "1", "--max-votes", "5"], "below the pilot's"),
    ]
    for args, message in cases:
        result = _run(*args)
        assert result.exit_code == 2, (args, result.output)
        assert result.output.count("\n") == 1 and result.output.startswith("error: "), result.output
        assert message in result.output, result.output


def _work(app, study: str, worker_id: str, pages: int) -> None:
    worker = WorkerClient(app.test_client(), study, worker_id=worker_id)
    worker.start()
    worker.answer_page(worker.correct_side)  # quiz
    stage = None
    for page in range(pages):
        if page:
            assert worker.action("continue").status_code == 200
        stage = worker.answer_page(worker.correct_side)["stage"]
    if stage != "completed":  # the last page of max_pages completes the assignment by itself
        assert worker.action("finish").json["stage"] == "completed"


def test_a_stored_study_forecasts_from_its_pilot_participants_only(app, study, tmp_path):
    pilots = [f"WPILOT{k}" for k in range(5)]
    for worker_id in pilots:
        _work(app, study, worker_id, pages=3)
    _work(app, study, "WREAL", pages=1)
    with app_services(app).sessions() as session:
        s = session.scalar(select(Study).where(Study.slug == study))
        mark_pilot(session, s, list(session.scalars(select(Worker).where(Worker.study_id == s.id,
                                                                         Worker.external_id.in_(pilots)))))
        session.commit()
    out = tmp_path / "f.json"
    result = CliRunner().invoke(cli, ["forecast", "--study", study, "--halfwidth", "3", "--units", "z",
                                      "--replicates", "1", "--bootstrap", "10", "--json-out", str(out),
                                      "--database-url", app.config["DATABASE_URL"]],
                                env={"PERCEPTLAB_SECRET_KEY": SECRET})
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert doc["pilot"]["workers"] == 5
    assert doc["pilot"]["votes"] == 5 * 3 * 5  # three pages of 6 trials, one of them hidden gold
    assert doc["assumptions"]["pairs_per_page"] == 6 and doc["assumptions"]["reward"] == 0.5
    assert doc["pilot"]["seconds_source"] in ("created_at", "rt_ms")
    unknown = CliRunner().invoke(cli, ["forecast", "--study", "nope", "--halfwidth", "3", "--database-url",
                                       app.config["DATABASE_URL"]], env={"PERCEPTLAB_SECRET_KEY": SECRET})
    assert unknown.exit_code == 2 and "no study 'nope'" in unknown.output
