"""What every experimenter blueprint under ``/admin`` shares, below the views: :func:`protect` (CSRF on
every state-changing request, no caching, no framing, the content security policy), :func:`admin_error`
(JSON errors under ``/admin/api/``, else the admin error page), :func:`study_or_404`, and the helpers of
CSV downloads (:func:`download_salt`, :func:`csv_download`, :func:`flag`).

:mod:`server.views.admin` and a paradigm's own experimenter routes (``Paradigm.admin_blueprint``, such as
server/paradigms/paired/admin.py) both build on this module: paradigm packages never import
``server/views/`` (ARCHITECTURE.md, Layers; tests/test_architecture.py).
"""
from __future__ import annotations

from flask import Blueprint, Response, abort, current_app, jsonify, render_template, request
from sqlalchemy import select
from werkzeug.exceptions import HTTPException

from . import auth, exports
from .db import db_session
from .models import Study

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")


def protect(blueprint: Blueprint) -> None:
    """CSRF checks on every state-changing request, the token for its templates' forms (``csrf_token``, which
    admin_base.html's logout form needs on every page, error pages included), and headers for pages that show
    worker IDs and results: never cached, never framed, no foreign code. Every experimenter blueprint calls
    this."""
    blueprint.before_request(auth.check_csrf)
    blueprint.context_processor(lambda: {"csrf_token": auth.csrf_token})

    @blueprint.after_request
    def _headers(response: Response) -> Response:
        response.headers["Cache-Control"] = "no-store"
        response.headers["X-Frame-Options"] = "DENY"
        response.headers.setdefault("Content-Security-Policy", CSP)
        return response


def admin_error(exc: HTTPException):
    """Errors under ``/admin``: JSON under ``/admin/api/``, else the admin error page (a paradigm's admin
    blueprint registers this too)."""
    if exc.code is None or exc.code < 400:  # routing redirects
        return exc
    if request.path.startswith("/admin/api/"):
        code = {400: "invalid_request", 404: "not_found", 405: "method_not_allowed"}.get(exc.code, "http_error")
        return jsonify({"error": code, "message": exc.description}), exc.code
    return render_template("admin_error.html", title=exc.name, message=exc.description), exc.code


def study_or_404(slug: str) -> Study:
    """The study of a URL's slug, else a 404."""
    study = db_session().scalar(select(Study).where(Study.slug == slug))
    if study is None:
        abort(404, description=f"There is no study {slug!r}.")
    return study


def _user_name() -> str:
    return auth.current_user(db_session()).username


def download_salt(study: Study, raw: bool) -> bytes | None:
    """The pseudonym key of a download, or None (logged) when the experimenter asked for raw worker IDs."""
    if raw:
        current_app.logger.info("%s downloaded raw worker IDs of study %s", _user_name(), study.slug)
        return None
    return exports.study_salt(current_app.config["SECRET_KEY"], study.slug)


def csv_download(text: str, filename: str) -> Response:
    """CSV text as a download named ``filename``."""
    return Response(text, mimetype="text/csv",
                    headers={"Content-Disposition": f'attachment; filename="{filename}"'})


def flag(name: str) -> bool:
    """Whether the query string sets ``name`` (1, true, yes, on)."""
    return request.args.get(name, "") in ("1", "true", "yes", "on")
