"""`perceptlab forecast` (server/cli/cmd_forecast.py): a votes or ratings file, a study file, a stored study's pilots,
errors."""
from __future__ import annotations

import json

import numpy as np
from click.testing import CliRunner
from sqlalchemy import select

from analysis.formats import write_votes
from analysis.rating_models import simulate_ratings
from analysis.simulate import simulate_study
from server.cli import cli
from server.models import Study, Worker
from server.pilot import mark_pilot
from server.services import app_services

from .conftest import WorkerClient, write_study_file
from .motion_support import write_motion_study

SECRET = "test-secret"  # make_test_app's secret key


def _pilot_csv(tmp_path, **kwargs):
    study = simulate_study(n_sets=2, n_items=12, degree=4, votes_per_pair=8, n_workers=24, seed=3, **kwargs)
    path = tmp_path / "pilot.csv"
    write_votes(path, study.votes.subset(np.arange(len(study.votes)) < 0.4 * len(study.votes)))
    return path


def _ratings_csv(tmp_path):
    """A DCR pilot as a rating study exports it: ``<scene>/<item>`` stimuli, a scale and rt_ms column."""
    sim = simulate_ratings(n_stimuli=24, n_workers=30, ratings_per_stimulus=12, careless=0.2, seed=4)
    path = tmp_path / "ratings.csv"
    rows = [f"{w},scene{int(s[1:]) % 2}/{s},{r},dcr,2500" for w, s, r in zip(*sim.columns().values())]
    path.write_text("worker_id,stimulus_id,rating,scale,rt_ms\n" + "\n".join(rows) + "\n")
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
    # A random design's careless share comes from its posterior: no simulated pilots refitted (share_refits_for).
    assert any("from its posterior" in line for line in doc["model"]), doc["model"]
    # Its inconsistency factor is applied, widened for the few workers who measured it (worker_spread).
    assert any("honest pilot workers" in line for line in doc["model"]), doc["model"]
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
    # An actively sampled study's share is as uncertain as simulated pilots' refits missed theirs.
    assert any("simulated pilots' refits" in line for line in doc["model"]), doc["model"]
    assert not any("honest pilot workers" in line for line in doc["model"]), doc["model"]  # the factor is not applied
    a = doc["assumptions"]
    assert (a["pairs_per_page"], a["gold_per_page"], a["votes_per_page"], a["reward"], a["bonus_per_page"],
            a["min_pages"]) == (10, 1, 9, 2.0, 0.5, 2)


def test_bad_input_is_one_error_line(tmp_path, rating_manifest, demo_stimuli):
    from .rating_support import write_rating_study

    pilot = _pilot_csv(tmp_path)
    ratings = tmp_path / "ratings.csv"
    ratings.write_text("worker_id,stimulus_id,rating\nw1,s1,4\nw2,s1,5\n")
    broken = tmp_path / "broken.csv"
    broken.write_text("worker_id,set_id,item_a,item_b\nw1,s,a,b\n")
    motion = tmp_path / "motion.toml"
    motion.write_text('[study]\nkind = "motion"\nslug = "m"\n')
    rating = write_rating_study(tmp_path, rating_manifest)  # a valid study file with pages of ratings
    paired = write_study_file(tmp_path, demo_stimuli)
    motion_ok = write_motion_study(tmp_path, tmp_path / "clips.json", slug="m2")  # only read: no clips needed
    cases = [
        (["--halfwidth", "1"], "give the pilot"),
        (["--pilot", str(pilot), "--study", "demo", "--halfwidth", "1"], "give the pilot"),
        (["--pilot", str(ratings), "--halfwidth", "1", "--units", "jod"], "MOS half-width in rating points"),
        (["--pilot", str(pilot), "--halfwidth", "1", "--units", "points"], "the unit of ratings"),
        (["--pilot", str(ratings), "--halfwidth", "1", "--sampling", "active"], "--sampling is for paired"),
        (["--pilot", str(pilot), "--halfwidth", "1", "--screen"], "--screen is for ratings"),
        (["--pilot", str(ratings), "--halfwidth", "1", "--max-votes", "1"], "below the pilot's 2 ratings"),
        ([str(rating), "--pilot", str(pilot), "--halfwidth", "1"], "a rating study file"),
        ([str(paired), "--pilot", str(ratings), "--halfwidth", "1"], "holds rating data"),
        (["--pilot", str(broken), "--halfwidth", "1"], "missing column winner"),
        (["--pilot", str(tmp_path / "none.csv"), "--halfwidth", "1"], "cannot read"),
        ([str(motion), "--pilot", str(pilot), "--halfwidth", "1"], "study.clips is required"),
        ([str(motion_ok), "--pilot", str(pilot), "--halfwidth", "1"], "pages of pairs or of ratings"),
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
    # The quiz's 3 and three pages of 6 trials: all votes of design pairs (the demo's gold pairs are design pairs).
    assert doc["pilot"]["votes"] == 5 * (3 + 3 * 6)
    assert doc["assumptions"]["pairs_per_page"] == 6 and doc["assumptions"]["reward"] == 0.5
    # the test clients answer in milliseconds, as bots do: the study's own time estimate stands in
    assert doc["pilot"]["seconds_source"] == "implausible"
    assert doc["assumptions"]["seconds_source"] == "study time prior"
    unknown = CliRunner().invoke(cli, ["forecast", "--study", "nope", "--halfwidth", "3", "--database-url",
                                       app.config["DATABASE_URL"]], env={"PERCEPTLAB_SECRET_KEY": SECRET})
    assert unknown.exit_code == 2 and "no study 'nope'" in unknown.output


def test_a_ratings_file_gives_the_table_and_the_json_in_ratings(tmp_path):
    out = tmp_path / "forecast.json"
    result = _run("--pilot", str(_ratings_csv(tmp_path)), "--halfwidth", "0.5", "--replicates", "4",
                  "--arrivals-per-hour", "20", "--json-out", str(out))
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("pilot: 288 ratings of 30 workers in 2 set(s)")
    assert lines[1].startswith("target: half-width 0.5 points (95 % t interval of each stimulus' mean rating")
    assert lines[2].split()[:3] == ["items", "ratings", "(band)"]
    assert any(line.startswith("counts are ratings") for line in lines)
    doc = json.loads(out.read_text())
    assert doc["work_unit"] == "ratings" and doc["target"]["units"] == "points"
    assert set(doc["votes_needed"]["per_set"]) == {"scene0", "scene1"}
    assert doc["votes_needed"]["low"] <= doc["votes_needed"]["total"] <= doc["votes_needed"]["high"]
    assert doc["votes_needed"]["total"] > 288  # the pilot's intervals are wider than 0.5
    a = doc["assumptions"]  # a rating study's defaults: 20 ratings a page, 2 of them checks, $0.90 and $0.60
    assert (a["pairs_per_page"], a["gold_per_page"], a["reward"], a["bonus_per_page"]) == (20, 2, 0.9, 0.6)
    assert a["seconds_per_trial"] == 2.5 and a["seconds_source"] == "rt_ms"
    assert doc["pilot"]["scale"] == "dcr" and 0 < doc["pilot"]["careless_share"] < 0.5
    assert doc["wall_clock_hours"]["total"] is not None


def test_a_rating_study_file_sets_the_pages_and_pay(tmp_path, rating_manifest):
    from .rating_support import write_rating_study

    toml = write_rating_study(tmp_path, rating_manifest, pages={"ratings_per_page": 10, "reward_per_page": "1.20",
                                                                "bonus_per_page": "0.40", "min_pages": 2},
                              quality={"gold_rate": 0.2})
    out = tmp_path / "f.json"
    result = _run(str(toml), "--pilot", str(_ratings_csv(tmp_path)), "--halfwidth", "0.6", "--units", "points",
                  "--quantile", "0.5", "--replicates", "2", "--json-out", str(out))
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    a = doc["assumptions"]
    assert (a["pairs_per_page"], a["gold_per_page"], a["votes_per_page"], a["reward"], a["bonus_per_page"],
            a["min_pages"]) == (10, 2, 8, 1.2, 0.4, 2)
    assert [f["quantile"] for f in doc["forecasts"]] == [0.5]


def test_a_stored_rating_study_forecasts_from_its_pilot_participants_ratings(app, rating_manifest, tmp_path):
    import random

    from .rating_support import SMALL, RatingWorker, create_rating_study

    slug = create_rating_study(app, rating_manifest, tmp_path, slug="rated", **SMALL)
    rng = random.Random(2)
    api = app.test_client()
    ids = []
    for k in range(4):
        worker = RatingWorker(api, slug, worker_id=f"WRATE{k}")
        worker.pass_training()
        worker.rate_pages(2, lambda: rng.randint(1, 5))
        ids.append(worker.worker_id)
    with app_services(app).sessions() as session:
        s = session.scalar(select(Study).where(Study.slug == slug))
        mark_pilot(session, s, list(session.scalars(select(Worker).where(Worker.study_id == s.id,
                                                                         Worker.external_id.in_(ids[:3])))))
        session.commit()
    out = tmp_path / "f.json"
    result = CliRunner().invoke(cli, ["forecast", "--study", slug, "--halfwidth", "0.5", "--replicates", "2",
                                      "--json-out", str(out), "--database-url", app.config["DATABASE_URL"]],
                                env={"PERCEPTLAB_SECRET_KEY": SECRET})
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert doc["work_unit"] == "ratings" and doc["pilot"]["workers"] == 3 and doc["pilot"]["scale"] == "dcr"
    assert doc["pilot"]["ratings"] == 3 * 2 * 6  # two pages of 8 trials, 2 of them checks
    a = doc["assumptions"]
    assert (a["pairs_per_page"], a["gold_per_page"], a["reward"], a["bonus_per_page"]) == (8, 2, 0.5, 0.4)
    # the test clients answer in milliseconds, as bots do: the study's own time estimate stands in
    assert doc["pilot"]["seconds_source"] == "implausible"
    assert doc["assumptions"]["seconds_source"] == "study time prior"


def _bot_ratings_csv(tmp_path):
    """The DCR pilot of :func:`_ratings_csv` answered in 0.1 s a rating, as a bot or the simulator answers."""
    path = _ratings_csv(tmp_path)
    path.write_text(path.read_text().replace(",2500\n", ",100\n"))
    return path


def test_a_bot_pilots_time_warns_and_leaves_the_hours_unknown(tmp_path):
    out = tmp_path / "f.json"
    result = _run("--pilot", str(_bot_ratings_csv(tmp_path)), "--halfwidth", "0.6", "--quantile", "0.9",
                  "--replicates", "2", "--json-out", str(out))
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "time per trial unknown" in lines[0]
    warning = [line for line in lines if line.startswith("warning: ")]
    assert len(warning) == 1 and "median time per response is 0.10 s (rt_ms), below the 0.5 s" in warning[0]
    assert "hours unknown" in warning[0]
    assert any("stimuli differ in noise" in line for line in lines if line.startswith("assumes: "))
    doc = json.loads(out.read_text())
    assert doc["worker_hours"] == {"total": None, "low": None, "high": None}  # not "0 hours"
    assert doc["pilot"]["seconds_source"] == "implausible" and doc["warnings"] == [warning[0][len("warning: "):]]
    assert len(doc["model"]) == 4


def test_a_bot_pilot_with_a_study_file_takes_the_studys_time_estimate(tmp_path, rating_manifest):
    from server.paradigms import paradigm_of_spec, read_study_file

    from .rating_support import write_rating_study

    toml = write_rating_study(tmp_path, rating_manifest)
    out = tmp_path / "f.json"
    result = _run(str(toml), "--pilot", str(_bot_ratings_csv(tmp_path)), "--halfwidth", "0.6", "--quantile", "0.9",
                  "--replicates", "2", "--json-out", str(out))
    assert result.exit_code == 0, result.output
    spec = read_study_file(toml)
    pace = paradigm_of_spec(spec).time_prior(spec).unit_s / spec.ratings_per_page  # the paradigm's documented pace
    assert f"time per trial {pace:.1f} s (study time prior)" in result.output.splitlines()[0]
    assert f"hours from study time prior: {pace:g} s per trial" in result.output
    doc = json.loads(out.read_text())
    assert doc["assumptions"]["seconds_per_trial"] == pace and doc["worker_hours"]["total"] > 0
