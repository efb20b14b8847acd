"""votes.csv exports (server/paradigms/paired/export.py, `perceptlab export`, the dashboard download), on SQLite and PostgreSQL."""
from __future__ import annotations

import csv
import datetime as dt
import io
import re

import numpy as np
from click.testing import CliRunner
from scipy.stats import spearmanr
from sqlalchemy import select

from analysis.formats import read_votes
from analysis.pipeline import AnalysisOptions, analyze
from server import exports
from server.paradigms.paired import export as paired_export
from server.cli import cli
from server.models import Study
from server.services import app_services

from .conftest import SMALL_STUDY, WorkerClient, create_test_study
from .simulated_votes import QUALITY, add_votes

SECRET = "test-secret"  # make_test_app's secret key


def _study_id(app, slug: str) -> int:
    with app_services(app).sessions() as session:
        return session.scalar(select(Study.id).where(Study.slug == slug))


def _export(app, slug: str, **kwargs) -> list[dict]:
    kwargs.setdefault("salt", exports.study_salt(SECRET, slug))
    with app_services(app).sessions() as session:
        return paired_export.export_votes(session, _study_id(app, slug), **kwargs)


def _api_worker(app, study: str, worker_id: str) -> WorkerClient:
    worker = WorkerClient(app.test_client(), study, worker_id=worker_id)
    worker.start()
    worker.answer_page(worker.correct_side)  # quiz
    worker.answer_page(worker.correct_side)  # 5 real pairs (left) + 1 hidden gold (right answer)
    return worker


def test_export_format(app, study, demo_stimuli, tmp_path):
    """The demo's gold pairs are pairs of its design: their quiz and hidden gold trials are exported as votes of
    those pairs (``is_gold`` 0) with a known answer (``gold_winner``). With the design redrawn (degree 2) most
    gold pairs lie outside it and are gold-only pairs (``is_gold`` 1, items of their own)."""
    redrawn = create_test_study(app, demo_stimuli, tmp_path, slug="redrawn", design={"degree": 2}, **SMALL_STUDY)
    gold_only = 0
    for slug in (study, redrawn):
        worker = _api_worker(app, slug, "WFORMAT1")
        rows = _export(app, slug)
        assert len(rows) == 3 + 6
        text = paired_export.votes_csv_text(rows)
        header = text.splitlines()[0].split(",")
        assert header[:5] == ["worker_id", "set_id", "item_a", "item_b", "winner"]
        assert {"position_a", "trial_id", "is_gold", "gold_winner", "created_at", "rt_ms"} <= set(header)
        records = list(csv.DictReader(io.StringIO(text)))
        trial_ids = {t["trial_id"] for t in worker.state()["page"]["trials"]}
        for r in records:
            assert r["winner"] in (r["item_a"], r["item_b"]) and r["position_a"] in ("left", "right")
            assert dt.datetime.fromisoformat(r["created_at"]).tzinfo is not None and float(r["rt_ms"]) == 1234.5
            if r["is_gold"] == "1":  # a gold-only pair: stimuli of its own
                assert re.fullmatch(r"__gold_better_[1-9][0-9]*__", r["gold_winner"])
                assert {r["item_a"], r["item_b"]} == {r["gold_winner"], r["gold_winner"].replace("better", "worse")}
            else:  # a vote of a design pair, with a known answer when it was a gold trial
                assert r["gold_winner"] in ("", r["item_a"], r["item_b"]) and "__gold" not in r["item_a"] + r["item_b"]
        checks = [r for r in records if r["gold_winner"]]
        gold_only += sum(r["is_gold"] == "1" for r in records)
        if slug == study:
            assert not any(r["is_gold"] == "1" for r in records)
        # The worker clicked "left" on every real trial: position_a says which item that was.
        real = [r for r in records if r["trial_id"] in trial_ids and not r["gold_winner"]]
        assert len(real) == 5 and all((r["winner"] == r["item_a"]) == (r["position_a"] == "left") for r in real)
        assert sum(r["is_quiz"] == "1" for r in records) == 3 and len(checks) == 4
        assert len({r["trial_id"] for r in records}) == len(records)
        # Quiz and hidden gold never showed the worker the same gold pair twice (a third of each scene's design in the study).
        assert len({(r["set_id"], r["gold_winner"]) for r in checks}) == 4
        # analysis.formats reads it as it is, gold answers included: checks, and votes of design pairs scaled.
        path = tmp_path / f"{slug}.csv"
        path.write_text(text)
        votes = read_votes(path)
        assert len(votes) == 9 and votes.is_check.sum() == 4 and votes.gold_correct.sum() == 4
        assert votes.is_gold.sum() == sum(r["is_gold"] == "1" for r in records)
        # Without the checks: no gold-only pair's vote, and no known answer (a design pair's vote stays a vote).
        no_gold = _export(app, slug, include_gold=False)
        assert len(no_gold) == 9 - sum(r["is_gold"] == "1" for r in records)
        assert all(r["is_gold"] == "0" and r["gold_winner"] == "" for r in no_gold)
    assert gold_only > 0


def test_pseudonyms_are_stable_keyed_and_not_raw(app, study):
    _api_worker(app, study, "WPSEUDO1")
    _api_worker(app, study, "WPSEUDO2")
    first, again = _export(app, study), _export(app, study)
    ids = [r["worker_id"] for r in first]
    assert ids == [r["worker_id"] for r in again]
    assert len(set(ids)) == 2 and all(re.fullmatch(r"w_[0-9a-f]{12}", i) for i in ids)
    assert "WPSEUDO" not in paired_export.votes_csv_text(first)
    raw = _export(app, study, pseudonymise=False, salt=None)
    assert {r["worker_id"] for r in raw} == {"WPSEUDO1", "WPSEUDO2"}
    # Keyed: another study or another secret key gives other pseudonyms.
    salt = exports.study_salt(SECRET, study)
    assert exports.pseudonym(salt, "WPSEUDO1") in ids
    assert exports.pseudonym(exports.study_salt(SECRET, "other"), "WPSEUDO1") not in ids
    assert exports.pseudonym(exports.study_salt("another key", study), "WPSEUDO1") not in ids


def test_round_trip_into_analysis(app, study, tmp_path):
    add_votes(app, study, honest=6, random=2, seed=3)
    path = tmp_path / "votes.csv"
    path.write_text(paired_export.votes_csv_text(_export(app, study)))
    votes = read_votes(path)
    result = analyze(votes, AnalysisOptions(n_boot=20, progress=False))
    # The demo's gold pairs are design pairs: their votes are checks, and scaled like any vote.
    assert result.summary["counts"]["sets"] == 4 and result.summary["counts"]["checks"] == 8 * 4
    assert result.summary["counts"]["gold_votes"] == 0
    for set_id in votes.set_ids:
        scales = {r["item_id"]: r["scale"] for r in result.scales if r["set_id"] == set_id}
        assert set(scales) == set(QUALITY)
        assert spearmanr([QUALITY[k] for k in scales], list(scales.values())).statistic > 0.8
    kept = dict(zip(votes.worker_ids, result.screening.kept))
    honest = [exports.pseudonym(exports.study_salt(SECRET, study), f"SIM3X{k:03d}") for k in range(6)]
    assert all(kept[w] for w in honest)
    # The random clickers also fail the gold check half the time; at most one slips through screening.
    assert int(np.sum([v for w, v in kept.items() if w not in honest])) <= 1


def test_cli_export_and_dashboard_download(app, study, tmp_path, monkeypatch, admin):
    _api_worker(app, study, "WCLI1")
    add_votes(app, study, honest=1, pairs_per_worker=4, seed=5, gold=False)
    monkeypatch.setenv("PERCEPTLAB_SECRET_KEY", SECRET)
    runner, url, out = CliRunner(), app.config["DATABASE_URL"], tmp_path / "export"
    result = runner.invoke(cli, ["export", study, "--out", str(out), "--database-url", url])
    assert result.exit_code == 0, result.output
    assert "13 votes (4 gold) by 2 workers in" in result.output and "pseudonymised" in result.output
    votes_text = (out / "votes.csv").read_text()
    assert "WCLI1" not in votes_text and "WCLI1" not in (out / "workers_meta.csv").read_text()
    # The dashboard serves the very same file.
    download = admin.get(f"/admin/studies/{study}/votes.csv")
    assert download.headers["Content-Disposition"] == f'attachment; filename="{study}-votes.csv"'
    assert download.get_data(as_text=True) == votes_text
    meta = list(csv.DictReader(io.StringIO((out / "workers_meta.csv").read_text())))
    api_worker = next(m for m in meta if m["quiz_total"] == "3")
    assert api_worker["stage"] == "page_done" and api_worker["pages"] == "1" and api_worker["gold_accuracy"] == "1.0"
    assert api_worker["worker_id"] == exports.pseudonym(exports.study_salt(SECRET, study), "WCLI1")
    assert admin.get(f"/admin/studies/{study}/workers.csv").get_data(as_text=True) == \
        (out / "workers_meta.csv").read_text()

    result = runner.invoke(cli, ["export", study, "--out", str(out), "--raw-worker-ids", "--no-gold",
                                 "--database-url", url])
    assert result.exit_code == 0 and "RAW" in result.output
    rows = list(csv.DictReader(io.StringIO((out / "votes.csv").read_text())))
    # Every vote is one of a design pair (the quiz's and hidden gold's too), without its known answer.
    assert len(rows) == 9 + 4 and {r["worker_id"] for r in rows} == {"WCLI1", "SIM5X000"}
    assert not any(r["gold_winner"] for r in rows)
    assert admin.get(f"/admin/studies/{study}/votes.csv?raw_worker_ids=1&no_gold=1").get_data(as_text=True) == \
        (out / "votes.csv").read_text()
    result = runner.invoke(cli, ["export", "nope", "--out", str(out), "--database-url", url])
    assert result.exit_code == 2 and "no study 'nope'" in result.output
