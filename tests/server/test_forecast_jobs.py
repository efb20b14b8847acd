"""Dashboard forecasts, bounded (server/forecast_jobs.py): one at a time per study across processes (two apps
on one database stand for two gunicorn workers), cached on the study's responses, at low priority; the real
child process computes and stores a real forecast."""
from __future__ import annotations

import os
import random
import threading

import pytest
from prometheus_client import REGISTRY

from server import forecast_jobs
from server.models import StudyStopping
from server.paradigms.rating.paradigm import Rating
from server.services import app_services

from .conftest import make_test_app
from .rating_support import SMALL, RatingWorker, create_rating_study


def _jobs(outcome: str) -> float:
    return REGISTRY.get_sample_value("perceptlab_background_jobs_total", {"job": "forecast", "outcome": outcome}) or 0


def _stored(app, study_id: int) -> dict | None:
    with app_services(app).sessions() as session:
        record = session.get(StudyStopping, study_id)
        return record.forecast if record is not None else None


def _study_id(app, slug: str) -> int:
    from sqlalchemy import select

    from server.models import Study

    with app_services(app).sessions() as session:
        return session.scalar(select(Study.id).where(Study.slug == slug))


def _add_ratings(app, slug: str, workers: int, seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(workers):
        worker = RatingWorker(app.test_client(), slug)
        worker.pass_training()
        worker.rate_pages(2, lambda: rng.randint(2, 4))


class FakeForecast:
    """``Rating.forecast`` replaced: counts its calls, notes its thread's niceness, and waits for ``gate``."""

    def __init__(self):
        self.calls, self.niceness = 0, []
        self.entered, self.gate = threading.Event(), threading.Event()

    def __call__(self, _session, _study, _spec):  # set on the class as an instance: not bound to the paradigm
        self.calls += 1
        self.niceness.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        self.entered.set()
        assert self.gate.wait(30)
        return {"unit": "ratings", "votes_now": 0, "replicates": 1}


@pytest.fixture
def fake(monkeypatch):
    forecast = FakeForecast()
    monkeypatch.setattr(Rating, "forecast", forecast)
    return forecast


def test_one_forecast_at_a_time_per_study_across_processes_cached_and_niced(app, database_url, rating_manifest,
                                                                              tmp_path, fake):
    slug = create_rating_study(app, rating_manifest, tmp_path, stopping={"halfwidth": 0.3, "min_workers": 3}, **SMALL)
    study_id = _study_id(app, slug)
    other = make_test_app(database_url, app.instance_path)  # another gunicorn worker: same database and instance
    before = {outcome: _jobs(outcome) for outcome in ("done", "busy", "cached")}
    try:
        base = os.getpriority(os.PRIO_PROCESS, 0)
        assert forecast_jobs.start(app, study_id)
        assert fake.entered.wait(30)
        assert not forecast_jobs.start(app, study_id)  # this process runs it already
        # The other process neither computes nor waits: the claim is held; its dashboard says "running".
        assert forecast_jobs.run_job(other, study_id) == "busy"
        assert forecast_jobs.running(other, study_id)
        fake.gate.set()
        forecast_jobs.wait(app)
        assert fake.calls == 1 and not forecast_jobs.running(other, study_id)
        assert fake.niceness == [min(19, base + forecast_jobs.DEFAULT_NICE)]  # the computing thread only
        assert os.getpriority(os.PRIO_PROCESS, 0) == base
        stored = _stored(other, study_id)
        assert stored["unit"] == "ratings" and stored["cache_key"] == {"responses": 0}

        # No new responses: every process reads the stored result.
        assert forecast_jobs.run_job(other, study_id) == "cached"
        assert forecast_jobs.run_job(app, study_id) == "cached"
        assert fake.calls == 1

        _add_ratings(app, slug, workers=2, seed=3)  # new responses: the next press computes again
        assert forecast_jobs.run_job(other, study_id) == "done" and fake.calls == 2
        assert _stored(app, study_id)["cache_key"]["responses"] > 0
        assert {o: _jobs(o) - before[o] for o in before} == {"done": 2, "busy": 1, "cached": 2}
    finally:
        fake.gate.set()
        forecast_jobs.wait(app)
        app_services(other).engine.dispose()


def test_a_study_without_stopping_forecasts_nothing(app, rating_manifest, tmp_path, fake):
    slug = create_rating_study(app, rating_manifest, tmp_path, **SMALL)
    assert forecast_jobs.run_job(app, _study_id(app, slug)) == "none" and fake.calls == 0


@pytest.mark.slow  # a real forecast in a child interpreter
def test_the_child_process_computes_and_stores_a_real_forecast(sqlite_url, rating_manifest, tmp_path, clock):
    app = make_test_app(sqlite_url, tmp_path / "instance", clock=clock, forecast_process=True)
    try:
        slug = create_rating_study(app, rating_manifest, tmp_path, stopping={"halfwidth": 0.3, "min_workers": 3}, **SMALL)
        study_id = _study_id(app, slug)
        _add_ratings(app, slug, workers=4, seed=5)
        assert forecast_jobs.run_job(app, study_id) == "done"
        stored = _stored(app, study_id)
        assert stored["unit"] == "ratings" and stored["votes_now"] == stored["cache_key"]["responses"] > 0
        with app_services(app).sessions() as session:
            assert session.get(StudyStopping, study_id).forecast_at.replace(tzinfo=None) == clock().replace(
                tzinfo=None)  # the app's clock, handed to the child
        assert forecast_jobs.run_job(app, study_id) == "cached"
    finally:
        app_services(app).engine.dispose()
