"""``perceptlab simulate`` takes a study's ``[viewing]`` checks (server/simulate_viewing.py) over the worker pages'
routes: careful workers answer what the server drew (with its secret), careless ones at random, and the workers
who completed have their results in workers.csv."""
from __future__ import annotations

import csv
import io

import pytest
from sqlalchemy import select

from server.models import Study
from server.pilot import pilot_signature
from server.services import app_services
from server.simulate_client import run_simulation

ALL_CHECKS = ["brightness", "colour", "distance", "acuity"]
SECRET = "test-secret"  # make_test_app's: the server's secret key, which perceptlab simulate holds


def _workers_csv(app, slug: str) -> list[dict[str, str]]:
    from server.exports import workers_csv_text

    with app_services(app).sessions() as session:
        study = session.scalar(select(Study).where(Study.slug == slug))
        text, _ = workers_csv_text(session, study, salt=None, include_pilot=True)
    return list(csv.DictReader(io.StringIO(text)))


def _simulate(live_server, slug, **options):
    return run_simulation(live_server, slug, workers=6, spam=0.5, concurrency=3, seed=5, pages=1, progress=False,
                          pilot=pilot_signature(SECRET, slug), secret=SECRET, **options)


def _assert_careful_pass_careless_fail(report, rows, checks) -> None:
    assert report.gave_up_count == 0, report.gave_up
    assert "viewing_pending" not in report.errors, report.errors
    # The 3 careful workers pass every check; a careless one fails one of them (and is turned away there).
    for check in checks:
        assert report.viewing[f"{check}:passed"] >= 3, report.viewing
    assert sum(n for key, n in report.viewing.items() if key.endswith(":failed")) == 3, report.viewing
    assert report.outcomes["disqualified"] >= 3
    completed = [r for r in rows if r["completion_status"] == "completed"] or \
        [r for r in rows if r["viewing_passed"] == "1"]
    passed = [r for r in rows if r["viewing_passed"] == "1"]
    assert len(passed) == 3 and len([r for r in rows if r["viewing_passed"] == "0"]) == 3
    assert report.outcomes["completed"] >= 1 and completed
    for row in passed:
        assert all(row[f"viewing_{check}"] == "1" for check in checks), row
        assert row["viewing_failed"] == ""
        if "distance" in checks:
            assert 45 <= float(row["viewing_distance_cm"]) <= 75  # the study's 60 cm, within its 25 %
        if "acuity" in checks:
            assert float(row["viewing_acuity_logmar"]) >= 0.3 and row["viewing_px_per_mm"]


def test_a_paired_study_with_every_check_is_simulated(app, demo_stimuli, tmp_path, live_server):
    from .conftest import SMALL_STUDY, create_test_study

    slug = create_test_study(app, demo_stimuli, tmp_path, slug="view-sim", **SMALL_STUDY,
                             viewing={"checks": ALL_CHECKS})
    report = _simulate(live_server, slug)
    _assert_careful_pass_careless_fail(report, _workers_csv(app, slug), ALL_CHECKS)
    summary = next(line for line in report.summary_lines() if line.startswith("viewing checks: "))
    assert "brightness:passed 3" in summary and "acuity:passed 3" in summary


@pytest.mark.one_database
@pytest.mark.parametrize("when", ["before_consent", "after_instructions"])
def test_a_rating_study_with_the_touch_checks_is_simulated(app, rating_manifest, tmp_path, live_server, when):
    from .rating_support import SMALL, create_rating_study

    checks = ["brightness", "colour"]
    slug = create_rating_study(app, rating_manifest, tmp_path, slug=f"view-rate-{when[:5]}", **SMALL,
                               viewing={"checks": checks, "when": when})
    report = _simulate(live_server, slug)
    _assert_careful_pass_careless_fail(report, _workers_csv(app, slug), checks)


@pytest.mark.one_database
def test_a_motion_study_with_the_touch_checks_is_simulated(app, motion_clips, tmp_path, live_server):
    from .motion_support import SMALL, create_motion_study

    checks = ["brightness", "colour"]
    slug = create_motion_study(app, motion_clips, tmp_path, slug="view-motion", **SMALL, viewing={"checks": checks})
    report = run_simulation(live_server, slug, workers=2, spam=0.5, concurrency=2, seed=2, progress=False,
                            pilot=pilot_signature(SECRET, slug), secret=SECRET)
    assert report.kind == "motion" and report.gave_up_count == 0, report.to_dict()
    assert report.viewing["brightness:passed"] >= 1 and report.viewing["colour:passed"] == 1
    assert sum(n for key, n in report.viewing.items() if key.endswith(":failed")) == 1, report.viewing
    assert report.outcomes["completed"] == 1 and report.outcomes["disqualified"] == 1
    rows = _workers_csv(app, slug)
    assert sorted(r["viewing_passed"] for r in rows) == ["0", "1"]


@pytest.mark.one_database
def test_without_the_secret_every_worker_answers_at_random(app, demo_stimuli, tmp_path, live_server):
    """A simulation that does not hold the secret cannot know the answers: its workers guess, and are turned
    away (an honest bot cannot pass on a server it cannot read)."""
    from .conftest import SMALL_STUDY, create_test_study

    slug = create_test_study(app, demo_stimuli, tmp_path, slug="view-nokey", **SMALL_STUDY,
                             viewing={"checks": ["brightness", "colour"], "colour_plates": 4})
    report = run_simulation(live_server, slug, workers=3, spam=0.0, concurrency=3, seed=6, pages=1, progress=False,
                            pilot=pilot_signature(SECRET, slug))
    assert report.outcomes["disqualified"] == 3 and report.gave_up_count == 0


@pytest.mark.one_database
def test_only_a_simulated_entry_names_the_draw(app, demo_stimuli, tmp_path):
    """Every entry of a study with checks names them (the page's configuration, no answers); only a simulated
    participant's, signed with the pilot signature, names the draw's identifiers (useless without the secret)."""
    from .conftest import SMALL_STUDY, create_test_study

    slug = create_test_study(app, demo_stimuli, tmp_path, slug="view-entry", **SMALL_STUDY,
                             viewing={"checks": ["brightness"]})
    client = app.test_client()

    def enter(worker: str, **extra):
        body = {"platform": "mturk", "worker_id": worker, "assignment_id": f"A{worker}", "hit_id": "H1",
                "turk_submit_to": "https://workersandbox.mturk.com", **extra}
        response = client.post(f"/api/v1/studies/{slug}/assignments", json=body)
        assert response.status_code == 201, response.json
        return response.json

    plain = enter("W1")
    assert set(plain["viewing"]) == {"config"} and plain["viewing"]["config"]["checks"] == ["brightness"]
    assert plain["viewing"]["config"]["base"] == f"/w/{plain['token']}/viewing"
    simulated = enter("W2", pilot=pilot_signature(SECRET, slug), simulated=True)
    assert set(simulated["viewing"]["draw"]) == {"study_id", "study_seed", "worker_id"}
    assert simulated["viewing"]["config"] | {"base": ""} == plain["viewing"]["config"] | {"base": ""}
