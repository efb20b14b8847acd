"""The application factory's body: configuration, database, secret key, blueprints.

All Flask wiring lives here (each paradigm's own parts through server/paradigms/wiring.py): the
blueprints, the request session's teardown, error handlers, security headers and the background work. The configuration arrives from the caller
(:func:`server.create_app`), read once where the process started.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from flask import Flask, jsonify, request
from werkzeug.exceptions import HTTPException

import experiment_ui

from .config import secret_key
from .db import close_request_session, database_url, make_engine, make_session_factory, upgrade
from .errors import ApiError
from .i18n import DEFAULT_LOCALE, gettext
from .reasons import entry_code, reason_text
from .paradigms.entry import BUSY
from .services import Services, init_app
from .validation import StrictJSONProvider


def build_app(config: dict[str, Any], overrides: dict[str, Any]) -> Flask:
    """The Flask application for ``config`` (nested sections, as from :func:`server.config.load_config`)
    with ``overrides`` of its ``[server]`` section; see :func:`server.create_app`."""
    server = {**config.get("server", {}), **overrides}
    app = Flask("perceptlab", template_folder=str(experiment_ui.TEMPLATES), static_folder=str(experiment_ui.STATIC),
                instance_path=str(Path(server.get("instance_path", "instance")).resolve()))
    app.config["TESTING"] = bool(server.get("testing", False))
    app.config["PERCEPTLAB"] = config
    app.config["SERVER"] = server
    url = database_url(server, overrides.get("database_url"))  # a caller's URL wins over the environment's
    app.config["DATABASE_URL"] = url
    app.config["SECRET_KEY"] = secret_key(server)
    app.config["SESSION_COOKIE_HTTPONLY"] = True
    app.config["SESSION_COOKIE_SAMESITE"] = "Lax"
    _secure_transport(app, server)
    app.config["MAX_CONTENT_LENGTH"] = 1 << 20  # no legitimate request is larger than a few kB
    app.json = StrictJSONProvider(app)  # depth-limited, no NaN/Infinity in or out (server/validation.py)
    app.json.sort_keys = False
    if server.get("auto_migrate", True):
        upgrade(url)
    engine = _init_services(app, config, server, url).engine

    from .views import admin, admin_codes, admin_mturk, admin_prolific, api, ops, stimuli, viewing, worker

    app.register_blueprint(worker.bp)
    app.register_blueprint(viewing.bp)
    app.register_blueprint(api.bp)
    app.register_blueprint(admin.bp)
    app.register_blueprint(admin_mturk.bp)
    app.register_blueprint(admin_prolific.bp)
    app.register_blueprint(admin_codes.bp)
    app.register_blueprint(stimuli.bp)
    app.register_blueprint(ops.bp)
    app.teardown_appcontext(_closing_request_session(app))
    app.register_error_handler(ApiError, _api_error)
    app.register_error_handler(HTTPException, _http_error)
    _answer_outages(app)
    from .i18n import init_app as init_i18n

    init_i18n(app)

    headers_for = security_headers(server)

    @app.after_request
    def _security_headers(response):
        for name, value in headers_for(request.path):
            response.headers.setdefault(name, value)  # blueprints may set their own
        return response

    if engine.dialect.name == "postgresql":  # where responses can be stored in one statement
        from .views.fast_lane import FastLane

        app.wsgi_app = FastLane(app, app.wsgi_app, headers_for)
    _instrument(app, engine)

    # Every paradigm's templates, admin blueprint and background work (server/paradigms/wiring.py).
    from .paradigms.wiring import install_paradigms

    # Imported now, not by the first request that completes a page or takes an action (the [stopping] check
    # after it): a server process's first workers would wait for the import.
    from . import stopping  # noqa: F401

    install_paradigms(app)
    return app


def _init_services(app: Flask, config: dict[str, Any], server: dict[str, Any], url: str) -> Services:
    """The app's :class:`~server.services.Services`, installed (:func:`server.services.init_app`)."""
    from .limits import store_from_config
    from .storage import make_storage

    clock = server.get("clock")  # an injected clock (tests): page reservations, limits, the vote's times
    seconds = (lambda: clock().timestamp()) if clock else None
    engine = make_engine(url)
    return init_app(app, Services(
        engine=engine,
        sessions=make_session_factory(engine, info={"clock": clock} if clock else None),  # server/allocation.py
        injected_clock=clock,
        # Rate limits shared by every process through Redis ([server] redis_url), else None: each process counts.
        shared_limits=store_from_config(server, seconds),
        storage=make_storage(config)))


ADMIN_CSP = "frame-ancestors 'none'; object-src 'none'; base-uri 'none'"
DEFAULT_FRAME_ANCESTORS = "'self' https://www.mturk.com https://worker.mturk.com https://workersandbox.mturk.com"


def worker_content_security_policy(server: dict[str, Any]) -> str:
    """The CSP of every page outside ``/admin``: only MTurk's worker sites and this server may frame
    them (``[server] frame_ancestors``), no plugins, no ``<base>`` elsewhere. Scripts, styles and
    images are left alone (stimuli may come from an S3 endpoint or a CDN)."""
    ancestors = " ".join(str(server.get("frame_ancestors") or DEFAULT_FRAME_ANCESTORS).split())
    if any(c in ancestors for c in ";,\r\n"):
        raise ValueError(f"[server] frame_ancestors must be space-separated sources, got {ancestors!r}")
    return f"frame-ancestors {ancestors}; object-src 'none'; base-uri 'self'"


def security_headers(server: dict[str, Any]) -> Callable[[str], list[tuple[str, str]]]:
    """The function giving the security headers of every response to a request for a path (the
    after-request hook adds them to Flask's responses; the fast lane sends them with its own)."""
    common = [("X-Content-Type-Options", "nosniff"), ("Referrer-Policy", "same-origin")]
    admin = [*common, ("Content-Security-Policy", ADMIN_CSP), ("X-Frame-Options", "DENY")]
    worker = [*common, ("Content-Security-Policy", worker_content_security_policy(server))]

    def headers_for(path: str) -> list[tuple[str, str]]:
        return admin if path == "/admin" or path.startswith("/admin/") else worker  # 404s under /admin too
    return headers_for


def _secure_transport(app: Flask, server: dict[str, Any]) -> None:
    """``Secure`` cookies per ``[server] secure_cookies``, and ``[server] proxy_fix`` trusted proxies
    (their X-Forwarded-For / X-Forwarded-Proto give the client's address and scheme)."""
    from werkzeug.middleware.proxy_fix import ProxyFix

    from .auth import SessionInterface, secure_cookie_mode

    secure_cookie_mode(server)  # refuse a misspelt setting at start-up, not at the first login
    app.session_interface = SessionInterface()
    proxies = int(server.get("proxy_fix", 0) or 0)
    if proxies < 0:
        raise ValueError(f"[server] proxy_fix must be 0 or more, got {proxies}")
    if proxies:
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=proxies, x_proto=proxies)


def _instrument(app: Flask, engine) -> None:
    """Metrics, request ids and the access log around everything, the fast lane included (server/metrics.py):
    each request's kind is its response kind's name (the fast lane's and the view's alike) or its endpoint."""
    from .db import pool_counts
    from .metrics import Instrumented

    kind_key = "perceptlab.kind"

    @app.before_request
    def _kind():
        kind = (request.view_args or {}).get("kind")
        request.environ.setdefault(kind_key, getattr(kind, "name", None) or request.endpoint or "unmatched")

    app.wsgi_app = Instrumented(app.wsgi_app, lambda environ: environ.get(kind_key, "unmatched"),
                                lambda: pool_counts(engine))


def _closing_request_session(app: Flask) -> Callable[[BaseException | None], None]:
    """The request session's teardown: closing it while the database is out of reach is part of the outage
    (one log line, server/outages.py), not a traceback after the response."""
    from .outages import app_outages, is_unavailable

    def close(exc: BaseException | None = None) -> None:
        try:
            close_request_session(exc)
        except Exception as error:  # noqa: BLE001 - re-raised unless it is the outage the request met
            if not is_unavailable(error):
                raise
            app_outages(app).noticed(error, counted=False)
    return close


def _answer_outages(app: Flask) -> None:
    """Every route, while the database is out of reach: 503 with Retry-After (server/outages.py), the API's JSON
    error or a page (a GET: the waiting page, which loads the address again by itself); one log line per outage,
    and one when a request that used the database is answered again."""
    from flask import g, render_template

    from .outages import UNAVAILABLE_ERRORS, app_outages, unavailable_error

    outages = app_outages(app)

    def unavailable(exc: Exception):
        outages.noticed(exc)
        error = unavailable_error()
        if _wants_json() or request.path.startswith("/admin/api/"):  # the dashboard's own JSON too
            return jsonify(error.to_dict()), error.status, error.headers
        if request.method in ("GET", "HEAD"):
            page = render_template("waiting.html", title=gettext("Please wait a moment"), retry_s=error.retry_after_s,
                                   message=gettext("The study's server is briefly unavailable. Nothing you did is "
                                                   "lost."))
        else:  # a form sent again by a reload would ask the browser to resend it: the worker goes back instead
            page = render_template("error.html", title=gettext("Please try again in a moment"),
                                   message=gettext("The server is briefly unavailable and saved nothing of this "
                                                   "step. Go back and send it again in %(seconds)s seconds.",
                                                   seconds=round(error.retry_after_s)))
        return page, error.status, error.headers

    for kind in UNAVAILABLE_ERRORS:
        app.register_error_handler(kind, unavailable)

    @app.after_request
    def _back(response):
        if outages.down and response.status_code < 500 and g.get("db_session") is not None:
            outages.recovered()
        return response


def _wants_json() -> bool:
    return request.path.startswith("/api/") or request.accept_mimetypes.best == "application/json"


def _api_error(exc: ApiError):
    if _wants_json():
        return jsonify(exc.to_dict()), exc.status, exc.headers
    from flask import render_template

    if exc.code == BUSY:  # a new worker over the admission rate: a page that tries again by itself
        return (render_template("waiting.html", title=gettext("Please wait a moment"), retry_s=exc.retry_after_s or 1.0),
                exc.status, exc.headers)
    return (render_template("error.html", title=gettext("Cannot continue"), message=_worker_message(exc), setting=exc.setting),
            exc.status, exc.headers)


def _worker_message(exc: ApiError) -> str:
    """An error page's message: for an entry refused for a reason of server/reasons.py, in the worker's
    language (the error's own English words, which name the cause more closely, on English pages)."""
    from flask_babel import get_locale

    code = entry_code(exc.code)
    if code is None or str(get_locale() or DEFAULT_LOCALE) == DEFAULT_LOCALE:
        return exc.message
    return reason_text(code, None) or exc.message


def _http_error(exc: HTTPException):
    if _wants_json():
        code = {404: "not_found", 405: "method_not_allowed", 413: "too_large", 400: "invalid_request"}.get(
            exc.code, "http_error")
        return jsonify({"error": code, "message": exc.description}), exc.code
    return exc
