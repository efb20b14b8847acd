"""Running scale estimates (server/paradigms/paired/live_scales.py), on SQLite and PostgreSQL."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from scipy.stats import spearmanr
from sqlalchemy import func, select

from server.paradigms.paired import live_scales
from server.models import Study, Worker
from server.paradigms.paired.models import ScaleSnapshot, Vote
from server.services import app_services

from .simulated_votes import QUALITY, add_votes


def _study_id(app, slug: str) -> int:
    with app_services(app).sessions() as session:
        return session.scalar(select(Study.id).where(Study.slug == slug))


def _compute(app, study_id: int, bootstrap: int = 40) -> dict:
    with app_services(app).sessions() as session:
        return live_scales.compute_snapshot(session, study_id, bootstrap=bootstrap, seed=0)


def _snapshot(app, study_id: int) -> ScaleSnapshot | None:
    with app_services(app).sessions() as session:
        return session.get(ScaleSnapshot, study_id)


def test_snapshot_leaves_out_workers_who_favour_one_item_and_says_why(app, study):
    """Two workers answer like the honest ones except that they always pick the worst item (zero_flow):
    screening keeps them (their TPR is high), the targeted-bias test leaves them out, and the snapshot
    says why; the worst item stays last."""
    study_id = _study_id(app, study)
    ids = add_votes(app, study, honest=8, biased=2)
    payload = _compute(app, study_id)
    with app_services(app).sessions() as session:
        raw = dict(session.execute(select(Worker.id, Worker.external_id)).all())
    workers = {raw[int(k)]: w for k, w in payload["workers"].items()}
    for worker_id in ids[8:]:
        assert workers[worker_id]["kept"] is False and workers[worker_id]["flags"] == "favours:zero_flow"
    assert all(workers[w]["kept"] and workers[w]["flags"] == "" for w in ids[:8])
    assert payload["screening"]["targeted_bias_workers"] == 2 and payload["screening"]["kept_workers"] == 8
    for record in payload["sets"]:
        assert {i["item_id"]: i["rank"] for i in record["items"]}["zero_flow"] == 11


def test_snapshot_ranks_items_sensibly(app, study):
    study_id = _study_id(app, study)
    add_votes(app, study, honest=8, random=3)
    payload = _compute(app, study_id)
    assert payload["error"] is None
    assert len(payload["sets"]) == 4
    for record in payload["sets"]:
        assert record["status"] == "ok" and record["connected"], record["message"]
        items = {i["item_id"]: i for i in record["items"]}
        assert set(items) == set(QUALITY)
        truth = [QUALITY[k] for k in items]
        scale = [items[k]["scale"] for k in items]
        assert spearmanr(truth, scale).statistic > 0.8
        assert items["true_flow"]["rank"] <= 2 and items["zero_flow"]["rank"] == 11
        for item in items.values():
            assert item["ci_low"] <= item["scale"] + 1e-9 <= item["ci_high"] + 2e-9
            # Votes of the kept workers (as in scales.csv): 6 pairs per item in the demo's degree-6 design.
            assert item["n_votes"] == 6 * payload["screening"]["kept_workers"]
    # Honest workers are kept; most random clickers are not.
    with app_services(app).sessions() as session:
        raw = dict(session.execute(select(Worker.id, Worker.external_id)).all())
    kept = {raw[int(k)]: w["kept"] for k, w in payload["workers"].items()}
    assert all(kept[f"SIM0X{k:03d}"] for k in range(8))
    assert sum(kept[f"SIM0X{k:03d}"] for k in range(8, 11)) <= 1
    assert payload["screening"]["rule"] == "auto"
    # The intervals say how they were made (the analysis's default method, as in summary.json).
    assert payload["intervals"] == {"method": "t", "confidence": 0.95, "n_boot": 40, "unit": "worker",
                                    "conditional_on_screening": True}
    # Stored, JSON-clean (no NaN), and stamped with the number of votes it saw.
    stored = _snapshot(app, study_id)
    assert stored.n_votes == 11 * 132  # each worker's 4 gold votes are votes of 4 of the 132 design pairs
    json.dumps(stored.payload, allow_nan=False)
    assert not any(w for w in json.dumps(stored.payload).split('"') if w.startswith("SIM0X"))  # no raw IDs


def test_the_snapshots_jod_intervals_are_the_analysis_in_jod(app, study):
    """The JOD fields ([stopping]'s default unit) are what an analysis reporting in JOD gives on the same votes
    with the same bootstrap and seed, not anchored intervals stretched by a factor; the anchored fields stay."""
    from analysis.formats import build_votes
    from analysis.pipeline import AnalysisOptions, analyze
    from analysis.scaling import ScalingOptions

    study_id = _study_id(app, study)
    add_votes(app, study, honest=6, random=2)
    payload = _compute(app, study_id, bootstrap=40)
    with app_services(app).sessions() as session:
        rows = live_scales.load_study_votes(session, study_id).rows
    votes = build_votes(*([r[c] for r in rows] for c in ("worker_id", "set_id", "item_a", "item_b", "winner")),
                        is_gold=[r["is_gold"] for r in rows], gold_winner=[r["gold_winner"] for r in rows])
    options = dict(n_boot=40, seed=0, progress=False)
    jod = analyze(votes, AnalysisOptions(scaling=ScalingOptions(allow_disconnected=True, units="jod"), **options))
    anchored = analyze(votes, AnalysisOptions(scaling=ScalingOptions(allow_disconnected=True), **options))
    expected = {(r["set_id"], r["item_id"]): r for r in jod.scales}
    expected_anchored = {(r["set_id"], r["item_id"]): r for r in anchored.scales}
    ratios = []
    for record in payload["sets"]:
        for item in record["items"]:
            key = (record["set_id"], item["item_id"])
            for column in ("scale", "ci_low", "ci_high"):
                assert item[f"{column}_jod"] == pytest.approx(expected[key][column], rel=1e-9, abs=1e-12)
                assert item[column] == pytest.approx(expected_anchored[key][column], rel=1e-9, abs=1e-12)
            ratios.append((item["ci_high_jod"] - item["ci_low_jod"]) / (item["ci_high"] - item["ci_low"]))
    assert max(ratios) / min(ratios) > 1.05  # each set's anchors move per resample: no one factor converts them


def test_sparse_data_is_reported_not_raised(app, study):
    study_id = _study_id(app, study)
    payload = _compute(app, study_id)
    assert payload["error"].startswith("not enough votes yet")
    assert {s["status"] for s in payload["sets"]} == {"no_votes"}
    assert all(i["scale"] is None and i["ci_low_jod"] is None for s in payload["sets"] for i in s["items"])

    # A design pair's gold votes are votes of it: one gold vote in each set scales that pair's two items.
    add_votes(app, study, honest=1, pairs_per_worker=0, prefix="GOLD")
    payload = _compute(app, study_id)
    assert payload["error"] is None and {s["status"] for s in payload["sets"]} == {"ok"}
    assert all(sum(i["scale"] is not None for i in s["items"]) == 2 for s in payload["sets"])

    # Three votes in one set: a disconnected design there, nothing elsewhere.
    add_votes(app, study, honest=1, pairs_per_worker=3, sets=["scene_01_chelsea"], seed=1)
    payload = _compute(app, study_id)
    assert payload["error"] is None
    by_set = {s["set_id"]: s for s in payload["sets"]}
    first = by_set.pop("scene_01_chelsea")
    assert first["status"] == "disconnected" and not first["connected"]
    assert "not connected yet" in first["message"]
    scaled = [i for i in first["items"] if i["scale"] is not None]
    assert 3 <= len(scaled) <= 8 and len(first["items"]) == 11
    assert {s["status"] for s in by_set.values()} == {"ok"}  # their gold vote's pair
    assert _snapshot(app, study_id).n_votes == 4 + 3 + 1  # gold of every set, then 3 real + 1 gold

    # Without bootstrap: scales, no intervals.
    add_votes(app, study, honest=2, sets=["scene_02_immunohistochemistry"], seed=2)
    record = next(s for s in _compute(app, study_id, bootstrap=0)["sets"]
                  if s["set_id"] == "scene_02_immunohistochemistry")
    assert record["status"] == "ok" and all(i["ci_low"] is None and i["scale"] is not None for i in record["items"])
    assert all(i["ci_low_jod"] is None and i["scale_jod"] is not None for i in record["items"])
    assert _snapshot(app, study_id).payload["intervals"] is None


def test_running_intervals_follow_the_configured_method(app, study):
    study_id = _study_id(app, study)
    add_votes(app, study, honest=4, sets=["scene_02_immunohistochemistry"])
    app.config["SERVER"]["live_scales_bootstrap"] = 30
    config = app.config["PERCEPTLAB"]  # replaced, not changed: the loaded configuration may be shared
    app.config["PERCEPTLAB"] = {**config, "analysis": {**config["analysis"], "interval_method": "percentile"}}
    assert live_scales.refresh_if_stale(app, study_id)
    payload = _snapshot(app, study_id).payload
    assert payload["intervals"]["method"] == "percentile" and payload["intervals"]["n_boot"] == 30


def test_concurrent_refresh_computes_once(app, study, monkeypatch):
    study_id = _study_id(app, study)
    add_votes(app, study, honest=3, pairs_per_worker=20)
    calls = []
    original = live_scales.snapshot_payload
    others_returned = threading.Event()

    def slow_payload(*args, **kwargs):
        calls.append(threading.get_ident())
        # The first computation holds on until the five other threads have asked and returned: they
        # find it running, on a machine of any speed (a fixed sleep let a late thread find it finished).
        assert others_returned.wait(60), "the other refreshes did not return while one computed"
        return original(*args, **kwargs)

    monkeypatch.setattr(live_scales, "snapshot_payload", slow_payload)
    app.config["SERVER"]["live_scales_bootstrap"] = 20
    barrier = threading.Barrier(6)
    results = []

    def refresh():
        barrier.wait()
        results.append(live_scales.refresh_if_stale(app, study_id))
        if len(results) == 5:  # the one computing appends last
            others_returned.set()

    threads = [threading.Thread(target=refresh) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(results) == [False] * 5 + [True] and len(calls) == 1
    # Up to date now: nothing to do until a vote arrives.
    assert live_scales.refresh_if_stale(app, study_id) is False and len(calls) == 1
    add_votes(app, study, honest=1, pairs_per_worker=5, seed=7)
    assert live_scales.refresh_if_stale(app, study_id) is True and len(calls) == 2
    # min_age holds back a recomputation of a fresh snapshot.
    add_votes(app, study, honest=1, pairs_per_worker=5, seed=8)
    assert live_scales.refresh_if_stale(app, study_id, min_age=3600) is False
    # A slow computation that finishes last never replaces a snapshot of more votes.
    newest = _snapshot(app, study_id).n_votes
    with app_services(app).sessions() as session:
        live_scales.store_snapshot(session, study_id, newest - 1, {"sets": [], "tag": "old"})
        session.commit()
    assert "tag" not in _snapshot(app, study_id).payload


def test_other_process_computing_is_respected(app, study, database_url, tmp_path):
    """A second server process on the same database: PostgreSQL's advisory lock, SQLite's vote count."""
    study_id = _study_id(app, study)
    add_votes(app, study, honest=2, pairs_per_worker=20)
    app.config["SERVER"]["live_scales_bootstrap"] = 10
    if database_url.startswith("postgresql"):
        import psycopg

        key = live_scales.ADVISORY_KEY_BASE + study_id
        with psycopg.connect(database_url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as other:
            other.execute("SELECT pg_advisory_lock(%s)", (key,))
            assert live_scales.refresh_if_stale(app, study_id) is False
            assert _snapshot(app, study_id) is None
            other.execute("SELECT pg_advisory_unlock(%s)", (key,))
        assert live_scales.refresh_if_stale(app, study_id) is True
    else:
        from tests.server.conftest import make_test_app

        assert live_scales.refresh_if_stale(app, study_id) is True
        second = make_test_app(database_url, tmp_path / "instance2")
        try:
            assert live_scales.refresh_if_stale(second, study_id) is False
        finally:
            app_services(second).engine.dispose()


def test_background_thread_survives_errors(app, study, monkeypatch):
    study_id = _study_id(app, study)
    add_votes(app, study, honest=2, pairs_per_worker=10)
    app.config["SERVER"].update(live_scales_interval=0.05, live_scales_bootstrap=10)
    original, failures = live_scales.refresh_if_stale, []

    def flaky(app_, sid, **kwargs):
        if not failures:
            failures.append(sid)
            raise RuntimeError("database briefly unreachable")
        return original(app_, sid, **kwargs)

    monkeypatch.setattr(live_scales, "refresh_if_stale", flaky)
    thread = live_scales.start_background_refresh(app)
    try:
        assert thread is not None and live_scales.start_background_refresh(app) is thread  # one per process
        deadline = time.monotonic() + 120  # a guard only: the loop ends as soon as the snapshot is there
        while _snapshot(app, study_id) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert failures == [study_id] and thread.is_alive()
        assert _snapshot(app, study_id).n_votes == _vote_count(app, study_id)
    finally:
        live_scales.stop_background_refresh(app)
    assert not thread.is_alive()


def _vote_count(app, study_id: int) -> int:
    with app_services(app).sessions() as session:
        return session.scalar(select(func.count()).select_from(Vote).where(Vote.study_id == study_id))


# ---------------------------------------------------------------- the computing child process

CHILD_NICE = 3  # small: the child must still get some CPU while other tests load the machine


def _process_gone(pid: int) -> bool:
    """True once ``pid`` has ended (no longer listed, or a zombie nobody reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_snapshot_is_computed_in_a_low_priority_child_process(app, study):
    """The analysis runs in a child of the server process: niced, one BLAS thread; its failures are
    reported and survived, a killed child is replaced, and stopping the app ends it."""
    study_id = _study_id(app, study)
    add_votes(app, study, honest=2, pairs_per_worker=20)
    app.config["SERVER"].update(live_scales_process=True, live_scales_nice=CHILD_NICE, live_scales_bootstrap=10)
    state = live_scales._state(app)
    assert state.child is None  # started lazily: nothing runs before the first snapshot is needed
    try:
        assert live_scales.refresh_if_stale(app, study_id) is True
        assert _snapshot(app, study_id).n_votes == _vote_count(app, study_id)
        child = state.child
        info = child.describe()
        assert info["pid"] == child.pid and info["pid"] != os.getpid()
        assert info["niceness"] == min(os.getpriority(os.PRIO_PROCESS, 0) + CHILD_NICE, 19)
        assert info["blas_threads"] == 1
        assert live_scales.refresh_if_stale(app, study_id) is False  # up to date: the child is not asked

        # A failure in the child is the asker's exception; the child carries on.
        with pytest.raises(live_scales.ScaleProcessError, match="no study with id"):
            child.compute(app.config["DATABASE_URL"], 10_000, bootstrap=0)
        assert child.pid == info["pid"]

        # A child that died between requests is replaced by the next one.
        os.kill(info["pid"], signal.SIGKILL)
        while child.pid is not None:  # the signal is delivered asynchronously (pid is None once it has ended)
            time.sleep(0.01)
        add_votes(app, study, honest=1, pairs_per_worker=5, seed=3)
        assert live_scales.refresh_if_stale(app, study_id) is True
        assert child.pid not in (None, info["pid"])
        assert _snapshot(app, study_id).n_votes == _vote_count(app, study_id)

        # Idle long enough, it is let go; the next snapshot starts another.
        second = child.pid
        assert child.close_if_idle(idle_seconds=0) is True and child.pid is None
        assert _process_gone(second)
    finally:
        live_scales.stop_background_refresh(app)
    assert state.child is None


def test_background_refresh_uses_the_child_and_stopping_ends_it(app, study):
    study_id = _study_id(app, study)
    add_votes(app, study, honest=2, pairs_per_worker=10)
    app.config["SERVER"].update(live_scales_interval=0.05, live_scales_bootstrap=10, live_scales_process=True,
                                live_scales_nice=CHILD_NICE)
    thread = live_scales.start_background_refresh(app)
    try:
        deadline = time.monotonic() + 120  # the child's imports run at lower priority on a busy machine
        while _snapshot(app, study_id) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _snapshot(app, study_id).n_votes == _vote_count(app, study_id)
        pid = live_scales._state(app).child.pid
        assert pid is not None and pid != os.getpid()
    finally:
        live_scales.stop_background_refresh(app)
    assert not thread.is_alive() and _process_gone(pid)


def test_child_ends_when_its_server_process_dies():
    """A server process killed without clean-up (no atexit) leaves no computing process behind: the child
    reads the end of its request pipe and exits."""
    script = ("import os, sys\n"
              "from server.paradigms.paired.live_scales import ScaleProcess\n"
              f"child = ScaleProcess(nice={CHILD_NICE})\n"
              "print(child.describe()['pid'], flush=True)\n"
              "os._exit(0)\n")
    server = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                            cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert server.returncode == 0, server.stderr
    pid = int(server.stdout.split()[0])
    deadline = time.monotonic() + 60
    while not _process_gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _process_gone(pid)


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)  # the advisory lock is PostgreSQL's
def test_other_process_computing_is_respected_by_the_child_mode(app, study, database_url):
    """With the child process on, the locks still sit in the server process: a study another process is
    computing (PostgreSQL's advisory lock) starts no child at all."""
    import psycopg

    study_id = _study_id(app, study)
    add_votes(app, study, honest=2, pairs_per_worker=20)
    app.config["SERVER"].update(live_scales_process=True, live_scales_nice=CHILD_NICE, live_scales_bootstrap=10)
    key = live_scales.ADVISORY_KEY_BASE + study_id
    try:
        with psycopg.connect(database_url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as other:
            other.execute("SELECT pg_advisory_lock(%s)", (key,))
            assert live_scales.refresh_if_stale(app, study_id) is False
            assert live_scales._state(app).child is None and _snapshot(app, study_id) is None
            other.execute("SELECT pg_advisory_unlock(%s)", (key,))
        assert live_scales.refresh_if_stale(app, study_id) is True
        assert _snapshot(app, study_id).n_votes == _vote_count(app, study_id)
    finally:
        live_scales.stop_background_refresh(app)
