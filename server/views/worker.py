"""Worker pages: entry from a HIT or a plain link, consent, instructions, the trial app, the end."""
from __future__ import annotations

from flask import Blueprint, abort, current_app, redirect, render_template, request, url_for
from sqlalchemy import select

from .. import assignments as flow
from ..app import db_session
from ..errors import ApiError
from ..models import Assignment, MotionClip, Study, StudySet
from ..tokens import BadToken, make_token, read_token
from .stimuli import stimulus_urls

bp = Blueprint("worker", __name__)


def _study(slug: str) -> Study:
    study = db_session().scalar(select(Study).where(Study.slug == slug))
    if study is None:
        abort(404)
    return study


@bp.get("/s/<slug>")
def entry(slug: str):
    """MTurk's ExternalQuestion URL (with assignmentId, hitId, workerId, turkSubmitTo) or a plain link."""
    study = _study(slug)
    args = request.args
    spec = flow.spec_for(db_session(), study.id)
    if args.get("assignmentId") == flow.PREVIEW_ASSIGNMENT or ("hitId" in args and "assignmentId" not in args):
        return render_template("preview.html", study=study, spec=spec, example=_example_set(study),
                               clip_example=_example_clip(study), stimulus_url=stimulus_urls(study))
    from ..entry import admit_from_request

    session = db_session()
    try:
        if "assignmentId" in args:
            assignment, _ = flow.enter(session, study, platform="mturk", worker_id=args.get("workerId"),
                                    assignment_id=args.get("assignmentId"), hit_id=args.get("hitId"),
                                    turk_submit_to=args.get("turkSubmitTo"), admit_new=admit_from_request)
        else:
            # The study's [entry] rules decide which links admit (server/entry.py).
            assignment, _ = flow.enter(session, study, platform="link",
                                    worker_id=args.get("participant") or args.get("PROLIFIC_PID"),
                                    signature=args.get("sig"), access_key=args.get("key"),
                                    admit_new=admit_from_request)
        session.commit()
    except BaseException:
        session.rollback()
        raise
    token = make_token(current_app.config["SECRET_KEY"], assignment.id, assignment.token_nonce)
    return redirect(url_for("worker.stage_page", token=token))


def _assignment(token: str) -> Assignment:
    try:
        assignment_id, nonce = read_token(current_app.config["SECRET_KEY"], token)
    except BadToken:
        raise ApiError(403, "bad_token", "This link is not valid. Please open the task again from its HIT.")
    assignment = db_session().get(Assignment, assignment_id)
    if assignment is None or assignment.token_nonce != nonce:
        raise ApiError(403, "bad_token", "This link is no longer valid.")
    return assignment


def _example_set(study: Study) -> StudySet | None:
    return study.sets[0] if study.sets else None


def _example_clip(study: Study) -> dict | None:
    """Motion studies: the middle frame of the first clip, for the HIT preview."""
    clip = db_session().scalar(select(MotionClip).where(MotionClip.study_id == study.id)
                               .order_by(MotionClip.position).limit(1))
    if clip is None:
        return None
    paths = clip.frames["paths"]
    return {"path": paths[len(paths) // 2], "width": clip.width, "height": clip.height}


@bp.get("/w/<token>/")
def stage_page(token: str):
    assignment = _assignment(token)
    study = assignment.study
    spec = flow.spec_for(db_session(), study.id)
    common = {"study": study, "spec": spec, "token": token, "assignment": assignment,
              "stimulus_url": stimulus_urls(study)}
    stage = assignment.stage
    if stage == "consent":
        return render_template("consent.html", paragraphs=_paragraphs(spec.consent), **common)
    if stage == "instructions":
        return render_template("instructions.html", paragraphs=_paragraphs(spec.instructions),
                               example=_example_set(study), **common)
    if stage in ("quiz", "trials", "page_done"):
        return render_template("trials.html", api_base=request.script_root + "/api/v1",
                               assignment_id=str(assignment.id), study_name=study.name, **common)
    if stage in ("calibration", "rdk", "main"):  # motion-matching studies: the motion app
        return render_template("motion.html", api_base=request.script_root + "/api/v1",
                               assignment_id=str(assignment.id), study_name=study.name, **common)
    if stage == "completed":
        return render_template("done.html", completion=flow.completion_info(assignment), **common)
    if stage == "full":  # no work left before min_pages: no code, no submit form (see flow.no_work_left)
        return render_template("full.html", message=flow.FULL_MESSAGE, **common)
    return render_template("stopped.html", message=_stop_message(assignment),
                           completion=flow.completion_info(assignment), **common)


def _stop_message(assignment: Assignment) -> str | None:
    """Why the worker cannot go on: the worker's status reason, or (motion) why the display was refused."""
    if assignment.study.is_motion:
        from ..motion import stop_message

        return stop_message(db_session(), assignment)
    return assignment.worker.status_reason


def _paragraphs(text: str) -> list[str]:
    return [p.strip() for p in text.split("\n\n") if p.strip()]


def _advance(token: str, action: str):
    session = db_session()
    try:
        assignment = _assignment(token)
        flow.perform_action(session, flow.lock_assignment(session, assignment.id), action)
        session.commit()
    except BaseException:
        session.rollback()
        raise
    return redirect(url_for("worker.stage_page", token=token), code=303)


@bp.post("/w/<token>/consent")
def consent(token: str):
    if request.form.get("agree") != "yes":
        return redirect(url_for("worker.stage_page", token=token), code=303)
    return _advance(token, "consent")


@bp.post("/w/<token>/instructions")
def instructions(token: str):
    return _advance(token, "instructions_done")


@bp.post("/w/<token>/retry")
def retry(token: str):
    """A worker told the study is full tries again: reopened when work is free again, else the same page."""
    session = db_session()
    try:
        assignment = _assignment(token)
        flow.reopen_if_room(session, flow.lock_assignment(session, assignment.id))
        session.commit()
    except BaseException:
        session.rollback()
        raise
    return redirect(url_for("worker.stage_page", token=token), code=303)
