"""The participants of a study and their completion codes, under ``/admin/studies/<slug>/participants``.

    GET  /admin/studies/<slug>/participants          every assignment: platform, status, code given
                                                     (?raw_ids=1: the platforms' IDs and Prolific's STUDY_ID,
                                                     SESSION_ID, which are personal data)
    POST /admin/studies/<slug>/participants/check    form field ``codes``: a recruiter's CSV of submitted codes
                                                     (at most UPLOAD_LIMIT bytes), checked as
                                                     ``perceptlab codes check`` does (server/codes.py)
    POST /admin/studies/<slug>/participants/pilot    form fields ``worker`` (a pseudonym) and ``pilot`` (1 or 0):
                                                     mark a participant as a pilot or as a real one again, as
                                                     ``perceptlab study pilot`` does (server/pilot.py)

All need a logged-in experimenter; the POSTs need the session's CSRF token. Only the pilot mark is stored.
"""
from __future__ import annotations

from flask import Blueprint, current_app, redirect, render_template, request, url_for
from sqlalchemy import select
from werkzeug.exceptions import RequestEntityTooLarge

from .. import auth, codes, exports, pilot
from ..db import db_session
from ..models import Study
from ..paradigms import spec_from_config
from .admin import protect, study_or_404

bp = Blueprint("admin_codes", __name__, url_prefix="/admin/studies")
UPLOAD_LIMIT = 8 << 20  # bytes of one upload; the app's limit for every other request is 1 MB


@bp.before_request
def _upload_limit():
    # Before the CSRF check, which reads the form (and so the upload) of every POST.
    if request.endpoint == "admin_codes.check":
        request.max_content_length = UPLOAD_LIMIT


protect(bp)


def _page(study: Study, *, check=None, error: str | None = None, status: int = 200):
    session = db_session()
    raw = request.args.get("raw_ids", "") in ("1", "true", "yes", "on")
    if raw:
        current_app.logger.info("%s viewed raw participant IDs of study %s",
                                auth.current_user(session).username, study.slug)
    salt = exports.study_salt(current_app.config["SECRET_KEY"], study.slug)
    rows = [{"p": p, "worker_id": exports.pseudonym(salt, p.external_id)} for p in codes.participants(session, study)]
    spec = spec_from_config(study.config)
    html = render_template("admin_participants.html", study=study, spec=spec, rows=rows, raw=raw, check=check,
                           error=error, upload_limit_mb=UPLOAD_LIMIT >> 20, user=auth.current_user(session).username,
                           preview_url=pilot.preview_link(current_app.config["SECRET_KEY"], study.slug,
                                                          request.script_root))
    return html, status


@bp.get("/<slug>/participants")
@auth.login_required
def participants(slug: str):
    return _page(study_or_404(slug))


@bp.post("/<slug>/participants/check")
@auth.login_required
def check(slug: str):
    study = study_or_404(slug)
    try:
        upload = request.files.get("codes")
        data = upload.read(UPLOAD_LIMIT + 1) if upload is not None else b""
    except RequestEntityTooLarge:
        return _page(study, error=f"The file is larger than {UPLOAD_LIMIT >> 20} MB.", status=413)
    if not data:
        return _page(study, error="Choose a CSV file of submitted codes first.", status=400)
    try:
        submitted = codes.read_submitted(data, max_bytes=UPLOAD_LIMIT)
    except codes.CodeFileError as exc:
        name = upload.filename or "the file"
        return _page(study, error=f"{name}: {exc}", status=400)
    return _page(study, check=codes.check_codes(db_session(), study, submitted))


@bp.post("/<slug>/participants/pilot")
@auth.login_required
def mark_pilot(slug: str):
    """Mark one participant (by pseudonym) as a pilot (``pilot=1``) or as a real participant again (``pilot=0``)."""
    study = study_or_404(slug)
    session = db_session()
    salt = exports.study_salt(current_app.config["SECRET_KEY"], study.slug)
    try:
        found = pilot.find_workers(session, study, [request.form.get("worker", "")], salt)
    except LookupError as exc:
        return _page(study, error=str(exc), status=404)
    try:
        pilot.mark_pilot(session, study, found, pilot=request.form.get("pilot") == "1")
    except pilot.SimulatedWorkerError as exc:
        return _page(study, error=str(exc), status=409)
    session.commit()
    current_app.logger.info("%s marked %s of study %s as %s", auth.current_user(session).username,
                            request.form.get("worker"), study.slug,
                            "a pilot" if request.form.get("pilot") == "1" else "a real participant")
    return redirect(url_for("admin_codes.participants", slug=study.slug), code=303)


@bp.errorhandler(RequestEntityTooLarge)
def _too_large(exc):
    # Raised by the CSRF check reading an oversized upload: the same page, with the reason.
    slug = (request.view_args or {}).get("slug", "")
    study = db_session().scalar(select(Study).where(Study.slug == slug))
    if study is None or auth.current_user(db_session()) is None:
        return exc
    return _page(study, error=f"The file is larger than {UPLOAD_LIMIT >> 20} MB.", status=413)
