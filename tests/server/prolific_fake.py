"""A fake Prolific for tests: a small Flask (WSGI) app implementing the endpoints server/prolific.py calls, as strict
as Prolific's public API documentation (docs.prolific.com), with Prolific's error shape, and a transport that
injects faults.

No offline Prolific exists. This one keeps its state in memory and follows the documentation:

* every request is checked against :data:`ENDPOINTS`, the documented fields of each endpoint (the one place these
  lists live; each cites its page): a missing required field or an undocumented one is a 400 with Prolific's
  error shape, and is kept in ``violations`` (tests assert there are none);
* ``Authorization: Token ...``; errors as ``{"error": {"status", "error_code", "title", "detail", ...}}``;
* lists paginated by ``limit``/``offset`` with ``results`` and ``meta.count``; the studies list also gives
  ``_links.next.href`` (a full URL), the study-submissions list gives none (``null``), as it may not; no page is
  longer than ``page_size`` whatever ``limit`` asks;
* study transitions PUBLISH / PAUSE / START / STOP; PUBLISH leaves the study PUBLISHING until :meth:`FakeState.settle`
  (Prolific publishes asynchronously), and no other action is accepted meanwhile;
* submission transitions APPROVE / REJECT (a category and a message of 100+ characters), repeated requests ignored;
* bulk approve is asynchronous: it answers "in progress" and the submissions show PROCESSING until
  :meth:`FakeState.settle` approves them;
* bonuses set up from ``participant_id,amount`` lines (amounts in the study's currency, as the CSV takes them);
  the set-up answer gives ``amount``, ``fees`` and ``total_amount`` in cents; ``/bulk-bonus-payments/{id}/pay/``
  pays again on every call (it is not idempotent), and each paid bonus shows in the submission's
  ``bonus_payments`` (cents).

``latency`` (seconds) delays every answer, outside the fake's lock, so that two clients' calls overlap as they
would against the real API (the race tests); the state itself is changed under a lock.

:class:`FaultyTransport` serves the app through ``httpx.WSGITransport`` and, for the next matching requests,
answers 429 (with ``Retry-After``) or 500, drops the connection, or times out *after* the app did the work (the
answer is lost, the money moved). A support module, not a test module.
"""
from __future__ import annotations

import datetime as dt
import itertools
import re
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

import httpx
from flask import Flask, jsonify, request


# The study's public address in the tests that talk to the fake.
HOST = "https://lab.example.org"


class Clock:
    """The service's injected clock: a fixed moment that a test moves by hand (``clock.now += ...``)."""

    def __init__(self):
        self.now = dt.datetime(2026, 11, 21, 12, 0, tzinfo=dt.UTC)

    def __call__(self) -> dt.datetime:
        return self.now



def publish_and_approve_all(service, state, study, pids, places: int):
    """Create ``study`` on the fake Prolific (``places`` places), let ``pids`` submit with the completion code,
    approve them as the service does and read the approvals back (the bulk approval settled on Prolific's
    side). Returns the service's Prolific row."""
    row = service.create(study, host=HOST, places=places)
    for pid in pids:
        state.add_submission(row.prolific_id, pid, code=COMPLETION_CODE)
    service.reconcile(study)
    service.approve_checked(study)
    state.settle()
    service.reconcile(study)
    return row

TOKEN = "fake-prolific-token"
BASE_URL = "https://api.prolific.test/api/v1/"
REJECTION_CATEGORIES = {"TOO_QUICKLY", "TOO_SLOWLY", "FAILED_INSTRUCTIONS", "INCOMP_LONGITUDINAL", "FAILED_CHECK",
                        "LOW_EFFORT", "MALINGERING", "NO_CODE", "BAD_CODE", "NO_DATA", "UNSUPP_DEVICE", "OTHER"}
DEVICES = {"desktop", "tablet", "mobile"}
DOCS = "https://docs.prolific.com/api-reference/"
PAGINATION = frozenset({"limit", "offset"})


@dataclass(frozen=True)
class Endpoint:
    """The documented fields of one endpoint: ``required`` body fields (each alternative of ``one_of``: one of
    the sets, whole), ``optional`` ones, the ``query`` parameters, and the page that documents them."""
    doc: str
    required: frozenset[str] = frozenset()
    optional: frozenset[str] = frozenset()
    one_of: tuple[frozenset[str], ...] = ()
    query: frozenset[str] = frozenset()

    def problems(self, body: dict[str, Any] | None, query: set[str]) -> dict[str, list[str]]:
        """Field -> what is wrong, by the documentation (empty: the request is as documented)."""
        body = body or {}
        problems: dict[str, list[str]] = {}
        for name in self.required - set(body):
            problems[name] = ["This field is required."]
        known = self.required | self.optional | frozenset().union(*self.one_of)
        for name in set(body) - known:
            problems[name] = ["Unknown field (not in the documentation)."]
        if self.one_of and not any(option <= set(body) for option in self.one_of):
            problems["non_field_errors"] = ["One of these is required: "
                                            + " or ".join(" + ".join(sorted(o)) for o in self.one_of)]
        for name in query - self.query:
            problems[name] = ["Unknown query parameter (not in the documentation)."]
        return problems


# Every endpoint server/prolific.py calls, with its documented fields: (method, path under /api/v1/ with {id}).
ENDPOINTS: dict[tuple[str, str], Endpoint] = {
    ("GET", "users/me/"): Endpoint(DOCS + "users/get-user"),
    ("GET", "studies/"): Endpoint(DOCS + "studies/get-studies", query=PAGINATION | {"state"}),
    ("POST", "studies/"): Endpoint(
        DOCS + "studies/create-study",
        # "filters" is required since Feb 2026 (an empty list is accepted); so are the recruitment basics.
        required=frozenset({"name", "description", "external_study_url", "prolific_id_option", "completion_codes",
                            "total_available_places", "estimated_completion_time", "reward", "filters"}),
        optional=frozenset({"internal_name", "device_compatibility", "peripheral_requirements", "maximum_allowed_time",
                            "project", "filter_set_id", "filter_set_version", "naivety_distribution_rate",
                            "study_labels", "content_warnings", "submissions_config", "is_custom_screening"})),
    ("GET", "studies/{id}/"): Endpoint(DOCS + "studies/get-study"),
    ("PATCH", "studies/{id}/"): Endpoint(DOCS + "studies/update-study",
                                         optional=frozenset({"total_available_places", "name", "internal_name",
                                                             "description", "reward", "filters"})),
    ("POST", "studies/{id}/transition/"): Endpoint(DOCS + "studies/publish-study",
                                                   required=frozenset({"action"})),
    ("GET", "studies/{id}/submissions/"): Endpoint(DOCS + "studies/get-study-submissions",
                                                   query=PAGINATION | {"ordering"}),
    ("GET", "submissions/{id}/"): Endpoint(DOCS + "submissions/get-submission"),
    ("POST", "submissions/{id}/transition/"): Endpoint(DOCS + "submissions/transition-submission",
                                                       required=frozenset({"action"}),
                                                       optional=frozenset({"message", "rejection_category"})),
    ("POST", "submissions/bulk-approve/"): Endpoint(
        DOCS + "submissions/bulk-approve-submissions",
        one_of=(frozenset({"submission_ids"}), frozenset({"study_id", "participant_ids"}))),
    ("POST", "submissions/bonus-payments/"): Endpoint(DOCS + "bonuses/create-bonus-payments",
                                                      required=frozenset({"study_id", "csv_bonuses"})),
    ("POST", "bulk-bonus-payments/{id}/pay/"): Endpoint(DOCS + "bonuses/pay-bonus-payments"),
}
_ROUTES = [(method, re.compile("^/api/v1/" + re.escape(path).replace(re.escape("{id}"), "[^/]+") + "$"), (method, path))
           for method, path in ENDPOINTS]


def endpoint_of(method: str, path: str) -> tuple[str, str] | None:
    """The :data:`ENDPOINTS` key a request path matches (fixed paths before ``{id}`` ones), or None."""
    matches = [key for m, pattern, key in _ROUTES if m == method and pattern.match(path)]
    return min(matches, key=lambda key: key[1].count("{id}")) if matches else None


@dataclass
class Fault:
    """Applied to the next request whose method matches and whose path contains ``path``.

    ``kind``: "429" (refused, ``retry_after`` seconds), "500" (refused before any work), "500_after" (the work
    is done, then 500), "timeout" (the work is done, the answer never arrives), "timeout_before" (no work, no
    answer), "connect" (no connection), "pounds" (the work is done; the answer's amounts are in pounds, not the
    documented cents)."""
    method: str
    path: str
    kind: str
    retry_after: str | None = "2"


@dataclass
class FakeState:
    studies: dict[str, dict[str, Any]] = field(default_factory=dict)
    submissions: dict[str, dict[str, Any]] = field(default_factory=dict)
    bulks: dict[str, dict[str, Any]] = field(default_factory=dict)
    payments: list[tuple[str, str, int]] = field(default_factory=list)  # (bulk ID, participant, cents): money moved
    calls: list[tuple[str, str]] = field(default_factory=list)          # (method, path) the app served
    # (method, endpoint key or None, body, query names) of every request, and those the documentation refuses.
    requests: list[tuple[str, tuple[str, str] | None, Any, set[str]]] = field(default_factory=list)
    violations: list[tuple[str, str, dict[str, list[str]]]] = field(default_factory=list)
    page_size: int = 2           # the most items a page holds, whatever ``limit`` asks
    lists_bonuses: bool = True   # False: a submission's view leaves out ``bonus_payments``
    latency: float = 0.0         # seconds each answer takes (outside the lock)
    ids: Any = field(default_factory=lambda: itertools.count(1))
    lock: Any = field(default_factory=threading.RLock)

    def new_id(self, prefix: str) -> str:
        return f"{prefix}{next(self.ids):023x}"

    def add_submission(self, study_id: str, participant_id: str, *, status: str = "AWAITING REVIEW",
                       code: str = "") -> str:
        with self.lock:
            submission_id = self.new_id("5")
            self.submissions[submission_id] = {
                "id": submission_id, "study_id": study_id, "participant_id": participant_id, "status": status,
                "study_code": code, "started_at": "2026-11-21T12:00:00Z", "completed_at": "2026-11-21T12:20:00Z",
                "bonus_payments": []}
            return submission_id

    def settle(self) -> None:
        """Prolific finishes what it does asynchronously: PUBLISHING studies become ACTIVE, PROCESSING
        submissions (a bulk approval) APPROVED."""
        with self.lock:
            for study in self.studies.values():
                if study["status"] == "PUBLISHING":
                    study["status"] = "ACTIVE"
            for submission in self.submissions.values():
                if submission["status"] == "PROCESSING":
                    submission["status"] = "APPROVED"

    def paid_to(self, participant_id: str) -> int:
        """Cents of bonus paid to a participant, all pay calls counted."""
        return sum(c for _, who, c in self.payments if who == participant_id)

    def served(self, method: str, fragment: str) -> int:
        return sum(1 for m, p in self.calls if m == method and fragment in p)


def error(status: int, code: int, title: str, detail: Any) -> tuple[Any, int]:
    return jsonify({"error": {"status": status, "error_code": code, "title": title, "detail": detail,
                              "additional_information": f"/api/v1/errors/{code}", "traceback": None,
                              "interactive": False}}), status


def make_fake(state: FakeState | None = None, token: str = TOKEN) -> tuple[Flask, FakeState]:
    """The fake's WSGI app and its state."""
    state = state or FakeState()
    app = Flask("prolific_fake")

    @app.before_request
    def _auth_and_fields():
        if state.latency:
            time.sleep(state.latency)  # an answer's latency, while other clients' calls go on
        state.lock.acquire()  # released in teardown: one request changes the state at a time
        state.calls.append((request.method, request.path))
        if request.headers.get("Authorization") != f"Token {token}":
            return error(401, 140100, "Unauthorized", "Invalid token.")
        key = endpoint_of(request.method, request.path)
        body = request.get_json(silent=True) if request.data else None
        query = set(request.args)
        state.requests.append((request.method, key, body, query))
        if key is None:
            return error(404, 140400, "Not found", f"No endpoint {request.method} {request.path}.")
        if body is not None and not isinstance(body, dict):
            problems = {"non_field_errors": ["A JSON object is required."]}
        else:
            problems = ENDPOINTS[key].problems(body, query)
        if problems:
            state.violations.append((request.method, request.path, problems))
            return error(400, 140001, "Request validation failed.", problems)
        return None

    @app.teardown_request
    def _release(_exc):
        try:
            state.lock.release()
        except RuntimeError:  # the request failed before taking the lock
            pass

    def page(items: list[dict[str, Any]], *, next_links: bool):
        """One page of ``items`` by ``limit``/``offset`` (at most ``page_size`` items) with ``meta.count``; with
        ``next_links``, the next page's full URL in ``_links.next.href``, else ``null`` there."""
        try:
            limit = min(int(request.args.get("limit", state.page_size)), state.page_size)
            offset = int(request.args.get("offset", 0))
        except ValueError:
            return error(400, 140001, "Request validation failed.", {"limit": ["A whole number is required."]})
        if limit < 1 or offset < 0:
            return error(400, 140001, "Request validation failed.", {"limit": ["Out of range."]})
        chunk = items[offset:offset + limit]
        following = (f"{request.base_url}?limit={limit}&offset={offset + limit}"
                     if next_links and offset + limit < len(items) else None)
        return jsonify({"results": chunk, "_links": {"self": {"href": request.url, "title": "Current"},
                                                     "next": {"href": following, "title": "Next"}},
                        "meta": {"count": len(items)}})

    def study_or_404(study_id: str):
        study = state.studies.get(study_id)
        return study, (None if study else error(404, 140400, "Not found", f"No study {study_id}."))

    @app.get("/api/v1/users/me/")
    def me():
        return jsonify({"id": "60aaaaaaaaaaaaaaaaaaaaaa", "email": "lab@example.org", "currency_code": "GBP"})

    @app.get("/api/v1/studies/")
    def list_studies():
        return page(list(state.studies.values()), next_links=True)

    @app.post("/api/v1/studies/")
    def create_study():
        body = request.get_json(silent=True) or {}
        problems: dict[str, list[str]] = {}
        for name in ("name", "description", "external_study_url"):
            if not body.get(name):
                problems[name] = ["This field is required."]
        if not str(body.get("external_study_url", "")).startswith("https://"):
            problems.setdefault("external_study_url", []).append("Enter a valid https URL.")
        if not body.get("completion_codes"):
            problems["completion_codes"] = ["Specify at least one completion code."]
        for name in ("total_available_places", "estimated_completion_time", "reward"):
            value = body.get(name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                problems[name] = ["A positive whole number is required."]
        if not set(body.get("device_compatibility") or []) <= DEVICES:
            problems["device_compatibility"] = ["Unknown device."]
        if not isinstance(body.get("filters"), list):
            problems["filters"] = ["A list of filters is required (it may be empty)."]
        if problems:
            return error(400, 140001, "Request validation failed.", problems)
        study_id = state.new_id("6")
        study = {**body, "id": study_id, "status": "UNPUBLISHED", "places_taken": 0}
        state.studies[study_id] = study
        return jsonify(study), 201

    @app.get("/api/v1/studies/<study_id>/")
    def get_study(study_id):
        study, missing = study_or_404(study_id)
        return missing or jsonify(study)

    @app.patch("/api/v1/studies/<study_id>/")
    def update_study(study_id):
        study, missing = study_or_404(study_id)
        if missing:
            return missing
        places = (request.get_json(silent=True) or {}).get("total_available_places")
        if not isinstance(places, int) or places < study["total_available_places"]:
            return error(400, 140001, "Request validation failed.",
                         {"total_available_places": ["Places can only be increased."]})
        study["total_available_places"] = places
        return jsonify(study)

    @app.post("/api/v1/studies/<study_id>/transition/")
    def transition_study(study_id):
        study, missing = study_or_404(study_id)
        if missing:
            return missing
        action = (request.get_json(silent=True) or {}).get("action")
        moves = {("PUBLISH", "UNPUBLISHED"): "PUBLISHING", ("PAUSE", "ACTIVE"): "PAUSED", ("START", "PAUSED"): "ACTIVE",
                 ("STOP", "ACTIVE"): "AWAITING REVIEW", ("STOP", "PAUSED"): "AWAITING REVIEW"}
        target = moves.get((action, study["status"]))
        if target is None:
            return error(400, 140002, "Invalid transition.",
                         f"Cannot {action} a study that is {study['status']}.")
        study["status"] = target
        return jsonify(study)

    @app.get("/api/v1/studies/<study_id>/submissions/")
    def study_submissions(study_id):
        _, missing = study_or_404(study_id)
        if missing:
            return missing
        return page([{k: v for k, v in s.items() if k != "bonus_payments"}
                     for s in state.submissions.values() if s["study_id"] == study_id], next_links=False)

    @app.get("/api/v1/submissions/<submission_id>/")
    def get_submission(submission_id):
        submission = state.submissions.get(submission_id)
        if submission is None:
            return error(404, 140400, "Not found", f"No submission {submission_id}.")
        hidden = {"participant_id"} | (set() if state.lists_bonuses else {"bonus_payments"})
        return jsonify({**{k: v for k, v in submission.items() if k not in hidden},
                        "participant": submission["participant_id"]})

    @app.post("/api/v1/submissions/<submission_id>/transition/")
    def transition_submission(submission_id):
        submission = state.submissions.get(submission_id)
        if submission is None:
            return error(404, 140400, "Not found", f"No submission {submission_id}.")
        body = request.get_json(silent=True) or {}
        action = body.get("action")
        target = {"APPROVE": "APPROVED", "REJECT": "REJECTED"}.get(action)
        if target is None:
            return error(400, 140001, "Request validation failed.", {"action": ["Unknown action."]})
        if action == "REJECT":
            problems = {}
            if body.get("rejection_category") not in REJECTION_CATEGORIES:
                problems["rejection_category"] = ["A valid category is required."]
            if len(body.get("message") or "") < 100:
                problems["message"] = ["Ensure this field has at least 100 characters."]
            if problems:
                return error(400, 140001, "Request validation failed.", problems)
        if submission["status"] == target:  # a repeated request is ignored
            return jsonify(submission)
        if submission["status"] != "AWAITING REVIEW":
            return error(400, 140002, "Invalid transition.", f"The submission is {submission['status']}.")
        submission["status"] = target
        return jsonify(submission)

    @app.post("/api/v1/submissions/bulk-approve/")
    def bulk_approve():
        ids = (request.get_json(silent=True) or {}).get("submission_ids") or []
        unknown = [i for i in ids if i not in state.submissions]
        if unknown:
            return error(400, 140001, "Request validation failed.", {"submission_ids": unknown})
        for i in ids:  # carried out later (settle): the answer only says it is under way
            if state.submissions[i]["status"] == "AWAITING REVIEW":
                state.submissions[i]["status"] = "PROCESSING"
        return jsonify("The request to bulk approve has been made successfully.")

    @app.post("/api/v1/submissions/bonus-payments/")
    def set_up_bonuses():
        body = request.get_json(silent=True) or {}
        study_id = body.get("study_id")
        _, missing = study_or_404(study_id or "")
        if missing:
            return missing
        lines, bad = [], []
        taken = {s["participant_id"] for s in state.submissions.values() if s["study_id"] == study_id}
        for line in str(body.get("csv_bonuses") or "").splitlines():
            if not line.strip():
                continue
            try:
                who, amount = line.split(",")
                value = Decimal(amount)
            except (ValueError, InvalidOperation):
                bad.append(line)
                continue
            if who not in taken or value <= 0 or value != value.quantize(Decimal("0.01")):
                bad.append(line)
                continue
            lines.append((who, int(value * 100)))
        if bad or not lines:
            return error(400, 140001, "Request validation failed.", {"csv_bonuses": bad or ["No bonuses."]})
        bulk_id = state.new_id("7")
        amount = sum(c for _, c in lines)  # cents, as Prolific answers
        fees = round(amount / 3)
        state.bulks[bulk_id] = {"study": study_id, "lines": lines, "pay_calls": 0}
        return jsonify({"id": bulk_id, "study": study_id, "amount": amount, "fees": fees,
                        "total_amount": amount + fees, "vat": 0}), 201

    @app.post("/api/v1/bulk-bonus-payments/<bulk_id>/pay/")
    def pay(bulk_id):
        bulk = state.bulks.get(bulk_id)
        if bulk is None:
            return error(404, 140400, "Not found", f"No bulk bonus payment {bulk_id}.")
        bulk["pay_calls"] += 1  # every call pays again: the endpoint is not idempotent
        for who, amount in bulk["lines"]:
            state.payments.append((bulk_id, who, amount))
            for submission in state.submissions.values():
                if submission["study_id"] == bulk["study"] and submission["participant_id"] == who:
                    submission["bonus_payments"].append(amount)
                    break
        return jsonify(f"Bulk bonus payment with ID {bulk_id} is being processed asynchronously."), 202

    return app, state


class FaultyTransport(httpx.BaseTransport):
    """``httpx.WSGITransport`` over the fake app, with :class:`Fault` s applied first-come to matching requests."""

    def __init__(self, app: Flask):
        self.inner = httpx.WSGITransport(app=app)
        self.faults: deque[Fault] = deque()

    def inject(self, method: str, path: str, kind: str, *, times: int = 1, retry_after: str | None = "2") -> None:
        for _ in range(times):
            self.faults.append(Fault(method, path, kind, retry_after))

    def _take(self, request: httpx.Request) -> Fault | None:
        for fault in self.faults:
            if fault.method == request.method and fault.path in request.url.path:
                self.faults.remove(fault)
                return fault
        return None

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        fault = self._take(request)
        if fault is None:
            return self.inner.handle_request(request)
        if fault.kind == "429":
            headers = {"Retry-After": fault.retry_after} if fault.retry_after else {}
            return httpx.Response(429, headers=headers, json={"error": {
                "status": 429, "error_code": 140029, "title": "Too many requests",
                "detail": "Request was throttled.", "additional_information": "/api/v1/errors/140029"}})
        if fault.kind == "500":
            return httpx.Response(500, json={"error": {"status": 500, "error_code": 140500,
                                                       "title": "Internal server error", "detail": "Try again."}})
        if fault.kind == "connect":
            raise httpx.ConnectError("connection refused", request=request)
        if fault.kind == "timeout_before":
            raise httpx.ReadTimeout("timed out", request=request)
        response = self.inner.handle_request(request)  # the work is done ...
        response.read()
        if fault.kind == "pounds":  # amounts answered in the currency's units, not cents (a client must notice)
            body = response.json()
            for name in ("amount", "fees", "total_amount"):
                body[name] = body[name] / 100
            return httpx.Response(response.status_code, json=body)
        if fault.kind == "500_after":
            return httpx.Response(500, json={"error": {"status": 500, "error_code": 140500,
                                                       "title": "Internal server error", "detail": "Try again."}})
        raise httpx.ReadTimeout("timed out", request=request)  # ... and the answer is lost


# ---------------------------------------------------------------- perceptlab's side

COMPLETION_CODE = "C0DE1234"
PROLIFIC_ENTRY = {"recruiter": "prolific", "completion_code": COMPLETION_CODE}


def completed_participant(app, slug: str, participant_id: str, pages: int, *, stage: str = "completed") -> None:
    """A Prolific participant who entered ``slug`` (a plain link with PROLIFIC_PID) and finished ``pages``
    pages (``stage`` "completed", or another stage), as the end page leaves them."""
    from sqlalchemy import select

    from server.models import Assignment, Study, Worker
    from server.services import app_services

    response = app.test_client().post(f"/api/v1/studies/{slug}/assignments",
                                      json={"platform": "link", "worker_id": participant_id})
    assert response.status_code == 201, response.json
    with app_services(app).sessions() as db:
        study_id = db.scalar(select(Study.id).where(Study.slug == slug))
        row = db.scalar(select(Assignment).join(Worker, Worker.id == Assignment.worker_id)
                        .where(Assignment.study_id == study_id, Worker.external_id == participant_id))
        row.stage, row.pages_completed = stage, pages
        row.completion_code = row.completion_code or f"own-{participant_id}"
        db.commit()


def pay_bonuses_in_a_process(database_url: str, base_url: str, slug: str, now_iso: str, barrier) -> None:
    """``ProlificService.pay_bonuses`` of study ``slug`` in a process of its own (the target of a spawned
    ``multiprocessing.Process``): its own engine and session on ``database_url``, its own client on the fake served
    over HTTP at ``base_url``, the service clock at ``now_iso``; starts when ``barrier`` lets every process go."""

    from sqlalchemy import select

    from server.db import make_engine, make_session_factory
    from server.models import Study
    from server.prolific import ProlificClient, ProlificService

    now = dt.datetime.fromisoformat(now_iso)
    engine = make_engine(database_url)
    client = ProlificClient(TOKEN, base_url=base_url, sleep=lambda s: None, clock=lambda: now)
    try:
        with make_session_factory(engine)() as session:
            study = session.scalar(select(Study).where(Study.slug == slug))
            service = ProlificService(client, session, clock=lambda: now)
            session.commit()  # SQLite: no transaction (which holds the write lock) while waiting for the other
            barrier.wait(timeout=60)
            service.pay_bonuses(study)
    finally:
        client.close()
        engine.dispose()
