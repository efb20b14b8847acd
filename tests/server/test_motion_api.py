"""Motion-matching studies over the worker API (server/paradigms/motion/paradigm.py), on SQLite and PostgreSQL.

A scripted worker goes through consent, instructions, calibration, the RDK screening (practice
with a failed trial repeated, then test trials) and the main session. Every response passes
through :class:`~tests.server.api_support.SpecClient`, so it is checked against ``server/openapi.yaml``.
"""
from __future__ import annotations

import json
import math
import re
import uuid
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import func, select

from server.models import Study, Worker
from server.paradigms.motion.models import Calibration, FrameLog, MotionClip, MotionProbe, MotionResponse, MotionTrial
from server.services import app_services

from .api_support import SpecClient
from .motion_support import REFRESH_MS, SMALL, MotionWorker, create_motion_study, write_motion_study
from .reason_support import counts, one, recorded


def count(app, model) -> int:
    with app_services(app).sessions() as session:
        return int(session.scalar(select(func.count()).select_from(model)))


# ---------------------------------------------------------------- the whole path

def test_scripted_worker_through_calibration_screening_practice_and_main(app, motion_study):
    worker = MotionWorker(app, motion_study)
    state = worker.state()
    assert state["kind"] == "motion" and state["stage"] == "consent" and state["trials"] == []
    assert worker.action("finish").status_code == 409  # paired-comparison actions do not exist here
    state = worker.start()
    assert state["stage"] == "calibration" and state["calibration"] is None and state["block"] is None
    assert re.fullmatch(rf"/stimuli/{motion_study}/[0-9a-f]{{32}}\.png", state["params"]["noise_url"])  # opaque
    assert state["params"]["panel_diameter_px"] == 600
    assert worker.action("consent").status_code == 200  # a repeated action is harmless

    calibrated = worker.calibrate()
    assert calibrated.status_code == 200, calibrated.json
    result = calibrated.json
    assert result["accepted"] and result["reason"] is None and result["stage"] == "rdk"
    px_per_mm = (323.5 / 85.60 + 204.0 / 53.98) / 2
    assert result["px_per_mm"] == pytest.approx(px_per_mm)
    assert result["viewing_distance_cm"] == pytest.approx(50 / px_per_mm / 10 / (2 * math.tan(math.radians(0.5))))
    assert result["refresh_hz"] == pytest.approx(60, abs=0.1)
    assert worker.calibrate().json == result  # a retry answers the stored result
    assert worker.calibrate(card_width_px=300.0).status_code == 409

    state = worker.state()
    block = state["block"]
    assert block == {"name": "rdk", "practice_passes": 0, "practice_needed": 2, "practice_done": 0,
                     "practice_max": 5, "trials_done": 0, "trials_total": 8}
    assert [t["practice"] for t in state["trials"]] == [True] * 2 + [False] * 8
    assert all("rdk" in t and "clip" not in t for t in state["trials"])
    # RDK trials all show the true motion afterwards (HuPerFlow gives feedback in the whole RDK session),
    # but the truth comes with the answer to the response, not in State.
    assert all(t["feedback"] and "gt" not in t for t in state["trials"])

    # A failed practice trial is repeated at once, with the same dots.
    first = state["trials"][0]
    gt_u, gt_v = worker.gt(first["trial_id"])
    failed = worker.respond(first, -gt_u, -gt_v)  # the opposite direction
    assert failed.status_code == 201 and failed.json["practice_passed"] is False and failed.json["repeat_added"]
    assert failed.json["feedback"] == {"gt_u": pytest.approx(gt_u), "gt_v": pytest.approx(gt_v), "passed": False}
    state = worker.state()
    practice = [t for t in state["trials"] if t["practice"]]
    assert len(practice) == 2 and practice[0]["rdk"] == first["rdk"] and practice[0]["trial_id"] != first["trial_id"]
    assert worker.dots(practice[0]["trial_id"]).data == worker.dots(first["trial_id"]).data
    assert state["block"]["practice_done"] == 1 and state["block"]["practice_passes"] == 0

    last = worker.answer_block()
    assert last["stage"] == "main" and last["screening"]["passed"] and last["screening"]["r"] > 0.95
    with app_services(app).sessions() as session:
        stored = session.scalar(select(Worker).where(Worker.external_id == worker.worker_id))
        assert stored.screening_passed and stored.screening_r == pytest.approx(last["screening"]["r"])

    state = worker.state()
    block = state["block"]
    assert block["name"] == "main" and block["trials_total"] == 2 * 3 * 2 and block["practice_needed"] == 2
    main = [t for t in state["trials"] if not t["practice"]]
    assert all("gt" not in t and "rdk" not in t for t in main)  # no ground truth on test trials
    assert {(t["clip"]["clip_id"], t["probe"]["probe_id"], t["repetition"]) for t in main} == {
        (c, f"p0{k}", r) for c in ("demo_objects", "demo_camera") for k in range(3) for r in (1, 2)}
    trial = main[0]
    assert len(trial["clip"]["frames"]) == trial["movie_frames"] == 15 and trial["probe"]["frame_index"] == 7
    assert trial["movie_ms"] == pytest.approx(500) and trial["isi2_ms"] == pytest.approx(1000)

    last = worker.answer_block()
    assert last["stage"] == "completed"
    state = worker.state()
    assert state["stage"] == "completed" and state["trials"] == [] and state["completion"]["mode"] == "code"
    assert count(app, MotionResponse) == 3 + 8 + 2 + 12 == count(app, FrameLog)


def _warnings(app, slug: str) -> list[str]:
    from server.paradigms import paradigm_for

    with app_services(app).sessions() as session:
        study = session.scalar(select(Study).where(Study.slug == slug))
        return paradigm_for(study).study_warnings(session, study)


def _main_block(app, slug: str, worker_id: str = "PRACTICE1") -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """A worker's main block: the (clip, probe) of its practice trials and of its test trials."""
    worker = MotionWorker(app, slug, platform="mturk", worker_id=worker_id)
    worker.start()
    worker.calibrate()
    assert worker.answer_block()["stage"] == "main"
    trials = worker.state()["trials"]
    keys = [(t["practice"], (t["clip"]["clip_id"], t["probe"]["probe_id"])) for t in trials]
    return [k for p, k in keys if p], [k for p, k in keys if not p]


def test_practice_never_shows_a_probe_the_session_tests(app, motion_clips, tmp_path):
    """Issue 39: with 5 of each clip's 10 probes tested, practice once showed the true motion of 6 of the
    20 test trials' probes; now it uses the untested p05-p09."""
    slug = create_motion_study(app, motion_clips, tmp_path, slug="practice-untested",
                               session={"probes_per_clip": 5, "repetitions": 1},
                               practice={"practice_needed": 6, "practice_max": 10},
                               screening={"rdk_practice": 0, "rdk_trials": 3})
    practice, tests = _main_block(app, slug)
    assert len(practice) == 6 and len(tests) == 10
    assert not set(practice) & set(tests)
    assert {probe for _, probe in practice} <= {f"p0{k}" for k in range(5, 10)}
    assert _warnings(app, slug) == []


def test_practice_without_untested_probes_uses_other_clips_and_warns(app, motion_clips, tmp_path):
    """Every probe tested: practice takes probes of clips outside the session, never the session's own;
    ``study create`` warns of it."""
    slug = create_motion_study(app, motion_clips.parent / "four.json", tmp_path, slug="practice-others",
                               session={"probes_per_clip": 10, "repetitions": 1, "clips_per_session": 1},
                               practice={"practice_needed": 3, "practice_max": 5},
                               screening={"rdk_practice": 0, "rdk_trials": 3})
    practice, tests = _main_block(app, slug)
    assert len(practice) == 3 and len(tests) == 10
    assert not {clip for clip, _ in practice} & {clip for clip, _ in tests}
    [warning] = _warnings(app, slug)
    assert "no probe is left for practice" in warning and "other sessions test" in warning


def test_full_default_session_of_80_main_trials(app, motion_clips, tmp_path):
    """The default parameters: 6 RDK practice + 80 RDK trials, then 2 clips x 10 probes x 4. The demo's
    clips have 10 probes and a session shows both: no probe is left for practice, so there is none (a
    practice trial would show the answer of test trials), and ``study create`` says so."""
    slug = create_motion_study(app, motion_clips, tmp_path, slug="motion-full")
    [warning] = _warnings(app, slug)
    assert "a session that shows every clip has no practice trials" in warning
    worker = MotionWorker(app, slug)
    worker.start()
    assert worker.calibrate().json["stage"] == "rdk"
    assert worker.state()["block"]["trials_total"] == 80
    rng = np.random.default_rng(0)
    assert worker.answer_block(noise=1.0, rng=rng)["stage"] == "main"
    state = worker.state()
    assert state["block"]["trials_total"] == 80 and len(state["trials"]) == 80
    keys = [(t["clip"]["clip_id"], t["probe"]["probe_id"]) for t in state["trials"] if not t["practice"]]
    assert len(set(keys)) == 20 and all(keys.count(k) == 4 for k in set(keys))
    assert keys[:20] != sorted(keys)[:20]  # randomised order
    assert worker.answer_block(noise=1.0, rng=rng)["stage"] == "completed"
    with app_services(app).sessions() as session:
        n_main = session.scalar(select(func.count()).select_from(MotionResponse).join(MotionTrial).where(
            MotionTrial.kind == "main", ~MotionTrial.practice))
    assert n_main == 80


def test_slow_or_irregular_display_is_refused(app, motion_study):
    slow = MotionWorker(app, motion_study)
    slow.start()
    refused = slow.calibrate(interval_ms=1000 / 30)
    assert refused.status_code == 200
    assert not refused.json["accepted"] and refused.json["stage"] == "disqualified"
    assert "30 times a second" in refused.json["reason"]
    assert recorded(app, slow.assignment_id) == (None, "refresh_too_slow")  # the display's, not the worker's
    state = slow.state()
    assert state["stage"] == "disqualified" and state["message"] == refused.json["reason"]
    assert state["trials"] == [] and state["completion"] is None

    irregular = MotionWorker(app, motion_study)
    irregular.start()
    rng = np.random.default_rng(3)
    intervals = np.where(rng.random(80) < 0.4, 50.0, REFRESH_MS).tolist()
    refused = irregular.client.post(irregular.url("calibration"), headers=irregular.headers, json={
        "card_width_px": 320, "card_height_px": 200, "refresh_intervals_ms": intervals, "fullscreen": False})
    assert refused.status_code == 200 and not refused.json["accepted"] and "irregular" in refused.json["reason"]
    with app_services(app).sessions() as session:
        rows = session.scalars(select(Calibration).order_by(Calibration.id)).all()
        assert [r.accepted for r in rows] == [False, False] and len(rows[1].refresh_intervals["ms"]) == 80
        # The display failed, not the worker: the worker may come back with another one.
        assert {w.status for w in session.scalars(select(Worker))} == {"active"}
    assert counts(app, motion_study) == {**one("refresh_too_slow"), **one("refresh_irregular")}


def test_random_responder_is_disqualified_for_good(app, motion_study):
    worker = MotionWorker(app, motion_study, platform="mturk", worker_id="RANDOM1")
    worker.start()
    worker.calibrate()
    rng = np.random.default_rng(7)
    body: dict = {}
    while (state := worker.state())["stage"] == "rdk":
        for trial in state["trials"]:
            if trial["practice"]:
                body = worker.answer(trial, noise=0.0)
            else:
                response = worker.respond(trial, *rng.uniform(-14, 14, 2))
                assert response.status_code == 201
                body = response.json
    assert body["stage"] == "disqualified" and not body["screening"]["passed"] and body["screening"]["r"] < 0.9
    state = worker.state()
    assert state["stage"] == "disqualified" and "motion test" in state["message"] and state["trials"] == []
    # A new HIT of the same worker starts disqualified.
    again = MotionWorker(app, motion_study, platform="mturk", worker_id="RANDOM1")
    assert again.entry["stage"] == "disqualified"
    assert recorded(app, again.assignment_id) == ("motion_screening", "motion_screening")
    assert counts(app, motion_study) == one("motion_screening")


def test_worker_who_passed_screening_skips_the_rdk_block(app, motion_clips, tmp_path):
    slug = create_motion_study(app, motion_clips.parent / "four.json", tmp_path, slug="four",
                               session={"probes_per_clip": 2, "repetitions": 1, "clips_per_session": 1},
                               practice={"practice_needed": 1, "practice_max": 3},
                               screening={"rdk_practice": 0, "rdk_trials": 4})
    first = MotionWorker(app, slug, platform="mturk", worker_id="RETURNING")
    first.start()
    first.calibrate()
    assert first.answer_block()["stage"] == "main"
    first_clip = first.state()["trials"][-1]["clip"]["clip_id"]
    assert first.answer_block()["stage"] == "completed"
    second = MotionWorker(app, slug, platform="mturk", worker_id="RETURNING")
    second.start()
    assert second.calibrate().json["stage"] == "main"
    clips = {t["clip"]["clip_id"] for t in second.state()["trials"] if not t["practice"]}
    assert len(clips) == 1 and first_clip not in clips  # never the same clip twice


def test_clips_go_to_the_neediest_first_and_run_out(app, motion_clips, tmp_path):
    slug = create_motion_study(app, motion_clips.parent / "four.json", tmp_path, slug="alloc",
                               session={"probes_per_clip": 1, "repetitions": 1, "observers_per_clip": 1},
                               practice={"practice_needed": 0},
                               screening={"rdk_practice": 0, "rdk_trials": 3})
    seen = []
    for k in range(2):
        worker = MotionWorker(app, slug)
        worker.start()
        worker.calibrate()
        body = worker.answer_block()
        assert body["stage"] == "main"
        state = worker.state()
        # Practice uses probes of clips outside the session where there are any (none asked here).
        seen.append({t["clip"]["clip_id"] for t in state["trials"]})
        assert len(seen[-1]) == 2  # two clips per session, while the first session is still open
    assert not seen[0] & seen[1] and len(seen[0] | seen[1]) == 4
    # Every clip has its observer: a third worker is told at entry that the study is full (never completed).
    third = MotionWorker(app, slug)
    assert third.entry["stage"] == "full"
    state = third.state()
    assert state["stage"] == "full" and state["completion"] is None and "no work left" in state["message"]


# ---------------------------------------------------------------- errors and idempotency

def test_responses_are_idempotent_and_errors_store_nothing(app, motion_study):
    worker = MotionWorker(app, motion_study)
    other = MotionWorker(app, motion_study)
    worker.start()
    assert worker.calibrate(n=59).status_code == 400  # too few refresh samples
    assert worker.calibrate(fullscreen="yes").status_code == 400
    assert count(app, Calibration) == 0
    worker.calibrate()
    trial = worker.state()["trials"][2]  # a test trial
    response_id = str(uuid.uuid4())
    stored = worker.respond(trial, 1.0, 2.0, response_id=response_id)
    assert stored.status_code == 201 and stored.json["status"] == "stored" and stored.json["practice_passed"] is None
    retry = worker.respond(trial, 1.0, 2.0, response_id=response_id)
    assert retry.status_code == 200 and retry.json == {**stored.json, "status": "duplicate"}
    assert count(app, MotionResponse) == 1

    changed = worker.respond(trial, 1.5, 2.0, response_id=response_id)
    assert changed.status_code == 409 and changed.json["error"] == "conflict"
    again = worker.respond(trial, 1.0, 2.0)
    assert again.status_code == 409 and again.json["error"] == "trial_already_answered"
    next_trial = worker.state()["trials"][2]
    reused = worker.respond(next_trial, 1.0, 2.0, response_id=response_id)
    assert reused.status_code == 409 and reused.json["error"] == "conflict"

    other.start()
    stolen = other.respond(next_trial, 1.0, 2.0)
    assert stolen.status_code == 404 and stolen.json["error"] == "unknown_trial"
    forged = worker.client.post(worker.url("motion-responses"), headers={"Authorization": "Bearer nope"},
                                json={"response_id": str(uuid.uuid4())})
    assert forged.status_code == 403
    wrong_token = worker.client.post(worker.url("motion-responses"), headers=other.headers, json={})
    assert wrong_token.status_code == 403

    for bad in ({"cycles": 2}, {"frames": []}, {"frames": [{"cycle": 1, "phase": "isi", "t": [1.0]}]},
                {"frames": [{"cycle": 1, "phase": "movie", "t": [1.0] * 20_001}]},
                {"frames": [{"cycle": 1, "phase": "movie", "t": [1.0]}] * 201},
                {"resp_u": "1"}, {"direction_deg": 400}, {"response_id": "not-a-uuid"}, {"extra": 1}):
        refused = worker.respond(next_trial, 1.0, 2.0, **bad)
        assert refused.status_code == 400, (bad, refused.json)
    # Limits the schema cannot say: a log going backwards, more than 20,000 timestamps over all phases.
    raw = worker.client
    worker.client = SpecClient.__new__(SpecClient)
    worker.client.open = lambda method, url, **kw: raw.client.open(url, method=method.upper(), **kw)
    worker.client.post = lambda url, **kw: worker.client.open("post", url, **kw)
    for bad in ({"frames": [{"cycle": 1, "phase": "movie", "t": [2.0, 1.0]}]},
                {"frames": [{"cycle": 1, "phase": "movie", "t": [1.0] * 15_000}] * 2}):
        refused = worker.respond(next_trial, 1.0, 2.0, **bad)
        assert refused.status_code == 400 and refused.json["error"] == "invalid_request", refused.json
    worker.client = raw
    assert worker.client.post(worker.url("motion-responses"), headers=worker.headers, data="[]",
                              content_type="application/json").status_code == 400
    assert count(app, MotionResponse) == 1 and count(app, FrameLog) == 1

    with app_services(app).sessions() as session:
        assert session.scalar(select(func.count()).select_from(MotionTrial).where(MotionTrial.answered)) == 1


def test_response_at_the_wrong_stage_is_refused(app, motion_study, demo_stimuli, tmp_path):
    from .conftest import create_test_study

    worker = MotionWorker(app, motion_study)
    early = worker.calibrate()
    assert early.status_code == 409 and early.json["error"] == "wrong_stage"  # still at consent
    worker.start()
    worker.calibrate()
    rdk_trial = worker.state()["trials"][0]
    worker.answer_block()  # rdk -> main
    assert worker.state()["stage"] == "main"
    # The RDK trial was answered; a new response to it is a conflict, and its duplicate still replays.
    late = worker.respond(rdk_trial, 0.0, 0.0)
    assert late.status_code == 409 and late.json["error"] == "trial_already_answered"
    pc = create_test_study(app, demo_stimuli, tmp_path, slug="pc")
    pc_worker = MotionWorker(app, pc)
    refused = pc_worker.calibrate()
    assert refused.status_code == 409 and refused.json["error"] == "wrong_stage"


# ---------------------------------------------------------------- frame timing

def test_timing_summary_and_repeat_policy(app, motion_clips, tmp_path):
    slug = create_motion_study(app, motion_clips, tmp_path, slug="timing", **{
        **SMALL, "timing": {"dropped_frames": "repeat", "max_timing_repeats": 1}})
    worker = MotionWorker(app, slug)
    worker.start()
    worker.calibrate()
    tests = [t for t in worker.state()["trials"] if not t["practice"]]
    clean = worker.answer(tests[0])
    assert clean["frame_drops"] == 0 and not clean["repeat_added"]
    assert abs(clean["onset_err_mean_ms"]) < REFRESH_MS and clean["onset_err_sd_ms"] >= 0
    dropped = worker.answer(tests[1], drops=2)
    assert dropped["frame_drops"] == 2 and dropped["repeat_added"]
    state = worker.state()
    assert state["block"]["trials_total"] == 9
    repeat = state["trials"][-1]
    assert worker.dots(repeat["trial_id"]).data == worker.dots(tests[1]["trial_id"]).data and not repeat["practice"]
    again = worker.answer(tests[2], drops=1)
    assert again["frame_drops"] == 1 and not again["repeat_added"]  # max_timing_repeats reached
    with app_services(app).sessions() as session:
        flagged = dict(session.execute(select(MotionResponse.trial_id, MotionResponse.timing_flagged)).all())
    assert flagged == {tests[0]["trial_id"]: False, tests[1]["trial_id"]: True, tests[2]["trial_id"]: True}

    # "exclude" (the default) flags trials with drops but adds no repeat.
    slug = create_motion_study(app, motion_clips, tmp_path, slug="timing-exclude", **SMALL)
    worker = MotionWorker(app, slug)
    worker.start()
    worker.calibrate()
    test = [t for t in worker.state()["trials"] if not t["practice"]][0]
    body = worker.answer(test, drops=3)
    assert body["frame_drops"] == 3 and not body["repeat_added"]
    assert worker.state()["block"]["trials_total"] == 8


def test_timing_uses_the_calibrated_refresh(app, motion_study):
    """On a 120 Hz display a 16.7 ms interval is a dropped frame; on 60 Hz it is not."""
    worker = MotionWorker(app, motion_study)
    worker.start()
    worker.calibrate(interval_ms=1000 / 120)
    trial = [t for t in worker.state()["trials"] if not t["practice"]][0]
    body = worker.answer(trial)  # the log is at 60 Hz: every interval is 2 refreshes of 120 Hz
    with app_services(app).sessions() as session:
        n_intervals = session.scalar(select(MotionResponse.n_intervals))
    assert body["frame_drops"] == n_intervals > 0


# ---------------------------------------------------------------- study files

def test_motion_study_file_validation(motion_clips, tmp_path):
    from server.paradigms import StudyDefinitionError, read_study_file
    from server.paradigms.motion.study import MOTION_STUDY_TEMPLATE, MotionSpec

    spec = read_study_file(write_motion_study(tmp_path, motion_clips))
    assert isinstance(spec, MotionSpec) and spec.main_trials == 80 and spec.isi2_ms(10) == pytest.approx(1166.667,
                                                                                                          abs=0.01)
    template = tmp_path / "template.toml"
    template.write_text(MOTION_STUDY_TEMPLATE.replace("clips/manifest.json", motion_clips.as_posix()))
    assert read_study_file(template).clips_per_session == 2
    for sections, message in (({"timing": {"dropped_frames": "skip"}}, "timing.dropped_frames"),
                              ({"session": {"colour": 1}}, "unknown key session.colour"),
                              ({"pages": {"max_pages": 2}}, "unknown section [pages]"),
                              ({"session": {"repetitions": "4"}}, "session.repetitions must be int"),
                              ({"timing": {"refresh_samples": 30}}, "refresh_samples"),
                              ({"practice": {"practice_needed": 40}}, "practice_max")):
        with pytest.raises(StudyDefinitionError, match=message.replace("[", r"\[")) as error:
            read_study_file(write_motion_study(tmp_path, motion_clips, slug="bad", **sections))
        assert str(tmp_path / "bad.toml") in str(error.value)
    missing = tmp_path / "none.toml"
    missing.write_text('[study]\nkind = "motion"\nslug = "x"\n')
    with pytest.raises(StudyDefinitionError, match="study.clips is required"):
        read_study_file(missing)


def test_motion_study_creation_stores_clips_and_probes(app, motion_clips, tmp_path):
    from server.paradigms import StudyDefinitionError, create_study, read_study_file

    create_motion_study(app, motion_clips, tmp_path)
    with app_services(app).sessions() as session:
        study = session.scalar(select(Study).where(Study.slug == "motion"))
        clips = session.scalars(select(MotionClip).order_by(MotionClip.position)).all()
        assert study.config["kind"] == "motion" and study.config["noise"] == "noise.png"
        assert [c.clip_id for c in clips] == ["demo_objects", "demo_camera"]
        assert all(len(c.probes) == 10 and (Path(study.stimulus_root) / c.frames["paths"][0]).is_file()
                   for c in clips)
        manifest = json.loads(motion_clips.read_text())
        probe = clips[0].probes[0]
        assert probe.probe_id == manifest["clips"][0]["probes"][0]["probe_id"]
        assert math.isfinite(probe.gt_u) and math.isfinite(probe.gt_v)
        with pytest.raises(StudyDefinitionError, match="exists already"):
            create_study(session, read_study_file(tmp_path / "motion.toml"))
    # Without a noise texture in the manifest, one is generated beside the clips.
    create_motion_study(app, motion_clips.parent / "four.json", tmp_path, slug="generated")
    with app_services(app).sessions() as session:
        study = session.scalar(select(Study).where(Study.slug == "generated"))
        noise = Path(study.stimulus_root) / study.config["noise"]
        assert study.config["noise"].startswith("_perceptlab/") and noise.is_file()
        from stimuli.io import read_image
        from stimuli.noise import spectral_slope

        image = read_image(noise)
        assert image.shape[:2] == (2048, 2048) and spectral_slope(image[:, :, 0].astype(float)) == pytest.approx(
            -2, abs=0.3)


# ---------------------------------------------------------------- worker pages

def test_worker_pages_of_a_motion_study(app, motion_study):
    client = app.test_client()
    preview = client.get(f"/s/{motion_study}?assignmentId=ASSIGNMENT_ID_NOT_AVAILABLE&hitId=H1")
    assert preview.status_code == 200
    text = preview.get_data(as_text=True)
    assert "video clips" in text and "credit card" in text and "comparisons" not in text
    frame = re.search(r'<img src="([^"]+)"', text).group(1)
    assert client.get(frame).status_code == 200  # a frame of the first clip, served
    entry = client.get(f"/s/{motion_study}?participant=PAGES1")
    assert entry.status_code == 302 and "/w/" in entry.location
    stage_url = entry.location
    consent = client.get(stage_url)
    assert consent.status_code == 200 and 'id="consent"' in consent.get_data(as_text=True)
    assert "motion" in consent.get_data(as_text=True)
    client.post(stage_url + "consent", data={"agree": "yes"})
    instructions = client.get(stage_url).get_data(as_text=True)
    assert "How to match the motion" in instructions and "credit-card" in instructions
    client.post(stage_url + "instructions")
    app_page = client.get(stage_url).get_data(as_text=True)
    assert 'id="motion-root"' in app_page and "js/assignment_driver.js" in app_page and "css/motion.css" in app_page
    assert "motion-matching" in app_page  # the driver's paradigm (static/js/paradigms.js)
    token = stage_url.rstrip("/").rsplit("/", 1)[1]
    assert f"&#34;token&#34;: &#34;{token}&#34;" in app_page or f'"token": "{token}"' in app_page
    # A refused display ends on the stop page with the reason.
    assignment_id = re.search(r"assignmentId(?:&#34;|\")\s*:\s*(?:&#34;|\")(\d+)", app_page).group(1)
    response = client.post(f"/api/v1/assignments/{assignment_id}/calibration",
                           headers={"Authorization": f"Bearer {token}"},
                           json={"card_width_px": 320, "card_height_px": 200, "fullscreen": True,
                                 "refresh_intervals_ms": [1000 / 30] * 60})
    assert response.status_code == 200 and response.json["stage"] == "disqualified"
    stopped = client.get(stage_url).get_data(as_text=True)
    assert 'id="stopped"' in stopped and "30 times a second" in stopped


# ---------------------------------------------------------------- the window a trial needs, recalibration

def test_min_window_follows_the_geometry(app, motion_study):
    """The trial page's smallest window: the clips with their probes' apertures, the RDK aperture and
    the panel with its text columns, at one image pixel per CSS pixel; a study floor raises it."""
    from dataclasses import replace

    from server.paradigms.motion import study as ms
    from server.paradigms.motion import PARADIGM

    spec = ms.MotionSpec(slug="geometry", name="geometry", clips=("x.json",))
    assert ms.min_window(spec) == (1000, 600)  # HuPerFlow's 600 px panel and aperture, 200 px of text either side
    assert ms.min_window(spec, [(768, 432)]) == (1000, 600)
    # A KITTI-sized clip (1242 x 375) with a probe 10 px from its left edge: the placeholder dots (60 px
    # away, 10 px wide) reach 55 px past it, so the clip takes 2 x (621 - 10 + 65) px around the centre.
    extent = ms.clip_extent(spec, 1242, 375, [(10.0, 187.5)])
    assert extent == (1352, 375)
    assert ms.min_window(spec, [extent, (768, 432)]) == (1352, 600)
    assert ms.min_window(replace(spec, min_window_width=1200, min_window_height=700), [(768, 432)]) == (1200, 700)
    assert ms.min_window(replace(spec, panel_diameter_px=500, rdk_aperture_px=500)) == (900, 500)

    with app_services(app).sessions() as session:
        study = session.scalar(select(Study).where(Study.slug == motion_study))
        clips = session.execute(select(MotionClip.width, MotionClip.height).where(MotionClip.study_id == study.id)).all()
        assert clips and all((w, h) == (768, 432) for w, h in clips)  # the demo's clips fit 1000 x 600
        assert PARADIGM.min_window(session, study) == (1000, 600)
    # The page is told the same need (it hides a trial in a smaller window), and the HIT preview says it.
    worker = MotionWorker(app, motion_study)
    params = worker.start()["params"]
    assert (params["min_window_width"], params["min_window_height"]) == (1000, 600)
    preview = app.test_client().get(f"/s/{motion_study}?hitId=H1").get_data(as_text=True)
    assert "a browser window of at least 1000 &times; 600 pixels at normal zoom" in preview


def test_study_min_window_counts_the_probes_a_session_shows(app, motion_clips, tmp_path):
    """Only probes a session shows (the first probes_per_clip of a clip) widen the window."""
    from server.paradigms.motion import study as ms

    slug = create_motion_study(app, motion_clips, tmp_path, slug="edge", session={"probes_per_clip": 1})
    with app_services(app).sessions() as session:
        study = session.scalar(select(Study).where(Study.slug == slug))
        spec = ms.MotionSpec.from_config(study.config)
        clip = session.scalar(select(MotionClip).where(MotionClip.study_id == study.id).limit(1))
        probes = session.scalars(select(MotionProbe).where(MotionProbe.clip_id == clip.id)
                                 .order_by(MotionProbe.position)).all()
        clip.width, clip.height = 1100, 560  # a larger clip (the probes stay inside it)
        probes[-1].x = 0.0  # a later probe at the clip's edge: not shown, the need stays
        session.flush()
        assert ms.study_min_window(session, study.id, spec) == (1100, 600)
        probes[0].x, probes[0].y = 0.0, 0.0  # the shown probe at the corner: its placeholders reach past it
        session.flush()
        assert ms.study_min_window(session, study.id, spec) == (1100 + 130, 560 + 130)
        session.rollback()


def test_recalibration_after_a_zoom_keeps_the_answers_and_the_earlier_figures(app, motion_study):
    worker = MotionWorker(app, motion_study)
    worker.start()
    first = worker.calibrate().json
    assert first["stage"] == "rdk"
    state = worker.state()
    assert state["calibration"]["device_pixel_ratio"] == 1
    assert (state["calibration"]["card_width_px"], state["calibration"]["card_height_px"]) == (323.5, 204.0)
    worker.answer(state["trials"][0])

    # Another body without the flag is still refused; with it, the new measurement replaces the old.
    assert worker.calibrate(card_width_px=258.8, card_height_px=163.2, device_pixel_ratio=1.25).status_code == 409
    again = worker.calibrate(card_width_px=258.8, card_height_px=163.2, device_pixel_ratio=1.25, recalibration=True)
    assert again.status_code == 200, again.json
    assert again.json["accepted"] and again.json["stage"] == "rdk"
    assert again.json["px_per_mm"] == pytest.approx((258.8 / 85.60 + 163.2 / 53.98) / 2)
    assert again.json["viewing_distance_cm"] > first["viewing_distance_cm"]  # fewer px per mm: sit farther
    retry = worker.calibrate(card_width_px=258.8, card_height_px=163.2, device_pixel_ratio=1.25, recalibration=True)
    assert retry.json == again.json  # a retry answers the stored result, and adds no history
    state = worker.state()
    assert state["stage"] == "rdk" and state["block"]["practice_done"] == 1  # the answer is kept
    assert state["calibration"]["device_pixel_ratio"] == 1.25
    with app_services(app).sessions() as session:
        rows = session.scalars(select(Calibration)).all()
        assert len(rows) == 1 and rows[0].device_pixel_ratio == 1.25
        earlier = rows[0].refresh_intervals["earlier"]
        assert [(e["device_pixel_ratio"], e["card_width_px"], e["px_per_mm"]) for e in earlier] == [
            (1.0, 323.5, pytest.approx(first["px_per_mm"]))]
        assert len(rows[0].refresh_intervals["ms"]) == 60
    assert count(app, MotionResponse) == 1

    assert worker.calibrate(recalibration="yes").status_code == 400
    # A display that got too slow is refused as at the first calibration.
    refused = worker.calibrate(interval_ms=1000 / 30, recalibration=True)
    assert refused.status_code == 200 and not refused.json["accepted"] and refused.json["stage"] == "disqualified"
    # Nothing to recalibrate before the first calibration (the flag is a first calibration then) or after the end.
    fresh = MotionWorker(app, motion_study)
    fresh.start()
    assert fresh.calibrate(recalibration=True).json["stage"] == "rdk"
    assert worker.calibrate(card_width_px=300.0, recalibration=True).status_code == 409
