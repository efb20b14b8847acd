"""No answers in the browser (issue 12, item 1), motion studies, on SQLite and PostgreSQL.

State never holds an RDK trial's direction, speed or seed, nor any trial's ground truth; RDK
dots come as a server-rendered binary "dot movie" (decoded here by hand, from the format the
OpenAPI file documents) that only the assignment itself can fetch; the true vector of a
feedback trial arrives in the answer to its stored response, and only there.
"""
from __future__ import annotations

import math
import struct
import uuid

import numpy as np
import pytest
from sqlalchemy import select

from server.models import MotionProbe, MotionTrial
from server.services import app_services
from stimuli.rdk import rdk_dot_positions, rdk_vector

from .motion_support import SMALL, MotionWorker, create_motion_study

FORBIDDEN_KEYS = {"direction_deg", "speed_ppf", "seed", "gt", "gt_u", "gt_v"}


def walk(node, path: str = ""):
    """Every (path, key, value) of a JSON document, depth first."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield path, key, value
            yield from walk(value, f"{path}/{key}")
    elif isinstance(node, list):
        for k, value in enumerate(node):
            yield path, str(k), value
            yield from walk(value, f"{path}/{k}")


def secrets_of(app, assignment_id: str) -> set[float]:
    """Every answer of the assignment's trials as stored: RDK direction, speed, seed and (u, v); probe (u, v).
    Integral values are left out (a static probe's 0.0 would match any count in State)."""
    values: set[float] = set()
    with app_services(app).sessions() as session:
        rows = session.execute(select(MotionTrial.kind, MotionTrial.params, MotionProbe.gt_u, MotionProbe.gt_v)
                               .outerjoin(MotionProbe, MotionTrial.probe_id == MotionProbe.id)
                               .where(MotionTrial.assignment_id == int(assignment_id))).all()
    for kind, params, gt_u, gt_v in rows:
        if kind == "rdk":
            values |= {params["direction_deg"], params["speed_ppf"], params["seed"],
                       *rdk_vector(params["direction_deg"], params["speed_ppf"])}
        else:
            values |= {gt_u, gt_v}
    return {float(v) for v in values if not float(v).is_integer() or abs(v) > 100_000}


def assert_no_answers(app, worker: MotionWorker, state: dict) -> None:
    for path, key, value in walk(state):
        assert key not in FORBIDDEN_KEYS, f"State has {path}/{key}"
    secrets = secrets_of(app, worker.assignment_id)
    numbers = [v for _, _, v in walk(state) if isinstance(v, (int, float)) and not isinstance(v, bool)]
    leaked = [v for v in numbers if any(math.isclose(v, s, rel_tol=1e-9, abs_tol=1e-12) for s in secrets)]
    assert not leaked, f"State holds stored answers: {leaked}"


def decode(data: bytes) -> tuple[np.ndarray, dict]:
    """The dot movie as documented in server/openapi.yaml (getRdkDots), independent of stimuli.rdk."""
    magic, n_frames, scale, n_dots, aperture, zero = struct.unpack_from("<4sHHIHH", data)
    assert (magic, zero) == (b"RDK1", 0) and len(data) == 16 + 4 * n_frames * n_dots
    fixed = np.frombuffer(data, dtype="<u2", offset=16).reshape(n_frames, n_dots, 2)
    header = {"n_frames": n_frames, "scale": scale, "n_dots": n_dots, "aperture_px": aperture}
    return fixed / scale - aperture / 2, header


def stored_params(app, trial_id: int) -> dict:
    with app_services(app).sessions() as session:
        return session.scalar(select(MotionTrial.params).where(MotionTrial.id == trial_id))


# ---------------------------------------------------------------- State

def test_state_of_every_stage_holds_no_answers(app, motion_study):
    worker = MotionWorker(app, motion_study)
    stages = []
    assert_no_answers(app, worker, worker.state())
    worker.start()
    assert_no_answers(app, worker, worker.state())
    assert worker.calibrate().json["stage"] == "rdk"
    rng = np.random.default_rng(5)
    for _ in range(100):
        state = worker.state()
        assert_no_answers(app, worker, state)
        stages.append(state["stage"])
        if not state["trials"]:
            break
        trial = state["trials"][0]
        if trial["kind"] == "rdk":
            assert set(trial["rdk"]) == {"n_dots", "aperture_px", "dot_px"}
        worker.answer(trial, 0.3, rng)
    assert stages[-1] == "completed"
    assert {"rdk", "main"} <= set(stages)


# ---------------------------------------------------------------- the dot movie

def test_dot_movie_shows_the_stored_motion(app, motion_study):
    worker = MotionWorker(app, motion_study)
    worker.start()
    worker.calibrate()
    trials = worker.state()["trials"]
    assert all(t["kind"] == "rdk" for t in trials)
    for trial in trials[:4]:
        response = worker.dots(trial["trial_id"])
        assert response.status_code == 200 and response.mimetype == "application/octet-stream"
        assert response.headers["Cache-Control"] == "private, max-age=86400, immutable"
        positions, header = decode(response.data)
        assert header == {"n_frames": trial["movie_frames"], "scale": 64, "n_dots": trial["rdk"]["n_dots"],
                          "aperture_px": trial["rdk"]["aperture_px"]}
        assert len(response.data) == 16 + 15 * 5000 * 4 == 300_016
        radius = header["aperture_px"] / 2
        assert np.hypot(positions[..., 0], positions[..., 1]).max() <= radius + 1 / 64
        # The motion is in the positions: the median step of the dots is the stored vector.
        params = stored_params(app, trial["trial_id"])
        u, v = rdk_vector(params["direction_deg"], params["speed_ppf"])
        steps = np.diff(positions, axis=0)
        median = np.median(steps.reshape(-1, 2), axis=0)
        assert median == pytest.approx((u, v), abs=1 / 64)
        coherent = np.all(np.abs(steps - (u, v)) <= 1 / 64 + 1e-9, axis=-1)
        assert 0.9 < coherent.mean() < 1  # most dots move by (u, v); a few re-enter on the opposite side
        # Rendered with the reference renderer from the stored seed, and the same bytes every time.
        reference = rdk_dot_positions(header["n_dots"], header["aperture_px"], params["direction_deg"],
                                      params["speed_ppf"], params["seed"], header["n_frames"])
        assert np.abs(positions - reference).max() <= 1 / 128 + 1e-9
        assert worker.dots(trial["trial_id"]).data == response.data
    first, second = (decode(worker.dots(t["trial_id"]).data)[0] for t in trials[:2])
    assert not np.array_equal(first, second)


def test_dot_movie_only_for_the_assignments_own_rdk_trials(app, motion_study, demo_stimuli, tmp_path):
    from .conftest import create_test_study

    worker = MotionWorker(app, motion_study)
    other = MotionWorker(app, motion_study)
    for w in (worker, other):
        w.start()
        w.calibrate()
    mine = worker.state()["trials"][0]["trial_id"]
    assert worker.dots(mine).status_code == 200
    # Another assignment's token on this assignment's path; no token; a forged one.
    assert worker.dots(mine, headers=other.headers).status_code == 403
    assert worker.client.get(worker.url(f"motion-trials/{mine}/dots")).status_code == 403
    assert worker.dots(mine, headers={"Authorization": "Bearer forged"}).status_code == 403
    # This assignment's trial through another assignment: not found.
    stolen = other.dots(mine)
    assert stolen.status_code == 404 and stolen.json["error"] == "unknown_trial"
    for bad in ("999999", "2147483648", "99999999999999999999", "abc", "-1", "1.5", "١"):
        refused = worker.dots(bad)  # type: ignore[arg-type]
        assert refused.status_code == 404 and refused.json["error"] == "unknown_trial", bad
    # A main trial has no dots.
    worker.answer_block()
    main = worker.state()["trials"][0]
    assert main["kind"] == "main"
    assert worker.dots(main["trial_id"]).status_code == 404
    # Nor has a paired-comparison assignment.
    pc = MotionWorker(app, create_test_study(app, demo_stimuli, tmp_path, slug="pc"))
    assert pc.dots(mine).status_code == 404


# ---------------------------------------------------------------- feedback

def expected_feedback(worker: MotionWorker, trial: dict, passed) -> dict:
    gt_u, gt_v = worker.gt(trial["trial_id"])
    return {"gt_u": pytest.approx(gt_u), "gt_v": pytest.approx(gt_v), "passed": passed}


@pytest.mark.parametrize("rdk_feedback", [True, False])
def test_truth_comes_only_with_the_stored_response(app, motion_clips, tmp_path, rdk_feedback):
    slug = create_motion_study(app, motion_clips, tmp_path, slug=f"fb-{rdk_feedback}".lower(),
                               **{**SMALL, "screening": {**SMALL["screening"], "rdk_feedback": rdk_feedback}})
    worker = MotionWorker(app, slug)
    worker.start()
    worker.calibrate()
    seen = set()
    rng = np.random.default_rng(2)
    for _ in range(100):
        state = worker.state()
        if not state["trials"]:
            break
        trial = state["trials"][0]
        expected = trial["practice"] or (trial["kind"] == "rdk" and rdk_feedback)
        assert trial["feedback"] is expected and "gt" not in trial
        gt_u, gt_v = worker.gt(trial["trial_id"])
        response_id = str(uuid.uuid4())
        miss = trial["practice"] and (trial["kind"], True) not in seen  # the first practice answer of a block fails
        noise = 0.0 if trial["practice"] else 0.2
        u, v = (-gt_u, -gt_v) if miss else (gt_u + rng.normal(0, noise), gt_v + rng.normal(0, noise))
        stored = worker.respond(trial, u, v, response_id=response_id)
        assert stored.status_code == 201, stored.json
        body = stored.json
        if expected:
            passed = (not miss) if trial["practice"] else None
            assert body["feedback"] == expected_feedback(worker, trial, passed)
            assert body["practice_passed"] == passed
        else:
            assert body["feedback"] is None
        replay = worker.respond(trial, u, v, response_id=response_id)
        assert replay.status_code == 200 and replay.json == {**body, "status": "duplicate"}
        seen.add((trial["kind"], trial["practice"]))
    assert seen == {("rdk", True), ("rdk", False), ("main", True), ("main", False)}
    assert worker.state()["stage"] == "completed"
