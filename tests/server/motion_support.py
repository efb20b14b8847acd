"""Motion-matching study helpers shared by the server and browser tests: writing and creating a motion
study, a scripted worker over the spec-checked test client (:class:`MotionWorker`), frame logs.

A support module, not a test module: test modules import it (they never import each other); the
``motion_study`` fixture built on it lives in tests/server/conftest.py.
"""
from __future__ import annotations

import math
import uuid
from pathlib import Path

import numpy as np
from sqlalchemy import select

from server.models import MotionProbe, MotionTrial
from server.services import app_services

from .api_support import SpecClient

FRAME_MS = 1000 / 30
REFRESH_MS = 1000 / 60


def write_motion_study(folder: Path, manifest: Path, slug: str = "motion", **sections) -> Path:
    """A motion study.toml over ``manifest``; ``sections`` like ``screening={"rdk_trials": 10}``."""
    sections["entry"] = {"external_hits": True, **sections.get("entry", {})}  # MTurk entries without posted HITs
    lines = ["[study]", 'kind = "motion"', f'slug = "{slug}"', 'name = "Motion test"',
             f'clips = ["{manifest.as_posix()}"]']
    for section, values in sections.items():
        lines.append(f"[{section}]")
        for key, value in values.items():
            text = f'"{value}"' if isinstance(value, str) else str(value).lower() if isinstance(value, bool) \
                else repr(value)
            lines.append(f"{key} = {text}")
    path = folder / f"{slug}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def create_motion_study(app, manifest: Path, folder: Path, slug: str = "motion", **sections) -> str:
    from server.paradigms import create_study, read_study_file

    spec = read_study_file(write_motion_study(folder, manifest, slug, **sections))
    with app_services(app).sessions() as session:
        create_study(session, spec)
        session.commit()
    return slug


# Small blocks so a test can walk through a whole assignment quickly.
SMALL = {"session": {"probes_per_clip": 3, "repetitions": 2, "observers_per_clip": 4},
         "practice": {"practice_needed": 2, "practice_max": 5},
         "screening": {"rdk_practice": 2, "rdk_trials": 8}}


def ideal_phase(n_frames: int, t0: float, refresh_ms: float = REFRESH_MS, stalls: tuple[int, ...] = ()) -> list[float]:
    """rAF timestamps of one phase at a steady refresh, up to the refresh that ends it; each index in
    ``stalls`` loses one refresh there (one dropped frame)."""
    t, k = [], 0
    while True:
        stamp = t0 + k * refresh_ms
        t.append(stamp)
        if math.floor((stamp - t0 + refresh_ms / 2) / FRAME_MS) >= n_frames:
            return t
        k += 2 if len(t) in stalls else 1


def frame_log(movie_frames: int = 15, drops: int = 0, cycles: int = 3) -> list[dict]:
    """A frame log of ``cycles`` cycles (movie and matching), with ``drops`` stalls in the last movie."""
    log, t0 = [], 1000.0
    for cycle in range(1, cycles + 1):
        stalls = tuple(range(3, 3 + 3 * drops, 3)) if cycle == cycles else ()
        log.append({"cycle": cycle, "phase": "movie", "t": ideal_phase(movie_frames, t0, stalls=stalls)})
        log.append({"cycle": cycle, "phase": "matching", "t": ideal_phase(15, t0 + 1500)})
        t0 += 3000
    return log


def vector_fields(u: float, v: float) -> dict:
    """resp_u/v with the control panel's direction (y up, 0-360) and speed."""
    return {"resp_u": u, "resp_v": v, "direction_deg": math.degrees(math.atan2(-v, u)) % 360,
            "speed_ppf": min(math.hypot(u, v), 20.0)}


class MotionWorker:
    """A worker of a motion study over the spec-checked test client."""

    def __init__(self, app, slug: str, worker_id: str | None = None, platform: str = "link"):
        self.app = app
        self.client = SpecClient(app.test_client())
        self.worker_id = worker_id or f"W{uuid.uuid4().hex[:10].upper()}"
        body = {"platform": platform, "worker_id": self.worker_id}
        if platform == "mturk":
            body.update(assignment_id=f"A{uuid.uuid4().hex[:12].upper()}", hit_id="HIT1",
                        turk_submit_to="https://workersandbox.mturk.com")
        response = self.client.post(f"/api/v1/studies/{slug}/assignments", json=body)
        assert response.status_code in (200, 201), response.json
        self.assignment_id = response.json["assignment_id"]
        self.token = response.json["token"]
        self.entry = response.json

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def url(self, tail: str) -> str:
        return f"/api/v1/assignments/{self.assignment_id}/{tail}"

    def state(self) -> dict:
        response = self.client.get(self.url("state"), headers=self.headers)
        assert response.status_code == 200, response.json
        return response.json

    def action(self, action: str):
        return self.client.post(self.url("actions"), headers=self.headers, json={"action": action})

    def start(self) -> dict:
        assert self.action("consent").status_code == 200
        response = self.action("instructions_done")
        assert response.status_code == 200, response.json
        return response.json

    def calibrate(self, interval_ms: float = REFRESH_MS, jitter: float = 0.05, n: int = 60, **extra):
        rng = np.random.default_rng(1)
        intervals = (interval_ms + rng.uniform(-jitter, jitter, n)).tolist()
        body = {"card_width_px": 323.5, "card_height_px": 204.0, "refresh_intervals_ms": intervals,
                "fullscreen": True, "device_pixel_ratio": 1, "screen_width": 1920, "screen_height": 1080,
                "window_width": 1366, "window_height": 768, **extra}
        return self.client.post(self.url("calibration"), headers=self.headers, json=body)

    def gt(self, trial_id: int) -> tuple[float, float]:
        """The true vector of a trial, read from the database (State hides it on test trials)."""
        from server.models import MotionClip as Clip
        from server.paradigms.motion.paradigm import trial_gt

        with app_services(self.app).sessions() as session:
            row = session.execute(select(MotionTrial.kind, MotionTrial.params, MotionProbe.gt_u, MotionProbe.gt_v,
                                         Clip.movie_frames)
                                  .outerjoin(MotionProbe, MotionTrial.probe_id == MotionProbe.id)
                                  .outerjoin(Clip, MotionProbe.clip_id == Clip.id)
                                  .where(MotionTrial.id == trial_id)).one()
            return trial_gt(row)

    def dots(self, trial_id: int, headers: dict | None = None):
        """GET the dot movie of an RDK trial (spec-checked)."""
        return self.client.get(self.url(f"motion-trials/{trial_id}/dots"), headers=headers or self.headers)

    def respond(self, trial: dict, u: float, v: float, response_id: str | None = None, drops: int = 0, **extra):
        body = {"response_id": response_id or str(uuid.uuid4()), "trial_id": trial["trial_id"],
                **vector_fields(u, v), "cycles": 3, "rt_ms": 9876.5,
                "frames": frame_log(trial["movie_frames"], drops), "client_time": "2026-11-21T10:00:00Z",
                "window_width": 1366, "window_height": 768, "device_pixel_ratio": 1, **extra}
        return self.client.post(self.url("motion-responses"), headers=self.headers, json=body)

    def answer(self, trial: dict, noise: float = 0.3, rng: np.random.Generator | None = None, **kwargs) -> dict:
        """Answer near the truth (normal noise of SD ``noise`` px/frame); return the 201 body."""
        rng = rng or np.random.default_rng(trial["trial_id"])
        noise = 0.0 if trial["practice"] else noise  # practice passes at once
        gt_u, gt_v = self.gt(trial["trial_id"])
        response = self.respond(trial, gt_u + rng.normal(0, noise), gt_v + rng.normal(0, noise), **kwargs)
        assert response.status_code == 201, response.json
        return response.json

    def answer_block(self, noise: float = 0.3, rng: np.random.Generator | None = None) -> dict:
        """Answer every open trial of the current block (refetching State as the browser does once
        trials run out); return the last response body."""
        body: dict = {}
        stage = self.state()["stage"]
        while True:
            state = self.state()
            if state["stage"] != stage or not state["trials"]:
                return body
            for trial in state["trials"]:
                body = self.answer(trial, noise, rng)


#: The secret key of the export tests' pseudonyms.
SECRET = "test-secret"


def _finished_worker(app, slug: str, worker_id: str, drops_on_first_main: int = 0) -> MotionWorker:
    """A worker who finished a motion study (one failed practice trial, ``drops_on_first_main``
    dropped frames on the first main trial)."""
    worker = MotionWorker(app, slug, worker_id=worker_id)
    worker.start()
    worker.calibrate()
    rdk = worker.state()["trials"]
    worker.respond(rdk[0], -worker.gt(rdk[0]["trial_id"])[0], -worker.gt(rdk[0]["trial_id"])[1])  # failed practice
    worker.answer_block()
    first_main = [t for t in worker.state()["trials"] if not t["practice"]][0]
    worker.answer(first_main, drops=drops_on_first_main)
    worker.answer_block()
    assert worker.state()["stage"] == "completed"
    return worker
