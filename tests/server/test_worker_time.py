"""Time on task, effective wages and worker-facing time estimates (server/worker_time.py, server/wages.py):
the computation on crafted timestamps (numpy and SQL on SQLite and PostgreSQL), the dashboard's wage and
floor warning, workers.csv's columns, the payment plan, and the estimates on the worker pages."""
from __future__ import annotations

import csv
import datetime as dt
import io
from decimal import Decimal

import numpy as np
import pytest
from sqlalchemy import select, update

from server import exports, wages, worker_time
from server.models import Assignment, MTurkAssignment, Study, Vote
from server.payments import payment_plan
from server.services import app_services
from server.worker_time import PaySettings, time_estimate, time_on_task

from .conftest import SMALL_STUDY, WorkerClient, create_test_study
from .motion_support import MotionWorker

T0 = dt.datetime(2026, 3, 2, 9, 0, 0, tzinfo=dt.timezone.utc)


# ---------------------------------------------------------------- the computation

def test_time_on_task_caps_idle_gaps_and_the_lead_in():
    # Entered at 0; events at 30, 40, 50, then a 10-minute break, then 615.
    total, span, active = time_on_task(0.0, np.array([615.0, 30.0, 40.0, 50.0]), idle_cap_s=60, lead_in_cap_s=300)
    assert (total, span) == (615.0, 585.0)
    assert active == 30 + 10 + 10 + 60          # the break counts 60 s
    # A long lead-in (consent left open) counts at most lead_in_cap_s.
    assert time_on_task(0.0, np.array([1000.0, 1005.0]), idle_cap_s=60, lead_in_cap_s=300)[2] == 300 + 5
    # Smaller caps count less; gaps under the cap count in full.
    assert time_on_task(0.0, np.array([10.0, 20.0, 200.0]), idle_cap_s=5, lead_in_cap_s=8)[2] == 8 + 5 + 5


def test_time_on_task_of_a_single_event_and_of_none():
    assert time_on_task(100.0, np.array([160.0])) == (60.0, 0.0, 60.0)   # the lead-in only
    assert time_on_task(100.0, np.array([])) == (0.0, 0.0, 0.0)
    # An event logged before the entry (another clock) gives no negative lead-in.
    assert time_on_task(100.0, np.array([90.0, 100.0])) == (10.0, 10.0, 10.0)


def test_pay_settings_from_the_configuration():
    assert PaySettings.from_config(None) == PaySettings()
    settings = PaySettings.from_config({"idle_cap_seconds": 30, "wage_floor_usd_per_hour": 15,
                                        "estimate_min_finished": 3, "lead_in_cap_seconds": 120.5})
    assert settings == PaySettings(30.0, 120.5, 15.0, 3)
    for bad in ({"idle_cap_seconds": 0}, {"wage_floor_usd_per_hour": -1}, {"lead_in_cap_seconds": "5"},
                {"estimate_min_finished": True}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            PaySettings.from_config(bad)


def test_estimate_phrases():
    prior = worker_time.TimeEstimate("page", 300.0, 135.0, "20 comparisons", "prior", 0)
    assert prior.phrase == "about 5 minutes per page of 20 comparisons, plus about 3 minutes at the start"
    measured = worker_time.TimeEstimate("session", 61.0, 0.0, "46 trials", "measured", 7)
    assert measured.phrase == "about 2 minutes per session of 46 trials"
    assert measured.basis == "the median of 7 participants so far" and measured.setup == ""
    assert worker_time.TimeEstimate.about(10) == "about 1 minute"


# ---------------------------------------------------------------- crafted studies

def _finished(app, slug: str, worker_id: str | None = None) -> WorkerClient:
    """A worker who passed the quiz and completed one page (the HIT's required page of SMALL_STUDY)."""
    with app.test_client() as http:
        worker = WorkerClient(http, slug, worker_id=worker_id)
        worker.start()
        worker.answer_page(worker.correct_side)      # the quiz
        worker.answer_page(worker.correct_side)      # a page of trials
        assert worker.action("finish").status_code == 200
    return worker


def _set_times(app, assignment_id, entered: float, votes: list[float]) -> None:
    """Move an assignment's entry and its votes (oldest first) to T0 + the given seconds."""
    assignment_id = int(assignment_id)
    with app_services(app).sessions() as db:
        db.execute(update(Assignment).where(Assignment.id == assignment_id)
                   .values(created_at=T0 + dt.timedelta(seconds=entered)))
        ids = db.scalars(select(Vote.id).where(Vote.assignment_id == assignment_id).order_by(Vote.id)).all()
        assert len(ids) == len(votes)
        for vote_id, seconds in zip(ids, votes):
            db.execute(update(Vote).where(Vote.id == vote_id).values(created_at=T0 + dt.timedelta(seconds=seconds)))
        db.commit()


def _study(db, slug: str) -> Study:
    return db.scalar(select(Study).where(Study.slug == slug))


def _vote_count(app, assignment_id) -> int:
    with app_services(app).sessions() as db:
        return len(db.scalars(select(Vote.id).where(Vote.assignment_id == int(assignment_id))).all())


def test_sql_time_on_task_matches_numpy_and_wages_follow(app, study):
    fast, slow = _finished(app, study, "WFAST"), _finished(app, study, "WSLOW")
    with app.test_client() as http:
        idle = WorkerClient(http, study, worker_id="WIDLE")           # consented, never voted
        one = WorkerClient(http, study, worker_id="WONE")
        one.start()
        assert one.vote(one.state()["page"]["trials"][0]["trial_id"], "left").status_code == 201
    n = _vote_count(app, fast.assignment_id)
    fast_votes = [20.0 + 5 * k for k in range(n)]                      # 20 s of reading, then a vote every 5 s
    slow_votes = [400.0 + 10 * k for k in range(n)]
    slow_votes[n // 2:] = [v + 3600 for v in slow_votes[n // 2:]]      # an hour's break half-way
    _set_times(app, fast.assignment_id, 0.0, fast_votes)
    _set_times(app, slow.assignment_id, 0.0, slow_votes)
    _set_times(app, one.assignment_id, 0.0, [42.5])
    settings = PaySettings(idle_cap_s=60, lead_in_cap_s=300)
    with app_services(app).sessions() as db:
        s = _study(db, study)
        times = worker_time.assignment_times(db, s, settings)
        for worker, votes in ((fast, fast_votes), (slow, slow_votes), (one, [42.5])):
            got = times[int(worker.assignment_id)]
            want = time_on_task(0.0, np.array(votes), idle_cap_s=60, lead_in_cap_s=300)
            assert (got.total_s, got.span_s, got.active_s) == pytest.approx(want, abs=1e-3)
            assert got.n_events == len(votes)
        assert times[int(slow.assignment_id)].active_s == pytest.approx(300 + 10 * (n - 2) + 60, abs=1e-3)
        assert times[int(slow.assignment_id)].total_s == pytest.approx(slow_votes[-1], abs=1e-3)
        assert (times[int(one.assignment_id)].active_s, times[int(one.assignment_id)].span_s) == pytest.approx((42.5, 0.0))
        idle_time = times[int(idle.assignment_id)]
        assert (idle_time.n_events, idle_time.total_s, idle_time.active_s) == (0, 0.0, 0.0)

        pay = wages.study_pay(db, s, settings)
        by_id = {w.raw_id: w for w in pay.workers}
        assert by_id["WFAST"].pay == Decimal("0.50") and by_id["WONE"].pay == Decimal("0.00")  # unfinished: unpaid
        fast_active = times[int(fast.assignment_id)].active_s
        assert by_id["WFAST"].wage == pytest.approx(0.50 * 3600 / fast_active)
        assert by_id["WFAST"].wage_total == pytest.approx(0.50 * 3600 / fast_votes[-1])
        assert by_id["WIDLE"].wage is None
        assert pay.n_paid == 2
        assert pay.median_wage == pytest.approx(np.median([by_id["WFAST"].wage, by_id["WSLOW"].wage]))
        assert pay.unpaid == [by_id["WONE"]] and pay.unpaid_active_s == pytest.approx(42.5)
        assert pay.overall_wage == pytest.approx(1.00 * 3600 / (fast_active + times[int(slow.assignment_id)].active_s + 42.5))

        # An assignment rejected on MTurk earns nothing.
        external = db.get(Assignment, int(slow.assignment_id)).external_id
        db.add(MTurkAssignment(study_id=s.id, assignment_id=external, hit_id="HIT1", worker_id="WSLOW",
                               status="Rejected"))
        db.commit()
        assert {w.raw_id: w.pay for w in wages.study_pay(db, s, settings).workers}["WSLOW"] == Decimal("0.00")


def test_the_payment_plan_lists_time_and_wage(app, study):
    worker = _finished(app, study)
    n = _vote_count(app, worker.assignment_id)
    _set_times(app, worker.assignment_id, 0.0, [30.0 + 6 * k for k in range(n)])
    with app_services(app).sessions() as db:
        plan = payment_plan(db, _study(db, study))
    (row,) = plan.rows
    active = 30 + 6 * (n - 1)
    assert row.time_active_s == pytest.approx(active) and row.time_total_s == pytest.approx(active)
    assert row.wage_usd_per_h == pytest.approx(round(0.50 * 3600 / active, 2))
    assert plan.median_wage == row.wage_usd_per_h


def test_a_motion_session_is_timed_from_its_calibration_and_responses(app, motion_study):
    worker = MotionWorker(app, motion_study, worker_id="WMOTION")
    worker.start()
    worker.calibrate()
    first = worker.state()["trials"][0]
    worker.respond(first, *worker.gt(first["trial_id"]))
    with app_services(app).sessions() as db:
        s = _study(db, motion_study)
        (got,) = worker_time.assignment_times(db, s).values()
        assert got.n_events == 2                            # the calibration and one response
        estimate = time_estimate(db, s)
    # The prior counts every trial of a session (RDK, practice, main) at its cycles + 2 s, plus the setup.
    spec = s.config
    trials = (spec["clips_per_session"] * spec["probes_per_clip"] * spec["repetitions"] + spec["practice_needed"]
              + spec["rdk_practice"] + spec["rdk_trials"])
    assert estimate.what == f"{trials} trials" and estimate.unit == "session" and estimate.source == "prior"
    assert estimate.unit_s == pytest.approx(120 + trials * (spec["cycles_required"] * spec["cycle_ms"] / 1000 + 2))


def test_the_estimate_follows_the_page_size_then_the_measured_median(app, study, demo_stimuli, tmp_path):
    big = create_test_study(app, demo_stimuli, tmp_path, slug="big",
                            pages={**SMALL_STUDY["pages"], "pairs_per_page": 12}, quality=SMALL_STUDY["quality"])
    with app_services(app).sessions() as db:
        small_estimate, big_estimate = time_estimate(db, _study(db, study)), time_estimate(db, _study(db, big))
    assert (small_estimate.unit_s, big_estimate.unit_s) == (6 * 15.0, 12 * 15.0)
    assert small_estimate.setup_s == 60 + 3 * 15 and small_estimate.source == "prior"
    assert small_estimate.phrase == "about 2 minutes per page of 6 comparisons, plus about 2 minutes at the start"
    assert big_estimate.per_unit == "about 3 minutes"

    workers = [_finished(app, study) for _ in range(3)]
    for k, worker in enumerate(workers):
        n = _vote_count(app, worker.assignment_id)
        _set_times(app, worker.assignment_id, 0.0, [10.0 + (4 + 4 * k) * j for j in range(n)])
    settings = PaySettings(estimate_min_finished=3)
    with app_services(app).sessions() as db:
        s = _study(db, study)
        assert time_estimate(db, s, PaySettings(estimate_min_finished=4)).source == "prior"  # 3 finished < 4
        measured = time_estimate(db, s, settings)
        actives = sorted(t.active_s for t in worker_time.assignment_times(db, s).values())
    assert measured.source == "measured" and measured.n_finished == 3 and measured.setup_s == 0
    assert measured.unit_s == pytest.approx(actives[1])       # the median; one page each

    # The worker pages show it: the HIT preview and the consent text's {time}.
    app.config["SERVER"]["estimate_min_finished"] = 3
    worker_time.clear_estimate_cache()
    with app.test_client() as http:
        preview = http.get(f"/s/{study}?assignmentId=ASSIGNMENT_ID_NOT_AVAILABLE&hitId=HIT1").get_data(as_text=True)
        assert measured.per_unit in preview and "the median of 3 participants so far" in preview
        big_preview = http.get(f"/s/big?assignmentId=ASSIGNMENT_ID_NOT_AVAILABLE&hitId=HIT1").get_data(as_text=True)
        assert "about 3 minutes" in big_preview and "plus about 2 minutes" in big_preview
        entered = http.get(f"/s/big?assignmentId=A1&hitId=HIT1&workerId=WCONSENT"
                           "&turkSubmitTo=https://workersandbox.mturk.com")
        consent = http.get(entered.location).get_data(as_text=True)
        assert "It takes about 3 minutes per page of 12 comparisons, plus about 2 minutes at the start." in consent
        assert "{time}" not in consent


# ---------------------------------------------------------------- dashboard and workers.csv

def _paid_worker(app, study: str, seconds_per_vote: float) -> WorkerClient:
    worker = _finished(app, study)
    n = _vote_count(app, worker.assignment_id)
    _set_times(app, worker.assignment_id, 0.0, [10.0 + seconds_per_vote * k for k in range(n)])
    return worker


def test_the_dashboard_shows_wages_and_warns_below_the_floor(app, study, admin):
    _paid_worker(app, study, 5.0)
    with app_services(app).sessions() as db:
        pay = wages.study_pay(db, _study(db, study))
    wage = pay.median_wage
    app.config["SERVER"]["wage_floor_usd_per_hour"] = 0.0
    page = admin.get(f"/admin/studies/{study}").get_data(as_text=True)
    assert f"${wage:.2f}/h" in page and 'id="median-wage"' in page and 'id="wage-warning"' not in page

    app.config["SERVER"]["wage_floor_usd_per_hour"] = round(wage + 1, 2)
    page = admin.get(f"/admin/studies/{study}").get_data(as_text=True)
    assert 'id="wage-warning"' in page and "Below the wage floor" in page
    assert f"median effective wage is ${wage:.2f}/h" in page


def test_before_anyone_is_paid_the_warning_uses_the_estimated_wage(app, study, admin):
    # SMALL_STUDY: $0.50 for one page of 6 comparisons (90 s) after 105 s of setup: about $9.23/h.
    app.config["SERVER"]["wage_floor_usd_per_hour"] = 12.0
    page = admin.get(f"/admin/studies/{study}").get_data(as_text=True)
    assert "estimated wage is $9.23/h" in page and 'id="wage-warning"' in page
    app.config["SERVER"]["wage_floor_usd_per_hour"] = 9.0
    assert 'id="wage-warning"' not in admin.get(f"/admin/studies/{study}").get_data(as_text=True)


def test_workers_csv_has_time_and_pay_columns(app, study, admin):
    worker = _paid_worker(app, study, 6.0)
    n = _vote_count(app, worker.assignment_id)
    text = admin.get(f"/admin/studies/{study}/workers.csv").get_data(as_text=True)
    reader = csv.DictReader(io.StringIO(text))
    assert reader.fieldnames[-len(wages.WORKER_COLUMNS):] == list(wages.WORKER_COLUMNS)
    (row,) = list(reader)
    active = 10 + 6 * (n - 1)
    assert row["worker_id"] == exports.pseudonym(exports.study_salt("test-secret", study), worker.worker_id)
    assert float(row["time_active_s"]) == pytest.approx(active) and float(row["time_total_s"]) == pytest.approx(active)
    assert row["pay_usd"] == "0.50" and float(row["wage_usd_per_h"]) == pytest.approx(0.5 * 3600 / active, abs=0.01)


def test_study_create_and_show_print_the_estimate_and_its_wage(demo_stimuli, tmp_path):
    from click.testing import CliRunner

    from server.cli import cli

    from .conftest import write_study_file

    url = f"sqlite:///{tmp_path / 'cli.db'}"
    path = write_study_file(tmp_path, demo_stimuli, "cli-pay", quality={"quiz_size": 5},
                            texts={"researcher": "A. Researcher", "contact": "a@example.org"})
    result = CliRunner().invoke(cli, ["study", "create", str(path), "--database-url", url], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    # The defaults: 20 comparisons x 15 s a page, a minute + 5 quiz comparisons at the start: $1.50 for 435 s,
    # at or above the default wage floor ($12.00/h), as the template promises.
    line = ("time: about 5 minutes per page of 20 comparisons, plus about 3 minutes at the start (an estimate before "
            "any measurement); the reward of $1.50 for 1 page(s) pays about $12.41/h")
    assert line in result.output
    assert "wage floor" not in result.output
    shown = CliRunner().invoke(cli, ["study", "show", "cli-pay", "--database-url", url], catch_exceptions=False)
    assert line in shown.output
