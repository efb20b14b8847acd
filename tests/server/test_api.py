"""The worker JSON API (/api/v1) against its OpenAPI document, on SQLite and PostgreSQL.

Every response these tests receive goes through :class:`SpecClient`, which checks it against
``server/openapi.yaml`` (the operation for its path and method must document its status, and the
body must match that status's schema, Draft 2020-12 with ``$ref`` resolved through a ``referencing``
registry). A request the server accepts must also be valid for the spec, and a JSON body the server
refuses with ``400 invalid_request`` must be invalid for it, so the spec's request schemas are
checked as well.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
import uuid

import pytest
import yaml
from sqlalchemy import func, select, update

from server.models import Assignment, Page, Study, as_utc
from server.paradigms.paired.models import GoldResult, Pair, Trial, Vote
from server.paradigms.core import response_kinds
from server.services import app_services

from .api_support import (API_PREFIX, METHODS, SPEC, SpecClient, _deref, db_snapshot, expect_error, request_errors,
                          response_errors)
from .conftest import WorkerClient, gold_side
from .reason_support import counts


# ---------------------------------------------------------------- database helpers

def count(app, model, *where) -> int:
    with app_services(app).sessions() as session:
        return session.scalar(select(func.count()).select_from(model).where(*where))


@pytest.fixture
def client(app):
    # A server error should reach the test as a 500 response, not as an exception inside the client.
    app.config["PROPAGATE_EXCEPTIONS"] = False
    return SpecClient(app.test_client())


def _vote_body(trial_id: str, choice: str = "left", **changes) -> dict:
    body = {"vote_id": str(uuid.uuid4()), "trial_id": trial_id, "choice": choice, "rt_ms": 812,
            "input": "keyboard", "client_time": "2026-11-21T10:00:00.000Z",
            "window": {"width": 1366, "height": 768, "dpr": 2}}
    body.update(changes)
    return body


def _at_trials(client, study) -> tuple[WorkerClient, dict]:
    """A worker past the quiz, at the first trials page."""
    worker = WorkerClient(client, study)
    worker.start()
    worker.answer_page(worker.correct_side)
    state = worker.state()
    assert state["stage"] == "trials"
    return worker, state


# ---------------------------------------------------------------- the document itself

def test_spec_is_valid_openapi_31_and_covers_every_route():
    from flask import Flask
    from openapi_spec_validator import validate

    from server.views import api

    validate(SPEC)
    assert SPEC["openapi"].startswith("3.1")
    app = Flask("routes")
    app.register_blueprint(api.bp)
    kinds = response_kinds()
    assert kinds, "no paradigm declares a response kind"
    routes = set()
    for rule in app.url_map.iter_rules():
        if rule.endpoint.startswith("api."):
            # The response route stands for one path per declared response kind.
            names = list(kinds) if "<response_kind:" in rule.rule else [None]
            for name in names:
                path = rule.rule if name is None else re.sub(r"<response_kind:[^>]+>", name, rule.rule)
                template = re.sub(r"<(?:[^:>]+:)?([^>]+)>", r"{\1}", path)[len(API_PREFIX):]
                routes |= {(template, m.lower()) for m in rule.methods - {"HEAD", "OPTIONS"}}
    documented = {(path, m) for path, item in SPEC["paths"].items() for m in item if m in METHODS}
    assert routes == documented
    for name, (_, kind) in kinds.items():  # each kind's operation says what the declaration says
        operation = SPEC["paths"][f"/assignments/{{assignment_id}}/{name}"]["post"]
        assert operation["operationId"] == kind.operation_id and operation["summary"] == kind.summary
        assert operation["requestBody"]["content"]["application/json"]["schema"] == kind.request_schema
        assert f"{kind.max_body // 1024} KiB" in _deref(operation["responses"]["413"], "")[0]["description"]
    assert SPEC["components"]["securitySchemes"]["workerToken"] == {
        **SPEC["components"]["securitySchemes"]["workerToken"], "type": "http", "scheme": "bearer"}
    error = SPEC["components"]["schemas"]["Error"]
    assert error["required"] == ["error", "message"] and error["additionalProperties"] is False
    for path, item in SPEC["paths"].items():
        for method, operation in item.items():
            secured = operation.get("security", SPEC["security"]) != []
            assert secured == path.startswith("/assignments/"), (path, method)
            for status, response in operation["responses"].items():
                response, _ = _deref(response, "")
                if status.startswith("4"):  # every 4xx is an Error
                    schema = response["content"]["application/json"]["schema"]
                    target, _ = _deref(schema, "")
                    assert schema == {"$ref": "#/components/schemas/Error"} or \
                        target["allOf"][0] == {"$ref": "#/components/schemas/Error"}, (path, method, status)
            if secured:
                assert "403" in operation["responses"], (path, method)


def test_response_kind_declarations_are_checked(monkeypatch):
    """One kind per name across paradigms, URL-safe names, none that another route of the API takes."""
    from flask import Flask

    from server.paradigms.core import ResponseKind
    from server.paradigms.motion.paradigm import MotionMatching
    from server.paradigms.paired.paradigm import PairedComparison
    from server.views import api

    votes = PairedComparison.response_kinds[0]
    assert dataclasses.replace(votes, name="likert-answers", operation_id="").operation_id == "postLikertAnswers"
    for bad in ("Votes", "votes/1", "", "-x"):
        with pytest.raises(ValueError, match="name"):
            ResponseKind(name=bad, record=votes.record, summary="x", request_schema={})
    with monkeypatch.context() as patch:
        patch.setattr(MotionMatching, "response_kinds", (*MotionMatching.response_kinds, votes))
        with pytest.raises(ValueError, match="'votes'"):
            response_kinds()
    with monkeypatch.context() as patch:
        patch.setattr(MotionMatching, "response_kinds", (dataclasses.replace(votes, name="actions"),))
        with pytest.raises(ValueError, match="actions"):
            Flask("routes").register_blueprint(api.bp)


def test_spec_helper_rejects_wrong_shapes():
    """The checker itself must be able to fail."""
    assert response_errors("get", "/api/v1/assignments/1/state", 200, "application/json", {"stage": "trials"})
    assert response_errors("get", "/api/v1/assignments/1/state", 418, "application/json", {})
    good_error = {"error": "bad_token", "message": "no"}
    assert not response_errors("get", "/api/v1/assignments/1/state", 403, "application/json", good_error)
    assert response_errors("get", "/api/v1/assignments/1/state", 403, "application/json",
                           {**good_error, "extra": 1})
    assert response_errors("get", "/api/v1/assignments/1/state", 403, "application/json",
                           {"error": "not_found", "message": "x"})
    assert response_errors("post", "/api/v1/assignments/1/votes", 201, "application/json",
                           {"vote_id": str(uuid.uuid4()), "status": "duplicate", "stage": "trials",
                            "page_complete": False})
    assert request_errors("post", "/api/v1/assignments/1/votes", {**_vote_body("3"), "choice": "up"})
    assert not request_errors("post", "/api/v1/assignments/1/votes", _vote_body("3"))


# ---------------------------------------------------------------- happy paths

def test_happy_path_mturk(app, study, client):
    served = client.get("/api/v1/openapi.yaml")
    assert served.status_code == 200 and yaml.safe_load(served.data) == SPEC

    worker = WorkerClient(client, study)
    assert worker.entry["stage"] == "consent" and worker.entry["worker_url"] == f"/w/{worker.token}/"
    state = worker.state()
    assert state["stage"] == "consent" and state["page"] is None and state["completion"] is None
    assert state["progress"] == {"pages_completed": 0, "min_pages": 1, "max_pages": 3,
                                 "reward_per_page": "0.50", "bonus_per_page": "0.40"}
    assert state["limits"] == {"min_window_width": 1000, "min_window_height": 600, "min_image_scale": 0.5}

    environment = {"window": {"width": 1366, "height": 768, "dpr": 1.25}, "screen": {"width": 1920, "height": 1080},
                   "user_agent": "Mozilla/5.0 test"}
    response = client.post(f"/api/v1/assignments/{worker.assignment_id}/environment", headers=worker.headers,
                           json=environment)
    assert response.status_code == 204 and response.data == b""
    with app_services(app).sessions() as session:
        stored = session.get(Assignment, int(worker.assignment_id)).environment
    assert stored["window"] == environment["window"] and stored["screen"] == environment["screen"]
    assert stored["user_agent"] == "Mozilla/5.0 test"

    response = worker.action("consent")
    assert response.status_code == 200 and response.json["stage"] == "instructions"
    response = worker.action("instructions_done")
    assert response.status_code == 200
    state = response.json
    assert state["stage"] == "quiz" and state["page"]["kind"] == "quiz" and state["page"]["index"] == 0
    assert [t["position"] for t in state["page"]["trials"]] == [0, 1, 2]
    for trial in state["page"]["trials"]:
        for side in ("reference", "left", "right"):
            image = trial[side]
            assert image["full"].startswith(f"/stimuli/{study}/") and image["crops"]
            assert all(c["url"].startswith(f"/stimuli/{study}/") for c in image["crops"])
        # A stimulus URL from the state really serves the image.
        assert client.client.get(trial["left"]["full"]).status_code == 200

    for k, trial in enumerate(state["page"]["trials"]):
        response = worker.vote(trial["trial_id"], worker.correct_side(trial))
        assert response.status_code == 201, response.json
        assert response.json["status"] == "stored" and response.json["feedback"] == {"correct": True}
        assert response.json["page_complete"] == (k == 2)
    assert response.json["stage"] == "trials"

    pages = 0
    while True:
        state = worker.state()
        assert state["stage"] == "trials" and state["page"]["kind"] == "trials"
        assert state["page"]["index"] == pages + 1 and state["page"]["n_answered"] == 0
        body = worker.answer_page(worker.correct_side)
        assert "feedback" not in body  # hidden gold looks like any other trial
        pages += 1
        state = worker.state()
        assert state["progress"]["pages_completed"] == pages
        if pages == 2:
            assert state["stage"] == "page_done" and state["page"]["n_answered"] == state["page"]["n_trials"]
            response = worker.action("finish")
            assert response.status_code == 200
            break
        assert state["stage"] == "page_done"
        assert worker.action("continue").status_code == 200
    state = response.json
    assert state["stage"] == "completed" and state["page"] is None
    completion = state["completion"]
    assert completion["mode"] == "mturk" and re.fullmatch(r"A[0-9A-F]{12}", completion["assignment_id"])
    assert completion["submit_url"] == "https://workersandbox.mturk.com/mturk/externalSubmit"
    assert re.fullmatch(r"[0-9A-F]{10}", completion["code"])
    assert count(app, Vote) == 3 + 2 * 6
    # Done: repeating the last action is harmless and changes nothing.
    before = db_snapshot(app)
    assert worker.action("finish").json["stage"] == "completed"
    assert db_snapshot(app) == before


def test_happy_path_plain_link(app, study, client):
    # A plain link needs a participant ID unless the study allows anonymous entry ([entry]).
    response = client.post(f"/api/v1/studies/{study}/assignments", json={"platform": "link"})
    assert response.status_code == 403 and response.json["error"] == "participant_required"
    response = client.post(f"/api/v1/studies/{study}/assignments", json={"platform": "link", "worker_id": "P-1"})
    assert response.status_code == 201
    entry = response.json
    headers = {"Authorization": f"Bearer {entry['token']}"}
    base = f"/api/v1/assignments/{entry['assignment_id']}"
    client.post(f"{base}/actions", headers=headers, json={"action": "consent"})
    state = client.post(f"{base}/actions", headers=headers, json={"action": "instructions_done"}).json
    while state["stage"] in ("quiz", "trials"):
        for trial in state["page"]["trials"]:
            response = client.post(f"{base}/votes", headers=headers,
                                   json=_vote_body(trial["trial_id"], gold_side(app, trial) or "left"))
            assert response.status_code == 201
        state = client.get(f"{base}/state", headers=headers).json
    assert state["stage"] == "page_done"
    state = client.post(f"{base}/actions", headers=headers, json={"action": "finish"}).json
    assert state["stage"] == "completed"
    assert state["completion"]["mode"] == "code" and set(state["completion"]) == {"mode", "code"}
    # A participant ID given in the link is the one stored; entering again resumes the same assignment.
    first = client.post(f"/api/v1/studies/{study}/assignments", json={"platform": "link", "worker_id": "P-7"})
    again = client.post(f"/api/v1/studies/{study}/assignments", json={"platform": "link", "worker_id": "P-7"})
    assert first.json["assignment_id"] == again.json["assignment_id"] and first.json["token"] == again.json["token"]


def test_entering_again_returns_the_same_assignment_with_200(app, study, client):
    """Contract: entry answers 201 for a new assignment and 200 for the existing one (reload)."""
    body = {"platform": "mturk", "worker_id": "WRELOAD", "assignment_id": "ARELOAD", "hit_id": "H1",
            "turk_submit_to": "https://www.mturk.com"}
    first = client.post(f"/api/v1/studies/{study}/assignments", json=body)
    assert first.status_code == 201
    before = db_snapshot(app)
    again = client.post(f"/api/v1/studies/{study}/assignments", json=body)
    assert again.json == first.json
    assert db_snapshot(app) == before
    assert again.status_code == 200


# ---------------------------------------------------------------- invalid bodies

MALFORMED = [
    ("malformed JSON", {"data": b'{"vote_id": ', "content_type": "application/json"}),
    ("not JSON", {"data": b"choice=left", "content_type": "application/x-www-form-urlencoded"}),
    ("JSON null", {"data": b"null", "content_type": "application/json"}),
    ("JSON array", {"json": [1, 2]}),
    ("JSON string", {"json": "left"}),
    ("JSON number", {"json": 5}),
]


def _check_refusals(app, client, url, headers, cases) -> list[str]:
    """Send each ``(label, request kwargs, word the message must contain)``; expect 400 invalid_request and
    no change to the database but the count of refused entries (``entry_refusal``, server/refusals.py).
    Returns the list of problems (all cases run even if one fails)."""
    def snapshot():
        return {table: rows for table, rows in db_snapshot(app).items() if table != "entry_refusal"}

    problems = []
    before = snapshot()
    for label, kwargs, mentions in cases:
        try:
            response = client.post(url, headers=headers, **kwargs)
            expect_error(response, 400, "invalid_request", mentions)
        except AssertionError as exc:
            problems.append(f"{url} {label}: {exc}".splitlines()[0][:400])
        after = snapshot()
        if after != before:
            problems.append(f"{url} {label}: the database changed")
            before = after
    return problems


def test_invalid_vote_bodies(app, study, client):
    worker, state = _at_trials(client, study)
    trial_id = state["page"]["trials"][0]["trial_id"]
    url = f"/api/v1/assignments/{worker.assignment_id}/votes"
    good = _vote_body(trial_id)
    cases = [(label, kwargs, None) for label, kwargs in MALFORMED]
    for field in ("vote_id", "trial_id", "choice", "rt_ms"):
        cases.append((f"missing {field}", {"json": {k: v for k, v in good.items() if k != field}}, field))
    wrong = {"vote_id": ["not-a-uuid", 12, None, str(uuid.uuid4())[:-1]],
             "trial_id": [int(trial_id), "", "x1", "1" * 19, "²", None],
             "choice": ["LEFT", "up", 0, True, None],
             "rt_ms": ["812", -1, True, None, 86_400_001],
             "input": ["voice", 1],
             "client_time": [1234, "x" * 41],
             "window": ["1366x768", [1366, 768]]}
    for field, values in wrong.items():
        for value in values:
            cases.append((f"{field}={value!r}", {"json": {**good, field: value}}, field))
    for key, value in (("width", "1366"), ("width", 0), ("height", 1.5), ("height", True), ("dpr", "2"),
                       ("dpr", 0)):
        cases.append((f"window.{key}={value!r}", {"json": {**good, "window": {**good["window"], key: value}}},
                      f"window.{key}"))
    cases.append(("window.zoom (unknown)", {"json": {**good, "window": {**good["window"], "zoom": 2}}}, "zoom"))
    for literal in ("NaN", "Infinity"):
        raw = json.dumps(good).replace('"rt_ms": 812', f'"rt_ms": {literal}')
        cases.append((f"rt_ms={literal}", {"data": raw, "content_type": "application/json"}, "rt_ms"))
    cases.append(("extra field", {"json": {**good, "correct": True}}, "correct"))
    cases.append(("extra field (server-side data)", {"json": {**good, "worker_id": 1}}, "worker_id"))
    problems = _check_refusals(app, client, url, worker.headers, cases)
    assert not problems, "\n".join(problems)
    # The same vote, valid, is stored: the refusals were about the body only.
    assert client.post(url, headers=worker.headers, json=good).status_code == 201


def test_invalid_entry_bodies(app, study, client):
    url = f"/api/v1/studies/{study}/assignments"
    good = {"platform": "mturk", "worker_id": "WENTRY", "assignment_id": "AENTRY", "hit_id": "HENTRY",
            "turk_submit_to": "https://www.mturk.com"}
    cases = [(label, kwargs, None) for label, kwargs in MALFORMED]
    for field, name in (("worker_id", "workerId"), ("assignment_id", "assignmentId"), ("hit_id", "hitId"),
                        ("turk_submit_to", "turkSubmitTo")):
        cases.append((f"mturk without {field}", {"json": {k: v for k, v in good.items() if k != field}},
                      (field, name)))
        cases.append((f"{field} as a number", {"json": {**good, field: 17}}, field))
    cases += [
        ("unknown platform", {"json": {**good, "platform": "prolific"}}, "platform"),
        ("platform as a list", {"json": {**good, "platform": ["mturk"]}}, "platform"),
        ("worker id with spaces", {"json": {**good, "worker_id": "W 1"}}, ("worker_id", "workerId")),
        ("link participant with slash", {"json": {"platform": "link", "worker_id": "../x"}}, "participant"),
        ("extra field", {"json": {**good, "bonus": "10.00"}}, "bonus"),
        ("preview assignment", {"json": {**good, "assignment_id": "ASSIGNMENT_ID_NOT_AVAILABLE"}}, "preview"),
    ]
    for submit_to in ("http://www.mturk.com", "https://evil.example", "https://www.mturk.com.evil.example",
                      "https://evil.example/www.mturk.com", "https://www.mturk.com@evil.example",
                      "javascript:alert(1)",
                      # Python's urlsplit sees host www.mturk.com here, browsers see evil.example
                      # (WHATWG URLs treat "\" as "/" in https URLs): the completion form would post there.
                      "https://evil.example\\@www.mturk.com"):
        cases.append((f"turkSubmitTo={submit_to}", {"json": {**good, "turk_submit_to": submit_to}},
                      ("turk_submit_to", "turkSubmitTo")))
    problems = _check_refusals(app, client, url, {}, cases)
    assert not problems, "\n".join(problems)
    assert count(app, Assignment) == 0
    # The entries the entry rules refused (not the bodies refused before them) are counted as bad_entry.
    assert set(counts(app, study)) == {"bad_entry"} and counts(app, study)["bad_entry"]["entries"] >= 8
    assert client.post(url, json=good).status_code == 201


def test_invalid_action_and_environment_bodies(app, study, client):
    worker = WorkerClient(client, study)
    base = f"/api/v1/assignments/{worker.assignment_id}"
    cases = [(label, kwargs, None) for label, kwargs in MALFORMED]
    cases += [("missing action", {"json": {}}, "action"),
              ("action as a number", {"json": {"action": 1}}, "action"),
              ("unknown action", {"json": {"action": "skip"}}, "skip"),
              ("extra field", {"json": {"action": "consent", "stage": "completed"}}, "stage")]
    problems = _check_refusals(app, client, f"{base}/actions", worker.headers, cases)
    good = {"window": {"width": 1366, "height": 768, "dpr": 1}, "screen": {"width": 1920, "height": 1080},
            "user_agent": "UA"}
    cases = [(label, kwargs, None) for label, kwargs in MALFORMED]
    cases += [("window as a string", {"json": {**good, "window": "big"}}, "window"),
              ("screen as a list", {"json": {**good, "screen": [1, 2]}}, "screen"),
              ("window.width as a string", {"json": {**good, "window": {"width": "1366"}}}, "width"),
              ("user_agent as a number", {"json": {**good, "user_agent": 5}}, "user_agent"),
              ("extra field", {"json": {**good, "cookies": "a=b"}}, "cookies")]
    problems += _check_refusals(app, client, f"{base}/environment", worker.headers, cases)
    assert not problems, "\n".join(problems)
    assert worker.state()["stage"] == "consent"


# ---------------------------------------------------------------- authorisation

def test_tokens(app, study, client):
    from itsdangerous import URLSafeSerializer

    from server.tokens import SALT

    mine = WorkerClient(client, study)
    other = WorkerClient(client, study)
    mine.start()
    trial_id = mine.state()["page"]["trials"][0]["trial_id"]
    with app_services(app).sessions() as session:
        nonce = session.get(Assignment, int(mine.assignment_id)).token_nonce
    forged_signature = mine.token[:-2] + ("AA" if not mine.token.endswith("AA") else "BB")
    other_secret = URLSafeSerializer("not-the-secret", salt=SALT).dumps([int(mine.assignment_id), nonce])
    stale_nonce = URLSafeSerializer(app.config["SECRET_KEY"], salt=SALT).dumps([int(mine.assignment_id), "0" * 16])
    bad_headers = {
        "no header": {},
        "empty bearer": {"Authorization": "Bearer "},
        "other scheme": {"Authorization": f"Basic {mine.token}"},
        "forged signature": {"Authorization": f"Bearer {forged_signature}"},
        "signed with another key": {"Authorization": f"Bearer {other_secret}"},
        "revoked nonce": {"Authorization": f"Bearer {stale_nonce}"},
        "garbage": {"Authorization": "Bearer ../../etc/passwd"},
        "another assignment's token": other.headers,
    }
    requests = [("get", "state", None), ("post", "actions", {"action": "continue"}),
                ("post", "environment", {"window": {"width": 1, "height": 1, "dpr": 1}}),
                ("post", "votes", _vote_body(trial_id))]
    problems = []
    before = db_snapshot(app)
    for label, headers in bad_headers.items():
        for method, endpoint, body in requests:
            kwargs = {"json": body} if body is not None else {}
            try:
                expect_error(client.open(method, f"/api/v1/assignments/{mine.assignment_id}/{endpoint}",
                                         headers=headers, **kwargs), 403, "bad_token")
            except AssertionError as exc:
                problems.append(f"{label} {method} {endpoint}: {exc}".splitlines()[0][:300])
    # The right token on a path that is not its assignment's: another ID, or "digits" that int() rejects.
    for path_id in (other.assignment_id, mine.assignment_id + "0", "abc", "-1", "²"):
        try:
            expect_error(client.get(f"/api/v1/assignments/{path_id}/state", headers=mine.headers), 403, "bad_token")
        except AssertionError as exc:
            problems.append(f"path id {path_id!r}: {exc}".splitlines()[0][:300])
    assert not problems, "\n".join(problems)
    assert db_snapshot(app) == before
    # The token works on its own path.
    assert client.get(f"/api/v1/assignments/{mine.assignment_id}/state", headers=mine.headers).status_code == 200


def test_a_replaced_nonce_revokes_a_token_already_in_use(app, study, client):
    """Verified tokens are remembered (server/tokens.py), but the nonce is compared with the database
    on every request: replacing it stops the very token that was just accepted."""
    worker = WorkerClient(client, study)
    url = f"/api/v1/assignments/{worker.assignment_id}/state"
    assert client.get(url, headers=worker.headers).status_code == 200
    assert client.get(url, headers=worker.headers).status_code == 200  # now a remembered token
    with app_services(app).sessions() as session:
        session.get(Assignment, int(worker.assignment_id)).token_nonce = "f" * 16
        session.commit()
    expect_error(client.get(url, headers=worker.headers), 403, "bad_token")
    expect_error(client.get(url, headers={"Authorization": "Bearer " + "x" * 10_000}), 403, "bad_token")


def test_a_revoked_or_deleted_assignment_is_refused_before_its_body_is_judged(app, study, client):
    """The state and the environment read no ORM object: a revoked token is still a 403 (even with a
    malformed body, which a valid token gets a 400 for), and a deleted assignment is a 403 for the
    state (its token names nothing any more) and a 404 for the environment, as before."""
    worker = WorkerClient(client, study)
    base = f"/api/v1/assignments/{worker.assignment_id}"
    bad_environment = {"window": {"width": "wide"}}
    expect_error(client.post(f"{base}/environment", headers=worker.headers, json=bad_environment), 400,
                 "invalid_request")
    good = {"window": {"width": 1366, "height": 768, "dpr": 1.0}, "screen": {"width": 1920, "height": 1080},
            "user_agent": "Mozilla/5.0"}
    assert client.post(f"{base}/environment", headers=worker.headers, json=good).status_code == 204
    with app_services(app).sessions() as session:
        assignment = session.get(Assignment, int(worker.assignment_id))
        assert assignment.environment["screen"] == good["screen"]
        assignment.token_nonce = "f" * 16
        session.commit()
    before = db_snapshot(app)
    expect_error(client.post(f"{base}/environment", headers=worker.headers, json=bad_environment), 403, "bad_token")
    expect_error(client.post(f"{base}/environment", headers=worker.headers, json=good), 403, "bad_token")
    expect_error(client.get(f"{base}/state", headers=worker.headers), 403, "bad_token")
    expect_error(client.post(f"{base}/actions", headers=worker.headers, json={"action": "consent"}), 403,
                 "bad_token")
    assert db_snapshot(app) == before
    with app_services(app).sessions() as session:
        session.delete(session.get(Assignment, int(worker.assignment_id)))
        session.commit()
    expect_error(client.get(f"{base}/state", headers=worker.headers), 403, "bad_token")
    expect_error(client.post(f"{base}/environment", headers=worker.headers, json=good), 404, "not_found")


# ---------------------------------------------------------------- votes: idempotency and ownership

def test_vote_replays_conflicts_and_answered_trials(app, study, client):
    worker, state = _at_trials(client, study)
    trials = state["page"]["trials"]
    url = f"/api/v1/assignments/{worker.assignment_id}/votes"
    body = _vote_body(trials[0]["trial_id"], "left")
    first = client.post(url, headers=worker.headers, json=body)
    assert first.status_code == 201 and first.json["status"] == "stored" and first.json["vote_id"] == body["vote_id"]
    n_votes = count(app, Vote)
    before = db_snapshot(app)

    replay = client.post(url, headers=worker.headers, json=body)
    assert replay.status_code == 200
    assert replay.json == {**first.json, "status": "duplicate"}
    # The same UUID in upper case, and a retry with another response time: still the same vote.
    for variant in ({**body, "vote_id": body["vote_id"].upper()}, {**body, "rt_ms": 999}):
        response = client.post(url, headers=worker.headers, json=variant)
        assert response.status_code == 200 and response.json["status"] == "duplicate"
    assert db_snapshot(app) == before

    expect_error(client.post(url, headers=worker.headers, json={**body, "choice": "right"}), 409, "conflict")
    expect_error(client.post(url, headers=worker.headers, json={**body, "trial_id": trials[1]["trial_id"]}),
                 409, "conflict")
    expect_error(client.post(url, headers=worker.headers, json=_vote_body(trials[0]["trial_id"], "right")),
                 409, "trial_already_answered")
    assert db_snapshot(app) == before and count(app, Vote) == n_votes
    with app_services(app).sessions() as session:
        stored = session.scalar(select(Vote).where(Vote.client_vote_id == body["vote_id"]))
        assert stored.chose_left is True and stored.trial_id == int(trials[0]["trial_id"])
        assert stored.rt_ms == 812 and stored.input == "keyboard" and stored.window_width == 1366

    # Another worker reusing the vote_id (or replaying the request) gets a conflict, never the first vote.
    intruder, intruder_state = _at_trials(client, study)
    before = db_snapshot(app)
    response = client.post(f"/api/v1/assignments/{intruder.assignment_id}/votes", headers=intruder.headers,
                           json={**body, "trial_id": intruder_state["page"]["trials"][0]["trial_id"]})
    expect_error(response, 409, "conflict")
    assert db_snapshot(app) == before


def test_vote_for_a_trial_of_another_assignment(app, study, client):
    mine, _ = _at_trials(client, study)
    theirs, their_state = _at_trials(client, study)
    url = f"/api/v1/assignments/{mine.assignment_id}/votes"
    before = db_snapshot(app)
    problems = []
    # Another assignment's trial, trials that do not exist, and one beyond PostgreSQL's integer range.
    for trial_id in (their_state["page"]["trials"][0]["trial_id"], "999999", "0", "2147483648", "9" * 18):
        try:
            expect_error(client.post(url, headers=mine.headers, json=_vote_body(trial_id)), 404, "unknown_trial")
        except AssertionError as exc:
            problems.append(f"trial_id {trial_id}: {exc}".splitlines()[0][:300])
    assert not problems, "\n".join(problems)
    assert db_snapshot(app) == before
    # Their trial is still open for them.
    response = theirs.vote(their_state["page"]["trials"][0]["trial_id"], "left")
    assert response.status_code == 201


def test_a_stored_vote_writes_its_rows(app, study, client, clock):
    """What one vote stores, column by column (PostgreSQL stores a vote in one statement, SQLite in
    several: both must write the same): the vote, its pair's counter (real pairs only), the gold
    result of a gold trial, the page's reservation renewed, the quiz page left unreserved."""
    worker, state = _at_trials(client, study)
    trials = state["page"]["trials"]
    real = next(t for t in trials if gold_side(app, t) is None)
    gold = next(t for t in trials if gold_side(app, t) is not None)
    wrong = "right" if gold_side(app, gold) == "left" else "left"
    with app_services(app).sessions() as session:
        page = session.scalar(select(Page).join(Trial, Trial.page_id == Page.id)
                              .where(Trial.id == int(real["trial_id"])))
        reserved_before = as_utc(page.reserved_until)
        shown = {int(t["trial_id"]): session.execute(
            select(Trial.pair_id, Trial.left_is_a, Pair.stimulus_a_id, Pair.stimulus_b_id, Pair.n_votes)
            .join(Pair, Trial.pair_id == Pair.id).where(Trial.id == int(t["trial_id"]))).one() for t in (real, gold)}
    clock.advance(minutes=2)
    bodies = {}
    for trial, choice in ((real, "right"), (gold, wrong)):
        body = _vote_body(trial["trial_id"], choice)
        response = client.post(f"/api/v1/assignments/{worker.assignment_id}/votes", headers=worker.headers, json=body)
        assert response.status_code == 201
        assert response.json == {"vote_id": body["vote_id"], "status": "stored", "stage": "trials",
                                 "page_complete": False}
        bodies[int(trial["trial_id"])] = body
    with app_services(app).sessions() as session:
        assignment = session.get(Assignment, int(worker.assignment_id))
        for trial_id, body in bodies.items():
            pair_id, left_is_a, a, b, n_votes = shown[trial_id]
            vote = session.scalar(select(Vote).where(Vote.trial_id == trial_id))
            left = body["choice"] == "left"  # "right" shows b when a is on the left
            assert (vote.client_vote_id, vote.pair_id, vote.chose_left, vote.winner_id) == (
                body["vote_id"], pair_id, left, a if left == left_is_a else b)
            assert (vote.assignment_id, vote.worker_id, vote.study_id) == (
                assignment.id, assignment.worker_id, assignment.study_id)
            assert (vote.rt_ms, vote.input, vote.client_time, vote.window_width, vote.window_height,
                    vote.device_pixel_ratio) == (812, "keyboard", "2026-11-21T10:00:00.000Z", 1366, 768, 2)
            assert vote.created_at is not None
            pair = session.get(Pair, pair_id)
            assert pair.n_votes == n_votes + (0 if pair.is_gold else 1)  # gold-only pairs keep no counter
        gold_vote = session.scalar(select(Vote.id).where(Vote.trial_id == int(gold["trial_id"])))
        results = session.execute(select(GoldResult.vote_id, GoldResult.worker_id, GoldResult.assignment_id,
                                         GoldResult.is_quiz, GoldResult.correct)
                                  .where(GoldResult.assignment_id == assignment.id, ~GoldResult.is_quiz)).all()
        assert [tuple(r) for r in results] == [(gold_vote, assignment.worker_id, assignment.id, False, False)]
        assert session.scalar(select(func.count()).select_from(GoldResult).where(
            GoldResult.assignment_id == assignment.id, GoldResult.is_quiz, GoldResult.correct)) == 3
        # The votes renewed the page's reservation from the clock's new time; the quiz page has none.
        assert as_utc(session.get(Page, page.id).reserved_until) == reserved_before + dt.timedelta(minutes=2)
        assert session.scalar(select(Page.reserved_until).where(Page.assignment_id == assignment.id,
                                                                Page.kind == "quiz")) is None


# ---------------------------------------------------------------- stages

def test_actions_in_the_wrong_stage(app, study, client):
    worker = WorkerClient(client, study)

    def refused(action: str) -> None:
        before = db_snapshot(app)
        response = worker.action(action)
        expect_error(response, 409, "wrong_stage")
        assert db_snapshot(app) == before

    def repeated(action: str, stage: str) -> None:
        before = db_snapshot(app)
        response = worker.action(action)
        assert response.status_code == 200 and response.json["stage"] == stage
        assert db_snapshot(app) == before

    for action in ("instructions_done", "continue", "finish"):
        refused(action)
    worker.action("consent")
    repeated("consent", "instructions")
    for action in ("continue", "finish"):
        refused(action)
    assert worker.action("instructions_done").json["stage"] == "quiz"
    repeated("instructions_done", "quiz")
    repeated("consent", "quiz")
    for action in ("continue", "finish"):
        refused(action)
    worker.answer_page(worker.correct_side)
    assert worker.state()["stage"] == "trials"
    refused("finish")  # the page is not done
    repeated("continue", "trials")
    worker.answer_page(worker.correct_side)
    assert worker.state()["stage"] == "page_done"
    assert worker.action("finish").json["stage"] == "completed"
    repeated("continue", "completed")
    # No trial of a completed assignment is open: a new vote ID on an answered trial is refused.
    with app_services(app).sessions() as session:
        trial_id = session.scalar(select(Trial.id).where(Trial.assignment_id == int(worker.assignment_id)).limit(1))
    before = db_snapshot(app)
    expect_error(worker.vote(str(trial_id), "left"), 409, "trial_already_answered")
    assert db_snapshot(app) == before


def test_finish_needs_min_pages(app, demo_stimuli, tmp_path, client):
    from .conftest import create_test_study

    slug = create_test_study(app, demo_stimuli, tmp_path, slug="two-pages",
                             pages={"pairs_per_page": 4, "min_pages": 2, "max_pages": 3},
                             quality={"quiz_size": 0, "gold_rate": 0.0})
    worker = WorkerClient(client, slug)
    worker.action("consent")
    assert worker.action("instructions_done").json["stage"] == "trials"  # no quiz in this study
    worker.answer_page(worker.correct_side)
    before = db_snapshot(app)
    expect_error(worker.action("finish"), 409, "wrong_stage", "2 page")
    assert db_snapshot(app) == before
    assert worker.action("continue").json["page"]["index"] == 1


# ---------------------------------------------------------------- entry errors

def test_unknown_and_paused_studies(app, study, client):
    body = {"platform": "link", "worker_id": "P1"}
    before = db_snapshot(app)
    expect_error(client.post("/api/v1/studies/no-such-study/assignments", json=body), 404, "not_found")
    with app_services(app).sessions() as session:
        session.execute(update(Study).values(status="paused"))
        session.commit()
    before = db_snapshot(app)
    expect_error(client.post(f"/api/v1/studies/{study}/assignments", json=body), 409, "study_paused", "paused")
    after = db_snapshot(app)
    # Nothing stored but the refusal's count (server/refusals.py): one row per study and reason code.
    assert [row[1:3] for row in after.pop("entry_refusal")] == [("study_paused", 1)]
    assert {**after, "entry_refusal": []} == before


def test_paused_study_lets_started_workers_resume(app, study, client):
    """`perceptlab study pause`: "Stop new workers from starting (workers already in the study can finish)"."""
    body = {"platform": "mturk", "worker_id": "WPAUSE", "assignment_id": "APAUSE", "hit_id": "H",
            "turk_submit_to": "https://www.mturk.com"}
    first = client.post(f"/api/v1/studies/{study}/assignments", json=body)
    with app_services(app).sessions() as session:
        session.execute(update(Study).values(status="paused"))
        session.commit()
    # A new worker is turned away...
    expect_error(client.post(f"/api/v1/studies/{study}/assignments",
                             json={**body, "worker_id": "WNEW", "assignment_id": "ANEW"}), 409, "study_paused")
    # ... the worker whose HIT is under way comes back to it (MTurk reloads the entry URL).
    again = client.post(f"/api/v1/studies/{study}/assignments", json=body)
    assert again.status_code in (200, 201), again.json
    assert again.json["assignment_id"] == first.json["assignment_id"]


def test_assignment_of_another_worker_is_forbidden(app, study, client):
    body = {"platform": "mturk", "worker_id": "WOWNER", "assignment_id": "ASHARED", "hit_id": "H",
            "turk_submit_to": "https://www.mturk.com"}
    client.post(f"/api/v1/studies/{study}/assignments", json=body)
    before = db_snapshot(app)
    expect_error(client.post(f"/api/v1/studies/{study}/assignments", json={**body, "worker_id": "WTHIEF"}),
                 403, "forbidden")
    assert db_snapshot(app) == before


# ---------------------------------------------------------------- HTTP-level errors

def test_huge_bodies_unknown_routes_and_methods(app, study, client):
    worker = WorkerClient(client, study)
    huge = b'{"padding": "' + b"x" * (2 << 20) + b'"}'
    before = db_snapshot(app)
    for url in (f"/api/v1/studies/{study}/assignments", f"/api/v1/assignments/{worker.assignment_id}/votes",
                f"/api/v1/assignments/{worker.assignment_id}/actions",
                f"/api/v1/assignments/{worker.assignment_id}/environment"):
        expect_error(client.post(url, headers=worker.headers, data=huge, content_type="application/json"),
                     413, "too_large")
    for url in ("/api/v1/nope", "/api/v1/assignments", f"/api/v1/assignments/{worker.assignment_id}/votes/1",
                "/api/v1/studies/demo"):
        response = client.get(url, headers=worker.headers)
        expect_error(response, 404, "not_found")
        assert response.mimetype == "application/json"
    expect_error(client.get(f"/api/v1/assignments/{worker.assignment_id}/votes", headers=worker.headers),
                 405, "method_not_allowed")
    expect_error(client.open("delete", f"/api/v1/assignments/{worker.assignment_id}/state", headers=worker.headers),
                 405, "method_not_allowed")
    # The response route takes the declared kinds only: another name is an unknown route, and the
    # assignment's other routes keep their methods.
    expect_error(client.post(f"/api/v1/assignments/{worker.assignment_id}/likert-answers", headers=worker.headers,
                             json={"rating": 3}), 404, "not_found")
    expect_error(client.post(f"/api/v1/assignments/{worker.assignment_id}/state", headers=worker.headers,
                             json={}), 405, "method_not_allowed")
    # A kind another paradigm declares: refused by the study's paradigm, as at a wrong stage.
    expect_error(client.post(f"/api/v1/assignments/{worker.assignment_id}/calibration", headers=worker.headers,
                             json={"card_width_px": 300, "card_height_px": 190, "refresh_intervals_ms": [16.7] * 60,
                                   "fullscreen": True}), 409, "wrong_stage")
    assert db_snapshot(app) == before
