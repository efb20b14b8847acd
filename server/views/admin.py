"""Experimenter pages under ``/admin``: login, the study list, a study's live dashboard, exports.

HTML pages
    GET  /admin/login, POST /admin/login         401 on a wrong password, 429 + Retry-After while the
                                                 login throttle holds (server/login_throttle.py)
    POST /admin/logout                           ends the session on the server too
    GET  /admin/                                 studies with progress, pause/resume buttons
    GET  /admin/studies/<slug>                   one study, on its paradigm's page (paired comparison: figures
                                                 filled in by dashboard.js; motion: server-rendered, refreshed live)
    POST /admin/studies/<slug>/pause | /resume
    GET  /admin/studies/<slug>/votes.csv         ?raw_worker_ids=1 &no_gold=1
    GET  /admin/studies/<slug>/scales.csv        the running estimate
    GET  /admin/studies/<slug>/workers.csv       ?raw_worker_ids=1
    GET  /admin/studies/<slug>/motion/<name>     the files of the paradigm's downloads (motion studies:
                                                 motion.csv, rdk.csv, frames.csv, calibration.csv)
                                                 (?raw_worker_ids=1)
JSON (``/admin/api``; 401 JSON when not logged in)
    GET  /admin/api/studies                      progress of every study
    GET  /admin/api/studies/<slug>/summary       ?raw_ids=1: everything the study page shows (a paradigm with
                                                 a page of its own: Paradigm.dashboard_summary)
    POST /admin/api/studies/<slug>/refresh       recompute the running estimate now

Every page needs a logged-in experimenter; every POST needs the session's CSRF
token (form field ``csrf_token`` or header ``X-CSRF-Token``).
"""
from __future__ import annotations

import datetime as dt
import math

from flask import (Blueprint, Response, abort, current_app, jsonify, make_response, redirect, render_template,
                   request, url_for)
from sqlalchemy import func, select
from werkzeug.exceptions import HTTPException

from .. import auth, codes, exports, wages
from ..paradigms.paired import live_scales
from ..db import db_session
from ..models import Assignment, Pair, ScaleSnapshot, Study, StudySet, Vote, as_utc, utcnow
from ..paradigms import paradigm_for, spec_from_config
from ..paradigms.stages import TERMINAL_STAGES
from ..worker_time import PaySettings

bp = Blueprint("admin", __name__, url_prefix="/admin")

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
HISTOGRAM_BINS = 20


def protect(blueprint: Blueprint) -> None:
    """CSRF checks on every state-changing request, and headers for pages that show worker IDs and
    results: never cached, never framed, no foreign code. Every experimenter blueprint calls this."""
    blueprint.before_request(auth.check_csrf)

    @blueprint.after_request
    def _headers(response: Response) -> Response:
        response.headers["Cache-Control"] = "no-store"
        response.headers["X-Frame-Options"] = "DENY"
        response.headers.setdefault("Content-Security-Policy", CSP)
        return response


protect(bp)


@bp.errorhandler(HTTPException)
def _error(exc: HTTPException):
    if exc.code is None or exc.code < 400:  # routing redirects
        return exc
    if request.path.startswith("/admin/api/"):
        code = {400: "invalid_request", 404: "not_found", 405: "method_not_allowed"}.get(exc.code, "http_error")
        return jsonify({"error": code, "message": exc.description}), exc.code
    return render_template("admin_error.html", title=exc.name, message=exc.description), exc.code


@bp.context_processor
def _template_globals():
    return {"csrf_token": auth.csrf_token, "preview_url": _preview_url}


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

def _study(slug: str) -> Study:
    study = db_session().scalar(select(Study).where(Study.slug == slug))
    if study is None:
        abort(404, description=f"There is no study {slug!r}.")
    return study


def _user_name() -> str:
    return auth.current_user(db_session()).username


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
    study = _study(slug)
    session = db_session()
    paradigm = paradigm_for(study)
    salt = exports.study_salt(current_app.config["SECRET_KEY"], study.slug)
    pay = wages.study_pay(session, study, pay_settings())  # as of loading the page (not refreshed by the script)
    return render_template(paradigm.dashboard_template, study=study, row=_study_row(session, study),
                           user=_user_name(), refresh_ms=_refresh_ms(),
                           pay=pay, pay_labels={w.raw_id: exports.pseudonym(salt, w.raw_id) for w in pay.workers},
                           **paradigm.dashboard_context(session, study, salt))


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
    study = _study(slug)
    study.status = status
    session.commit()
    current_app.logger.info("%s set study %s to %s", _user_name(), slug, status)
    target = auth.safe_next(request.form.get("next"), url_for("admin.study_page", slug=slug))
    return redirect(target, code=303)


# ---------------------------------------------------------------- downloads

def _salt(study: Study, raw: bool) -> bytes | None:
    if raw:
        current_app.logger.info("%s downloaded raw worker IDs of study %s", _user_name(), study.slug)
        return None
    return exports.study_salt(current_app.config["SECRET_KEY"], study.slug)


def _csv(text: str, filename: str) -> Response:
    return Response(text, mimetype="text/csv",
                    headers={"Content-Disposition": f'attachment; filename="{filename}"'})


def _flag(name: str) -> bool:
    return request.args.get(name, "") in ("1", "true", "yes", "on")


@bp.get("/studies/<slug>/votes.csv")
@auth.login_required
def votes_csv(slug: str):
    study = _study(slug)
    raw = _flag("raw_worker_ids")
    rows = exports.export_votes(db_session(), study.id, pseudonymise=not raw, include_gold=not _flag("no_gold"),
                                salt=_salt(study, raw), include_pilot=_flag("include_pilot"))
    return _csv(exports.votes_csv_text(rows), f"{slug}-votes{'-raw-ids' if raw else ''}.csv")


@bp.get("/studies/<slug>/workers.csv")
@auth.login_required
def workers_csv(slug: str):
    study = _study(slug)
    raw = _flag("raw_worker_ids")
    text, _ = exports.workers_csv_text(db_session(), study, salt=_salt(study, raw), pay_settings=pay_settings(),
                                       include_pilot=_flag("include_pilot"))
    return _csv(text, f"{slug}-workers{'-raw-ids' if raw else ''}.csv")


@bp.get("/studies/<slug>/scales.csv")
@auth.login_required
def scales_csv(slug: str):
    from analysis.formats import table_csv

    study_id = _study(slug).id
    session = db_session()
    if session.get(ScaleSnapshot, study_id) is None:
        session.rollback()  # no transaction may stay open while the estimate is computed (SQLite's write lock)
        live_scales.refresh_if_stale(current_app._get_current_object(), study_id)
    snapshot = session.get(ScaleSnapshot, study_id)
    records = [{"set_id": s["set_id"], **item} for s in (snapshot.payload["sets"] if snapshot else [])
               for item in s["items"] if item["scale"] is not None]
    columns = ("set_id", "item_id", "scale", "ci_low", "ci_high", "rank", "n_votes")
    for r in records:
        r.update({k: (float("nan") if r[k] is None else r[k]) for k in ("ci_low", "ci_high")})
    return _csv(table_csv(columns, records), f"{slug}-scales-running.csv")


@bp.get("/studies/<slug>/motion/<name>")
@auth.login_required
def motion_csv(slug: str, name: str):
    """One of the study's paradigm downloads (motion.csv, rdk.csv, frames.csv or calibration.csv of a motion
    study; ``?raw_worker_ids=1``)."""
    study = _study(slug)
    paradigm = paradigm_for(study)
    if name not in paradigm.downloads:
        abort(404, description=f"There is no {name} for study {slug!r}.")
    raw = _flag("raw_worker_ids")
    text = paradigm.export_file(db_session(), study.id, name, salt=_salt(study, raw),
                                include_pilot=_flag("include_pilot"))
    return _csv(text, f"{slug}-{name.removesuffix('.csv')}{'-raw-ids' if raw else ''}.csv")


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
    study = _study(slug)
    session = db_session()
    salt = exports.study_salt(current_app.config["SECRET_KEY"], study.slug)
    own = paradigm_for(study).dashboard_summary(session, study, salt)
    if own is not None:  # a paradigm with figures of its own (motion: clips, calibrated workers)
        return jsonify({"study": _study_row(session, study), **own, "generated_at": utcnow().isoformat()})
    body = {"study": _study_row(session, study), "sets": pair_fill(session, study.id),
            "workers": _workers(session, study, raw=_flag("raw_ids")), "scales": _scales(session, study),
            "generated_at": utcnow().isoformat()}
    return jsonify(body)


@bp.post("/api/studies/<slug>/refresh")
@auth.login_required
def api_refresh(slug: str):
    study = _study(slug)
    study_id, session = study.id, db_session()
    session.rollback()  # as in scales_csv: no open transaction during the computation
    computed = live_scales.refresh_if_stale(current_app._get_current_object(), study_id)
    return jsonify({"computed": computed, "scales": _scales(session, study, trigger=False)})


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


def pair_fill(session, study_id: int) -> list[dict]:
    """Per set: items, pairs, votes against the target, min/median/max votes per pair and a histogram."""
    counts = (select(Vote.pair_id, func.count().label("n")).join(Assignment, Assignment.id == Vote.assignment_id)
              .where(Vote.study_id == study_id, ~Assignment.pilot).group_by(Vote.pair_id).subquery())
    rows = session.execute(
        select(StudySet.name, Pair.target_votes, func.coalesce(counts.c.n, 0))
        .join(Pair, Pair.set_id == StudySet.id).outerjoin(counts, counts.c.pair_id == Pair.id)
        .where(StudySet.study_id == study_id, ~Pair.is_gold).order_by(StudySet.id, Pair.id)).all()
    per_set: dict[str, list[tuple[int, int]]] = {}
    for name, target, n in rows:
        per_set.setdefault(name, []).append((int(target), int(n)))
    names = session.scalars(select(StudySet.name).where(StudySet.study_id == study_id).order_by(StudySet.id))
    return [_fill_record(name, per_set.get(name, [])) for name in names]


def _fill_record(name: str, pairs: list[tuple[int, int]]) -> dict:
    votes = sorted(n for _, n in pairs)
    target = sum(t for t, _ in pairs)
    top = max([0] + votes + [t for t, _ in pairs])
    width = max(1, math.ceil(top / HISTOGRAM_BINS))  # 0..target in at most 21 bins, one count each when it fits
    bins = [0] * (top // width + 1)
    for n in votes:
        bins[n // width] += 1
    middle = len(votes) // 2
    median = None if not votes else (votes[middle] if len(votes) % 2 else (votes[middle - 1] + votes[middle]) / 2)
    return {"set_id": name, "n_pairs": len(pairs), "n_votes": sum(votes), "target_votes": target,
            "fill": sum(votes) / target if target else 0.0,
            "per_pair": {"min": votes[0] if votes else None, "median": median, "max": votes[-1] if votes else None,
                         "target": max((t for t, _ in pairs), default=0)},
            "histogram": [{"low": k * width, "high": k * width + width - 1, "pairs": c} for k, c in enumerate(bins)]}


def _workers(session, study: Study, *, raw: bool) -> list[dict]:
    """The workers table: pseudonym (raw ID only when asked), one status (``state``:
    :func:`server.codes.worker_state`; ``status`` and ``stage`` stay for API readers), pages, votes, gold,
    quiz, TPR, kept."""
    salt = exports.study_salt(current_app.config["SECRET_KEY"], study.slug)
    snapshot = session.get(ScaleSnapshot, study.id)
    screened = snapshot.payload.get("workers", {}) if snapshot else {}
    out = []
    for s in exports.worker_stats(session, study.id):
        scores = screened.get(str(s["db_id"]), {})
        record = {"worker_id": exports.pseudonym(salt, s["raw_id"]), "platform": s["platform"],
                  "status": s["status"], "stage": s["stage"],
                  "state": codes.worker_state(s["status"], s["stage"]),
                  "pages": s["pages"], "n_votes": s["n_votes"],
                  "gold_correct": s["gold_correct"], "gold_total": s["gold_total"],
                  "gold_accuracy": s["gold_correct"] / s["gold_total"] if s["gold_total"] else None,
                  "quiz": s["quiz"], "quiz_correct": s["quiz_correct"], "quiz_total": s["quiz_total"],
                  "tpr": scores.get("tpr"), "kept": scores.get("kept"), "flags": scores.get("flags") or ""}
        if raw:
            record["raw_id"] = s["raw_id"]
        out.append(record)
    return out


def _scales(session, study: Study, *, trigger: bool = True) -> dict:
    """The stored running estimate with its freshness; starts a recomputation when it is stale."""
    app = current_app._get_current_object()
    snapshot = session.get(ScaleSnapshot, study.id)
    n_votes = live_scales.vote_count(session, study.id)
    stale = n_votes > 0 and (snapshot is None or snapshot.n_votes != n_votes)
    if stale and trigger:
        interval = float(current_app.config["SERVER"].get("live_scales_interval", 0) or 0)
        min_age = interval if interval > 0 else 10.0
        if snapshot is None or live_scales.snapshot_age(snapshot) >= min_age:
            live_scales.refresh_in_background(app, study.id, min_age=0 if snapshot is None else min_age)
    body = {"stale": stale, "computing": live_scales.is_computing(app, study.id), "votes_now": n_votes}
    if snapshot is None:
        return {**body, "available": False, "error": None if n_votes else "no votes yet", "sets": []}
    # Per-worker figures go into the workers table instead (keyed by pseudonym there).
    shown = {k: v for k, v in snapshot.payload.items() if k != "workers"}
    return {**body, "available": True, "snapshot_votes": snapshot.n_votes, **shown}
