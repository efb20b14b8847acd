"""Experimenter pages under ``/admin``: login, the study list, a study's live dashboard, exports.

HTML pages
    GET  /admin/login, POST /admin/login         401 on a wrong password, 429 + Retry-After while the
                                                 login throttle holds (server/login_throttle.py)
    POST /admin/logout                           ends the session on the server too
    GET  /admin/                                 studies with progress, pause/resume buttons
    GET  /admin/studies/<slug>                   one study, on its paradigm's page (paired comparison: figures
                                                 filled in by dashboard.js; motion: server-rendered, refreshed live)
    POST /admin/studies/<slug>/pause | /resume
    GET  /admin/studies/<slug>/workers.csv       ?raw_worker_ids=1
    GET  /admin/studies/<slug>/questionnaire.csv ?raw_worker_ids=1 (server/paradigms/questionnaire.py)
    GET  /admin/studies/<slug>/motion/<name>     the files of the paradigm's downloads (motion studies:
                                                 motion.csv, rdk.csv, frames.csv, calibration.csv)
                                                 (?raw_worker_ids=1)
JSON (``/admin/api``; 401 JSON when not logged in)
    GET  /admin/api/studies                      progress of every study
    GET  /admin/api/studies/<slug>/summary       ?raw_ids=1: the study row and what its paradigm's page shows
                                                 (Paradigm.dashboard_summary)

A paradigm's own experimenter routes live in its package (Paradigm.admin_blueprint; paired comparison:
votes.csv, scales.csv and the running estimate's refresh, server/paradigms/paired/admin.py), built with
the helpers this module uses too, one floor down in :mod:`server.admin_support` (:func:`protect`,
:func:`admin_error`, :func:`study_or_404`, :func:`download_salt`, :func:`csv_download`, :func:`flag`), so that
paradigm packages never import ``server/views/``; this module re-exports them for the other admin views.

Every page needs a logged-in experimenter; every POST needs the session's CSRF
token (form field ``csrf_token`` or header ``X-CSRF-Token``).
"""
from __future__ import annotations

import datetime as dt
import math

from flask import (Blueprint, abort, current_app, jsonify, make_response, redirect, render_template,
                   request, url_for)
from sqlalchemy import func, select
from werkzeug.exceptions import HTTPException

from .. import auth, exports, wages
# Re-exported for the other admin views (admin_codes, admin_mturk, admin_prolific import them from here).
from ..admin_support import (_user_name, admin_error, csv_download, download_salt, flag, protect,  # noqa: F401
                             study_or_404)
from ..db import db_session
from ..models import Assignment, QuestionnaireResponse, Study, as_utc, utcnow
from ..paradigms import paradigm_for, spec_from_config, viewing
from ..paradigms.core import spec_for
from ..paradigms.questionnaire import questionnaire_csv_text, study_parts_of
from ..reasons import REASONS
from ..refusals import reason_counts
from ..paradigms.stages import TERMINAL_STAGES
from ..worker_time import PaySettings

bp = Blueprint("admin", __name__, url_prefix="/admin")

protect(bp)
bp.register_error_handler(HTTPException, admin_error)


@bp.context_processor
def _template_globals():
    return {"preview_url": _preview_url}


def _preview_url(slug: str) -> str:
    """The study's preview link (server/pilot.py): each visit is a new pilot participant."""
    from ..pilot import preview_link

    return preview_link(current_app.config["SECRET_KEY"], slug, request.script_root)


# ---------------------------------------------------------------- login

@bp.route("/login", methods=["GET", "POST"])
def login():
    target = auth.safe_next(request.values.get("next"))
    if request.method == "GET":
        if auth.current_user(db_session()) is not None:
            return redirect(target)
        return render_template("admin_login.html", next=target, error=None, username="")
    username = request.form.get("username", "").strip()[:100]
    password = request.form.get("password", "")
    device, client = auth.device_for(username), request.remote_addr
    wait = auth.throttle().acquire(username, client, device)  # counts this attempt as failed until refunded
    if wait > 0:
        return _throttled(target, username, wait, device is not None)
    session = db_session()
    user = auth.find_user(session, username) if username else None
    if not auth.verify_password(user, password):
        return render_template("admin_login.html", next=target, error="Wrong username or password.",
                               username=username), 401
    auth.throttle().succeeded(username, client, device)
    auth.log_in(session, user)
    session.commit()
    response = redirect(target, code=303)
    auth.set_device_cookie(response, user)
    return response


def _throttled(target: str, username: str, wait: float, known_device: bool):
    """429 with Retry-After and a login page that says how long to wait (no request thread sleeps)."""
    seconds = math.ceil(wait)
    when = f"{seconds} second(s)" if seconds < 120 else f"{math.ceil(seconds / 60)} minute(s)"
    if known_device:
        error = f"Too many failed logins from this browser. Try again in {when}."
    else:
        error = (f"Too many failed logins for this username or from this network. Try again in {when}, "
                 "or from a browser you logged in with before: other people's attempts do not hold it up.")
    response = make_response(render_template("admin_login.html", next=target, error=error, username=username), 429)
    response.headers["Retry-After"] = str(seconds)
    return response


@bp.post("/logout")
def logout():
    session = db_session()
    auth.log_out(session)
    session.commit()
    return redirect(url_for("admin.login"), code=303)


# ---------------------------------------------------------------- pages

def _refresh_ms() -> int:
    return int(1000 * float(current_app.config["SERVER"].get("dashboard_refresh_seconds", 5)))


@bp.get("/")
@auth.login_required
def index():
    session = db_session()
    studies = [_study_row(session, s) for s in session.scalars(select(Study).order_by(Study.created_at.desc()))]
    return render_template("admin_index.html", studies=studies, user=_user_name(), refresh_ms=_refresh_ms())


@bp.get("/studies/<slug>")
@auth.login_required
def study_page(slug: str):
    study = study_or_404(slug)
    session = db_session()
    paradigm = paradigm_for(study)
    salt = exports.study_salt(current_app.config["SECRET_KEY"], study.slug)
    pay = wages.study_pay(session, study, pay_settings())  # as of loading the page (not refreshed by the script)
    return render_template(paradigm.dashboard_template, study=study, row=_study_row(session, study),
                           user=_user_name(), refresh_ms=_refresh_ms(),
                           pay=pay, pay_labels={w.raw_id: exports.pseudonym(salt, w.raw_id) for w in pay.workers},
                           stopping=_stopping_record(session, study), stopping_forecasting=_forecasting(study),
                           stopping_can_forecast=_can_forecast(paradigm),
                           viewing=viewing.dashboard_summary(session, study, spec_for(session, study.id)),
                           reasons=reason_counts(session, study.id), reason_stages={code: known.stage for code, known in REASONS.items()},
                           **_questionnaire_context(session, study),
                           **paradigm.dashboard_context(session, study, salt))


def _questionnaire_context(session, study: Study) -> dict:
    """What the study page says of the study's questionnaire: its parts ("before", "after") and how many
    parts participants answered."""
    parts = study_parts_of(study)
    answered = session.scalar(select(func.count()).select_from(QuestionnaireResponse)
                              .where(QuestionnaireResponse.study_id == study.id)) if any(parts.values()) else 0
    return {"questionnaire_parts": [word for part, word in (("pre", "before"), ("post", "after")) if parts[part]],
            "questionnaire_answered": answered}


def _stopping_record(session, study: Study):
    """The study's [stopping] record as last checked (server/stopping.py), or None without a target or cap; a
    study never checked gets an empty record, so the panel still shows its button."""
    from ..models import StudyStopping
    from ..stopping import stopping_spec

    if stopping_spec(study) is None:
        return None
    return session.get(StudyStopping, study.id) or StudyStopping(study_id=study.id)


@bp.post("/studies/<slug>/stopping-forecast")
@auth.login_required
def stopping_forecast(slug: str):
    """Start the simulation forecast of what the study still needs (the panel's button; runs in the background)."""
    from ..forecast_jobs import start

    study_id = study_or_404(slug).id
    db_session().commit()
    start(current_app._get_current_object(), study_id)  # one per study in the deployment, cached, niced
    return redirect(url_for("admin.study_page", slug=slug), code=303)


def _can_forecast(paradigm) -> bool:
    """Whether the paradigm offers a simulation forecast (overrides ``Paradigm.forecast``)."""
    from ..paradigms.core import Paradigm

    return type(paradigm).forecast is not Paradigm.forecast


def _forecasting(study: Study) -> bool:
    from ..forecast_jobs import running

    return running(current_app._get_current_object(), study.id)


@bp.post("/studies/<slug>/check-stopping")
@auth.login_required
def check_stopping(slug: str):
    """Check the study's [stopping] rules now (the study page's button)."""
    from ..stopping import check_in_app

    study_id = study_or_404(slug).id
    db_session().commit()  # the check runs in its own session (on SQLite every transaction holds the write lock)
    check_in_app(current_app._get_current_object(), study_id)
    return redirect(url_for("admin.study_page", slug=slug), code=303)


def pay_settings() -> PaySettings:
    """The app's ``[server]`` settings of time on task and pay (server/worker_time.py)."""
    return PaySettings.from_config(current_app.config["SERVER"])


@bp.post("/studies/<slug>/pause")
@auth.login_required
def pause(slug: str):
    return _set_status(slug, "paused")


@bp.post("/studies/<slug>/resume")
@auth.login_required
def resume(slug: str):
    return _set_status(slug, "active")


def _set_status(slug: str, status: str):
    session = db_session()
    study = study_or_404(slug)
    study.status = status
    session.commit()
    current_app.logger.info("%s set study %s to %s", _user_name(), slug, status)
    target = auth.safe_next(request.form.get("next"), url_for("admin.study_page", slug=slug))
    return redirect(target, code=303)


# ---------------------------------------------------------------- downloads

@bp.get("/studies/<slug>/workers.csv")
@auth.login_required
def workers_csv(slug: str):
    study = study_or_404(slug)
    raw = flag("raw_worker_ids")
    text, _ = exports.workers_csv_text(db_session(), study, salt=download_salt(study, raw), pay_settings=pay_settings(),
                                       include_pilot=flag("include_pilot"))
    return csv_download(text, f"{slug}-workers{'-raw-ids' if raw else ''}.csv")


@bp.get("/studies/<slug>/questionnaire.csv")
@auth.login_required
def questionnaire_csv(slug: str):
    """The study's questionnaire answers (server/paradigms/questionnaire.py; ``?raw_worker_ids=1``)."""
    study = study_or_404(slug)
    raw = flag("raw_worker_ids")
    text = questionnaire_csv_text(db_session(), study, salt=download_salt(study, raw),
                                  include_pilot=flag("include_pilot"))
    return csv_download(text, f"{slug}-questionnaire{'-raw-ids' if raw else ''}.csv")


@bp.get("/studies/<slug>/motion/<name>")
@auth.login_required
def motion_csv(slug: str, name: str):
    """One of the study's paradigm downloads (motion.csv, rdk.csv, frames.csv or calibration.csv of a motion
    study; ``?raw_worker_ids=1``)."""
    study = study_or_404(slug)
    paradigm = paradigm_for(study)
    if name not in paradigm.downloads:
        abort(404, description=f"There is no {name} for study {slug!r}.")
    raw = flag("raw_worker_ids")
    text = paradigm.export_file(db_session(), study.id, name, salt=download_salt(study, raw),
                                include_pilot=flag("include_pilot"))
    return csv_download(text, f"{slug}-{name.removesuffix('.csv')}{'-raw-ids' if raw else ''}.csv")


# ---------------------------------------------------------------- JSON

@bp.get("/api/studies")
@auth.login_required
def api_studies():
    session = db_session()
    return jsonify({"studies": [_study_row(session, s) for s in session.scalars(select(Study).order_by(Study.id))],
                    "generated_at": utcnow().isoformat()})


@bp.get("/api/studies/<slug>/summary")
@auth.login_required
def api_summary(slug: str):
    study = study_or_404(slug)
    session = db_session()
    salt = exports.study_salt(current_app.config["SECRET_KEY"], study.slug)
    own = paradigm_for(study).dashboard_summary(session, study, salt, raw_ids=flag("raw_ids"))
    return jsonify({"study": _study_row(session, study), **own, "generated_at": utcnow().isoformat()})


# ---------------------------------------------------------------- summary pieces

def _iso(value: dt.datetime | None) -> str | None:
    if value is None:
        return None
    return as_utc(value).isoformat()


def _study_row(session, study: Study) -> dict:
    """One study's headline figures (the study list and the top of the study page), in its paradigm's units."""
    paradigm = paradigm_for(study)
    progress = {**paradigm.progress(session, study.id), "paradigm": paradigm.title}
    answers = paradigm.response_model
    last_answer = session.scalar(select(func.max(answers.created_at)).where(answers.study_id == study.id))
    return {"slug": study.slug, "name": study.name, "status": study.status, "created_at": _iso(study.created_at),
            **progress, "active_assignments": active_assignments(session, study),
            "last_vote_at": _iso(last_answer), "url": url_for("admin.study_page", slug=study.slug)}


def active_assignments(session, study: Study) -> int:
    """Assignments still under way: not finished, and active within the study's assignment timeout."""
    timeout = spec_from_config(study.config).assignment_timeout_minutes
    cutoff = utcnow() - dt.timedelta(minutes=timeout)
    # Activity is the latest answer: a vote, an adjustment response (the paradigm's response table).
    answers = paradigm_for(study).response_model
    last = (select(answers.assignment_id, func.max(answers.created_at).label("at"))
            .where(answers.study_id == study.id).group_by(answers.assignment_id).subquery())
    return int(session.scalar(
        select(func.count()).select_from(Assignment).outerjoin(last, last.c.assignment_id == Assignment.id)
        .where(Assignment.study_id == study.id, Assignment.stage.not_in(TERMINAL_STAGES), ~Assignment.pilot,
               func.coalesce(last.c.at, Assignment.created_at) > cutoff)))
