"""The fast lane: a worker's response stored in one statement, answered below Flask (PostgreSQL).

A vote is the request a study serves most: 40 per worker against 6 for the rest of an
assignment's life. On PostgreSQL its common case is one statement
(:func:`~server.paradigms.core.record_in_one_statement`), and Flask's own work around it (request
and app contexts, routing, the header and response objects, the hooks, the teardown) cost as much
CPU as the statement's whole handling. This WSGI middleware answers that common case itself:

* ``POST /api/v1/assignments/<id>/<kind>`` for a response kind a paradigm stores in one
  statement (a :class:`~server.paradigms.core.ResponseKind` with ``one_statement``: the path pattern
  and each kind's body limit come from the declarations);
* the token checked first, by the same function (a request with a bad one goes to Flask unread);
  the body read and parsed by the same function as the view's
  (:func:`server.validation.read_json_body`), which keeps the parsed body, or the 4xx refusing it,
  in the environ: Flask's view takes it from there instead of reading and parsing again; the
  response stored by the same statement; the answer's body, status and headers are those the
  Flask view gives (:func:`server.app.security_headers`);
* a response that completes its page carries the new State, built inside a Flask request
  context as the view builds it, and is followed by the study's throttled ``[stopping]`` check
  (server/stopping.py), as the view's is: a study whose last page a response finishes stops then,
  not at the next action.

While the database is out of reach the fast lane answers as every route does (server/outages.py): 503 with
``Retry-After`` and the API's JSON error, one log line per outage.

Everything else goes to Flask untouched, with the body put back: another path or method, a body
or token the fast lane does not accept (Flask's view refuses it with the same error), a study
this process has not served yet, and every response the statement does not store (a replay, a
wrong trial, a stop: the regular path decides, and is told not to try the statement again).
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from typing import Any

from flask import Flask
from werkzeug.http import HTTP_STATUS_CODES

from ..errors import ApiError
from ..outages import RETRY_AFTER_S, app_outages, is_unavailable, log_failure, unavailable_error
from ..paradigms.core import ResponseKind, known_study, record_in_one_statement, response_kinds
from ..services import app_services
from ..tokens import TokenClaims
from ..validation import read_json_body
from .api import ONE_STATEMENT_DECLINED, bearer_claims, committed, state_after_response

StartResponse = Callable[..., Any]


def one_statement_kinds() -> dict[str, ResponseKind]:
    """The declared response kinds with a one-statement path, by name: those the fast lane tries."""
    return {name: kind for name, (_, kind) in response_kinds().items() if kind.one_statement is not None}


def path_pattern(names) -> re.Pattern[str] | None:
    """``/api/v1/assignments/<id>/<name>`` for the response kinds ``names``; None when there is none."""
    if not names:
        return None
    alternatives = "|".join(re.escape(name) for name in sorted(names, key=len, reverse=True))
    return re.compile(rf"/api/v1/assignments/([0-9]{{1,19}})/({alternatives})")


class FastLane:
    """WSGI middleware around ``app.wsgi_app`` (installed by the app factory on PostgreSQL)."""

    def __init__(self, app: Flask, wsgi_app: Callable[[dict, StartResponse], Iterable[bytes]],
                 headers: Callable[[str], list[tuple[str, str]]]):
        self.app, self.wsgi_app, self.headers = app, wsgi_app, headers
        self.services = app_services(app)
        self.outages = app_outages(app)
        # Read once: the paradigms are known when the app is built (as the API's routes are).
        self.kinds = one_statement_kinds()
        self.path = path_pattern(self.kinds)
        # The answer's JSON as ``app.json.dumps(result, separators=(",", ":"))`` writes it (its settings, the
        # strict provider's allow_nan=False), with one encoder for every answer: json.dumps builds a new one on
        # each call given any setting of its own.
        provider = app.json
        self.encode = json.JSONEncoder(separators=(",", ":"), allow_nan=False, default=provider.default,
                                       ensure_ascii=provider.ensure_ascii, sort_keys=provider.sort_keys).encode

    def __call__(self, environ: dict, start_response: StartResponse) -> Iterable[bytes]:
        match = (self.path.fullmatch(environ.get("PATH_INFO", ""))
                 if self.path is not None and environ.get("REQUEST_METHOD") == "POST" else None)
        if match is None:
            return self.wsgi_app(environ, start_response)
        try:
            claims = bearer_claims(environ.get("HTTP_AUTHORIZATION", ""), match[1], self.app.config["SECRET_KEY"])
            body = read_json_body(environ, self.kinds[match[2]].max_body)
        except ApiError:  # Flask's view refuses the token before reading, or the body with the kept error
            return self.wsgi_app(environ, start_response)
        environ["perceptlab.kind"] = match[2]  # the metrics' kind (server/metrics.py), as the view's
        answer = self._store(environ, claims, match[2], body)
        if answer is None:
            return self.wsgi_app(environ, start_response)
        status, result = answer
        data = (self.encode(result) + "\n").encode()
        headers = [("Content-Type", "application/json"), ("Content-Length", str(len(data))),
                   *self.headers(environ["PATH_INFO"])]
        if status == 503:
            headers.append(("Retry-After", str(RETRY_AFTER_S)))
        start_response(f"{status} {HTTP_STATUS_CODES[status].upper()}", headers)  # as werkzeug writes it
        return [data]

    def _store(self, environ: dict, claims: TokenClaims, name: str, body: Any) -> tuple[int, dict] | None:
        if not isinstance(body, dict):
            return None
        try:
            answer = record_in_one_statement(self.services.engine, name, claims, body, self.services.clock())
        except Exception as exc:  # noqa: BLE001 - the statement changed nothing
            if is_unavailable(exc):  # answered here: Flask's view would only meet the same outage again
                self.outages.noticed(exc)
                return 503, unavailable_error().to_dict()
            return None  # Flask's view meets the error again, and answers it
        if answer is None:  # declined (a lost connection too): the view decides, and meets any outage itself
            environ[ONE_STATEMENT_DECLINED] = True
            return None
        self.outages.recovered()  # the statement answered: the database is back, if it was away
        status, result = answer
        if status == 201 and result.get("page_complete"):
            state = self._state(environ, claims)
            if state is not None:
                result["state"] = state
            self._check_stopping(claims.study_id)
        return status, result

    def _check_stopping(self, study_id: int) -> None:
        """The throttled ``[stopping]`` check after a completed page, for a study whose spec sets one (the
        statement stored the response, so this process knows the study: no query decides it)."""
        from ..stopping import check_soon_if_set

        found = known_study(self.services.engine, study_id)
        if found is not None:
            check_soon_if_set(self.app, study_id, found[1])

    def _state(self, environ: dict, claims: TokenClaims) -> dict | None:
        """The State after a page-completing response, as the view builds it; None (logged) when it
        cannot be built: the response is stored, and a client without a State asks for it."""
        with self.app.request_context(environ):
            try:
                # Committed as the views are (a read-only transaction too: not the teardown's ROLLBACK,
                # after which the connection's next requests would plan their statements again).
                return committed(state_after_response)(claims)
            except Exception as exc:  # noqa: BLE001 - the stored response must still be acknowledged
                log_failure(self.app, self.app.logger, exc, "the State after a stored response could not be built")
                return None
