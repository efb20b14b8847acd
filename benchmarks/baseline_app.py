"""The stack's limit: the least a vote can cost on Flask + gunicorn + PostgreSQL (psycopg 3).

A minimal Flask app that speaks just enough of perceptlab's worker API for
:mod:`server.simulate_client` to drive it exactly as it drives perceptlab
(``benchmarks/server_load.py`` runs both under the same gunicorn settings):

* ``POST /api/v1/studies/<slug>/assignments``: a signed token for a random assignment ID
  (no database; ``<slug>`` ends in ``-<pages>``, the pages each worker answers);
* ``POST .../actions`` and ``POST .../environment``: verify the token, nothing stored;
* ``GET .../state``: verify the token, count the assignment's votes (one indexed read) and
  describe the next page of 20 trials (or ``completed``);
* ``POST .../votes``: verify the token and insert one row, idempotently
  (``ON CONFLICT (client_vote_id) DO NOTHING``); a retried vote answers "duplicate".

The token is perceptlab's own (:func:`server.tokens.make_token`, HMAC-signed with itsdangerous)
and every request checks it, so the baseline pays for what perceptlab must pay for at least:
HTTP, routing, the JSON body, the signature, one INSERT and its commit. Each gunicorn thread
keeps one autocommit psycopg connection.

Configuration by environment: ``BASELINE_DSN`` (a libpq connection string) and
``BASELINE_SECRET_KEY``. :func:`ensure_table` creates the table (``baseline_vote``).
"""
from __future__ import annotations

import os
import secrets
import threading

from flask import Flask, Response, jsonify, request

from server.tokens import BadToken, make_token, read_token

PAGE_SIZE = 20
TABLE = "baseline_vote"
CREATE_TABLE = (f"CREATE TABLE IF NOT EXISTS {TABLE} (id bigserial PRIMARY KEY, client_vote_id varchar(36) "
                "NOT NULL UNIQUE, slug text NOT NULL, assignment_id bigint NOT NULL, trial_id varchar(40) NOT NULL, "
                "chose_left boolean NOT NULL, rt_ms double precision NOT NULL, "
                "created_at timestamptz NOT NULL DEFAULT now())")
CREATE_INDEX = f"CREATE INDEX IF NOT EXISTS {TABLE}_assignment ON {TABLE} (assignment_id)"


def ensure_table(dsn: str) -> None:
    """Create the baseline's vote table in the database at ``dsn`` (idempotent)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(CREATE_TABLE)
        conn.execute(CREATE_INDEX)


def create_app() -> Flask:
    """The baseline application (``gunicorn 'benchmarks.baseline_app:create_app()'``)."""
    import psycopg

    dsn = os.environ["BASELINE_DSN"]
    secret = os.environ["BASELINE_SECRET_KEY"]
    local = threading.local()
    app = Flask("perceptlab-baseline")

    class Forbidden(Exception):
        """The bearer token is missing, forged or names another assignment."""

    def connection() -> psycopg.Connection:
        conn = getattr(local, "conn", None)
        if conn is None or conn.closed:
            conn = local.conn = psycopg.connect(dsn, autocommit=True)
        return conn

    def authorised(assignment_id: str) -> tuple[int, int, str]:
        """(assignment ID, pages, study slug) from the bearer token, which must name this assignment; else a 403."""
        header = request.headers.get("Authorization", "")
        try:
            claims = read_token(secret, header[7:])
        except BadToken:
            raise Forbidden() from None
        if not header.startswith("Bearer ") or str(claims.assignment_id) != assignment_id:
            raise Forbidden()
        pages, slug = claims.nonce.split("|", 1)
        return claims.assignment_id, int(pages), slug

    @app.errorhandler(Forbidden)
    def forbidden(_exc):
        return jsonify({"error": "bad_token", "message": "invalid worker token"}), 403

    @app.post("/api/v1/studies/<slug>/assignments")
    def enter(slug: str):
        body = request.get_json()
        if not isinstance(body, dict) or body.get("assignment_id") == "ASSIGNMENT_ID_NOT_AVAILABLE":
            return jsonify({"error": "invalid_request", "message": "a preview cannot start the task"}), 400
        pages = int(slug.rsplit("-", 1)[1])
        assignment_id = secrets.randbelow(1 << 62)
        # The token's second member is a nonce in perceptlab; here it carries the pages to answer and the slug.
        token = make_token(secret, assignment_id, f"{pages}|{slug}")
        return jsonify({"assignment_id": str(assignment_id), "token": token, "stage": "trials"}), 201

    @app.get("/api/v1/assignments/<assignment_id>/state")
    def state(assignment_id: str):
        aid, pages, _slug = authorised(assignment_id)
        answered = connection().execute(f"SELECT count(*) FROM {TABLE} WHERE assignment_id = %s",
                                        (aid,)).fetchone()[0]
        if answered >= pages * PAGE_SIZE:
            return jsonify({"assignment_id": assignment_id, "stage": "completed", "page": None,
                            "progress": {"pages_completed": pages}})
        index, done = divmod(answered, PAGE_SIZE)
        trials = [{"trial_id": f"{index}{position:02d}", "position": position, "answered": position < done,
                   "reference": {"full": "/r.png"}, "left": {"full": f"/{index}/{position}/a.png"},
                   "right": {"full": f"/{index}/{position}/b.png"}} for position in range(PAGE_SIZE)]
        return jsonify({"assignment_id": assignment_id, "stage": "trials",
                        "page": {"index": index, "kind": "trials", "n_trials": PAGE_SIZE, "n_answered": done,
                                 "trials": trials},
                        "progress": {"pages_completed": index}})

    @app.post("/api/v1/assignments/<assignment_id>/actions")
    def action(assignment_id: str):
        authorised(assignment_id)
        return state(assignment_id)

    @app.post("/api/v1/assignments/<assignment_id>/environment")
    def environment(assignment_id: str):
        authorised(assignment_id)
        request.get_json()
        return Response(status=204)

    @app.post("/api/v1/assignments/<assignment_id>/votes")
    def vote(assignment_id: str):
        aid, _pages, slug = authorised(assignment_id)
        body = request.get_json()
        if (not isinstance(body, dict) or not isinstance(body.get("vote_id"), str)
                or not isinstance(body.get("trial_id"), str) or body.get("choice") not in ("left", "right")
                or not isinstance(body.get("rt_ms"), (int, float))):
            return jsonify({"error": "invalid_request", "message": "bad vote"}), 400
        stored = connection().execute(
            f"INSERT INTO {TABLE} (client_vote_id, slug, assignment_id, trial_id, chose_left, rt_ms) "
            "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (client_vote_id) DO NOTHING",
            (body["vote_id"], slug, aid, body["trial_id"], body["choice"] == "left", float(body["rt_ms"]))).rowcount
        last = body["trial_id"].endswith(f"{PAGE_SIZE - 1:02d}")
        return jsonify({"vote_id": body["vote_id"], "status": "stored" if stored else "duplicate",
                        "stage": "trials", "page_complete": last}), 201 if stored else 200

    return app
