"""The motion study page's figures (headline counts, per-worker progress badges, the live summary JSON),
the blind-spot viewing distance of the calibration (validation, storage, exports) and the earnings on the
completion page, on SQLite and PostgreSQL."""
from __future__ import annotations

import math
from decimal import Decimal

import pytest
from sqlalchemy import func, select

from server import exports
from server.models import Assignment, Calibration, Study
from server.paradigms.motion import export as motion_export
from server.paradigms.motion.paradigm import blind_spot_distance, motion_progress
from server.paradigms.studyfile import StudyDefinitionError
from server.services import app_services

from .conftest import WorkerClient
from .motion_support import MotionWorker, create_motion_study, write_motion_study

SECRET = "test-secret"
TAN = math.tan(math.radians(13.5))
PX_PER_MM = (323.5 / 85.60 + 204.0 / 53.98) / 2   # MotionWorker.calibrate's card


def _finished(app, slug: str, worker_id: str) -> MotionWorker:
    worker = MotionWorker(app, slug, worker_id=worker_id)
    worker.start()
    assert worker.calibrate().status_code == 200
    worker.answer_block()  # RDK screening
    worker.answer_block()  # main session
    assert worker.state()["stage"] == "completed"
    return worker


def _progress(app, slug: str) -> dict:
    with app_services(app).sessions() as session:
        return motion_progress(session, session.scalar(select(Study.id).where(Study.slug == slug)))


# ---------------------------------------------------------------- headline and badges

def test_one_finished_session_counts_once(app, motion_study):
    """The headline read "2 / 20" after one session: each session shows 2 clips and was counted per clip."""
    _finished(app, motion_study, "WONE")
    progress = _progress(app, motion_study)
    # SMALL: 2 clips x 4 observers each = 8 clip viewings = 4 sessions of 2 clips.
    assert (progress["sessions_done"], progress["sessions_target"]) == (1, 4)
    assert (progress["clip_sessions_done"], progress["clip_sessions_target"]) == (2, 8)
    assert progress["fill"] == pytest.approx(0.25) and progress["sessions_open"] == 0


def test_summary_json_has_headline_clips_and_stage_badges(app, admin, motion_study):
    _finished(app, motion_study, "WDONE")
    screening = MotionWorker(app, motion_study, worker_id="WRDK")
    screening.start()
    screening.calibrate()
    main = MotionWorker(app, motion_study, worker_id="WMAIN")
    main.start()
    main.calibrate()
    main.answer_block()
    trials = [t for t in main.state()["trials"] if not t["practice"]]
    for trial in main.state()["trials"]:
        if trial["practice"]:
            main.answer(trial)
    main.answer(trials[0])
    MotionWorker(app, motion_study, worker_id="WNEW").start()

    body = admin.get(f"/admin/api/studies/{motion_study}/summary").json
    assert body["study"]["slug"] == motion_study and body["study"]["unit"] == "sessions"
    assert body["progress"]["sessions_done"] == 1 and body["progress"]["sessions_open"] == 1
    assert [c["clip_id"] for c in body["clips"]] == ["demo_objects", "demo_camera"]
    assert sum(c["done"] for c in body["clips"]) == 2 and sum(c["open"] for c in body["clips"]) == 2
    salt = exports.study_salt(SECRET, motion_study)
    badges = {w["worker_id"]: w["badge"] for w in body["workers"]}
    label = {name: badges[exports.pseudonym(salt, name)]["label"] for name in ("WDONE", "WRDK", "WMAIN", "WNEW")}
    assert label == {"WDONE": "completed", "WRDK": "screening · practice", "WMAIN": "session 1/12",
                     "WNEW": "calibration"}
    assert badges[exports.pseudonym(salt, "WMAIN")] == {"stage": "main", "label": "session 1/12", "done": 1,
                                                        "total": 12}
    assert "WDONE" not in str(body)  # pseudonyms only
    # The paired-comparison summary keys do not appear on a motion study.
    assert not {"sets", "scales"} & set(body)


# ---------------------------------------------------------------- blind spot

BLIND = {**{"calibration": {"blind_spot": True, "blind_spot_repetitions": 5}},
         "session": {"probes_per_clip": 2, "repetitions": 1},
         "practice": {"practice_needed": 1, "practice_max": 3},
         "screening": {"rdk_practice": 1, "rdk_trials": 4}}


class RawCalibration:
    """POST /calibration past the spec check of MotionWorker's client: a 400 that depends on the study
    (blind spot required or not, the distance's range) is no violation of the schema."""

    def __init__(self, worker: MotionWorker):
        self.worker = worker

    def calibrate(self, **extra):
        spec_client = self.worker.client
        self.worker.client = spec_client.client  # the plain Flask test client underneath
        try:
            return self.worker.calibrate(**extra)
        finally:
            self.worker.client = spec_client


def _sweeps_for(distance_cm: float) -> list[float]:
    """Square-to-dot distances (px) of five sweeps around the blind spot at ``distance_cm``."""
    px = distance_cm * 10 * TAN * PX_PER_MM
    return [round(px + d, 1) for d in (-6, -3, 0, 3, 6)]


def test_blind_spot_distance_is_validated_and_stored(app, motion_clips, tmp_path):
    slug = create_motion_study(app, motion_clips, tmp_path, slug="blind", **BLIND)
    worker = MotionWorker(app, slug, worker_id="WBLIND")
    worker.start()
    assert worker.state()["params"]["blind_spot"] is True
    assert worker.state()["params"]["blind_spot_repetitions"] == 5
    bad = [({}, "blind_spot_px must be a list of 5"),
           ({"blind_spot_px": _sweeps_for(60)[:4]}, "a list of 5"),
           ({"blind_spot_px": [*_sweeps_for(60)[:4], True]}, "blind_spot_px[4]"),
           ({"blind_spot_px": [*_sweeps_for(60)[:4], 0]}, "blind_spot_px[4]"),
           ({"blind_spot_px": [*_sweeps_for(60)[:4], "300"]}, "blind_spot_px[4]"),
           ({"blind_spot_px": _sweeps_for(15)}, "viewing distance of 15 cm; 20 to 200 cm"),
           ({"blind_spot_px": _sweeps_for(230)}, "viewing distance of 230 cm")]
    for extra, message in bad:
        response = RawCalibration(worker).calibrate(**extra)
        assert response.status_code == 400 and message in response.json["message"], (extra, response.json)
    with app_services(app).sessions() as session:
        assert session.scalar(select(func.count()).select_from(Calibration)) == 0  # nothing stored

    sweeps = _sweeps_for(58)
    response = worker.calibrate(blind_spot_px=sweeps)
    assert response.status_code == 200, response.json
    assert response.json["measured_distance_cm"] == pytest.approx(58, abs=0.01)
    assert response.json["stage"] == "rdk"
    assert worker.calibrate(blind_spot_px=sweeps).json == response.json  # a retry answers the stored result
    assert worker.calibrate(blind_spot_px=_sweeps_for(70)).status_code == 409
    state = worker.state()
    assert state["calibration"]["measured_distance_cm"] == pytest.approx(58, abs=0.01)
    with app_services(app).sessions() as session:
        stored = session.scalar(select(Calibration))
        assert stored.blind_spot_px == {"px": sweeps}
        assert stored.measured_distance_cm == pytest.approx(blind_spot_distance(sweeps, PX_PER_MM))
        study_id = session.scalar(select(Study.id).where(Study.slug == slug))
        rows = motion_export.export_motion(session, study_id, salt=None)["calibration.csv"]
        assert float(rows[0]["measured_distance_cm"]) == pytest.approx(58, abs=0.01)
        workers = motion_export.motion_workers(session, study_id, b"salt")
        assert workers[0]["measured_distance_cm"] == pytest.approx(58, abs=0.01)


def test_blind_spot_px_is_refused_when_the_study_does_not_measure_it(app, motion_study):
    worker = MotionWorker(app, motion_study)
    worker.start()
    assert worker.state()["params"]["blind_spot"] is False
    response = RawCalibration(worker).calibrate(blind_spot_px=_sweeps_for(60))
    assert response.status_code == 400 and "does not measure the blind spot" in response.json["message"]
    response = worker.calibrate()
    assert response.status_code == 200 and response.json["measured_distance_cm"] is None


def test_blind_spot_settings_in_the_study_file(motion_clips, tmp_path):
    from server.paradigms import read_study_file

    spec = read_study_file(write_motion_study(tmp_path, motion_clips, "ok", calibration={"blind_spot": True}))
    assert spec.blind_spot is True and spec.blind_spot_repetitions == 5
    assert read_study_file(write_motion_study(tmp_path, motion_clips, "off")).blind_spot is False
    for values, message in (({"blind_spot_repetitions": 0}, r"blind_spot_repetitions must be in \[1, 20\], got 0"),
                            ({"blind_spot": "yes"}, "calibration.blind_spot must be bool"),
                            ({"chinrest": True}, "unknown key calibration.chinrest")):
        with pytest.raises(StudyDefinitionError, match=message):
            read_study_file(write_motion_study(tmp_path, motion_clips, "bad", calibration=values))


# ---------------------------------------------------------------- earnings on the completion page

def test_done_page_shows_the_assignments_earnings(app, study):
    from server.payments import assignment_earnings

    with app.test_client() as http:
        worker = WorkerClient(http, study, platform="link")
    with app_services(app).sessions() as db:
        row = db.scalar(select(Assignment))
        row.stage, row.pages_completed, row.completion_code = "completed", 3, "C0DE12345A"
        db.commit()
        earned = assignment_earnings(row.study, row)
        # SMALL_STUDY: 1 page required (0.50) and 2 extra pages at 0.40 each.
        assert (earned.reward, earned.extra, earned.bonus, earned.total) == (
            Decimal("0.50"), 2, Decimal("0.80"), Decimal("1.30"))
    page = app.test_client().get(f"/w/{worker.token}/")
    html = page.get_data(as_text=True)
    assert page.status_code == 200 and 'id="earnings-total">$1.30<' in html
    assert "$0.50 for 1 page + $0.80 bonus for 2 extra pages" in " ".join(html.split())
