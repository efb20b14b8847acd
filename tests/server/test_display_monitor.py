"""The display monitor's server half (server/paradigms/display_monitor.py): POST /display-events validated,
counted against the worker once per event, the worker turned away past [viewing] max_display_changes, the
rate limit, the remote-desktop hint from the environment's cues, and workers.csv's display columns."""
from __future__ import annotations

import csv
import io
import uuid

import pytest
from sqlalchemy import select

from server import exports
from server.models import Assignment, DisplayEvent, Worker
from server.paradigms.display_monitor import DISPLAY_CHANGED
from server.paradigms.remote_hint import remote_desktop_cues
from server.services import app_services

from .api_support import SpecClient, expect_error
from .conftest import SMALL_STUDY, WorkerClient, create_test_study

SECRET = "test-secret"
WINDOW = {"width": 1366, "height": 657, "dpr": 1.25}
SCREEN = {"width": 1536, "height": 864}


@pytest.fixture
def client(app):
    app.config["PROPAGATE_EXCEPTIONS"] = False
    return SpecClient(app.test_client())


@pytest.fixture
def limited_study(app, demo_stimuli, tmp_path) -> str:
    """The small demo study with [viewing] max_display_changes = 2."""
    return create_test_study(app, demo_stimuli, tmp_path, slug="limited", **SMALL_STUDY,
                             viewing={"max_display_changes": 2})


def _post(client, worker, body):
    return client.post(f"/api/v1/assignments/{worker.assignment_id}/display-events", headers=worker.headers,
                       json=body)


def _pause(change="zoom", event_id=None):
    return {"event_id": event_id or str(uuid.uuid4()), "event": "paused", "change": change, "window": WINDOW,
            "screen": SCREEN}


def _resume(paused_ms, event_id=None):
    return {"event_id": event_id or str(uuid.uuid4()), "event": "resumed", "paused_ms": paused_ms,
            "window": WINDOW, "screen": SCREEN}


def _worker_row(app, worker) -> Worker:
    with app_services(app).sessions() as session:
        return session.scalar(select(Worker).where(Worker.external_id == worker.worker_id))


def test_pauses_are_counted_once_and_turn_the_worker_away_past_the_limit(app, limited_study, client):
    worker = WorkerClient(client, limited_study)
    worker.start()
    first = _pause("zoom")
    answer = _post(client, worker, first)
    assert answer.status_code == 201
    assert answer.json == {"display_changes": 1, "max_display_changes": 2, "paused_seconds": 0.0, "stage": "quiz"}
    # A retry of the same event (a lost answer) is counted once.
    again = _post(client, worker, first)
    assert again.status_code == 200 and again.json["display_changes"] == 1
    assert _post(client, worker, _resume(2500)).json["paused_seconds"] == 2.5
    assert _post(client, worker, _pause("screen")).json["display_changes"] == 2
    assert _post(client, worker, _resume(1250)).json["paused_seconds"] == 3.75
    assert worker.state()["stage"] == "quiz"  # at the limit: still working

    # The third change is one past the limit: turned away (stopped), with the worker-facing reason.
    past = _post(client, worker, _pause("window"))
    assert past.status_code == 201 and past.json["stage"] == "stopped" and past.json["display_changes"] == 3
    state = worker.state()
    assert state["stage"] == "stopped" and "changed during the task more often" in state["message"]
    row = _worker_row(app, worker)
    assert (row.status, row.display_changes, row.paused_ms) == ("stopped", 3, 3750)
    # Nothing new once the assignment ended; a retry of a stored event is still answered.
    expect_error(_post(client, worker, _pause()), 409, "assignment_ended")
    assert _post(client, worker, first).status_code == 200
    with app_services(app).sessions() as session:
        events = session.scalars(select(DisplayEvent).where(
            DisplayEvent.assignment_id == int(worker.assignment_id)).order_by(DisplayEvent.id)).all()
    assert [(e.event, e.change, e.paused_ms) for e in events] == [
        ("paused", "zoom", 0), ("resumed", None, 2500), ("paused", "screen", 0), ("resumed", None, 1250),
        ("paused", "window", 0)]
    assert events[0].window == WINDOW and events[0].screen == SCREEN
    assert DISPLAY_CHANGED == "display_changed"


def test_the_default_limit_and_minus_one_never_turn_away(app, study, demo_stimuli, tmp_path, client):
    worker = WorkerClient(client, study)
    answers = [_post(client, worker, _pause()).json for _ in range(4)]
    assert [a["stage"] for a in answers] == ["consent"] * 3 + ["stopped"]  # default 3
    assert answers[0]["max_display_changes"] == 3

    never = create_test_study(app, demo_stimuli, tmp_path, slug="never", **SMALL_STUDY,
                              viewing={"max_display_changes": -1})
    patient = WorkerClient(client, never)
    assert {_post(client, patient, _pause()).json["stage"] for _ in range(8)} == {"consent"}
    assert _worker_row(app, patient).display_changes == 8


@pytest.mark.one_database
@pytest.mark.parametrize("body, mentions", [
    ({"event": "paused", "change": "zoom"}, "event_id"),
    ({"event_id": "short", "event": "paused", "change": "zoom"}, "event_id"),
    ({"event_id": "a" * 65, "event": "paused", "change": "zoom"}, "event_id"),
    ({"event_id": "abcdefgh", "event": "moved", "change": "zoom"}, "event"),
    ({"event_id": "abcdefgh", "event": "paused"}, "change"),
    ({"event_id": "abcdefgh", "event": "paused", "change": "colour"}, "change"),
    ({"event_id": "abcdefgh", "event": "paused", "change": "zoom", "paused_ms": 10}, "paused_ms"),
    ({"event_id": "abcdefgh", "event": "resumed"}, "paused_ms"),
    ({"event_id": "abcdefgh", "event": "resumed", "paused_ms": -1}, "paused_ms"),
    ({"event_id": "abcdefgh", "event": "resumed", "paused_ms": 86_400_001}, "paused_ms"),
    ({"event_id": "abcdefgh", "event": "resumed", "paused_ms": 1.5}, "paused_ms"),
    ({"event_id": "abcdefgh", "event": "resumed", "paused_ms": 5, "change": "zoom"}, "change"),
    ({"event_id": "abcdefgh", "event": "paused", "change": "zoom", "window": {"width": 0}}, "window"),
    ({"event_id": "abcdefgh", "event": "paused", "change": "zoom", "window": {"dpr": 99}}, "window.dpr"),
    ({"event_id": "abcdefgh", "event": "paused", "change": "zoom", "extra": 1}, "extra"),
])
def test_malformed_events_are_refused_and_count_nothing(app, study, client, body, mentions):
    worker = WorkerClient(client, study)
    expect_error(_post(client, worker, body), 400, "invalid_request", mentions)
    assert _worker_row(app, worker).display_changes == 0


@pytest.mark.one_database
def test_another_assignments_token_is_refused(app, study, client):
    worker, other = WorkerClient(client, study), WorkerClient(client, study)
    response = client.post(f"/api/v1/assignments/{worker.assignment_id}/display-events", headers=other.headers,
                           json=_pause())
    expect_error(response, 403, "bad_token")


@pytest.mark.one_database
def test_display_events_are_rate_limited(app, study, client):
    app.config["SERVER"].update(display_events_per_minute=1, display_events_burst=2)
    worker = WorkerClient(client, study)
    codes = [_post(client, worker, _resume(10)).status_code for _ in range(3)]
    assert codes == [201, 201, 429]


def test_remote_desktop_cues_are_recorded_and_exported_never_refused(app, study, client, admin):
    remote, plain, silent = WorkerClient(client, study), WorkerClient(client, study), WorkerClient(client, study)
    environment = {"window": WINDOW, "screen": SCREEN, "user_agent": "Mozilla/5.0 test"}
    cues = {"color_depth": 16, "reduced_motion": True, "forced_colors": False,
            "renderer": "ANGLE (Microsoft Basic Render Driver)"}
    for worker, display in ((remote, cues), (plain, {"color_depth": 24, "reduced_motion": False,
                                                     "renderer": "ANGLE (NVIDIA GeForce RTX 3060)"})):
        response = client.post(f"/api/v1/assignments/{worker.assignment_id}/environment", headers=worker.headers,
                               json={**environment, "display": display})
        assert response.status_code == 204
    response = client.post(f"/api/v1/assignments/{silent.assignment_id}/environment", headers=silent.headers,
                           json=environment)
    assert response.status_code == 204
    bad = client.post(f"/api/v1/assignments/{plain.assignment_id}/environment", headers=plain.headers,
                      json={**environment, "display": {"color_depth": "16"}})
    expect_error(bad, 400, "invalid_request", "display.color_depth")
    with app_services(app).sessions() as session:
        stored = session.get(Assignment, int(remote.assignment_id)).environment
    assert remote_desktop_cues(stored) == ["low_colour_depth", "reduced_motion", "virtual_renderer"]
    # The hint never turns anyone away: the remote worker walks on.
    assert remote.action("consent").status_code == 200

    assert _post(client, plain, _pause("screen")).status_code == 201
    assert _post(client, plain, _resume(4321)).status_code == 201
    download = admin.get(f"/admin/studies/{study}/workers.csv")
    rows = {r["worker_id"]: r for r in csv.DictReader(io.StringIO(download.get_data(as_text=True)))}
    salt = exports.study_salt(SECRET, study)
    row = {w: rows[exports.pseudonym(salt, w.worker_id)] for w in (remote, plain, silent)}
    assert row[remote]["remote_desktop_hint"] == "low_colour_depth;reduced_motion;virtual_renderer"
    assert (row[plain]["display_changes"], row[plain]["paused_seconds"], row[plain]["remote_desktop_hint"]) == \
        ("1", "4.321", "")
    assert (row[silent]["display_changes"], row[silent]["remote_desktop_hint"]) == ("0", "")
