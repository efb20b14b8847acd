"""Limits shared through Redis (server/limits.py, ``[server] redis_url``) on the real Redis: two app
instances (two server processes, or two hosts) share one entry limit, admission gate, login throttle
and per-assignment request rate; a restart forgets nothing; each Lua script decides exactly as the
in-process class it stands for; a Redis that cannot be reached leaves the in-process limits working."""
from __future__ import annotations

import uuid

import numpy as np
import pytest

from server import auth
from server.limits import (RequestRate, SharedAdmissionGate, SharedEntryLimiter, SharedLoginThrottle,
                           SharedRequestRate, SharedStore)
from server.login_throttle import ACCOUNT, LoginThrottle
from server.paradigms.entry import AdmissionGate, EntryLimiter
from server.services import app_services

from .conftest import REDIS_URL, SMALL_STUDY, create_test_study, make_test_app


class FakeClock:
    def __init__(self, now: float = 1_800_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def _store(prefix: str, clock=None) -> SharedStore:
    return SharedStore(REDIS_URL, prefix, clock)


def _enter(app, slug: str, participant: str, address: str = "198.51.100.7"):
    client = app.test_client()
    client.environ_base["REMOTE_ADDR"] = address
    return client.post(f"/api/v1/studies/{slug}/assignments", json={"platform": "link", "worker_id": participant})


def _two_instances(database_url, tmp_path, redis_prefix, clock=None, **overrides):
    """Two apps over one database and one Redis prefix, as two server processes or hosts are."""
    settings = {"redis_url": REDIS_URL, "redis_prefix": redis_prefix, **overrides}
    if clock is not None:
        settings["clock"] = clock
    return [make_test_app(database_url, tmp_path / "instance", **settings) for _ in range(2)]


# ---------------------------------------------------------------- across instances and restarts

def test_two_instances_share_one_entry_limit_and_a_restart_forgets_nothing(database_url, tmp_path, demo_stimuli,
                                                                           redis_prefix):
    """No injected clock here: the scripts run on the Redis server's own clock (``TIME``)."""
    first, second = _two_instances(database_url, tmp_path, redis_prefix, entry_limit=3, entry_window_seconds=600)
    slug = create_test_study(first, demo_stimuli, tmp_path, **SMALL_STUDY)
    assert [_enter(app, slug, f"P{i}").status_code for i, app in enumerate((first, second, first))] == [201] * 3
    refused = _enter(second, slug, "P3")
    assert refused.status_code == 429 and refused.json["error"] == "rate_limited", refused.json
    assert 0 < int(refused.headers["Retry-After"]) <= 600
    assert _enter(first, slug, "P4", address="198.51.100.8").status_code == 201  # another address: its own count
    assert _enter(first, slug, "P0").status_code == 200  # a returning participant is never limited
    for app in (first, second):
        app_services(app).engine.dispose()
    restarted = make_test_app(database_url, tmp_path / "instance", redis_url=REDIS_URL, redis_prefix=redis_prefix,
                              entry_limit=3, entry_window_seconds=600)
    assert _enter(restarted, slug, "P5").status_code == 429  # the restart remembers the address's entries
    app_services(restarted).engine.dispose()
    # Without Redis each process counts alone, and a restart starts afresh (what redis_url is for).
    alone = make_test_app(database_url, tmp_path / "instance", entry_limit=3, entry_window_seconds=600)
    assert _enter(alone, slug, "P5").status_code == 201
    app_services(alone).engine.dispose()


def test_two_instances_share_one_admission_gate(database_url, tmp_path, demo_stimuli, redis_prefix, clock):
    first, second = _two_instances(database_url, tmp_path, redis_prefix, clock, admission_rate=1.0,
                                   admission_burst=1.0)
    slug = create_test_study(first, demo_stimuli, tmp_path, **SMALL_STUDY)
    assert _enter(first, slug, "P1").status_code == 201
    deferred = _enter(second, slug, "P2")  # a second process: its own bucket would have been full
    assert deferred.status_code == 429 and deferred.json["error"] == "busy"
    assert "[server] admission_rate" in deferred.json["setting"]
    clock.advance(seconds=1)
    assert _enter(second, slug, "P2").status_code == 201


def test_two_instances_share_one_login_throttle(database_url, tmp_path, redis_prefix, clock):
    first, second = _two_instances(database_url, tmp_path, redis_prefix, clock)
    for app in (first, second):
        with app.app_context():
            assert isinstance(auth.throttle(), SharedLoginThrottle)
    waits = []
    for i in range(ACCOUNT.free + 1):  # failures spread over both processes, from ever new addresses
        with (first, second)[i % 2].app_context():
            waits.append(auth.throttle().acquire("alice", f"203.0.113.{i}"))
    assert waits[:-1] == [0.0] * ACCOUNT.free and waits[-1] == ACCOUNT.delay(ACCOUNT.free)


def test_two_instances_share_one_request_rate_per_assignment(database_url, tmp_path, demo_stimuli, redis_prefix,
                                                              clock):
    first, second = _two_instances(database_url, tmp_path, redis_prefix, clock, state_requests_per_minute=6,
                                   state_requests_burst=4)
    slug = create_test_study(first, demo_stimuli, tmp_path, **SMALL_STUDY)
    entry = _enter(first, slug, "P1").json
    path = f"/api/v1/assignments/{entry['assignment_id']}/state"
    headers = {"Authorization": f"Bearer {entry['token']}"}
    codes = [(first, second)[i % 2].test_client().get(path, headers=headers).status_code for i in range(5)]
    assert codes == [200] * 4 + [429]
    clock.advance(seconds=10)  # 6 a minute: one more every 10 s
    assert second.test_client().get(path, headers=headers).status_code == 200


def test_state_and_environment_are_limited_per_assignment_in_process(database_url, tmp_path, demo_stimuli, clock):
    from server.config import load_config

    from .conftest import WorkerClient

    shipped = load_config({})["server"]  # the shipped rates, which make_test_app turns off for other tests
    app = make_test_app(database_url, tmp_path / "instance", clock=clock, **{
        key: shipped[key] for key in ("state_requests_per_minute", "state_requests_burst",
                                      "environment_posts_per_minute", "environment_posts_burst")})
    study = create_test_study(app, demo_stimuli, tmp_path, **SMALL_STUDY)
    first, second = WorkerClient(app.test_client(), study), WorkerClient(app.test_client(), study)
    environment = {"window": {"width": 1366, "height": 768, "dpr": 1}, "user_agent": "test"}
    post = lambda worker: worker.client.post(f"/api/v1/assignments/{worker.assignment_id}/environment",  # noqa: E731
                                             headers=worker.headers, json=environment)
    codes = [post(first).status_code for _ in range(11)]
    assert codes == [204] * 10 + [429]  # environment_posts_burst = 10 (the shipped default)
    refused = post(first)
    assert refused.json["error"] == "too_many_requests" and int(refused.headers["Retry-After"]) == 10
    assert "environment_posts_per_minute" in refused.json["setting"]
    assert post(second).status_code == 204  # another assignment: its own allowance
    clock.advance(seconds=10)  # 6 a minute: one more every 10 s
    assert post(first).status_code == 204
    state = lambda worker: worker.client.get(f"/api/v1/assignments/{worker.assignment_id}/state",  # noqa: E731
                                             headers=worker.headers).status_code
    assert [state(first) for _ in range(21)] == [200] * 20 + [429]  # state_requests_burst = 20
    clock.advance(seconds=1)  # 60 a minute: one more every second
    assert state(first) == 200
    app_services(app).engine.dispose()


# ---------------------------------------------------------------- the scripts decide as the classes do

def test_the_entry_script_decides_as_the_entry_limiter(redis_prefix):
    rng, clock = np.random.default_rng(3), FakeClock()
    local = EntryLimiter(4, 60.0, clock)
    shared = SharedEntryLimiter(_store(redis_prefix, clock), EntryLimiter(4, 60.0, clock))
    for _ in range(300):
        clock.now += float(rng.exponential(4.0))
        address, count = f"10.0.0.{rng.integers(3)}", bool(rng.random() < 0.8)
        assert shared.admit(address, count=count) == pytest.approx(local.admit(address, count=count), abs=1e-5)


def test_the_admission_script_decides_as_the_admission_gate(redis_prefix):
    rng, clock = np.random.default_rng(4), FakeClock()
    local = AdmissionGate(4.0, 2.0, clock)
    shared = SharedAdmissionGate(_store(redis_prefix, clock), AdmissionGate(4.0, 2.0, clock))
    decisions = []
    for _ in range(300):
        clock.now += float(rng.exponential(0.2))
        decisions.append((shared.admit(), local.admit()))
    got, expected = np.array(decisions).T
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert (expected > 0).sum() > 50 and (expected == 0).sum() > 50  # both outcomes were exercised


def test_the_login_script_decides_as_the_login_throttle(redis_prefix):
    rng, clock = np.random.default_rng(5), FakeClock()
    local = LoginThrottle(clock)
    shared = SharedLoginThrottle(_store(redis_prefix, clock), LoginThrottle(clock))
    refused = 0
    for _ in range(600):
        clock.now += float(rng.exponential(3.0))
        username = ["alice", "bob", "Alice", *[f"user{k}" for k in range(6)]][rng.integers(9)]
        client = ["192.0.2.1", "192.0.2.2", "2001:db8::1", "2001:db8::2"][rng.integers(4)]
        device = None if rng.random() < 0.8 else f"device{rng.integers(2)}"
        if rng.random() < 0.15:
            shared.succeeded(username, client, device)
            local.succeeded(username, client, device)
            continue
        wait = local.acquire(username, client, device)
        assert shared.acquire(username, client, device) == pytest.approx(wait, abs=1e-5), (username, client, device)
        refused += wait > 0
    assert refused > 50


def test_the_rate_script_decides_as_the_request_rate(redis_prefix):
    rng, clock = np.random.default_rng(6), FakeClock()
    local = RequestRate(30.0, 5.0, clock)
    shared = SharedRequestRate(_store(redis_prefix, clock), RequestRate(30.0, 5.0, clock), "state")
    refused = 0
    for _ in range(400):
        clock.now += float(rng.exponential(0.5))
        key = str(rng.integers(2))
        wait = local.admit(key)
        assert shared.admit(key) == pytest.approx(wait, abs=1e-5)
        refused += wait > 0
    assert refused > 30


def test_an_unreachable_redis_leaves_the_in_process_limits_working(caplog):
    clock = FakeClock()
    store = SharedStore("redis://127.0.0.1:1/0", "perceptlab-test:down:", clock)  # nothing listens on port 1
    limiter = SharedEntryLimiter(store, EntryLimiter(2, 60.0, clock))
    assert [limiter.admit("10.0.0.1") for _ in range(3)][:2] == [0.0, 0.0]
    assert limiter.admit("10.0.0.1") > 0  # counted in this process meanwhile
    assert sum("unreachable" in record.getMessage() for record in caplog.records) == 1  # said once, not per request


def test_keys_expire_with_the_counts_they_hold(redis_prefix):
    import redis

    store = _store(redis_prefix)
    SharedEntryLimiter(store, EntryLimiter(5, 30.0)).admit("10.0.0.9")
    SharedRequestRate(store, RequestRate(60.0, 3.0), "state").admit("42")
    connection = redis.Redis.from_url(REDIS_URL)
    keys = list(connection.scan_iter(match=redis_prefix + "*"))
    assert len(keys) == 2
    assert all(0 < connection.pttl(key) <= 31_000 for key in keys)
    assert uuid.UUID(redis_prefix.split(":")[1])  # the fixture's prefix: nothing outside it was touched
