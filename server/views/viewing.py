"""The ``[viewing]`` checks' worker routes (server/paradigms/viewing.py draws, scores and stores them):

    GET  /w/<token>/viewing                     the checks' page (experiment_ui/templates/viewing.html)
    GET  /w/<token>/viewing/image/<check>/<i>   one image of a check (PNG, one size per check and worker)
    POST /w/<token>/viewing/screen              the card (and blind spot) measure: calibration.js's body
    POST /w/<token>/viewing/answers/<check>     {"answers": [...]} of brightness, colour or acuity

The token is the worker page's; answers are taken only while the worker stands at the checks' stage.
"""
from __future__ import annotations

from dataclasses import replace

from flask import Blueprint, Response, current_app, jsonify, redirect, render_template, request, url_for

from ..db import db_session
from ..paradigms import paradigm_for, viewing
from ..paradigms.core import lock_assignment, spec_for
from .worker import assignment_of_token, page_locale, use_worker_locale

bp = Blueprint("viewing", __name__)


def _secret() -> str:
    return current_app.config["SECRET_KEY"]


@bp.get("/w/<token>/viewing")
def page(token: str):
    """The checks' page while some are pending at the worker's stage; else the worker's page."""
    assignment = assignment_of_token(token)
    session = db_session()
    spec = spec_for(session, assignment.study_id)
    stage, action = viewing.GATES.get(getattr(spec, "when", ""), (None, None))
    page_locale(session, assignment, spec)
    if assignment.stage != stage or not viewing.pending(session, spec, assignment.worker_id, action):
        return redirect(url_for("worker.stage_page", token=token))
    return viewing_page(token, assignment, spec)


def viewing_page(token: str, assignment, spec) -> str:
    """The checks' page of ``assignment`` (also what the consent stage shows while checks before it are pending)."""
    config = viewing.page_config(spec, request.script_root + f"/w/{token}/viewing")
    # The device check first, as on the consent page: a phone never meets a card it cannot show (the video
    # connection and decoding checks stay on the consent page, so that they run once).
    requirement = replace(paradigm_for(assignment.study).window_requirement(db_session(), assignment.study),
                          decode=(), min_mbps=0.0)
    return render_template("viewing.html", study=assignment.study, token=token, config=config,
                           requirement=requirement, assignment=assignment,
                           unable_url=url_for("worker.unable", token=token))


@bp.get("/w/<token>/viewing/image/<check>/<int:index>")
def image(token: str, check: str, index: int):
    assignment = assignment_of_token(token)
    session = db_session()
    data = viewing.check_image(session, _secret(), assignment, spec_for(session, assignment.study_id), check, index)
    response = Response(data, mimetype="image/png")
    response.headers["Cache-Control"] = "no-store"
    return response


def _recorded(record):
    session = db_session()
    try:
        assignment = lock_assignment(session, assignment_of_token(request.view_args["token"]).id)
        spec = spec_for(session, assignment.study_id)
        # A failed check's reason is written in the worker's language: the page shows it, and so does the stop.
        use_worker_locale(assignment.worker, spec)
        answer = record(session, assignment, spec, request.get_json(silent=True))
        session.commit()
    except BaseException:
        session.rollback()
        raise
    return jsonify(answer)


@bp.post("/w/<token>/viewing/screen")
def screen(token: str):
    return _recorded(viewing.record_screen)


@bp.post("/w/<token>/viewing/answers/<check>")
def answers(token: str, check: str):
    return _recorded(lambda session, assignment, spec, body: viewing.record_answers(
        session, _secret(), assignment, spec, check, body))
