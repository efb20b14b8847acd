"""[stopping] end to end (server/stopping.py): studies with simulated workers stop themselves at their precision
target or at a cap, whichever comes first, tell MTurk and Prolific exactly once, refuse new participants and let
the ones already working finish."""
from __future__ import annotations

import random
import threading

import numpy as np
import pytest
from sqlalchemy import select

from analysis.rating_forecast import RATING_REPLICATES
from server import forecast_jobs, stopping
from server.models import MTurkHit, Study, StudyStopping
from server.mturk import PAST
from server.paradigms.core import study_paradigm
from server.paradigms.paired import live_scales
from server.paradigms.paired.models import ScaleSnapshot
from server.paradigms.studyfile import StudyDefinitionError
from server.prolific import ProlificClient, ProlificService
from server.services import app_services

from .conftest import SMALL_STUDY, WorkerClient, create_test_study, write_study_file
from .prolific_fake import BASE_URL, PROLIFIC_ENTRY, TOKEN, FaultyTransport, make_fake
from .rating_support import SMALL, RatingWorker, consistent_rating, create_rating_study, write_rating_study
from .simulated_votes import add_votes


def _study(app, slug) -> tuple[int, str]:
    with app_services(app).sessions() as session:
        study = session.scalar(select(Study).where(Study.slug == slug))
        return study.id, study.status


def _record(app, study_id) -> StudyStopping | None:
    with app_services(app).sessions() as session:
        record = session.get(StudyStopping, study_id)
        if record is not None:
            session.expunge(record)
        return record


def _paired(app, demo_stimuli, tmp_path, slug="stop", entry=None, **stop):
    app.config["SERVER"]["live_scales_bootstrap"] = 40  # enough for intervals, quick
    return create_test_study(app, demo_stimuli, tmp_path, slug=slug, stopping=stop,
                             entry=entry or {}, **SMALL_STUDY)


def _reanalyse(app, study_id):
    """The live re-analysis (run here synchronously, as the background thread would), which checks [stopping]."""
    return live_scales.refresh_if_stale(app, study_id)


def test_a_paired_study_stops_itself_at_its_precision_target(app, demo_stimuli, tmp_path, client):
    slug = _paired(app, demo_stimuli, tmp_path, halfwidth=1.0, quantile=0.5)  # JOD, [stopping] units' default
    study_id, _ = _study(app, slug)
    app.config["MTURK_CLIENT_FACTORY"] = lambda live: client
    with app_services(app).sessions() as session:
        session.add(MTurkHit(study_id=study_id, hit_id="HITS1", unique_request_token="s1", launch_id="L",
                             batch_index=0, max_assignments=9, reward="0.50", status="Assignable", sandbox=True))
        session.commit()
    add_votes(app, slug, honest=3, seed=1, pairs_per_worker=20)
    assert _reanalyse(app, study_id)
    first = _record(app, study_id)
    assert first.stopped_at is None and first.measured["reason"] is None and not first.measured["target_met"]
    # Three workers: no item has the 5 different kept workers ([stopping] min_workers' default) it needs to count.
    assert first.measured["unit"] == "JOD" and all(s["halfwidth"] is None for s in first.measured["sets"])
    assert all(s["too_few_workers"] == s["items"] for s in first.measured["sets"])
    assert _study(app, slug)[1] == "active"
    # More honest workers narrow the intervals until half the items of every set are within 1 JOD.
    client.stubber.add_response("update_expiration_for_hit", {}, {"HITId": "HITS1", "ExpireAt": PAST})
    for round_ in range(2, 12):
        add_votes(app, slug, honest=4, seed=round_, prefix=f"R{round_}")
        _reanalyse(app, study_id)
        if _record(app, study_id).stopped_at is not None:
            break
    record = _record(app, study_id)
    assert record.reason == "target" and record.measured["target_met"]
    assert all(s["halfwidth"] <= 1.0 for s in record.at_stop["sets"])
    assert _study(app, slug)[1] == "stopped"
    assert record.mturk_told_at is not None and "1 HIT(s) expired" in record.recruiter_note
    # `perceptlab results` in the target's unit judges the target on its own analysis (scales.csv, workers.csv) by
    # the same rule: the same workers kept, the same items counted. Its bootstrap draws the workers in the order of
    # their export pseudonyms, the running estimate in the order of their database IDs, so the half-widths agree
    # within the noise of 40 resamples, not to the digit: it is checked one round of votes past the stop.
    from click.testing import CliRunner

    from server.cli import cli

    add_votes(app, slug, honest=4, seed=40, prefix="LATE")  # workers who were in when the study stopped
    _reanalyse(app, study_id)
    measured = _record(app, study_id).measured
    shown = CliRunner().invoke(cli, ["results", slug, "--out", str(tmp_path / "results"), "--no-mturk", "--no-plots",
                                     "--units", "jod", "--bootstrap", "40", "--allow-disconnected",
                                     "--database-url", app.config["DATABASE_URL"]],
                               env={"PERCEPTLAB_SECRET_KEY": app.config["SECRET_KEY"]})
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("[stopping] target"))
    assert lines[head].startswith("[stopping] target met by this analysis: 95 % half-width at most 1 JOD"), (
        "\n".join(lines[head:]))
    reported = [line for line in lines[head + 1:] if line.startswith("  ") and "items within" in line]
    assert len(reported) == len(measured["sets"])
    for line, s in zip(reported, measured["sets"]):
        assert line.startswith(f"  {s['name']}: ")
        assert float(line.rsplit("half-width ", 1)[1].rstrip(")")) == pytest.approx(s["halfwidth"], rel=0.25)
    assert [line for line in lines[head + 1:] if "do not count" in line or "does not count" in line] == [
        f"    {why}" for s in measured["sets"] for why in s["not_counted"]]
    # Checked again (and again concurrently): nothing more is told (the Stubber has no response left).
    threads = [threading.Thread(target=stopping.check_in_app, args=(app, study_id)) for _ in range(3)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert _record(app, study_id).recruiter_note == record.recruiter_note


def test_the_vote_cap_wins_when_it_comes_first(app, demo_stimuli, tmp_path):
    slug = _paired(app, demo_stimuli, tmp_path, halfwidth=0.01, max_votes=300)
    study_id, _ = _study(app, slug)
    add_votes(app, slug, honest=1, seed=3, pairs_per_worker=100)
    _reanalyse(app, study_id)
    early = _record(app, study_id)
    assert early.stopped_at is None, (early.reason, early.measured)
    add_votes(app, slug, honest=3, seed=4, prefix="MORE", pairs_per_worker=100)
    _reanalyse(app, study_id)
    record = _record(app, study_id)
    assert record.reason == "max_votes" and record.measured["counts"]["responses"] >= 300
    assert not record.measured["target_met"] and "response cap" in record.message
    assert _study(app, slug)[1] == "stopped"


def test_notify_only_records_and_changes_nothing(app, demo_stimuli, tmp_path, client):
    slug = _paired(app, demo_stimuli, tmp_path, max_participants=2, notify_only=True)
    study_id, _ = _study(app, slug)
    app.config["MTURK_CLIENT_FACTORY"] = lambda live: client  # no response queued: any call would fail the test
    with app_services(app).sessions() as session:
        session.add(MTurkHit(study_id=study_id, hit_id="HITN", unique_request_token="n1", launch_id="L",
                             batch_index=0, max_assignments=9, reward="0.50", status="Assignable", sandbox=True))
        session.commit()
    add_votes(app, slug, honest=3, seed=5)
    _reanalyse(app, study_id)
    record = _record(app, study_id)
    assert record.reason == "max_participants" and record.notify_only
    assert record.mturk_told_at is None and record.recruiter_note is None
    assert _study(app, slug)[1] == "active"
    WorkerClient(app.test_client(), slug, platform="link", worker_id="NEWCOMER")  # still admitted


def test_new_entries_are_refused_after_the_stop_and_a_worker_in_progress_finishes(app, demo_stimuli, tmp_path):
    app.config["SERVER"]["stopping_check_seconds"] = 0
    slug = _paired(app, demo_stimuli, tmp_path, max_participants=2)
    api = app.test_client()
    first = WorkerClient(api, slug, platform="link", worker_id="P1")
    assert first.action("consent").status_code == 200  # participants count once they consent
    second = WorkerClient(api, slug, platform="link", worker_id="P2")
    state = second.start()  # an action: the check runs after it and sees 2 participants
    study_id, status = _study(app, slug)
    assert status == "stopped" and _record(app, study_id).reason == "max_participants"
    refused = api.post(f"/api/v1/studies/{slug}/assignments", json={"platform": "link", "worker_id": "P3"})
    assert refused.status_code == 409 and refused.json["error"] == "study_stopped"
    assert "takes no new" in refused.json["message"]
    again = api.post(f"/api/v1/studies/{slug}/assignments", json={"platform": "link", "worker_id": "P1"})
    assert again.status_code == 200  # a participant already in comes back to their assignment
    # The one already working finishes the quiz and a page and gets a code.
    while state["stage"] in ("quiz", "trials"):
        second.answer_page(second.correct_side)
        state = second.state()
        if state["stage"] == "page_done":
            state = second.action("finish").json if second.action("finish").status_code == 200 else second.state()
    assert state["stage"] == "completed" and state["completion"]["code"]
    assert first.state()["stage"] == "instructions"


def test_prolific_is_stopped_once(app, demo_stimuli, tmp_path):
    fake_app, fake_state = make_fake()
    transport = FaultyTransport(fake_app)
    make_client = lambda: ProlificClient(TOKEN, base_url=BASE_URL, transport=transport, sleep=lambda s: None)
    app.config["PROLIFIC_CLIENT_FACTORY"] = make_client
    slug = _paired(app, demo_stimuli, tmp_path, entry=PROLIFIC_ENTRY, max_votes=50)
    study_id, _ = _study(app, slug)
    with app_services(app).sessions() as session:
        service = ProlificService(make_client(), session)
        study = session.get(Study, study_id)
        service.create(study, host="https://lab.example.org", places=5)
        service.publish(study)
        session.commit()
    fake_state.settle()  # Prolific publishes asynchronously (PUBLISHING, then ACTIVE)
    add_votes(app, slug, honest=2, seed=6, pairs_per_worker=40)
    _reanalyse(app, study_id)
    for _ in range(3):
        stopping.check_in_app(app, study_id)
    stops = [c for c in fake_state.calls if c[0] == "POST" and "transition" in c[1]]
    record = _record(app, study_id)
    assert record.reason == "max_votes" and record.prolific_told_at is not None
    assert len([c for c in stops]) == 2  # PUBLISH above, then STOP once
    assert "Prolific: study" in record.recruiter_note
    assert next(iter(fake_state.studies.values()))["status"] in ("AWAITING REVIEW", "COMPLETED")


def test_a_rating_study_stops_at_its_mos_target(app, rating_manifest, tmp_path):
    app.config["SERVER"]["stopping_check_seconds"] = 0
    slug = create_rating_study(app, rating_manifest, tmp_path, stopping={"halfwidth": 1.5, "quantile": 0.5},
                               **{**SMALL, "rating": {"ratings_per_stimulus": 6}})
    study_id, _ = _study(app, slug)
    rng = random.Random(3)
    api = app.test_client()
    stopped_after = None
    for n in range(1, 20):
        worker = RatingWorker(api, slug)
        worker.pass_training()
        worker.rate_stimuli(3, lambda scene, item: consistent_rating(item, rng))
        if _study(app, slug)[1] == "stopped":
            stopped_after = n
            break
    assert stopped_after is not None, "\n".join(stopping.describe(_record(app, study_id)))
    record = _record(app, study_id)
    assert record.reason == "target" and record.measured["unit"] == "MOS points"
    assert all(s["halfwidth"] <= 1.5 for s in record.at_stop["sets"])
    # `perceptlab results` judges the same target on its own analysis (the same screening and intervals) and
    # finds it met with the same numbers, set by set, as the check of the same ratings (the worker who was rating
    # when the study stopped finished their pages).
    from click.testing import CliRunner

    from server.cli import cli

    shown = CliRunner().invoke(cli, ["results", slug, "--out", str(tmp_path / "results"), "--no-mturk", "--no-plots",
                                     "--database-url", app.config["DATABASE_URL"]],
                                env={"PERCEPTLAB_SECRET_KEY": app.config["SECRET_KEY"]})
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("[stopping] target"))
    assert lines[head].startswith("[stopping] target met by this analysis: 95 % half-width at most 1.5 MOS points")
    now = stopping.check_in_app(app, study_id).measured
    assert now["target_met"] and lines[head + 1:head + 1 + len(stopping.set_lines(now))] == stopping.set_lines(now)
    refused = api.post(f"/api/v1/studies/{slug}/assignments",
                       json={"platform": "mturk", "worker_id": "WLATE", "assignment_id": "ALATE1234567",
                             "hit_id": "HIT1", "turk_submit_to": "https://workersandbox.mturk.com"})
    assert refused.status_code == 409 and refused.json["error"] == "study_stopped"


def test_stopping_params_are_checked(tmp_path, demo_stimuli, app):
    with pytest.raises(StudyDefinitionError, match="stopping.resolve"):
        _paired(app, demo_stimuli, tmp_path, resolve=["a|a"])
    with pytest.raises(StudyDefinitionError, match="stopping.quantile"):
        _paired(app, demo_stimuli, tmp_path, quantile=0.0)


def test_the_study_page_shows_the_panel_and_checks_on_demand(app, demo_stimuli, tmp_path, admin):
    from .admin_support import csrf_of

    slug = _paired(app, demo_stimuli, tmp_path, max_votes=100)
    study_id, _ = _study(app, slug)
    html = admin.get(f"/admin/studies/{slug}").get_data(as_text=True)
    assert 'id="stopping-panel"' in html and "Not checked yet." in html
    add_votes(app, slug, honest=2, seed=8, pairs_per_worker=60)
    response = admin.post(f"/admin/studies/{slug}/check-stopping",
                          data={"csrf_token": csrf_of(admin, f"/admin/studies/{slug}")})
    assert response.status_code == 303
    html = admin.get(f"/admin/studies/{slug}").get_data(as_text=True)
    # Each worker's 60 real votes and 4 gold ones (votes of design pairs, the demo's gold pairs being design pairs).
    assert "Stopped taking new participants" in html and "the response cap is reached (128 of 100)" in html
    assert _study(app, slug)[1] == "stopped" and _record(app, study_id).reason == "max_votes"


def test_the_cli_checks_and_shows_where_the_study_stands(app, demo_stimuli, tmp_path):
    from click.testing import CliRunner

    from server.cli import cli

    def run(*args):
        return CliRunner().invoke(cli, [*args, "--database-url", app.config["DATABASE_URL"]])

    slug = _paired(app, demo_stimuli, tmp_path, halfwidth=0.3, max_participants=3)
    plain = create_test_study(app, demo_stimuli, tmp_path, slug="plain", **SMALL_STUDY)
    refused = run("study", "check-stopping", plain)
    assert refused.exit_code != 0 and "no [stopping] target or cap" in refused.output
    assert "Traceback" not in refused.output
    add_votes(app, slug, honest=2, seed=9, pairs_per_worker=30)
    result = run("study", "check-stopping", slug)
    assert result.exit_code == 0, result.output
    assert "stopping: still recruiting" in result.output and "participants 2 of 3" in result.output
    add_votes(app, slug, honest=1, seed=10, pairs_per_worker=30, prefix="THIRD")
    result = run("study", "check-stopping", slug)
    assert "stopped taking participants" in result.output and "participant cap is reached (3 of 3)" in result.output
    shown = run("study", "show", slug)
    assert "(stopped)" in shown.output and "participant cap is reached" in shown.output


def test_evaluate_caps_win_and_the_target_needs_every_set_and_pair():
    import datetime as dt
    import math
    from decimal import Decimal

    from server.paradigms.core import Precision, SetPrecision
    from server.paradigms.paired.study import StudySpec

    spec = StudySpec(manifests=("m.json",), slug="s", name="s", halfwidth=0.3, quantile=0.5, resolve=("a|b",),
                     max_votes=100)
    counts = stopping.Counts(responses=40, participants=4, completed=4, cost=Decimal("8.00"), first_started=None)
    workers = (5, 5, 5)  # [stopping] min_workers' default: each item counts
    narrow = SetPrecision("one", ("a", "b", "c"), (0.1, 0.2, math.nan), 40, {"a|b": True}, workers=workers)
    wide = SetPrecision("two", ("a", "b", "c"), (0.5, 0.6, 0.2), 40, {"a|b": True}, workers=workers)
    met = stopping.evaluate(spec, Precision("u", (narrow,), 40), counts)
    assert met["reason"] == "target" and met["sets"][0]["meeting"] == 2 and met["sets"][0]["needed"] == 2
    assert stopping.evaluate(spec, Precision("u", (narrow, wide), 40), counts)["reason"] is None
    open_pair = SetPrecision("one", ("a", "b", "c"), (0.1, 0.2, 0.1), 40, {"a|b": False}, workers=workers)
    assert stopping.evaluate(spec, Precision("u", (open_pair,), 40), counts)["reason"] is None
    capped = stopping.Counts(100, 4, 4, Decimal("8.00"), None)
    assert stopping.evaluate(spec, Precision("u", (narrow,), 100), capped)["reason"] == "max_votes"
    # Ratings' projection: n = (s t / h)^2 per stimulus, minus what each has; the band from the items' spread.
    rating = SetPrecision("scene", ("x", "y"), (0.5, 0.8), 20, {}, (1.0, 2.0), (10, 10))
    projected = stopping.projection(spec, Precision("MOS", (rating,), 20), counts,
                                    dt.datetime.now(dt.timezone.utc))
    need = np.maximum((1.959964 * np.array([1.0, 2.0]) / 0.3) ** 2 - 10, 0) * 2
    assert projected["responses"]["estimate"] == round(float(np.percentile(need, 50)))
    assert projected["responses"]["low"] <= projected["responses"]["estimate"] <= projected["responses"]["high"]
    assert projected["participants"]["estimate"] == pytest.approx(projected["responses"]["estimate"] / 10, abs=0.1)


@pytest.mark.slow  # a simulation forecast (bootstrapped simulated studies) on each database
def test_the_simulation_forecast_runs_on_demand_and_is_shown(app, demo_stimuli, tmp_path, admin):
    from .admin_support import csrf_of

    slug = _paired(app, demo_stimuli, tmp_path, halfwidth=0.3)  # JOD
    study_id, _ = _study(app, slug)
    add_votes(app, slug, honest=4, seed=11, pairs_per_worker=40)
    _reanalyse(app, study_id)
    # The job's thread at this process's own priority: niced (the default, test_forecast_jobs.py checks it) it
    # waits behind every busy process of a loaded machine, past forecast_jobs.wait's two minutes.
    app.config["SERVER"]["forecast_nice"] = 0
    response = admin.post(f"/admin/studies/{slug}/stopping-forecast",
                          data={"csrf_token": csrf_of(admin, f"/admin/studies/{slug}")})
    assert response.status_code == 303
    forecast_jobs.wait(app)
    record = _record(app, study_id)
    forecast = record.forecast
    assert forecast["votes_now"] == 4 * (40 + 4) and forecast["replicates"] == 8  # with the gold design pairs' votes
    still = forecast["votes_still_needed"]
    assert still["total"] is None or still["low"] <= still["total"] <= still["high"]
    assert forecast["worker_hours"]["total"] is None or forecast["worker_hours"]["total"] > 0
    assert any("Thurstone Case V" in line for line in forecast["model"])
    html = admin.get(f"/admin/studies/{slug}").get_data(as_text=True)
    assert 'id="forecast-votes"' in html and "Simulation forecast" in html and "Thurstone Case V" in html


def test_stopping_units_are_each_paradigms_and_a_wrong_one_is_one_error_line(app, demo_stimuli, rating_manifest,
                                                                             tmp_path):
    from click.testing import CliRunner

    from server.cli import cli

    def create(path):
        return CliRunner().invoke(cli, ["study", "create", str(path), "--database-url", app.config["DATABASE_URL"]])

    rating = create(write_rating_study(tmp_path, rating_manifest, slug="mos-jod",
                                       stopping={"halfwidth": 0.3, "units": "jod"}))
    assert rating.exit_code != 0 and "Traceback" not in rating.output
    assert rating.output.strip().splitlines() == [
        f"error: {tmp_path / 'mos-jod.toml'}: stopping.units must be 'points', got 'jod'"]
    paired = create(write_study_file(tmp_path, demo_stimuli, "pc-points", stopping={"halfwidth": 0.3,
                                                                                    "units": "points"}))
    assert paired.exit_code != 0 and len(paired.output.strip().splitlines()) == 1
    assert "stopping.units must be 'jod', 'z' or 'anchored', got 'points'" in paired.output
    # The templates show the key at each paradigm's default, with its documentation.
    template = CliRunner().invoke(cli, ["study", "template"]).output
    assert 'units = "jod"' in template and "Thurstone z, JOD / 1.4826" in template
    assert 'units = "points"' in CliRunner().invoke(cli, ["study", "template", "--kind", "rating"]).output


def test_the_target_is_measured_in_the_units_the_study_file_names(app, demo_stimuli, tmp_path):
    from analysis.thurstone import JOD_PER_Z
    from server.paradigms.paired.precision import study_precision

    slug = _paired(app, demo_stimuli, tmp_path, halfwidth=0.05, units="anchored")
    study_id, _ = _study(app, slug)
    add_votes(app, slug, honest=4, seed=12, pairs_per_worker=30)
    _reanalyse(app, study_id)
    assert _record(app, study_id).measured["unit"] == "anchored units (worst anchor 0, best 1)"
    with app_services(app).sessions() as session:
        study = session.get(Study, study_id)
        measured = {units: study_precision(session, study, (), units) for units in ("jod", "z", "anchored")}
        items = {(s["set_id"], i["item_id"]): i for s in session.get(ScaleSnapshot, study_id).payload["sets"]
                 for i in s["items"]}
    assert [measured[u].unit for u in ("jod", "z")] == ["JOD", "z units"]
    compared = 0
    for jod, z, anchored in zip(*(measured[u].sets for u in ("jod", "z", "anchored")), strict=True):
        for item, h_jod, h_z, h_anchored in zip(jod.item_ids, jod.halfwidths, z.halfwidths, anchored.halfwidths):
            snapshot = items[(jod.name, item)]
            if snapshot["ci_high_jod"] is None:     # a blank interval (too few kept workers): no half-width
                assert snapshot["ci_high"] is None and np.isnan([h_jod, h_z, h_anchored]).all()
                continue
            assert h_jod == pytest.approx((snapshot["ci_high_jod"] - snapshot["ci_low_jod"]) / 2)
            assert h_z == pytest.approx(h_jod / JOD_PER_Z, rel=1e-12)
            assert h_anchored == pytest.approx((snapshot["ci_high"] - snapshot["ci_low"]) / 2)
            compared += 1
    assert compared > 0


def test_a_snapshot_without_jod_intervals_measures_nothing_until_the_next_votes(app, demo_stimuli, tmp_path):
    """A running estimate stored before the JOD fields existed: no half-width (never a crash, never met), a note
    saying why; the next re-analysis brings them."""
    from click.testing import CliRunner

    from server.cli import cli

    slug = _paired(app, demo_stimuli, tmp_path, halfwidth=50.0, quantile=0.5)  # met by any interval at all
    study_id, _ = _study(app, slug)
    add_votes(app, slug, honest=6, seed=13, pairs_per_worker=30)
    with app_services(app).sessions() as session:
        live_scales.compute_snapshot(session, study_id, bootstrap=40)
        snapshot = session.get(ScaleSnapshot, study_id)
        old = {**snapshot.payload, "sets": [{**s, "items": [{k: v for k, v in i.items() if not k.endswith("_jod")}
                                                            for i in s["items"]]} for s in snapshot.payload["sets"]]}
        snapshot.payload = old
        session.commit()
    record = stopping.check_in_app(app, study_id)
    assert record.stopped_at is None and not record.measured["target_met"]
    assert "no JOD intervals yet: recomputed with the next votes" in record.measured["note"]
    assert all(s["halfwidth"] is None and s["meeting"] == 0 for s in record.measured["sets"])
    shown = CliRunner().invoke(cli, ["study", "check-stopping", slug, "--database-url", app.config["DATABASE_URL"]])
    assert shown.exit_code == 0 and "precision in JOD: the running estimate has no JOD intervals yet" in shown.output
    add_votes(app, slug, honest=1, seed=14, pairs_per_worker=10, prefix="NEXT")
    _reanalyse(app, study_id)
    record = _record(app, study_id)
    assert record.reason == "target" and "recomputed" not in record.measured["note"], str(record.measured)


def test_a_rating_study_forecasts_the_ratings_it_still_needs(app, rating_manifest, tmp_path, admin):
    from .admin_support import csrf_of

    slug = create_rating_study(app, rating_manifest, tmp_path, stopping={"halfwidth": 0.3, "min_workers": 2}, **SMALL)
    study_id, _ = _study(app, slug)
    rng = random.Random(5)
    for _ in range(4):
        worker = RatingWorker(app.test_client(), slug)
        worker.pass_training()
        worker.rate_pages(3, lambda: rng.randint(2, 4))
    # The job's thread at this process's own priority: niced (the default, test_forecast_jobs.py checks it) it
    # waits behind every busy process of a loaded machine, past forecast_jobs.wait's two minutes.
    app.config["SERVER"]["forecast_nice"] = 0
    response = admin.post(f"/admin/studies/{slug}/stopping-forecast",
                          data={"csrf_token": csrf_of(admin, f"/admin/studies/{slug}")})
    assert response.status_code == 303
    forecast_jobs.wait(app)
    forecast = _record(app, study_id).forecast
    with app_services(app).sessions() as session:  # the ratings [stopping] measures on
        paradigm, spec = study_paradigm(session, study_id)
        counted = paradigm.precision(session, session.get(Study, study_id), spec).responses
    assert forecast["unit"] == "ratings" and forecast["votes_now"] == counted > 0
    assert forecast["replicates"] == RATING_REPLICATES  # analysis/rating_forecast.py's default, as the CLI's
    still = forecast["votes_still_needed"]
    assert still["low"] <= still["total"] <= still["high"] and still["total"] > 0  # far from 0.3 points
    assert forecast["participants"]["total"] >= 1 and forecast["dollars"]["total"] > 0
    # the test clients answer in milliseconds, as bots do: a warning, and the hours from the study's own estimate
    assert len(forecast["warnings"]) == 1 and "hours from study time prior" in forecast["warnings"][0]
    assert forecast["worker_hours"]["total"] > 0
    html = admin.get(f"/admin/studies/{slug}").get_data(as_text=True)
    assert 'id="forecast-votes"' in html and f"{still['total']} more ratings" in html
    assert "hours from study time prior" in html and f"{forecast['worker_hours']['total']} worker-hours" in html
    assert "What the forecast assumes" in html and "stimuli differ in noise" in html
