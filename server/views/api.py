"""The worker API under ``/api/v1`` (documented by :mod:`server.openapi`, served at ``/api/v1/openapi.yaml``).

Every endpoint of an assignment needs ``Authorization: Bearer <token>``, the
signed token of that very assignment. A request either commits everything it
changed or, on any error, nothing. On PostgreSQL the common case of a response, of
the consent and finish actions and of the environment is one statement, its own
transaction (server/paradigms/core.py: ``record_in_one_statement``, ``consent_in_one_statement``,
``finish_in_one_statement``, ``environment_in_one_statement``), and an action that handed out work under the
study's allocation lock (a page start) is committed before its State is read and
built: what was committed stays so if the answer built after it fails, and a
retry of the same request is answered as a repeat (a replayed response, a
repeated click).

Responses take one route, ``POST /assignments/<id>/<kind>``, for every kind of response a paradigm
declares (:class:`~server.paradigms.core.ResponseKind`): the route's last part matches only the
declared names (another is a 404, as any unknown route), and the study's paradigm must declare the
kind (else a 409 ``wrong_stage``).
"""
from __future__ import annotations

from flask import Blueprint, Response, after_this_request, current_app, g, jsonify, request
from sqlalchemy import select
from werkzeug.routing import BaseConverter

from .. import openapi as api_document
from ..allocation import renew_on_poll
from ..db import db_session
from ..errors import ApiError, invalid, reject_unknown
from ..i18n import shipped_locales, use_locale
from ..limits import RequestRate, SharedRequestRate
from ..models import Assignment, Study
from ..paradigms import paradigm_for, viewing
from ..paradigms.display_monitor import record_display_event
from ..paradigms.core import (HOLDS_ALLOCATION_LOCK, AssignmentRow, ResponseKind, assignment_row, check_nonce,
                              consent_in_one_statement, environment_in_one_statement, finish_in_one_statement,
                              lock_assignment, lock_assignment_row, record_environment, record_in_one_statement,
                              response_kinds, spec_for, study_paradigm)
from ..paradigms.questionnaire import check_pre_answered
from ..pilot import pilot_entry
from ..services import app_services
from ..tokens import BadToken, TokenClaims, assignment_token, read_token
from ..validation import json_object_body, text
from ..refusals import counted_entry_refusals
from .entry_limit import admission, per_app, request_fingerprint, shared_store
from .stimuli import stimulus_urls_of

bp = Blueprint("api", __name__, url_prefix="/api/v1")
LOCALE_HEADER = "X-Perceptlab-Locale"
"""The worker page's language (its ``<html lang>``), which the browser's API calls carry (assignment_api.js):
the messages of the answers (a stop's reason, an error) are in it. Cheaper than reading the worker's stored
locale on every response, and only ever one of the shipped catalogs."""
ONE_STATEMENT_DECLINED = "perceptlab.one_statement_declined"
"""The request environ's flag, set by the fast lane (:mod:`server.views.fast_lane`), that the response
was tried in one statement, which stored nothing: the view's regular path decides."""
# The other POST routes of an assignment: a response kind of that name could never be reached.
_ASSIGNMENT_ROUTES = frozenset({"actions", "environment", "display-events", "state", "motion-trials"})


class ResponseKindConverter(BaseConverter):
    """The ``<response_kind:...>`` part of a URL: one of the declared response kinds' names (as the
    :class:`~server.paradigms.core.ResponseKind`); any other segment matches no route. The names are
    read from every known paradigm when the blueprint is registered (a plugin registers first)."""

    def __init__(self, url_map, *args, **kwargs):
        super().__init__(url_map, *args, **kwargs)
        self.kinds = {name: kind for name, (_, kind) in response_kinds().items()}
        clash = sorted(_ASSIGNMENT_ROUTES & set(self.kinds))
        if clash:
            raise ValueError(f"a response kind may not be named {', '.join(clash)} (another route of the API)")
        # No declared kind: a pattern that matches nothing.
        self.regex = "|".join(sorted(self.kinds, key=len, reverse=True)) or "(?!)"

    def to_python(self, value: str) -> ResponseKind:
        return self.kinds[value]

    def to_url(self, value: ResponseKind | str) -> str:
        return value if isinstance(value, str) else value.name


@bp.before_request
def _page_language() -> None:
    asked = request.headers.get(LOCALE_HEADER, "").replace("-", "_")
    if asked in shipped_locales():
        use_locale(asked)


@bp.record_once
def _register_converter(state) -> None:
    # Recorded before the routes, so it runs first when the blueprint is registered.
    state.app.url_map.converters["response_kind"] = ResponseKindConverter


def _bearer_token(assignment_id: str) -> TokenClaims:
    """The request's signed bearer token, if it names the assignment in the path; else a 403. The
    caller still compares its nonce with the stored one."""
    return bearer_claims(request.headers.get("Authorization", ""), assignment_id, current_app.config["SECRET_KEY"])


def bearer_claims(header: str, assignment_id: str, secret_key: str) -> TokenClaims:
    """The claims of an ``Authorization: Bearer <token>`` header whose token is signed with
    ``secret_key`` and names ``assignment_id`` (the path's); else a 403 :class:`ApiError`."""
    if not header.startswith("Bearer "):
        raise ApiError(403, "bad_token", "missing worker token (Authorization: Bearer ...)")
    try:
        claims = read_token(secret_key, header[7:].strip())
    except BadToken as exc:
        raise ApiError(403, "bad_token", str(exc)) from None
    if not (assignment_id.isascii() and assignment_id.isdigit()) or int(assignment_id) != claims.assignment_id:
        raise ApiError(403, "bad_token", "the token belongs to another assignment")
    return claims


# Per-assignment request rates, [server] <name>_per_minute and <name>_burst. The browser asks for the
# State when a page loads, after an error and when it resynchronises, and posts its environment once
# per page load: an honest worker stays far below these; a script polling in a loop does not.
REQUEST_RATES = {"state": ("state_requests_per_minute", "state_requests_burst"),
                 "environment": ("environment_posts_per_minute", "environment_posts_burst"),
                 "display": ("display_events_per_minute", "display_events_burst")}


def _rate_limiter(name: str) -> RequestRate | SharedRequestRate:
    """The app's limiter of ``name`` requests per assignment (in Redis with ``[server] redis_url``)."""
    def make(server: dict) -> RequestRate | SharedRequestRate:
        rate, burst = REQUEST_RATES[name]
        local = RequestRate(float(server.get(rate, 0)), float(server.get(burst, 1)), app_services().seconds_clock())
        store = shared_store()
        return local if store is None else SharedRequestRate(store, local, name)
    return per_app(f"rate.{name}", make)


def _limit_rate(name: str, claims: TokenClaims) -> None:
    """Count one request of ``name`` for the token's assignment, or a 429 ``too_many_requests`` with
    ``Retry-After`` (the browser retries such answers with backoff). Counted after the token's signature
    was checked (nobody spends another's allowance) and before any database work."""
    wait = _rate_limiter(name).admit(str(claims.assignment_id))
    if wait > 0:
        seconds = max(1, int(wait + 0.999))
        rate, burst = REQUEST_RATES[name]
        raise ApiError(429, "too_many_requests", f"Too many requests for this assignment; try again in {seconds} s.",
                       headers={"Retry-After": str(seconds)}, retry_after_s=wait,
                       setting=f"[server] {rate} and {burst} (per assignment).")


def authorised_row(claims: TokenClaims, *, lock: bool = True) -> AssignmentRow:
    """The token's assignment, locked, as the plain row a response handler gets
    (:func:`~server.paradigms.core.lock_assignment_row`: a 404 when it is gone), if the token is still
    valid; else a 403. With ``lock=False`` (reading the state), unlocked, and one that is gone is a 403."""
    session = db_session()
    if lock:
        assignment = lock_assignment_row(session, claims.assignment_id)
    else:
        assignment = assignment_row(session, claims.assignment_id)
    check_nonce(assignment, claims.nonce)
    return assignment


def authorised_assignment(assignment_id: str, *, lock: bool = False) -> Assignment:
    """The assignment named in the path, if the bearer token is its own; else a 403."""
    claims = _bearer_token(assignment_id)
    session = db_session()
    assignment = (lock_assignment(session, claims.assignment_id) if lock
                  else session.get(Assignment, claims.assignment_id))
    check_nonce(assignment, claims.nonce)
    return assignment


def _state_body(assignment: Assignment | AssignmentRow) -> dict:
    session = db_session()
    paradigm, _ = study_paradigm(session, assignment.study_id)
    return paradigm.state(session, assignment, stimulus_urls_of(assignment.study_id))


def state_response(assignment: Assignment | AssignmentRow, status: int = 200):
    return jsonify(_state_body(assignment)), status


def committed(func):
    """Commit the request's session when the view returns, roll it back when it raises (a view that
    opened none, such as a response stored in one statement, has nothing to end). Also a read-only
    request ends with COMMIT: psycopg forgets all of a connection's prepared statements at a ROLLBACK."""
    from functools import wraps

    @wraps(func)
    def wrapper(*args, **kwargs):
        try:
            result = func(*args, **kwargs)
        except BaseException:
            if (session := g.get("db_session")) is not None:
                session.rollback()
            raise
        if (session := g.get("db_session")) is not None:
            session.commit()
        return result
    return wrapper


@bp.post("/studies/<slug>/assignments")
@committed
def create_assignment(slug: str):
    body = json_object_body()
    study = db_session().scalar(select(Study).where(Study.slug == slug))
    if study is None:
        raise ApiError(404, "not_found", f"no study {slug!r}")
    fields = ("platform", "worker_id", "assignment_id", "hit_id", "turk_submit_to", "signature", "access_key", "pilot")
    reject_unknown(body, (*fields, "simulated"))
    for key in fields:
        text(body.get(key), key, max_length=400)  # a string without control characters (patterns: Paradigm.enter)
    if body.get("simulated") not in (None, True, False):
        raise invalid("simulated must be true or false")
    # A pilot or simulated participant only with the study's pilot signature (server/pilot.py).
    pilot = pilot_entry(current_app.config["SECRET_KEY"], slug, body.get("pilot"), body.get("simulated"))
    # The same entry rules as the HTML entry /s/<slug> (server/paradigms/entry.py), and the same rate limit.
    platform = body.get("platform", "link")
    with counted_entry_refusals(db_session(), study.id):  # a refused entry is counted by its reason code
        assignment, created = paradigm_for(study).enter(
            db_session(), study, platform=platform, worker_id=body.get("worker_id"),
            assignment_id=body.get("assignment_id"), hit_id=body.get("hit_id"), turk_submit_to=body.get("turk_submit_to"),
            signature=body.get("signature"), access_key=body.get("access_key"),
            admit_new=admission(study, spec_for(db_session(), study.id), platform, signed=pilot is not None),
            pilot=pilot, fingerprint=request_fingerprint(study))
    token = assignment_token(current_app.config["SECRET_KEY"], assignment)
    checks = viewing.entry_fields(spec_for(db_session(), study.id), f"{request.script_root}/w/{token}/viewing", study,
                                  assignment.worker_id, simulated=pilot is not None and body.get("simulated") is True)
    return jsonify({"assignment_id": str(assignment.id), "token": token, "stage": assignment.stage,
                    "worker_url": f"/w/{token}/", "kind": paradigm_for(study).kind, **checks}), 201 if created else 200


@bp.get("/assignments/<assignment_id>/state")
@committed
def get_state(assignment_id: str):
    """The state; asking for it is a sign of life that renews the open page's reservation."""
    claims = _bearer_token(assignment_id)
    _limit_rate("state", claims)
    assignment = authorised_row(claims, lock=False)
    session = db_session()
    _, spec = study_paradigm(session, assignment.study_id)
    renew_on_poll(session, assignment.id, spec)
    return state_response(assignment)


CONSENT, FINISH = {"action": "consent"}, {"action": "finish"}


@bp.post("/assignments/<assignment_id>/actions")
@committed
def post_action(assignment_id: str):
    claims = _bearer_token(assignment_id)
    body = json_object_body()
    _wait_for_viewing_checks(claims, body.get("action"))
    if body in (CONSENT, FINISH):  # on PostgreSQL, their common case is one statement (its own transaction)
        one_statement = consent_in_one_statement if body == CONSENT else finish_in_one_statement
        moved = one_statement(app_services().engine, claims)
        if moved is not None:
            paradigm, spec = study_paradigm(db_session(), moved.study_id)
            check_stopping_after(moved.study_id, spec)
            return jsonify(_state_body(moved))
    assignment = authorised_row(claims)
    if not isinstance(body.get("action"), str):
        raise invalid("the body must be {\"action\": ...}")
    reject_unknown(body, ("action",))
    session = db_session()
    paradigm, spec = study_paradigm(session, assignment.study_id)
    check_stopping_after(assignment.study_id, spec)
    check_pre_answered(session, assignment, spec, body["action"])
    moved = paradigm.perform_action(session, assignment, body["action"])
    if session.info.pop(HOLDS_ALLOCATION_LOCK, False):
        # Work was handed out under the study's allocation lock (a page start): committed now, so that the
        # study's other page starts wait for this one's statements only, not for its State being read and built.
        session.commit()
    return state_response(moved)


def _wait_for_viewing_checks(claims, action) -> None:
    """A 409 ``viewing_pending`` for the action (``consent``, ``instructions_done``) that the study's ``[viewing]``
    checks stand before, until the worker passed them (server/paradigms/viewing.py): no client skips them.
    A study without checks loads nothing here when the token names it (its spec is cached)."""
    if action not in ("consent", "instructions_done"):
        return
    session = db_session()
    # A pilot's token (and an older one) does not name its study: its assignment does, once the token holds.
    row = authorised_row(claims, lock=False) if claims.study_id is None else None
    spec = spec_for(session, claims.study_id if row is None else row.study_id)
    if not viewing.checks_of(spec):
        return
    row = row or authorised_row(claims, lock=False)
    if viewing.pending(session, spec, row.worker_id, action):
        raise ApiError(409, "viewing_pending", "the worker's viewing checks come first (/w/<token>/viewing)")


def check_stopping_after(study_id: int, spec) -> None:
    """Check the study's ``[stopping]`` rules once this request is committed, when its ``spec`` sets any
    (throttled: server/stopping.py)."""
    app = current_app._get_current_object()

    @after_this_request
    def _check(response):
        if response.status_code < 400:
            from ..stopping import check_soon_if_set

            check_soon_if_set(app, study_id, spec)
        return response


@bp.post("/assignments/<assignment_id>/environment")
@committed
def post_environment(assignment_id: str):
    claims = _bearer_token(assignment_id)
    _limit_rate("environment", claims)
    body = json_object_body()
    # On PostgreSQL, its common case is one statement in its own transaction; else (or when that declines), the
    # session's.
    if not environment_in_one_statement(app_services().engine, claims, body):
        record_environment(db_session(), claims.assignment_id, claims.nonce, body)
    return Response(status=204)


@bp.post("/assignments/<assignment_id>/display-events")
@committed
def post_display_event(assignment_id: str):
    """A pause or resumption of the trials for a display change (server/paradigms/display_monitor.py): counted
    against the worker, who is turned away past the study's ``[viewing] max_display_changes``."""
    claims = _bearer_token(assignment_id)
    _limit_rate("display", claims)
    body = json_object_body()
    assignment = authorised_row(claims)
    session = db_session()
    _, spec = study_paradigm(session, assignment.study_id)
    status, answer = record_display_event(session, assignment, body, spec)
    return jsonify(answer), status


@bp.post("/assignments/<assignment_id>/<response_kind:kind>")
@committed
def post_response(assignment_id: str, kind: ResponseKind):
    """Store one response of ``kind`` with the handler the study's paradigm declares for it
    (:attr:`ResponseKind.record <server.paradigms.core.ResponseKind>`); a 409 when its paradigm takes no
    response of that kind. On PostgreSQL the common case may be one statement instead
    (:func:`~server.paradigms.core.record_in_one_statement`). A stored response that completes its page
    (``page_complete``) carries the assignment's new State."""
    claims = _bearer_token(assignment_id)
    body = json_object_body(kind.max_body)
    answer = None
    if not request.environ.get(ONE_STATEMENT_DECLINED):  # the fast lane (views/fast_lane.py) tried it already
        services = app_services()
        answer = record_in_one_statement(services.engine, kind.name, claims, body, services.clock())
    if answer is not None:
        status, result = answer
    else:
        assignment = authorised_row(claims)
        session = db_session()
        paradigm, _ = study_paradigm(session, assignment.study_id)
        own = paradigm.response_kind(kind.name)
        if own is None:
            raise ApiError(409, "wrong_stage", f"a {paradigm.title} study takes no {kind.name}")
        status, result = own.record(session, assignment, body)
    if status == 201 and result.get("page_complete"):
        # The response that completed its page: the browser would ask for the State next, so it comes
        # with it (one round trip fewer per page). Flushed first: the rare outcomes change the ORM object.
        db_session().flush()
        row = authorised_row(claims, lock=False)
        result["state"] = _state_body(row)
        # A page done: the study's precision may have reached [stopping]'s target (the fast lane checks too).
        check_stopping_after(row.study_id, spec_for(db_session(), row.study_id))
    return jsonify(result), status


def state_after_response(claims: TokenClaims) -> dict:
    """The State of the token's assignment, read after a response was stored in this request."""
    return _state_body(authorised_row(claims, lock=False))


@bp.get("/assignments/<assignment_id>/motion-trials/<trial_id>/dots")
def get_rdk_dots(assignment_id: str, trial_id: str):
    """The server-rendered dot movie of an RDK trial (the browser gets no direction, speed or seed)."""
    assignment = authorised_assignment(assignment_id)
    session = db_session()
    paradigm, _ = study_paradigm(session, assignment.study_id)
    data = paradigm.trial_media(session, assignment, trial_id)
    response = Response(data, mimetype="application/octet-stream")
    # A pure function of the trial's stored parameters, which never change: a reload may reuse it.
    # private: it belongs to one assignment (shared caches must not keep it).
    response.headers["Cache-Control"] = "private, max-age=86400, immutable"
    return response


@bp.get("/openapi.yaml")
def openapi():
    """The OpenAPI document: server/openapi.yaml and every declared response kind (:mod:`server.openapi`)."""
    return Response(api_document.document_text(), mimetype="application/yaml")
