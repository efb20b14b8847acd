"""The worker API under ``/api/v1`` (documented in ``server/openapi.yaml``).

Every endpoint of an assignment needs ``Authorization: Bearer <token>``, the
signed token of that very assignment. A request either commits everything it
changed or, on any error, nothing.
"""
from __future__ import annotations

import hmac
from pathlib import Path

from flask import Blueprint, Response, current_app, jsonify, request
from sqlalchemy import select

from .. import assignments as flow
from ..app import db_session
from ..errors import ApiError, invalid, reject_unknown
from ..models import Assignment, Study
from ..tokens import BadToken, make_token, read_token

bp = Blueprint("api", __name__, url_prefix="/api/v1")
OPENAPI = Path(__file__).resolve().parent.parent / "openapi.yaml"


def _json_body() -> dict:
    body = request.get_json(silent=True)
    if body is None:
        raise invalid("the body must be JSON (Content-Type: application/json)")
    if not isinstance(body, dict):
        raise invalid("the body must be a JSON object")
    return body


def authorised_assignment(assignment_id: str, *, lock: bool = False) -> Assignment:
    """The assignment named in the path, if the bearer token is its own; else a 403."""
    header = request.headers.get("Authorization", "")
    if not header.startswith("Bearer "):
        raise ApiError(403, "bad_token", "missing worker token (Authorization: Bearer ...)")
    try:
        token_assignment, nonce = read_token(current_app.config["SECRET_KEY"], header[7:].strip())
    except BadToken as exc:
        raise ApiError(403, "bad_token", str(exc)) from None
    if not (assignment_id.isascii() and assignment_id.isdigit()) or int(assignment_id) != token_assignment:
        raise ApiError(403, "bad_token", "the token belongs to another assignment")
    session = db_session()
    assignment = flow.lock_assignment(session, token_assignment) if lock else session.get(Assignment, token_assignment)
    if assignment is None or not hmac.compare_digest(assignment.token_nonce, nonce):
        raise ApiError(403, "bad_token", "the token is no longer valid")
    return assignment


def state_response(assignment: Assignment, status: int = 200):
    storage = current_app.extensions["perceptlab.storage"]
    slug = assignment.study.slug
    body = flow.assignment_state(db_session(), assignment, lambda path: storage.url(slug, path))
    return jsonify(body), status


def _committed(func):
    """Commit when the view returns, roll back when it raises."""
    from functools import wraps

    @wraps(func)
    def wrapper(*args, **kwargs):
        session = db_session()
        try:
            result = func(*args, **kwargs)
            session.commit()
            return result
        except BaseException:
            session.rollback()
            raise
    return wrapper


@bp.post("/studies/<slug>/assignments")
@_committed
def create_assignment(slug: str):
    body = _json_body()
    study = db_session().scalar(select(Study).where(Study.slug == slug))
    if study is None:
        raise ApiError(404, "not_found", f"no study {slug!r}")
    reject_unknown(body, ("platform", "worker_id", "assignment_id", "hit_id", "turk_submit_to"))
    for key in ("platform", "worker_id", "assignment_id", "hit_id", "turk_submit_to"):
        if body.get(key) is not None and not isinstance(body[key], str):
            raise invalid(f"{key} must be a string")
    assignment, created = flow.enter(db_session(), study, platform=body.get("platform", "link"),
                            worker_id=body.get("worker_id"), assignment_id=body.get("assignment_id"),
                            hit_id=body.get("hit_id"), turk_submit_to=body.get("turk_submit_to"))
    token = make_token(current_app.config["SECRET_KEY"], assignment.id, assignment.token_nonce)
    return jsonify({"assignment_id": str(assignment.id), "token": token, "stage": assignment.stage,
                    "worker_url": f"/w/{token}/"}), 201 if created else 200


@bp.get("/assignments/<assignment_id>/state")
def get_state(assignment_id: str):
    return state_response(authorised_assignment(assignment_id))


@bp.post("/assignments/<assignment_id>/actions")
@_committed
def post_action(assignment_id: str):
    body = _json_body()
    assignment = authorised_assignment(assignment_id, lock=True)
    if not isinstance(body.get("action"), str):
        raise invalid("the body must be {\"action\": ...}")
    reject_unknown(body, ("action",))
    flow.perform_action(db_session(), assignment, body["action"])
    return state_response(assignment)


@bp.post("/assignments/<assignment_id>/environment")
@_committed
def post_environment(assignment_id: str):
    body = _json_body()
    assignment = authorised_assignment(assignment_id, lock=True)
    flow.record_environment(assignment, body)
    return Response(status=204)


@bp.post("/assignments/<assignment_id>/votes")
@_committed
def post_vote(assignment_id: str):
    body = _json_body()
    assignment = authorised_assignment(assignment_id, lock=True)
    status, result = flow.record_vote(db_session(), assignment, body)
    return jsonify(result), status


def _motion_assignment(assignment_id: str) -> Assignment:
    assignment = authorised_assignment(assignment_id, lock=True)
    if not assignment.study.is_motion:
        raise ApiError(409, "wrong_stage", "this is not a motion-matching study")
    return assignment


@bp.post("/assignments/<assignment_id>/calibration")
@_committed
def post_calibration(assignment_id: str):
    from .. import motion

    body = _json_body()
    status, result = motion.record_calibration(db_session(), _motion_assignment(assignment_id), body)
    return jsonify(result), status


@bp.post("/assignments/<assignment_id>/motion-responses")
@_committed
def post_motion_response(assignment_id: str):
    from .. import motion

    body = _json_body()
    status, result = motion.record_motion_response(db_session(), _motion_assignment(assignment_id), body)
    return jsonify(result), status


@bp.get("/openapi.yaml")
def openapi():
    return Response(OPENAPI.read_text(), mimetype="application/yaml")
