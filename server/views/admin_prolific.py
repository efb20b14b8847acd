"""Experimenter pages for Prolific, under ``/admin/prolific`` (server/prolific.py does the calls).

    GET  /admin/prolific/studies/<slug>               the Prolific study (state, places, reward, time, devices),
                                                      its submissions with the code check, the bonus ledger;
                                                      no Prolific call
    POST /admin/prolific/studies/<slug>/create        form: url, places (a draft; publishing is a separate step)
    POST /admin/prolific/studies/<slug>/publish       (publish, pause, resume, stop: each may be repeated)
    POST /admin/prolific/studies/<slug>/pause
    POST /admin/prolific/studies/<slug>/resume
    POST /admin/prolific/studies/<slug>/stop
    POST /admin/prolific/studies/<slug>/places        form: more
    POST /admin/prolific/studies/<slug>/reconcile     fetch the study, its submissions, settle unanswered bonuses
    POST /admin/prolific/studies/<slug>/approve       form: submission_id, or all_checked=1 (codes that check)
    POST /admin/prolific/studies/<slug>/reject        form: submission_id, category, message (100+ characters)
    POST /admin/prolific/studies/<slug>/bonus         pay the pay rules' bonuses of approved submissions, once

The token comes from ``PROLIFIC_TOKEN``; tests set ``PROLIFIC_CLIENT_FACTORY`` (a callable returning a
:class:`~server.prolific.ProlificClient`). Every POST needs the CSRF token; its outcome is flashed on the
study's Prolific page it redirects to.
"""
from __future__ import annotations

from flask import (Blueprint, current_app, flash, get_flashed_messages, redirect, render_template, request,
                   url_for)
from sqlalchemy import select

from .. import auth
from ..db import db_session
from .admin import protect, study_or_404

bp = Blueprint("admin_prolific", __name__, url_prefix="/admin/prolific")


protect(bp)


def _back(slug: str, message: str, ok: bool = True):
    flash(message, "ok" if ok else "error")
    return redirect(url_for("admin_prolific.study", slug=slug))


def _service(client):
    from ..prolific import ProlificService

    return ProlificService(client, db_session())


def _run(slug: str, action):
    """Run ``action(service, study) -> message`` with a fresh client; Prolific's errors become the page's message."""
    from ..prolific import ProlificClient, ProlificError

    session = db_session()
    study = study_or_404(slug)
    try:
        client = (current_app.config.get("PROLIFIC_CLIENT_FACTORY") or ProlificClient)()
        try:
            message = action(_service(client), study)
        finally:
            client.close()
        session.commit()
        return _back(slug, message)
    except ProlificError as exc:
        session.rollback()
        return _back(slug, f"Prolific: {exc}", ok=False)


def _default_url() -> str:
    root = request.url_root.rstrip("/")
    return root if root.lower().startswith("https://") else ""


@bp.get("/studies/<slug>")
@auth.login_required
def study(slug: str):
    from ..models import ProlificBonus, ProlificStudy, ProlificSubmission
    from ..prolific import AWAITING_REVIEW, REJECTION_CATEGORIES, ProlificService

    session = db_session()
    study = study_or_404(slug)
    record = session.scalar(select(ProlificStudy).where(ProlificStudy.study_id == study.id))
    submissions = list(session.scalars(select(ProlificSubmission).where(ProlificSubmission.study_id == study.id)
                                       .order_by(ProlificSubmission.started_at, ProlificSubmission.id)))
    # The code check and the bonus plan read only the database (the service's client is never used here).
    service = ProlificService(None, session)
    ok, refused = service.review(study)
    checks = {s.submission_id: "code checks" for s in ok}
    checks.update({s.submission_id: why for s, why in refused})
    # Bulk approval is asynchronous: asked for, not yet shown approved (reconcile reads it back).
    checks.update({s.submission_id: "approval asked for; not shown approved by Prolific yet"
                   for s in service.pending_approval(study)})
    ledger = list(session.scalars(select(ProlificBonus).where(ProlificBonus.study_id == study.id)
                                  .order_by(ProlificBonus.id)))
    return render_template("admin_prolific_study.html", study=study, record=record, submissions=submissions,
                           checks=checks, approvable=len(ok), plan=service.bonus_plan(study), ledger=ledger,
                           awaiting=AWAITING_REVIEW, categories=REJECTION_CATEGORIES, default_url=_default_url(),
                           messages=get_flashed_messages(with_categories=True),
                           user=auth.current_user(session).username)


@bp.post("/studies/<slug>/create")
@auth.login_required
def create(slug: str):
    url = (request.form.get("url") or "").strip() or _default_url()
    try:
        places = int(request.form.get("places", ""))
    except ValueError:
        return _back(slug, "Places must be a whole number.", ok=False)
    if not url:
        return _back(slug, "The public https:// URL of this server is required.", ok=False)

    def action(service, study):
        row = service.create(study, host=url, places=places)
        return f"Draft study {row.prolific_id} created on Prolific ({row.places} place(s)); publish it when ready."
    return _run(slug, action)


def _transition(slug: str, action_name: str):
    return _run(slug, lambda service, study: f"Prolific study: {service.transition(study, action_name)}")


@bp.post("/studies/<slug>/publish")
@auth.login_required
def publish(slug: str):
    return _transition(slug, "PUBLISH")


@bp.post("/studies/<slug>/pause")
@auth.login_required
def pause(slug: str):
    return _transition(slug, "PAUSE")


@bp.post("/studies/<slug>/resume")
@auth.login_required
def resume(slug: str):
    return _transition(slug, "START")


@bp.post("/studies/<slug>/stop")
@auth.login_required
def stop(slug: str):
    return _transition(slug, "STOP")


@bp.post("/studies/<slug>/places")
@auth.login_required
def places(slug: str):
    try:
        more = int(request.form.get("more", ""))
    except ValueError:
        return _back(slug, "Places to add must be a whole number.", ok=False)
    return _run(slug, lambda service, study: f"{service.add_places(study, more)} place(s) in all")


@bp.post("/studies/<slug>/reconcile")
@auth.login_required
def reconcile(slug: str):
    def action(service, study):
        counts = service.reconcile(study)
        text = f"{counts['submissions']} submission(s) ({counts['new']} new)"
        if counts["bonuses_confirmed"] or counts["bonuses_unconfirmed"]:
            text += (f"; unanswered bonus payments: {counts['bonuses_confirmed']} confirmed, "
                     f"{counts['bonuses_unconfirmed']} not seen yet")
        return text
    return _run(slug, action)


@bp.post("/studies/<slug>/approve")
@auth.login_required
def approve(slug: str):
    def action(service, study):
        if request.form.get("all_checked"):
            asked, refused = service.approve_checked(study)
            left = f"; {len(refused)} left for you to review" if refused else ""
            # Bulk approval is asynchronous on Prolific: reconcile shows when it went through.
            return f"approval asked for {len(asked)} submission(s) (Prolific approves them shortly; reconcile to see){left}"
        submission_id = request.form.get("submission_id", "")
        return f"{submission_id}: {service.approve(study, submission_id)}"
    return _run(slug, action)


@bp.post("/studies/<slug>/reject")
@auth.login_required
def reject(slug: str):
    def action(service, study):
        submission_id = request.form.get("submission_id", "")
        result = service.reject(study, submission_id, request.form.get("category", ""),
                                request.form.get("message", ""))
        return f"{submission_id}: {result}"
    return _run(slug, action)


@bp.post("/studies/<slug>/bonus")
@auth.login_required
def bonus(slug: str):
    return _run(slug, lambda service, study: service.pay_bonuses(study).summary())
