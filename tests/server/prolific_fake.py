"""A fake Prolific for tests: a small Flask (WSGI) app implementing the endpoints server/prolific.py calls, with
Prolific's error shape, and a transport that injects faults.

No offline Prolific exists. This one keeps its state in memory and follows the public API documentation
(docs.prolific.com): ``Authorization: Token ...``; lists paginated with ``results``, ``_links.next.href`` (a
full URL or a path) and ``meta.count``; errors as ``{"error": {"status", "error_code", "title", "detail", ...}}``; study transitions
PUBLISH / PAUSE / START / STOP; submission transitions APPROVE / REJECT (a category and a message of 100+
characters), repeated requests ignored; bulk approve; bonuses set up from ``participant_id,amount`` lines and
paid by ``/bulk-bonus-payments/{id}/pay/``, which pays again on every call (it is not idempotent), and each
paid bonus shows in the submission's ``bonus_payments`` (cents).

:class:`FaultyTransport` serves the app through ``httpx.WSGITransport`` and, for the next matching requests,
answers 429 (with ``Retry-After``) or 500, drops the connection, or times out *after* the app did the work (the
answer is lost, the money moved). A support module, not a test module.
"""
from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

import httpx
from flask import Flask, jsonify, request

TOKEN = "fake-prolific-token"
BASE_URL = "https://api.prolific.test/api/v1/"
REJECTION_CATEGORIES = {"TOO_QUICKLY", "TOO_SLOWLY", "FAILED_INSTRUCTIONS", "INCOMP_LONGITUDINAL", "FAILED_CHECK",
                        "LOW_EFFORT", "MALINGERING", "NO_CODE", "BAD_CODE", "NO_DATA", "UNSUPP_DEVICE", "OTHER"}
DEVICES = {"desktop", "tablet", "mobile"}


@dataclass
class Fault:
    """Applied to the next request whose method matches and whose path contains ``path``.

    ``kind``: "429" (refused, ``retry_after`` seconds), "500" (refused before any work), "500_after" (the work
    is done, then 500), "timeout" (the work is done, the answer never arrives), "timeout_before" (no work, no
    answer), "connect" (no connection)."""
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
    page_size: int = 2
    lists_bonuses: bool = True  # False: a submission's view leaves out ``bonus_payments``
    ids: Any = field(default_factory=lambda: itertools.count(1))

    def new_id(self, prefix: str) -> str:
        return f"{prefix}{next(self.ids):023x}"

    def add_submission(self, study_id: str, participant_id: str, *, status: str = "AWAITING REVIEW",
                       code: str = "") -> str:
        submission_id = self.new_id("5")
        self.submissions[submission_id] = {
            "id": submission_id, "study_id": study_id, "participant_id": participant_id, "status": status,
            "study_code": code, "started_at": "2026-11-21T12:00:00Z", "completed_at": "2026-11-21T12:20:00Z",
            "bonus_payments": []}
        return submission_id

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
    def _auth():
        state.calls.append((request.method, request.path))
        if request.headers.get("Authorization") != f"Token {token}":
            return error(401, 140100, "Unauthorized", "Invalid token.")
        return None

    def page(items: list[dict[str, Any]], *, full_urls: bool = True):
        """One page of ``items``; the next page's link is a full URL, or (``full_urls`` False) a path from the
        host's root: a client must follow either."""
        start = int(request.args.get("page", 1))
        size = state.page_size
        chunk = items[(start - 1) * size:start * size]
        base = request.base_url if full_urls else request.path
        following = (f"{base}?page={start + 1}" if start * size < len(items) else None)
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
        return page(list(state.studies.values()))

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
        moves = {("PUBLISH", "UNPUBLISHED"): "ACTIVE", ("PAUSE", "ACTIVE"): "PAUSED", ("START", "PAUSED"): "ACTIVE",
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
                     for s in state.submissions.values() if s["study_id"] == study_id], full_urls=False)

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
        for i in ids:
            if state.submissions[i]["status"] == "AWAITING REVIEW":
                state.submissions[i]["status"] = "APPROVED"
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
            if who not in taken or value <= 0:
                bad.append(line)
                continue
            lines.append((who, int(value * 100)))
        if bad or not lines:
            return error(400, 140001, "Request validation failed.", {"csv_bonuses": bad or ["No bonuses."]})
        bulk_id = state.new_id("7")
        amount = sum(c for _, c in lines) / 100
        state.bulks[bulk_id] = {"study": study_id, "lines": lines, "pay_calls": 0}
        return jsonify({"id": bulk_id, "study": study_id, "amount": amount, "fees": round(amount / 3, 2),
                        "total_amount": round(amount * 4 / 3, 2), "vat": 0}), 201

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
