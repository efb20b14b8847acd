"""Every bad input gets a JSON 4xx and stores nothing (issue 12, item 3), on SQLite and PostgreSQL.

One test per case the adversarial tester found (each was a 500, or was stored): deeply nested
JSON, NUL and lone surrogates in ``client_time``, ``NaN``/``Infinity`` (and overflowing numbers)
in the environment's ``dpr``, a non-ASCII CSRF token, negative or huge window sizes, and a
calibration whose refresh intervals give ``refresh_hz = inf``. Each request goes through the
spec-checking client of ``test_api`` where it can, and each test compares every table before and
after (:func:`~tests.server.api_support.db_snapshot`).
"""
from __future__ import annotations

import json
import re
import uuid

import pytest
from sqlalchemy import select

from server.models import Assignment, Calibration, MotionResponse, Vote
from server.services import app_services
from server.validation import MAX_JSON_DEPTH, JsonBodyError, json_depth, loads_strict

from .api_support import SpecClient, db_snapshot, expect_error
from .conftest import WorkerClient
from .motion_support import MotionWorker, frame_log, vector_fields


def strict_json(data: bytes):
    """Parse as a browser's ``JSON.parse`` would: ``NaN``/``Infinity`` are not JSON."""
    def refuse(literal):
        raise ValueError(f"{literal} is not JSON")
    return json.loads(data, parse_constant=refuse)


@pytest.fixture
def client(app):
    app.config["PROPAGATE_EXCEPTIONS"] = False  # a server error reaches the test as a 500, not an exception
    return SpecClient(app.test_client())


def _at_quiz(client, study) -> tuple[WorkerClient, str]:
    """A worker at the quiz, and one of its open trials (votes are accepted there)."""
    worker = WorkerClient(client, study)
    state = worker.start()
    return worker, state["page"]["trials"][0]["trial_id"]


def _vote(trial_id: str, **changes) -> dict:
    return {"vote_id": str(uuid.uuid4()), "trial_id": trial_id, "choice": "left", "rt_ms": 812.5,
            "input": "mouse", "client_time": "2026-11-21T10:00:00.000Z",
            "window": {"width": 1366, "height": 657, "dpr": 1}, **changes}


def _raw(client, url: str, headers: dict, data: str | bytes):
    """POST a hand-written JSON text (the test client's ``json=`` could not write it)."""
    return client.post(url, headers=headers, data=data, content_type="application/json")


def _motion_at_rdk(app, slug: str) -> tuple[MotionWorker, dict]:
    worker = MotionWorker(app, slug)
    worker.start()
    assert worker.calibrate().status_code == 200
    return worker, worker.state()["trials"][0]


# ---------------------------------------------------------------- the parser itself

def test_depth_is_measured_without_recursion_and_ignores_brackets_in_strings():
    assert json_depth('{"a": [1, {"b": "[[[[{{{{"}]}') == 3
    assert json_depth('"\\"[[[["') == 0
    nested = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert loads_strict(nested.encode()) is not None
    too_deep = "[" * 50_000 + "]" * 50_000
    assert json_depth(too_deep) == 50_000
    with pytest.raises(JsonBodyError, match="nested deeper"):
        loads_strict(too_deep.encode())
    with pytest.raises(JsonBodyError, match="nested deeper"):
        loads_strict(b'{"a":' * 50_000 + b"1" + b"}" * 50_000)
    # An unterminated string counts to the end of the text in one pass. (A scanner that retried
    # from every later quote took hours on this megabyte; the suite's timeout would catch it.)
    assert json_depth('[["abc') == 2
    with pytest.raises(JsonBodyError, match="not valid JSON"):
        loads_strict(b'"' + b'\\"' * 500_000)


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e999", "-1e400", "1" * 30,
                                     str(2**63)])
def test_non_finite_and_overflowing_numbers_are_refused_and_named(literal):
    with pytest.raises(JsonBodyError, match="dpr"):
        loads_strict(f'{{"window": {{"dpr": {literal}}}}}'.encode())
    assert loads_strict(f'{{"dpr": {2**63 - 1}, "x": 1e308}}'.encode()) == {"dpr": 2**63 - 1, "x": 1e308}


def test_nul_and_lone_surrogates_are_refused_but_pairs_and_text_pass():
    for text in ('"a\\u0000b"', '"\\ud800"', '"x\\udfffy"', '{"\\ud800": 1}', '["ok", ["\\uDBFF"]]'):
        with pytest.raises(JsonBodyError, match="NUL|surrogate"):
            loads_strict(text.encode())
    assert loads_strict('"\\ud83d\\ude00 caf\\u00e9 \\\\ud800"'.encode()) == "\U0001F600 café \\ud800"
    with pytest.raises(JsonBodyError, match="UTF-8"):
        loads_strict(b'"\xed\xa0\x80"')  # a surrogate encoded in (invalid) UTF-8


def test_responses_never_carry_nan_or_infinity(app):
    with app.app_context():
        with pytest.raises(ValueError):
            app.json.dumps({"refresh_hz": float("inf")})
        assert app.json.dumps({"refresh_hz": 60.0}) == '{"refresh_hz": 60.0}'


# ---------------------------------------------------------------- over the API

def test_deeply_nested_json_is_a_400_on_every_endpoint(app, study, client):
    worker, _ = _at_quiz(client, study)
    base = f"/api/v1/assignments/{worker.assignment_id}"
    # As deep as fits the worker API's 64 kB (a larger body is refused unread: test_request_bodies.py)
    bodies = {"list": "[" * 32_000 + "]" * 32_000, "object": '{"a":' * 10_000 + "1" + "}" * 10_000,
              "in a field": '{"action": ' + "[" * 10_000 + "]" * 10_000 + "}"}
    before = db_snapshot(app)
    for url, headers in ((f"/api/v1/studies/{study}/assignments", {}), (f"{base}/actions", worker.headers),
                         (f"{base}/environment", worker.headers), (f"{base}/votes", worker.headers),
                         (f"{base}/calibration", worker.headers), (f"{base}/motion-responses", worker.headers)):
        for label, body in bodies.items():
            response = _raw(client, url, headers, body)
            expect_error(response, 400, "invalid_request", "nested deeper")
    assert db_snapshot(app) == before


def test_bad_client_time_of_a_vote_is_a_400_and_stores_nothing(app, study, client):
    worker, trial_id = _at_quiz(client, study)
    url = f"/api/v1/assignments/{worker.assignment_id}/votes"
    before = db_snapshot(app)
    for client_time in ("2026-11-21T10:00:00\u0000Z", "\ud800", "2026-11-21\udc00", "2026-11-21T10:00:00Z\n",
                        "Tuesday", "٢٠٢٦-11-21T10:00:00Z"):
        # json.dumps escapes NUL and lone surrogates as \u0000 and \ud800: exactly what a script would send.
        response = _raw(client, url, worker.headers, json.dumps(_vote(trial_id, client_time=client_time)))
        expect_error(response, 400, "invalid_request", ("client_time", "NUL", "surrogate"))
    assert db_snapshot(app) == before
    good = client.post(url, headers=worker.headers, json=_vote(trial_id))
    assert good.status_code == 201
    with app_services(app).sessions() as session:
        assert session.scalar(select(Vote.client_time)) == "2026-11-21T10:00:00.000Z"


def test_bad_client_time_of_a_motion_response_is_a_400_and_stores_nothing(app, motion_study):
    worker, trial = _motion_at_rdk(app, motion_study)
    body = {"response_id": str(uuid.uuid4()), "trial_id": trial["trial_id"], **vector_fields(1.0, -0.5),
            "cycles": 3, "rt_ms": 2500.0, "frames": frame_log(trial["movie_frames"])}
    before = db_snapshot(app)
    for client_time in ("\u0000", "\ud800", "x\udbff", "2026-11-21T10:00:00Z\u0085"):
        response = _raw(worker.client, worker.url("motion-responses"), worker.headers,
                        json.dumps({**body, "client_time": client_time}))
        expect_error(response, 400, "invalid_request", ("client_time", "NUL", "surrogate"))
    assert db_snapshot(app) == before
    body["client_time"] = "2026-11-21T10:00:00.000Z"
    assert worker.client.post(worker.url("motion-responses"), headers=worker.headers, json=body).status_code == 201
    with app_services(app).sessions() as session:
        assert session.scalar(select(MotionResponse.client_time)) == "2026-11-21T10:00:00.000Z"


def test_environment_dpr_must_be_finite_and_physical(app, study, client):
    worker = WorkerClient(client, study)
    url = f"/api/v1/assignments/{worker.assignment_id}/environment"
    before = db_snapshot(app)
    for literal in ("NaN", "Infinity", "-Infinity", "1e999", "0", "-2", "25", "0.01"):
        body = '{"window": {"width": 1366, "height": 657, "dpr": %s}, "user_agent": "UA"}' % literal
        expect_error(_raw(client, url, worker.headers, body), 400, "invalid_request", "dpr")
    assert db_snapshot(app) == before
    assert client.post(url, headers=worker.headers, json={"window": {"width": 1366, "height": 657, "dpr": 1.25},
                                                           "user_agent": "UA"}).status_code == 204


def test_negative_or_huge_window_sizes_are_refused(app, study, client):
    worker, trial_id = _at_quiz(client, study)
    base = f"/api/v1/assignments/{worker.assignment_id}"
    before = db_snapshot(app)
    for member, value in (("window.width", -1366), ("window.height", 0), ("window.width", 10**9),
                          ("screen.width", -1), ("screen.height", 2**62), ("window.width", 1366.5)):
        part, key = member.split(".")
        environment = {"window": {"width": 1366, "height": 657, "dpr": 1}, "screen": {"width": 1920, "height": 1080}}
        environment[part][key] = value
        expect_error(client.post(f"{base}/environment", headers=worker.headers, json=environment), 400,
                     "invalid_request", member)
        if part == "window":
            vote = _vote(trial_id, window=environment["window"])
            expect_error(client.post(f"{base}/votes", headers=worker.headers, json=vote), 400, "invalid_request",
                         member)
    assert db_snapshot(app) == before
    with app_services(app).sessions() as session:
        assert session.get(Assignment, int(worker.assignment_id)).environment is None


def test_control_characters_in_user_agent_and_entry_fields_are_refused(app, study, client):
    worker = WorkerClient(client, study)
    before = db_snapshot(app)
    expect_error(client.post(f"/api/v1/assignments/{worker.assignment_id}/environment", headers=worker.headers,
                             json={"user_agent": "Mozilla/5.0\u0007"}), 400, "invalid_request", "user_agent")
    entry = {"platform": "mturk", "worker_id": "WNUL", "assignment_id": "ANUL", "hit_id": "HNUL",
             "turk_submit_to": "https://www.mturk.com\u0000"}
    expect_error(_raw(client, f"/api/v1/studies/{study}/assignments", {}, json.dumps(entry)), 400,
                 "invalid_request", ("turk_submit_to", "NUL"))
    entry = {"platform": "link", "worker_id": "P\u0000"}
    expect_error(_raw(client, f"/api/v1/studies/{study}/assignments", {}, json.dumps(entry)), 400,
                 "invalid_request", ("worker_id", "NUL"))
    assert db_snapshot(app) == before


def test_calibration_with_impossible_refresh_intervals_is_refused_and_state_stays_json(app, motion_study):
    worker = MotionWorker(app, motion_study)
    worker.start()
    before = db_snapshot(app)
    for interval in (5e-324, 1e-6, 0.5, "NaN", "1e999", 20_000):
        intervals = ", ".join([str(interval)] * 60)
        body = ('{"card_width_px": 323.5, "card_height_px": 204.0, "fullscreen": true, '
                f'"refresh_intervals_ms": [{intervals}]}}')
        expect_error(_raw(worker.client, worker.url("calibration"), worker.headers, body), 400, "invalid_request",
                     "refresh_intervals_ms")
    assert db_snapshot(app) == before
    state = worker.client.get(worker.url("state"), headers=worker.headers)
    assert strict_json(state.data)["stage"] == "calibration" and strict_json(state.data)["calibration"] is None
    # A real display still calibrates, and /state stays strict JSON with a finite refresh rate.
    assert worker.calibrate().status_code == 200
    state = strict_json(worker.client.get(worker.url("state"), headers=worker.headers).data)
    assert state["calibration"]["refresh_hz"] == pytest.approx(60, abs=0.1)


def test_throttled_tab_below_20_hz_is_a_refused_display_with_finite_figures(app, motion_study):
    """Too slow is a real measurement (a background tab): the display is refused, not the request."""
    worker = MotionWorker(app, motion_study)
    worker.start()
    response = worker.calibrate(interval_ms=1000 / 8, jitter=0)
    assert response.status_code == 200 and not response.json["accepted"]
    assert "at least 55" in response.json["reason"]
    state = strict_json(worker.client.get(worker.url("state"), headers=worker.headers).data)
    assert state["stage"] == "disqualified" and state["calibration"]["refresh_hz"] == pytest.approx(8)


def test_calibration_sizes_must_be_physical(app, motion_study):
    worker = MotionWorker(app, motion_study)
    worker.start()
    before = db_snapshot(app)
    for field, value in (("card_width_px", -5), ("card_height_px", 1e6), ("device_pixel_ratio", 0),
                         ("window_width", 100_000), ("screen_height", -1)):
        expect_error(worker.calibrate(**{field: value}), 400, "invalid_request", field)
    assert db_snapshot(app) == before


def test_motion_response_numbers_and_frame_logs_must_be_finite_and_bounded(app, motion_study):
    worker, trial = _motion_at_rdk(app, motion_study)
    frames = frame_log(trial["movie_frames"])
    body = {"response_id": str(uuid.uuid4()), "trial_id": trial["trial_id"], **vector_fields(1.0, -0.5),
            "cycles": 3, "rt_ms": 2500.0, "frames": frames, "window_width": 1366}
    before = db_snapshot(app)
    for field, literal in (("rt_ms", "1" + "0" * 400), ("resp_u", "NaN"), ("rt_ms", "-1"), ("window_width", "-3"),
                           ("device_pixel_ratio", "Infinity"), ("trial_id", str(2**64))):
        text = json.dumps({**body, field: "__X__"}).replace('"__X__"', literal)
        expect_error(_raw(worker.client, worker.url("motion-responses"), worker.headers, text), 400,
                     "invalid_request", field)
    last = frames[-1]["t"][-1]
    for stamp in ("1e300", "-1", "NaN", "1e11"):
        text = json.dumps(body).replace(repr(last), stamp, 1)
        assert stamp in text
        expect_error(_raw(worker.client, worker.url("motion-responses"), worker.headers, text), 400,
                     "invalid_request", ("frames[", "t: "))
    assert db_snapshot(app) == before
    with app_services(app).sessions() as session:
        assert session.scalar(select(Calibration.refresh_hz)) == pytest.approx(60, abs=0.1)


def test_non_ascii_csrf_token_is_a_400_not_a_500(app):
    client = app.test_client()
    app.config["PROPAGATE_EXCEPTIONS"] = False
    client.get("/admin/login")  # the session gets its CSRF token
    before = db_snapshot(app)
    for token in ("é", "ü" * 43, "€uro", "\u0000", "x" * 5000):
        response = client.post("/admin/login", data={"username": "alice", "password": "x" * 12, "csrf_token": token})
        assert response.status_code == 400, token
    for token in ("é", "ü" * 43, "\xff\xfe"):  # HTTP headers travel as latin-1
        response = client.post("/admin/login", headers={"X-CSRF-Token": token}, data={"username": "alice"})
        assert response.status_code == 400, token
    response = client.post("/admin/api/studies/x/refresh", headers={"X-CSRF-Token": "é"})
    assert response.status_code == 400 and response.json["error"] == "invalid_request"
    assert db_snapshot(app) == before


def test_nul_in_the_login_username_is_a_refusal_not_a_500(app):
    client = app.test_client()
    app.config["PROPAGATE_EXCEPTIONS"] = False
    html = client.get("/admin/login").get_data(as_text=True)
    token = re.search(r'name="csrf_token" value="([^"]+)"', html).group(1)
    before = db_snapshot(app)
    for username in ("al\u0000ice", "é\u007f", "x" * 500):
        response = client.post("/admin/login", data={"username": username, "password": "x" * 12,
                                                      "csrf_token": token})
        assert 400 <= response.status_code < 500, (username, response.status_code)
    assert db_snapshot(app) == before
