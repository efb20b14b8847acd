"""Worker API bodies (server/validation.py read_json_body): the token before the body, a size cap, one
parse per request, and the same refusal of short, chunked and duplicate-key bodies on both vote paths
(PostgreSQL: the fast lane below Flask, then Flask's view; SQLite: Flask's view alone)."""
from __future__ import annotations

import io
import json
import uuid

import pytest
from sqlalchemy import func, select

from server import validation
from server.models import Vote
from server.services import app_services

from .conftest import SMALL_STUDY, WorkerClient, create_test_study


def _votes(app) -> int:
    with app_services(app).sessions() as session:
        return session.scalar(select(func.count()).select_from(Vote))


@pytest.fixture
def worker(app, demo_stimuli, tmp_path):
    """A worker at the quiz with one vote stored (so the fast lane knows the study), and its next trial."""
    slug = create_test_study(app, demo_stimuli, tmp_path, **SMALL_STUDY)
    worker = WorkerClient(app.test_client(), slug)
    trials = worker.start()["page"]["trials"]
    assert worker.vote(trials[0]["trial_id"], worker.correct_side(trials[0])).status_code == 201
    return worker, trials[1]


def _body(trial: dict, **extra) -> dict:
    return {"vote_id": str(uuid.uuid4()), "trial_id": trial["trial_id"], "choice": "left", "rt_ms": 900.0,
            "input": "mouse", "client_time": "2026-11-28T10:00:00Z", **extra}


class CountingInput(io.BytesIO):
    """A request body that remembers how many bytes were read from it."""

    def __init__(self, data: bytes):
        super().__init__(data)
        self.taken = 0

    def read(self, size=-1):
        chunk = super().read(size)
        self.taken += len(chunk)
        return chunk


def _post(worker, raw: bytes, *, token: str | None = None, **environ):
    stream = CountingInput(raw)
    environ = {"wsgi.input": stream, "CONTENT_LENGTH": str(len(raw)), **environ}
    response = worker.client.post(f"/api/v1/assignments/{worker.assignment_id}/votes",
                                  headers={"Authorization": f"Bearer {token or worker.token}"},
                                  content_type="application/json", environ_overrides=environ)
    return response, stream


def test_a_bad_token_is_refused_before_a_byte_of_the_body_is_read(app, worker):
    worker, trial = worker
    raw = json.dumps(_body(trial, pad="x" * 60_000)).encode()
    response, stream = _post(worker, raw, token=worker.token[:-4] + "AAAA")
    assert response.status_code == 403 and response.json["error"] == "bad_token"
    assert stream.taken == 0


def test_a_body_over_64_kb_is_refused_unread_with_413(app, worker):
    worker, trial = worker
    raw = json.dumps(_body(trial, pad="x" * (64 << 10))).encode()
    response, stream = _post(worker, raw)
    assert response.status_code == 413 and response.json["error"] == "too_large", response.json
    assert str(validation.WORKER_BODY_BYTES) in response.json["message"]
    assert stream.taken == 0 and _votes(app) == 1


@pytest.mark.parametrize("case", ["short", "chunked", "duplicate key", "no length"])
def test_short_chunked_and_ambiguous_bodies_are_refused_alike_and_store_nothing(app, worker, case):
    worker, trial = worker
    raw = json.dumps(_body(trial)).encode()
    environ = {}
    if case == "short":  # the client announced 50 bytes more, then half-closed
        environ = {"CONTENT_LENGTH": str(len(raw) + 50)}
    elif case == "chunked":
        environ = {"CONTENT_LENGTH": "", "HTTP_TRANSFER_ENCODING": "chunked", "wsgi.input_terminated": True}
    elif case == "duplicate key":  # Python's json would keep the last "choice"; another reader the first
        raw = raw[:-1] + b', "choice": "right"}'
    elif case == "no length":
        environ = {"CONTENT_LENGTH": ""}
    response, _ = _post(worker, raw, **environ)
    expected = {"short": (400, "incomplete_body"), "chunked": (411, "length_required"),
                "duplicate key": (400, "invalid_request"), "no length": (411, "length_required")}[case]
    assert (response.status_code, response.json["error"]) == expected, response.json
    if case == "duplicate key":
        assert "'choice' is given twice" in response.json["message"]
    assert _votes(app) == 1
    assert worker.vote(trial["trial_id"], worker.correct_side(trial)).status_code == 201  # still open


def test_a_body_is_parsed_once_also_when_the_fast_lane_hands_it_to_flask(app, worker, monkeypatch):
    worker, trial = worker
    body = _body(trial)
    assert worker.client.post(f"/api/v1/assignments/{worker.assignment_id}/votes", headers=worker.headers,
                              json=body).status_code == 201
    parses = []
    real = validation.loads_strict
    monkeypatch.setattr(validation, "loads_strict", lambda data: parses.append(len(data)) or real(data))
    # A replay: on PostgreSQL the fast lane reads it, its statement declines, Flask's view answers.
    replay = worker.client.post(f"/api/v1/assignments/{worker.assignment_id}/votes", headers=worker.headers,
                                json=body)
    assert len(parses) == 1  # counted before reading the answer (the test client parses it with the same parser)
    assert replay.status_code == 200 and replay.json["status"] == "duplicate"
    parses.clear()
    bad = worker.client.post(f"/api/v1/assignments/{worker.assignment_id}/votes", headers=worker.headers,
                             json={**body, "vote_id": str(uuid.uuid4()), "choice": "middle"})
    assert len(parses) == 1 and bad.status_code == 400


def test_every_worker_endpoint_reads_its_body_with_the_same_rules(app, worker):
    worker, _ = worker
    raw = b'{"action": "consent", "action": "instructions_done"}'
    for path in ("actions", "environment"):
        response = worker.client.post(f"/api/v1/assignments/{worker.assignment_id}/{path}", headers=worker.headers,
                                      data=raw, content_type="application/json")
        assert response.status_code == 400 and "given twice" in response.json["message"], (path, response.json)
    big = json.dumps({"platform": "link", "worker_id": "P1", "pad": "x" * (64 << 10)})
    response = worker.client.post("/api/v1/studies/demo/assignments", data=big, content_type="application/json")
    assert response.status_code == 413 and response.json["error"] == "too_large"


def test_a_motion_response_may_carry_a_frame_log_larger_than_64_kb():
    from server.paradigms.core import response_kinds

    def body_limit(name: str) -> int:
        return response_kinds()[name][1].max_body

    assert body_limit("votes") == validation.WORKER_BODY_BYTES == 64 * 1024
    # 20,000 timestamps (the validated maximum) written as the browser rounds them (round3)
    log = json.dumps({"frames": [{"cycle": 1, "phase": "movie", "t": [123456.789] * 20_000}]})
    assert validation.WORKER_BODY_BYTES < len(log) < body_limit("motion-responses")
