"""ratings.csv: its columns (what `perceptlab analyze-ratings` reads), pseudonymised workers, pilots left out,
CCR stored with positive meaning the test is better, stimulus IDs that join a paired study's votes.csv, and
`perceptlab results` of a rating study through the paradigm's results hook."""
from __future__ import annotations

import csv
import io

from click.testing import CliRunner
from sqlalchemy import select

from server.cli import cli
from server.exports import export_study, study_salt
from server.models import Study
from server.paradigms.rating.export import RATINGS_COLUMNS
from server.services import app_services

from .conftest import create_test_study
from .rating_support import SMALL, RatingWorker, create_rating_study, trial_facts


def _export(app, slug: str, **options) -> list[dict]:
    with app_services(app).sessions() as session:
        study = session.scalar(select(Study).where(Study.slug == slug))
        files = export_study(session, study, salt=study_salt("test-secret", slug), **options).files
    assert set(files) == {"ratings.csv", "workers_meta.csv"}
    text = files["ratings.csv"]
    assert text.splitlines()[0] == ",".join(RATINGS_COLUMNS)
    return list(csv.DictReader(io.StringIO(text)))


def _varied(trial: dict) -> int:
    return 1 + trial["position"] % 5


def test_ratings_csv_columns_pseudonyms_and_pilots(app, rating_study):
    worker = RatingWorker(app.test_client(), rating_study)
    worker.pass_training()
    worker.answer_page(lambda trial: worker.honest(trial) if trial_facts(app, trial["id"])[0] != "test"
                       else _varied(trial))
    pilot = RatingWorker(app.test_client(), rating_study, pilot=True)
    pilot.pass_training()
    pilot.answer_page(pilot.honest)
    rows = _export(app, rating_study)
    assert len(rows) == 3 + 8 and {r["worker_id"] for r in rows} == {rows[0]["worker_id"]}
    assert rows[0]["worker_id"].startswith("w_") and rows[0]["worker_id"] != worker.worker_id
    for row in rows:
        assert row["method"] == row["scale"] == "dcr"
        set_id, item = row["stimulus_id"].split("/")
        assert (set_id, item) == (row["set_id"], row["item_id"]) and row["reference_id"] == f"{set_id}/__reference__"
        assert float(row["rt_ms"]) == 2310.0 and row["created_at"].endswith("+00:00") and row["trial_id"].isdigit()
        if row["is_gold"] == "1":
            assert row["check"] in ("hidden_reference", "gold_low") and row["in_range"] == "1"
            assert float(row["gold_low"]) <= float(row["rating"]) <= float(row["gold_high"])
        else:
            assert row["check"] == row["gold_low"] == row["in_range"] == "" and not item.startswith("__")
    assert sum(r["is_quiz"] == "1" for r in rows) == 3
    assert len(_export(app, rating_study, include_gold=False)) == 6
    assert len(_export(app, rating_study, include_pilot=True)) == 2 * 11


def test_ccr_export_is_normalised_and_acr_hidden_references_are_data(app, rating_manifest, tmp_path):
    ccr = create_rating_study(app, rating_manifest, tmp_path, slug="ccr",
                              **{**SMALL, "rating": {"method": "ccr"}, "quality": {"quiz_size": 0, "gold_rate": 0.0}})
    worker = RatingWorker(app.test_client(), ccr)
    worker.pass_training()
    worker.answer_page(lambda trial: (-3, -1, 1, 3)[trial["position"] % 4])
    for row in _export(app, ccr):
        first = trial_facts(app, int(row["trial_id"]))[2]
        assert float(row["rating"]) == (float(row["raw_rating"]) if first else -float(row["raw_rating"]))
    acr = create_rating_study(app, rating_manifest, tmp_path, slug="acr", **{
        **SMALL, "rating": {"method": "acr"}, "quality": {"quiz_size": 0, "gold_rate": 0.5}})
    worker = RatingWorker(app.test_client(), acr)
    worker.pass_training()
    worker.answer_page(worker.honest)
    rows = _export(app, acr)
    hidden = [r for r in rows if r["check"] == "hidden_reference"]
    assert hidden and all(r["is_gold"] == "0" and r["stimulus_id"] == r["reference_id"] for r in hidden)
    assert all(r["is_gold"] == "1" for r in rows if r["check"] == "gold_low")


def test_stimulus_ids_join_a_paired_studys_items(app, rating_manifest, demo_stimuli, tmp_path):
    from server.paradigms.rating.models import RatingStimulus

    create_test_study(app, demo_stimuli, tmp_path, slug="pc")
    create_rating_study(app, rating_manifest, tmp_path, slug="dcr")
    with app_services(app).sessions() as session:
        from server.paradigms.paired.models import Stimulus, StudySet

        pc_items = {f"{s}/{i}" for s, i in session.execute(
            select(StudySet.name, Stimulus.item_id).join(Stimulus, Stimulus.set_id == StudySet.id)
            .where(Stimulus.kind == "candidate"))}
        rated = {f"{s}/{i}" for s, i in session.execute(select(RatingStimulus.scene, RatingStimulus.item_id)
                                                        .where(~RatingStimulus.is_gold))}
    assert rated == pc_items and len(rated) == 44


def test_results_run_the_rating_analysis(app, rating_study, database_url, tmp_path, monkeypatch):
    for _ in range(3):
        worker = RatingWorker(app.test_client(), rating_study)
        worker.pass_training()
        worker.answer_page(lambda trial: worker.honest(trial) if trial_facts(app, trial["id"])[0] != "test"
                           else _varied(trial))
    monkeypatch.setenv("PERCEPTLAB_INSTANCE", str(tmp_path / "lab"))
    monkeypatch.setenv("PERCEPTLAB_DATABASE_URL", database_url)
    monkeypatch.setenv("PERCEPTLAB_SECRET_KEY", "test-secret")  # the app's: the same pseudonyms
    out = tmp_path / "results"
    result = CliRunner().invoke(cli, ["results", rating_study, "--out", str(out), "--no-mturk", "--no-plots"])
    assert result.exit_code == 0, result.output
    assert "ratings.csv" in result.output and f"analysis of ratings.csv -> {out / 'analysis'}" in result.output
    assert (out / "ratings.csv").is_file() and (out / "analysis" / "scores.csv").is_file()
    scores = list(csv.DictReader((out / "analysis" / "scores.csv").open()))
    assert scores and all("/" in s["stimulus_id"] for s in scores)


def test_acr_hr_pages_hold_the_hidden_reference_of_every_scene_so_the_dmos_uses_every_test_rating(
        app, rating_manifest, tmp_path):
    # Issue 37 item 4: each worker gets the hidden reference of every content they rate, on the same page (in the
    # page's random order), so no test rating lacks its worker's reference rating (dv_without_reference = 0).
    from analysis.rating_report import RatingOptions, analyze_ratings
    from analysis.rating_screening import ScreeningOptions
    from analysis.ratings import build_ratings

    slug = create_rating_study(app, rating_manifest, tmp_path, slug="acrhr", **{
        **SMALL, "rating": {"method": "acr", "ratings_per_stimulus": 2}})
    for _ in range(3):
        worker = RatingWorker(app.test_client(), slug)
        worker.pass_training()
        pages = []
        for _ in range(3):
            state = worker.state()
            if state["stage"] != "trials":
                break
            trials = state["page"]["trials"]
            roles = [trial_facts(app, t["id"])[0] for t in trials]
            pages.append((trials, roles))
            body = worker.answer_page(lambda t: worker.honest(t) if trial_facts(app, t["id"])[0] != "test"
                                      else 1 + t["position"] % 5)
            if body.get("stage") == "page_done":
                worker.action("continue")
        assert pages and any(role == "hidden_reference" for _, roles in pages for role in roles)
    rows = [r for r in _export(app, slug) if r["is_quiz"] == "0"]
    tests = [r for r in rows if r["check"] == "" and r["is_gold"] == "0"]
    references = {(r["worker_id"], r["reference_id"]) for r in rows if r["check"] == "hidden_reference"}
    assert tests and all((r["worker_id"], r["reference_id"]) in references for r in tests)
    data = [r for r in rows if r["is_gold"] == "0"]
    ratings = build_ratings([r["worker_id"] for r in data], [r["stimulus_id"] for r in data],
                            [r["rating"] for r in data], reference_id=[r["reference_id"] for r in data], scale="acr")
    result = analyze_ratings(ratings, RatingOptions(dmos=True, screening=ScreeningOptions(rules=())))
    assert result.summary["counts"]["dv_without_reference"] == 0
    assert result.summary["counts"]["kept_ratings"] == len(data)
