"""Each paradigm's simulated worker (server/paradigms/*/simulated_worker.py) on the shared driver
(server/simulate_client.py), against a live server: ratings of every method, motion matching, a second
study with the same seed, and ``perceptlab simulate``'s exit status and clean-up when workers give up."""
from __future__ import annotations

from collections import Counter

import pytest
from click.testing import CliRunner
from sqlalchemy import func, select

from server.models import Assignment, Worker
from server.services import app_services
from server.simulate_client import run_simulation


def _stored(app, column) -> Counter:
    with app_services(app).sessions() as session:
        return Counter(session.scalars(select(column)).all())


# The driver and the workers are the same on both databases (test_simulate_client.py runs it on both): the
# paradigms' workers run on PostgreSQL, where ratings take their one-statement path, as in production.
ON_POSTGRES = pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)


@ON_POSTGRES
@pytest.mark.parametrize("method", ["dcr", "acr", "ccr"])
def test_rating_workers_rate_every_method(app, rating_manifest, tmp_path, live_server, method):
    """Honest raters pass the training and the hidden checks of every method; the careless one (random
    values) does not; the database holds exactly the acknowledged ratings, once each."""
    from server.paradigms.rating.models import RatingResponse

    from .rating_support import SMALL, create_rating_study

    slug = create_rating_study(app, rating_manifest, tmp_path, slug=f"r-{method}",
                               **{**SMALL, "rating": {**SMALL["rating"], "method": method}})
    report = run_simulation(live_server, slug, workers=3, spam=0.34, concurrency=3, seed=1, pages=1, progress=False)
    assert report.kind == "rating" and report.response_kind == "ratings"
    assert report.gave_up_count == 0 and not report.errors, report.to_dict()
    assert report.outcomes["completed"] >= 2, report.outcomes  # the two honest raters
    stored = _stored(app, RatingResponse.client_rating_id)
    assert set(stored) == report.acknowledged_ids() == report.sent_ids() and max(stored.values()) == 1
    agree, known = report.agreement(True)
    assert known >= 15 and agree / known >= 0.8


@ON_POSTGRES
def test_motion_workers_calibrate_and_match(app, motion_clips, tmp_path, live_server):
    """Calibration, the RDK screening (from the dot movies) and the main block (from the clips' frames):
    every honest worker completes, and its main answers follow the true motion; the careless worker fails
    its practice trials again and again (each failure brings a repeat) and is screened out, not stuck."""
    import numpy as np

    from server.paradigms.motion.models import MotionProbe, MotionResponse, MotionTrial

    from .motion_support import SMALL, create_motion_study

    slug = create_motion_study(app, motion_clips, tmp_path, **{**SMALL, "practice": {"practice_needed": 2,
                                                                                    "practice_max": 8}})
    report = run_simulation(live_server, slug, workers=3, spam=0.34, concurrency=3, seed=2, progress=False)
    assert report.kind == "motion" and report.gave_up_count == 0 and not report.errors, report.to_dict()
    assert report.outcomes == Counter(completed=2, disqualified=1)
    with app_services(app).sessions() as session:
        rows = session.execute(select(MotionProbe.gt_u, MotionProbe.gt_v, MotionResponse.resp_u, MotionResponse.resp_v)
                               .join(MotionTrial, MotionTrial.probe_id == MotionProbe.id)
                               .join(MotionResponse, MotionResponse.trial_id == MotionTrial.id)
                               .where(~MotionTrial.practice)).all()
        passed = Counter(session.scalars(select(Worker.screening_passed)).all())
    assert passed == Counter({True: 2, False: 1})
    truth, answer = np.array([r[:2] for r in rows]), np.array([r[2:] for r in rows])
    assert len(rows) >= 12
    assert np.median(np.hypot(*(truth - answer).T)) < 1.0  # end-point error, px/frame


def test_a_second_study_simulates_cleanly_with_the_same_seed(app, demo_stimuli, tmp_path, live_server):
    """Response IDs are unique in the whole database: with the slug in the seed, two studies simulated with
    the default seed get other IDs (before, every vote of the second was a 409 conflict)."""
    from .conftest import SMALL_STUDY, create_test_study

    quality = {"quiz_size": 0, "gold_rate": 0.0}
    for slug in ("first", "second"):
        create_test_study(app, demo_stimuli, tmp_path, slug=slug, pages=SMALL_STUDY["pages"], quality=quality)
        report = run_simulation(live_server, slug, workers=3, spam=0.0, concurrency=3, seed=0, pages=1,
                                observer="latent", progress=False)
        assert report.outcomes == Counter(completed=3) and not report.errors, report.to_dict()
        assert report.rejected == 0 and report.acknowledged == report.sent > 0


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_cli_exits_1_naming_why_workers_gave_up_and_ends_them(app, rating_study, live_server, database_url,
                                                               monkeypatch):
    """A worker model that fails (here: a KeyError, as the paired bot had on ratings) makes every worker give
    up: simulate prints the reason with its count, exits 1, and ends their assignments (stopped)."""
    from server.cli import cli
    from server.paradigms.rating.simulated_worker import RatingWorker

    async def broken(self, trial, state):
        raise KeyError("left")

    monkeypatch.setattr(RatingWorker, "answer", broken)
    monkeypatch.setenv("PERCEPTLAB_SECRET_KEY", "test-secret")
    monkeypatch.setenv("PERCEPTLAB_DATABASE_URL", database_url)
    result = CliRunner().invoke(cli, ["simulate", rating_study, "--url", live_server, "--workers", "3",
                                      "--concurrency", "3", "--quiet"])
    assert result.exit_code == 1, result.output
    assert "gave up: client:KeyError 3" in result.output
    assert "3 of 3 workers gave up (client:KeyError 3)" in result.output
    assert "ended 3 assignment(s)" in result.output
    with app_services(app).sessions() as session:
        stages = Counter(session.scalars(select(Assignment.stage)).all())
        simulated = session.scalar(select(func.count()).select_from(Worker).where(Worker.simulated))
    assert stages == Counter(stopped=3) and simulated == 3
