"""Concurrent motion requests over real HTTP (threaded werkzeug server), on SQLite and PostgreSQL:
retried responses are stored once, and workers finishing their screening at the same moment never
push a clip past its number of observers."""
from __future__ import annotations

import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import requests
from sqlalchemy import select

from server.models import MotionClip, MotionProbe, MotionResponse, MotionTrial
from server.services import app_services

from .concurrency_support import checked
from .motion_support import MotionWorker, create_motion_study, frame_log, vector_fields

TIMEOUT = 30


def _post(base: str, worker: MotionWorker, body: dict) -> requests.Response:
    url = f"{base}/api/v1/assignments/{worker.assignment_id}/motion-responses"
    return checked("post", url, requests.post(url, headers=worker.headers, json=body, timeout=TIMEOUT))


def _body(worker: MotionWorker, trial: dict, response_id: str | None = None) -> dict:
    gt_u, gt_v = worker.gt(trial["trial_id"])
    return {"response_id": response_id or str(uuid.uuid4()), "trial_id": trial["trial_id"],
            **vector_fields(gt_u, gt_v), "cycles": 3, "rt_ms": 9500.0, "frames": frame_log(trial["movie_frames"])}


def test_a_response_sent_many_times_at_once_is_stored_once(app, live_server, motion_clips, tmp_path):
    slug = create_motion_study(app, motion_clips, tmp_path, screening={"rdk_practice": 1, "rdk_trials": 4})
    worker = MotionWorker(app, slug)
    worker.start()
    worker.calibrate()
    trial = worker.state()["trials"][1]
    body = _body(worker, trial)
    with ThreadPoolExecutor(8) as pool:
        statuses = Counter(r.status_code for r in pool.map(lambda _: _post(live_server, worker, body), range(8)))
    assert statuses == {201: 1, 200: 7}
    with app_services(app).sessions() as session:
        assert session.scalars(select(MotionResponse.trial_id)).all() == [trial["trial_id"]]


def test_clips_are_never_given_to_more_observers_than_asked(app, live_server, motion_clips, tmp_path):
    slug = create_motion_study(app, motion_clips.parent / "four.json", tmp_path, slug="race",
                               session={"clips_per_session": 1, "observers_per_clip": 1, "probes_per_clip": 1,
                                        "repetitions": 1},
                               practice={"practice_needed": 0}, screening={"rdk_practice": 0, "rdk_trials": 3})
    workers, last = [], []
    for _ in range(6):  # six workers one response short of the end of their screening
        worker = MotionWorker(app, slug)
        worker.start()
        worker.calibrate()
        trials = worker.state()["trials"]
        for trial in trials[:-1]:
            worker.answer(trial)
        workers.append(worker)
        last.append(_body(worker, trials[-1]))
    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(lambda k: _post(live_server, workers[k], last[k]), range(6)))
    assert all(r.status_code == 201 for r in results)
    stages = Counter(r.json()["stage"] for r in results)
    assert stages == {"main": 4, "full": 2}  # four clips, one observer each; the others are told it is full
    with app_services(app).sessions() as session:
        per_clip = Counter(session.scalars(
            select(MotionClip.clip_id).join(MotionProbe).join(MotionTrial, MotionTrial.probe_id == MotionProbe.id)
            .where(~MotionTrial.practice)).all())
    assert sorted(per_clip.values()) == [1, 1, 1, 1]
