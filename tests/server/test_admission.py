"""The admission rate: a burst of new workers is let in a few at a time (429 ``busy`` + Retry-After,
a waiting room on the HTML entry), deferred workers are told successive times, nothing is stored for
a deferred entry, and workers who already have an assignment are never deferred.

Time moves only by the injected clock: nothing sleeps.
"""
from __future__ import annotations

import pytest
from sqlalchemy import func, select

from server.models import Assignment, Worker
from server.paradigms.entry import AdmissionGate
from server.services import app_services

from .allocation_support import SMALL, Client, token_of
from .conftest import create_test_study, make_test_app


def _gate_decisions(make_gate, now: list[float]) -> None:
    """The decisions every admission gate makes (4 tokens a second, 2 at once), clock at ``now[0]``."""
    gate = make_gate()
    assert [gate.admit(), gate.admit()] == [0.0, 0.0]  # the burst
    waits = [gate.admit() for _ in range(3)]  # told 1, 2 and 3 refills from now
    assert waits == pytest.approx([0.25, 0.5, 0.75])
    now[0] += 0.25
    assert gate.admit() == 0.0  # the first promised refill is there
    assert gate.admit() == pytest.approx(0.75)  # behind those already promised (0.5 and 0.75 from the start)
    now[0] += 10.0  # a quiet spell refills the bucket up to its burst, not beyond
    assert [gate.admit(), gate.admit()] == [0.0, 0.0]
    assert gate.admit() == pytest.approx(0.25)  # promises long past do not push new ones back


def test_gate_admits_its_burst_then_one_per_refill_and_spreads_the_deferred():
    now = [1000.0]
    _gate_decisions(lambda: AdmissionGate(rate=4.0, burst=2.0, clock=lambda: now[0]), now)
    assert AdmissionGate(rate=0, clock=lambda: 0.0).admit() == 0.0  # 0 = no limit


@pytest.fixture
def gated_app(database_url, tmp_path, clock):
    """An app that admits one new worker per second, one at a time."""
    app = make_test_app(database_url, tmp_path / "gated", clock=clock, admission_rate=1.0, admission_burst=1.0)
    yield app
    app_services(app).engine.dispose()


def _rows(app) -> tuple[int, int]:
    with app_services(app).sessions() as session:
        return (session.scalar(select(func.count()).select_from(Worker)),
                session.scalar(select(func.count()).select_from(Assignment)))


def test_a_burst_of_new_workers_waits_and_returning_workers_do_not(gated_app, demo_stimuli, tmp_path, clock):
    app = gated_app
    slug = create_test_study(app, demo_stimuli, tmp_path, slug="gated", **SMALL)
    client = Client(app, "198.51.100.7")
    first = token_of(client.page(f"/s/{slug}?participant=P-0"))
    stored = _rows(app)

    waiting = client.page(f"/s/{slug}?participant=P-1")  # the HTML entry: a waiting room
    assert waiting.status_code == 429 and waiting.headers["Retry-After"] == "1"
    html = waiting.get_data(as_text=True)
    assert 'id="waiting"' in html and 'data-retry-ms="1000"' in html and "waiting_room.js" in html
    deferred = client.enter(slug, platform="link", worker_id="P-2")  # the JSON entry, told a later time
    assert deferred.status_code == 429 and deferred.json["error"] == "busy"
    assert deferred.headers["Retry-After"] == "2" and deferred.json["retry_after_s"] == pytest.approx(2.0)
    assert _rows(app) == stored  # a deferred entry stores nothing

    # A reload of an admitted worker's link is never deferred, however busy the gate.
    assert token_of(client.page(f"/s/{slug}?participant=P-0")) == first
    assert client.enter(slug, platform="link", worker_id="P-0").status_code == 200

    clock.advance(seconds=1)
    token_of(client.page(f"/s/{slug}?participant=P-1"))  # back when told: admitted
    assert client.enter(slug, platform="link", worker_id="P-2").status_code == 429  # its time is not yet
    clock.advance(seconds=1)
    assert client.enter(slug, platform="link", worker_id="P-2").status_code == 201
    assert _rows(app) == (stored[0] + 2, stored[1] + 2)


def test_the_admission_rate_is_off_at_zero_and_on_by_default(database_url, tmp_path, clock, demo_stimuli):
    from server.config import load_config

    assert load_config({})["server"]["admission_rate"] > 0  # shipped on: a posted HIT's burst must not stall votes
    app = make_test_app(database_url, tmp_path / "open", clock=clock, admission_rate=0)
    try:
        slug = create_test_study(app, demo_stimuli, tmp_path, slug="open", **SMALL)
        client = Client(app, "198.51.100.8")
        for k in range(6):
            token_of(client.page(f"/s/{slug}?participant=Q-{k}"))
    finally:
        app_services(app).engine.dispose()


def test_an_address_over_its_entry_limit_takes_no_admission_token(database_url, tmp_path, clock, demo_stimuli):
    """A script at one address, over its entry limit, retrying in a loop must not take the tokens that other
    newcomers wait for; and being deferred does not count against an address's limit."""
    app = make_test_app(database_url, tmp_path / "both", clock=clock, admission_rate=1.0, admission_burst=1.0,
                        entry_limit=1, entry_window_seconds=600)
    try:
        slug = create_test_study(app, demo_stimuli, tmp_path, slug="both", **SMALL)
        script, worker = Client(app, "198.51.100.20"), Client(app, "198.51.100.21")
        token_of(script.page(f"/s/{slug}?participant=S-0"))  # the script's one entry, and the gate's token
        assert worker.enter(slug, platform="link", worker_id="W-0").json["error"] == "busy"  # deferred ...
        clock.advance(seconds=1)
        for k in range(1, 6):  # ... while the script, over its limit, keeps asking
            refused = script.enter(slug, platform="link", worker_id=f"S-{k}")
            assert refused.status_code == 429 and refused.json["error"] == "rate_limited"
        # The token refilled for the worker is still there, and its deferral did not use up its address's one entry.
        assert worker.enter(slug, platform="link", worker_id="W-0").status_code == 201
    finally:
        app_services(app).engine.dispose()
