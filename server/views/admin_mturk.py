"""Experimenter pages for Amazon Mechanical Turk, under ``/admin/mturk``.

    GET  /admin/mturk/studies/<slug>             HITs, MTurk assignments and the payment plan (database only)
    POST /admin/mturk/studies/<slug>/reconcile   fetch HITs and assignments from MTurk
    POST /admin/mturk/studies/<slug>/approve     form: assignment_id, or all_submitted=1
    POST /admin/mturk/studies/<slug>/reject      form: assignment_id, feedback
    POST /admin/mturk/studies/<slug>/bonus       pay the plan's unpaid bonuses of approved assignments
    POST /admin/mturk/studies/<slug>/expire      expire every HIT of the study

The marketplace is the sandbox unless the app config has ``MTURK_LIVE = True``; tests set
``MTURK_CLIENT_FACTORY`` (a callable ``live -> boto3 client``). Every POST needs the CSRF token.
"""
from __future__ import annotations

from flask import (
    Blueprint,
    Response,
    abort,
    current_app,
    redirect,
    render_template,
    request,
    url_for,
)
from sqlalchemy import select

from .. import auth
from ..app import db_session
from ..models import MTurkAssignment, MTurkHit, Study
from .admin import CSP

bp = Blueprint("admin_mturk", __name__, url_prefix="/admin/mturk")


@bp.before_request
def _csrf():
    auth.check_csrf()


@bp.after_request
def _headers(response: Response) -> Response:
    response.headers["Cache-Control"] = "no-store"
    response.headers["X-Frame-Options"] = "DENY"
    response.headers.setdefault("Content-Security-Policy", CSP)
    return response


@bp.context_processor
def _template_globals():
    return {"csrf_token": auth.csrf_token}


def _live() -> bool:
    return bool(current_app.config.get("MTURK_LIVE", False))


def _service():
    from ..mturk import MTurkService, check_credentials, make_client

    factory = current_app.config.get("MTURK_CLIENT_FACTORY")
    if factory is None:
        check_credentials()
        factory = lambda live: make_client(live=live)
    return MTurkService(factory(_live()), db_session(), sandbox=not _live())


def _study(slug: str) -> Study:
    study = db_session().scalar(select(Study).where(Study.slug == slug))
    if study is None:
        abort(404, description=f"There is no study {slug!r}.")
    return study


def _back(slug: str, message: str, ok: bool = True):
    return redirect(url_for("admin_mturk.study", slug=slug, msg=message, ok=int(ok)))


def _run(slug: str, action):
    """Run ``action(service, study) -> message``; MTurk errors come back as the page's message."""
    from botocore.exceptions import BotoCoreError, ClientError

    from ..mturk import MTurkError

    session = db_session()
    study = _study(slug)
    try:
        message = action(_service(), study)
        session.commit()
        return _back(slug, message)
    except (MTurkError, ClientError, BotoCoreError) as exc:
        session.rollback()
        return _back(slug, f"MTurk: {exc}", ok=False)


@bp.get("/studies/<slug>")
@auth.login_required
def study(slug: str):
    from ..payments import payment_plan

    session = db_session()
    study = _study(slug)
    hits = list(session.scalars(select(MTurkHit).where(MTurkHit.study_id == study.id, MTurkHit.sandbox == (not _live()))
                                .order_by(MTurkHit.id)))
    assignments = list(session.scalars(select(MTurkAssignment).where(MTurkAssignment.study_id == study.id)
                                       .order_by(MTurkAssignment.submit_time, MTurkAssignment.id)))
    return render_template("admin_mturk_study.html", study=study, hits=hits, assignments=assignments,
                           plan=payment_plan(session, study), live=_live(), message=request.args.get("msg"),
                           ok=request.args.get("ok") != "0", user=auth.current_user(session).username)


@bp.post("/studies/<slug>/reconcile")
@auth.login_required
def reconcile(slug: str):
    def action(service, study):
        counts = service.reconcile(study, qualify=True)
        return f"{counts['hits']} HIT(s), {counts['assignments']} assignment(s) ({counts['new']} new)"
    return _run(slug, action)


@bp.post("/studies/<slug>/approve")
@auth.login_required
def approve(slug: str):
    def action(service, study):
        if request.form.get("all_submitted"):
            ids = list(db_session().scalars(select(MTurkAssignment.assignment_id).where(
                MTurkAssignment.study_id == study.id, MTurkAssignment.status == "Submitted")))
        else:
            ids = [_own_assignment(study, request.form.get("assignment_id", ""))]
        for assignment_id in ids:
            service.approve(assignment_id)
            db_session().commit()
        return f"{len(ids)} assignment(s) approved"
    return _run(slug, action)


@bp.post("/studies/<slug>/reject")
@auth.login_required
def reject(slug: str):
    def action(service, study):
        assignment_id = _own_assignment(study, request.form.get("assignment_id", ""))
        return f"{assignment_id}: {service.reject(assignment_id, request.form.get('feedback', ''))}"
    return _run(slug, action)


@bp.post("/studies/<slug>/bonus")
@auth.login_required
def bonus(slug: str):
    from ..payments import payment_plan

    def action(service, study):
        rows = [r for r in payment_plan(db_session(), study).rows
                if r.bonus > 0 and r.bonus_status != "sent" and r.mturk_status == "Approved"]
        for row in rows:
            service.grant_bonus(row.worker_id, row.assignment_id, row.bonus, row.bonus_reason, study=study)
        return f"{len(rows)} bonus(es) paid"
    return _run(slug, action)


@bp.post("/studies/<slug>/expire")
@auth.login_required
def expire(slug: str):
    def action(service, study):
        hits = [h for h in service.hits(study) if h.hit_id and h.status not in ("expired", "deleted", "Disposed")]
        for hit in hits:
            service.expire_hit(hit.hit_id)
            db_session().commit()
        return f"{len(hits)} HIT(s) expired"
    return _run(slug, action)


def _own_assignment(study: Study, assignment_id: str) -> str:
    """Only assignments of this study (as reconciled) can be acted on from its page."""
    found = db_session().scalar(select(MTurkAssignment.assignment_id).where(
        MTurkAssignment.study_id == study.id, MTurkAssignment.assignment_id == assignment_id))
    if found is None:
        abort(404, description=f"No MTurk assignment {assignment_id!r} in this study (reconcile first).")
    return found
