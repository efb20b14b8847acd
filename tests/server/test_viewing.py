"""The [viewing] checks at entry (server/paradigms/viewing.py): the section's rules, the pass rules, the server's
scoring of the answers it drew, the gate before consent or the task, what the browser receives (no answer), the
stored results and workers.csv's columns."""
from __future__ import annotations

import csv
import io
import math

import pytest
from sqlalchemy import select

from server.models import Study
from server.paradigms import StudyDefinitionError, viewing
from server.services import app_services

from .conftest import SMALL_STUDY, WorkerClient, create_test_study, write_study_file
from .viewing_support import ALL_CHECKS, CARD, PX_PER_MM, Viewer, _sweeps

pytestmark = pytest.mark.one_database


@pytest.fixture
def client(app):
    """The Flask test client (this module's workers use the worker pages and the API)."""
    return app.test_client()


def _study(app, demo_stimuli, tmp_path, slug="viewing", **viewing_keys):
    return create_test_study(app, demo_stimuli, tmp_path, slug=slug, **SMALL_STUDY,
                             viewing={"checks": ALL_CHECKS, **viewing_keys})


# ---------------------------------------------------------------- the section

def test_the_section_is_off_by_default_and_checks_its_keys(demo_stimuli, tmp_path):
    from server.paradigms import read_study_file

    spec = read_study_file(write_study_file(tmp_path, demo_stimuli, "plain", **SMALL_STUDY))
    assert viewing.checks_of(spec) == () and not viewing.pending(None, spec, 1, "consent")
    for keys, message in (({"checks": ["colour", "hearing"]}, "viewing.checks must name distinct checks"),
                          ({"checks": ["colour", "colour"]}, "viewing.checks must name distinct checks"),
                          ({"colour_plates": 2, "colour_errors": 2}, "colour_errors must be below"),
                          ({"when": "after_task"}, "viewing.when must be"),
                          ({"acuity_logmar": 1.5}, "viewing.acuity_logmar must be in")):
        with pytest.raises(StudyDefinitionError, match=message):
            read_study_file(write_study_file(tmp_path, demo_stimuli, "bad", viewing=keys))
    # Checks run in one order, whatever the file's.
    spec = read_study_file(write_study_file(tmp_path, demo_stimuli, "order", viewing={"checks": ["acuity", "colour"]}))
    assert viewing.checks_of(spec) == ("colour", "acuity") and viewing.needs_card(spec)


def test_acuity_size_follows_logmar_distance_and_the_screen():
    # logMAR 0.3 = 2 arcmin; at 60 cm that is 0.349 mm; 4 CSS px/mm at devicePixelRatio 2 = 2.79 device px.
    size = viewing.acuity_size(0.3, 60, 4.0, 2.0)
    assert size.gap_device_px == pytest.approx(600 * math.tan(math.radians(10 ** 0.3 / 60)) * 8, rel=1e-9)
    assert size.logmar == pytest.approx(0.3) and size.canvas_px == max(24, math.ceil(8 * size.gap_device_px))
    # At devicePixelRatio 1 the gap would be 1.40 px: drawn at 2 px, and the logMAR tested says so.
    coarse = viewing.acuity_size(0.3, 60, 4.0, 1.0)
    assert coarse.gap_device_px == 2.0 and coarse.logmar == pytest.approx(math.log10(10 ** 0.3 * 2 / (size.gap_device_px / 2)), abs=1e-4)
    assert viewing.acuity_size(0.0, 120, 4.0, 2.0).logmar == pytest.approx(0.0)


# ---------------------------------------------------------------- the gate

def test_checks_stand_before_consent_and_no_client_skips_them(app, client, demo_stimuli, tmp_path):
    slug = _study(app, demo_stimuli, tmp_path)
    viewer = Viewer(app, client, slug)
    token = viewer.api.token
    assert client.get(f"/w/{token}/").location.endswith(f"/w/{token}/viewing")
    page = client.get(f"/w/{token}/viewing")
    assert page.status_code == 200 and 'id="viewing-config"' in page.get_data(as_text=True)
    refused = viewer.api.action("consent")
    assert refused.status_code == 409 and refused.json["error"] == "viewing_pending"
    assert client.post(f"/w/{token}/consent", data={"agree": "yes"}).location.endswith("/viewing")
    viewer.pass_all()
    assert client.get(f"/w/{token}/").status_code == 200  # the consent page now
    assert client.get(f"/w/{token}/viewing").location.endswith(f"/w/{token}/")
    assert viewer.api.action("consent").status_code == 200
    results = viewer.results()
    assert {c: (r.passed, r.errors) for c, r in results.items()} == {
        "brightness": (True, 0), "colour": (True, 0), "screen": (True, 0), "distance": (True, 0), "acuity": (True, 0)}
    assert results["screen"].measures["px_per_mm"] == pytest.approx(PX_PER_MM)
    assert results["distance"].measures["distance_cm"] == pytest.approx(60, abs=0.1)
    # Answered once: a second body (right or wrong) changes nothing.
    assert viewer.answer("colour", viewer.truth("colour")).status_code == 409


def test_checks_after_the_instructions_stand_before_the_task(app, client, demo_stimuli, tmp_path):
    slug = _study(app, demo_stimuli, tmp_path, checks=["colour"], when="after_instructions")
    viewer = Viewer(app, client, slug)
    token = viewer.api.token
    assert viewer.answer("colour", viewer.truth("colour")).status_code == 409  # not before the instructions
    assert viewer.api.action("consent").status_code == 200
    assert client.post(f"/w/{token}/instructions").location.endswith(f"/w/{token}/viewing")
    assert viewer.api.action("instructions_done").json["error"] == "viewing_pending"
    assert viewer.answer("colour", viewer.truth("colour")).json["passed"]
    assert viewer.api.action("instructions_done").json["stage"] == "quiz"


# ---------------------------------------------------------------- scoring

@pytest.mark.parametrize("check", ["brightness", "colour", "acuity"])
def test_a_wrong_answer_turns_the_worker_away_with_the_reason(app, client, demo_stimuli, tmp_path, check):
    slug = _study(app, demo_stimuli, tmp_path, checks=[check], acuity_errors=1)
    viewer = Viewer(app, client, slug)
    if check == "acuity":
        assert viewer.screen(distance_cm=None).json == {"accepted": True}
    truth = viewer.truth(check)
    wrong = {"brightness": lambda t: [t[0], (t[1] % 6) + 1],
             "colour": lambda t: [None] + t[1:],
             "acuity": lambda t: [viewing.GAP_DIRECTIONS[(viewing.GAP_DIRECTIONS.index(d) + 2) % 4] for d in t[:2]]
             + t[2:]}[check](truth)
    if check == "acuity":  # one error of five is allowed (acuity_errors = 1): two are not
        one_wrong = wrong[:1] + truth[1:]
        assert sum(a != b for a, b in zip(one_wrong, truth)) == 1
    answer = viewer.answer(check, wrong).json
    assert answer["passed"] is False and answer["reason"] == f"viewing_{check}" and answer["message"]
    assert viewer.results()[check].errors == sum(a != b for a, b in zip(wrong, truth))
    stopped = client.get(f"/w/{viewer.api.token}/").get_data(as_text=True)
    assert answer["message"].split(",")[0] in stopped  # the stopped page says why
    assert viewer.api.state()["stage"] == "disqualified"
    assert viewer.answer(check, truth).status_code == 409  # no second try


def test_acuity_allows_its_errors(app, client, demo_stimuli, tmp_path):
    slug = _study(app, demo_stimuli, tmp_path, checks=["acuity"], acuity_errors=1)
    viewer = Viewer(app, client, slug)
    viewer.screen(distance_cm=None, dpr=2.0)
    truth = viewer.truth("acuity")
    one_wrong = [viewing.GAP_DIRECTIONS[(viewing.GAP_DIRECTIONS.index(truth[0]) + 1) % 4]] + truth[1:]
    assert viewer.answer("acuity", one_wrong).json == {"passed": True, "pending": []}
    row = viewer.results()["acuity"]
    assert (row.errors, row.items) == (1, 5) and row.measures["logmar"] == pytest.approx(0.3, abs=1e-3)


def test_a_distance_outside_the_tolerance_fails(app, client, demo_stimuli, tmp_path):
    slug = _study(app, demo_stimuli, tmp_path, checks=["distance"], distance_cm=60, distance_tolerance=0.25)
    near = Viewer(app, client, slug)
    refused = near.screen(distance_cm=76).json
    assert refused["accepted"] is False and "76 cm" in refused["reason"] and "60 cm" in refused["reason"]
    answer = near.results()["distance"]
    assert answer.passed is False and answer.measures["distance_cm"] == pytest.approx(76, abs=0.1)
    close = Viewer(app, client, slug)
    assert close.screen(distance_cm=74).json == {"accepted": True}
    assert close.client.post(f"{close.base}/screen", json={**CARD, "device_pixel_ratio": 1,
                                                           "blind_spot_px": _sweeps(300)}).status_code == 409


def test_no_script_claims_a_pass(app, client, demo_stimuli, tmp_path):
    slug = _study(app, demo_stimuli, tmp_path, checks=["colour"])
    viewer = Viewer(app, client, slug)
    for body in ({"passed": True}, {"answers": [1, 2], "passed": True}, {"answers": ["5", "6"]}, {"answers": [5]},
                 {"answers": [5, 10]}):
        assert client.post(f"{viewer.base}/answers/colour", json=body).status_code == 400
    assert viewer.answer("brightness", [1, 1]).status_code == 404  # a check the study does not run
    assert client.post(f"{viewer.base}/screen", json=CARD).status_code == 404
    assert viewer.api.action("consent").status_code == 409


# ---------------------------------------------------------------- what the browser receives

def test_the_browser_receives_no_answer(app, client, demo_stimuli, tmp_path):
    """Two workers with other answers get the same page and images of the same sizes: nothing but the pixels
    differs with the answers (no answer in JSON, URL, file name or size)."""
    slug = _study(app, demo_stimuli, tmp_path)
    first, second = Viewer(app, client, slug), Viewer(app, client, slug)
    while second.truth("colour") == first.truth("colour") or second.truth("acuity") == first.truth("acuity"):
        second = Viewer(app, client, slug)
    pages = [client.get(v.base).get_data(as_text=True).replace(v.api.token, "TOKEN") for v in (first, second)]
    assert pages[0] == pages[1]
    for v in (first, second):
        v.screen()
    sizes = {(check, len(v.image(check, i))) for v in (first, second)
             for check, n in (("brightness", 2), ("colour", 2), ("acuity", 5)) for i in range(n)}
    assert sorted(c for c, _ in sizes) == ["acuity", "brightness", "colour"]  # one size per check
    headers = client.get(f"{first.base}/image/colour/0").headers
    assert "Content-Disposition" not in headers and "Last-Modified" not in headers
    assert client.get(f"{first.base}/image/colour/2").status_code == 404
    # The State the task's browser code reads holds nothing of the checks either.
    assert "viewing" not in str(first.api.state())


# ---------------------------------------------------------------- export

def test_workers_csv_has_the_viewing_columns(app, client, demo_stimuli, tmp_path):
    from server.exports import workers_csv_text

    slug = _study(app, demo_stimuli, tmp_path)
    passed, failed = Viewer(app, client, slug), Viewer(app, client, slug)
    passed.pass_all()
    failed.answer("brightness", failed.truth("brightness"))
    failed.answer("colour", [None, None])
    with app_services(app).sessions() as session:
        study = session.scalar(select(Study).where(Study.slug == slug))
        text, _ = workers_csv_text(session, study, salt=None)
    rows = {r["worker_id"]: r for r in csv.DictReader(io.StringIO(text))}
    good, bad = rows[passed.api.worker_id], rows[failed.api.worker_id]
    assert (good["viewing_passed"], good["viewing_acuity"], good["viewing_acuity_errors"]) == ("1", "1", "0")
    assert float(good["viewing_distance_cm"]) == pytest.approx(60, abs=0.1)
    assert float(good["viewing_px_per_mm"]) == pytest.approx(PX_PER_MM)
    assert float(good["viewing_acuity_logmar"]) >= 0.3
    assert (bad["viewing_passed"], bad["viewing_failed"], bad["viewing_colour"], bad["viewing_colour_errors"],
            bad["viewing_brightness"], bad["viewing_acuity"]) == ("0", "colour", "0", "2", "1", "")


def test_a_study_without_checks_keeps_its_workers_csv(app, client, study):
    from server.exports import workers_csv_text

    WorkerClient(client, study)
    with app_services(app).sessions() as session:
        text, _ = workers_csv_text(session, session.scalar(select(Study).where(Study.slug == study)), salt=None)
    assert "viewing_" not in text.splitlines()[0]
