"""Running scale estimates of the studies in progress, for the dashboard.

:func:`compute_snapshot` reads a study's votes (the same rows as the votes.csv
export), runs the analysis package (automatic worker screening, anchored
Thurstone MLE, worker bootstrap) and stores the result as JSON in
``ScaleSnapshot``, so every server process shows the same figures.

Early in a study the data are sparse: a set may have no votes yet, or its
comparison graph may still fall apart into groups of items never compared
with each other. Such sets are reported, not fatal: the fit allows
disconnected designs (the weak prior ties each group to the common mean)
and the set is flagged ``"connected": false`` with a message, because scale
values of separate groups are not comparable yet.

Who computes when
-----------------
:func:`start_background_refresh` runs a daemon thread per server process that
every ``[server] live_scales_interval`` seconds recomputes each study whose
vote count changed since its snapshot; :func:`refresh_if_stale` does the same
for one study on demand (the dashboard's summary endpoint). Within a process a
lock per study lets one thread compute while the others return at once;
across processes a PostgreSQL advisory lock (``pg_try_advisory_lock``) does
the same, and the vote count is checked again once the lock is held, so a
study that another process has just computed is not computed again. On SQLite
(one machine, normally one process) the vote-count check is enough.

Database transactions are kept short: the votes are read in one transaction,
the (seconds-long) computation runs outside any transaction, and the snapshot
is written in another. On SQLite every transaction holds the write lock, so a
long one would stall the workers' votes.
"""
from __future__ import annotations

import logging
import math
import os
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from analysis.screening import DEFAULT_GOLD_ACCURACY

from .exports import export_votes
from .models import ScaleSnapshot, Stimulus, Study, StudySet, Vote, as_utc, utcnow

log = logging.getLogger("perceptlab.live_scales")
ADVISORY_KEY_BASE = 8_100_000  # + study id; assignments.py uses 7_000_000 + study id for page allocation
DEFAULT_BOOTSTRAP = 200


# ---------------------------------------------------------------- the computation

@dataclass(frozen=True)
class StudyVotes:
    """What a snapshot is computed from: the study's vote rows and its candidate items per set."""
    study_id: int
    seed: int
    rows: list[dict[str, Any]]
    items: dict[str, list[str]]  # set name -> candidate item IDs (also those without votes yet)

    @property
    def n_votes(self) -> int:
        return len(self.rows)


def load_study_votes(session: Session, study_id: int) -> StudyVotes:
    """Read the votes of a study (real and gold) and its candidate items, in one transaction."""
    study = session.get(Study, study_id)
    if study is None:
        raise LookupError(f"no study with id {study_id}")
    # Workers are labelled by their database ID: the snapshot must not hold raw worker IDs.
    rows = export_votes(session, study_id, pseudonymise=False)
    for row in rows:
        row["worker_id"] = str(row["_worker_db_id"])
    items: dict[str, list[str]] = {s.name: [] for s in study.sets}
    for set_name, item_id in session.execute(
            select(StudySet.name, Stimulus.item_id).join(Stimulus, Stimulus.set_id == StudySet.id)
            .where(StudySet.study_id == study_id, Stimulus.kind == "candidate").order_by(Stimulus.id)):
        items[set_name].append(item_id)
    return StudyVotes(study_id, study.seed, rows, items)


def snapshot_payload(data: StudyVotes, *, bootstrap: int = DEFAULT_BOOTSTRAP, seed: int = 0,
                     gold_threshold: float | None = DEFAULT_GOLD_ACCURACY) -> dict[str, Any]:
    """Screen, scale and bootstrap the votes of ``data``; never raises for sparse data.

    Returns
    -------
    dict
        JSON-ready: ``computed_at``, ``n_votes`` (all rows read), ``n_scaling_votes``,
        ``bootstrap``, ``error`` (None, or why there are no scales at all), ``notes``,
        ``screening``, ``sets`` (per set ``set_id``, ``status`` "ok" | "disconnected" |
        "no_votes", ``connected``, ``message``, ``n_votes``, ``items``: ``item_id``,
        ``scale``, ``ci_low``, ``ci_high``, ``rank``, ``n_votes``; items without votes have
        null scales) and ``workers`` (by worker database ID: ``tpr``, ``kept``, ``n_votes``).
    """
    started = time.perf_counter()
    real = [r for r in data.rows if r["is_gold"] == "0"]
    payload: dict[str, Any] = {"computed_at": utcnow().isoformat(), "n_votes": data.n_votes,
                               "n_scaling_votes": len(real), "bootstrap": bootstrap, "error": None,
                               "notes": [], "screening": None, "workers": {}, "sets": []}
    voted_sets = {r["set_id"] for r in real}
    if not voted_sets:
        payload["error"] = "not enough votes yet: no comparison of real pairs has been answered"
        payload["sets"] = [_empty_set(name, ids) for name, ids in data.items.items()]
        return _finish(payload, started)
    # Sets with gold votes only cannot be scaled (the analysis needs real votes in every set): leave them out.
    result = _analyze([r for r in data.rows if r["set_id"] in voted_sets], bootstrap, seed, gold_threshold, payload)
    if result is None:
        payload["sets"] = [_empty_set(name, ids) for name, ids in data.items.items()]
        return _finish(payload, started)
    analysis, votes = result
    by_set = _set_records(analysis, votes)
    for name, ids in data.items.items():
        payload["sets"].append(by_set.get(name) or _empty_set(name, ids))
        _add_unvoted(payload["sets"][-1], ids)
    payload["screening"] = _screening(analysis.screening)
    # Workers with gold answers only (e.g. still at the quiz) are not screened: "kept" is null for them.
    payload["workers"] = {str(w["worker_id"]): {"tpr": _num(w["tpr"]), "n_votes": int(w["n_votes"]),
                                                "kept": bool(w["kept"]) if w["n_votes"] else None}
                          for w in analysis.workers}
    return _finish(payload, started)


def _analyze(rows, bootstrap, seed, gold_threshold, payload):
    """Run the pipeline; fall back to no screening when screening would drop everyone."""
    from analysis.formats import VotesFormatError, build_votes
    from analysis.pipeline import AnalysisOptions, analyze
    from analysis.scaling import ScalingOptions

    try:
        votes = build_votes(*([r[c] for r in rows] for c in ("worker_id", "set_id", "item_a", "item_b", "winner")),
                            is_gold=[r["is_gold"] for r in rows], gold_winner=[r["gold_winner"] for r in rows],
                            path="live votes")
    except VotesFormatError as exc:
        payload["error"] = f"cannot use the votes: {exc}"
        return None
    scaling = ScalingOptions(allow_disconnected=True)
    for keep in ("auto", "none"):
        options = AnalysisOptions(scaling=scaling, keep=keep, gold_threshold=gold_threshold if keep == "auto"
                                  else None, n_boot=bootstrap, seed=seed, progress=False)
        try:
            return analyze(votes, options), votes
        except ValueError as exc:
            if keep == "none":
                payload["error"] = f"the analysis failed: {exc}"
                return None
            payload["notes"].append(f"worker screening skipped ({exc}); every worker's votes are used")
    return None


def _set_records(result, votes) -> dict[str, dict[str, Any]]:
    from analysis.scaling import set_designs
    from analysis.thurstone import comparison_components

    records: dict[str, dict[str, Any]] = {}
    for design in set_designs(votes):
        n_groups = int(comparison_components(design.pairs, design.n_items).max()) + 1 if design.n_items else 0
        connected = n_groups <= 1
        records[design.set_id] = {
            "set_id": design.set_id, "status": "ok" if connected else "disconnected", "connected": connected,
            "message": None if connected else
            (f"not connected yet: the items fall into {n_groups} groups never compared with each other, "
             "so scale values of different groups are not comparable until more votes link them"),
            "n_votes": int(len(design.votes)), "items": []}
    for r in result.scales:
        records[r["set_id"]]["items"].append({"item_id": r["item_id"], "scale": _num(r["scale"]),
                                              "ci_low": _num(r["ci_low"]), "ci_high": _num(r["ci_high"]),
                                              "rank": int(r["rank"]), "n_votes": int(r["n_votes"])})
    return records


def _add_unvoted(record: dict[str, Any], ids: list[str]) -> None:
    seen = {item["item_id"] for item in record["items"]}
    record["items"].extend({"item_id": i, "scale": None, "ci_low": None, "ci_high": None, "rank": None,
                            "n_votes": 0} for i in ids if i not in seen)


def _empty_set(name: str, ids: list[str]) -> dict[str, Any]:
    return {"set_id": name, "status": "no_votes", "connected": False, "message": "no votes yet",
            "n_votes": 0, "items": [{"item_id": i, "scale": None, "ci_low": None, "ci_high": None, "rank": None,
                                     "n_votes": 0} for i in ids]}


def _screening(screening) -> dict[str, Any]:
    s = screening.summary()
    return {"rule": s["rule"], "kept_workers": s["kept_workers"], "workers": s["workers"],
            "kept_votes": s["kept_votes"], "votes": s["votes"], "kept_vote_fraction": _num(s["kept_vote_fraction"]),
            "threshold_tpr": _num(s["threshold_tpr"]), "gold_failed_workers": s["gold_failed_workers"]}


def _num(x) -> float | None:
    """A JSON-safe float: NaN and infinities become null (PostgreSQL's JSON refuses NaN)."""
    if x is None or x == "":
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def _finish(payload: dict[str, Any], started: float) -> dict[str, Any]:
    payload["seconds"] = round(time.perf_counter() - started, 3)
    return payload


def store_snapshot(session: Session, study_id: int, n_votes: int, payload: dict[str, Any]) -> None:
    """Insert or replace the study's snapshot, unless a newer one (more votes) is stored already."""
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    statement = insert(ScaleSnapshot).values(study_id=study_id, n_votes=n_votes, computed_at=utcnow(),
                                             payload=payload)
    # Votes are append-only, so a snapshot of fewer votes is older: a slow computation never overwrites a newer one.
    statement = statement.on_conflict_do_update(
        index_elements=[ScaleSnapshot.study_id],
        set_={"n_votes": statement.excluded.n_votes, "computed_at": statement.excluded.computed_at,
              "payload": statement.excluded.payload},
        where=ScaleSnapshot.n_votes <= statement.excluded.n_votes)
    session.execute(statement)


def compute_snapshot(session: Session, study_id: int, *, bootstrap: int = DEFAULT_BOOTSTRAP,
                     seed: int | None = None) -> dict[str, Any]:
    """Compute and store the running scale estimates of a study; return the payload.

    Commits ``session`` twice: after reading the votes (so no transaction stays
    open during the computation) and after storing the snapshot.

    Parameters
    ----------
    session : Session
    study_id : int
    bootstrap : int
        Bootstrap resamples for the confidence intervals (``[server] live_scales_bootstrap``).
    seed : int, optional
        Bootstrap seed (default: the study's seed).
    """
    data = load_study_votes(session, study_id)
    session.commit()
    payload = snapshot_payload(data, bootstrap=bootstrap, seed=data.seed if seed is None else seed)
    store_snapshot(session, study_id, data.n_votes, payload)
    session.commit()
    return payload


# ---------------------------------------------------------------- staleness and locking

def vote_count(session: Session, study_id: int) -> int:
    """All votes of a study (real and gold): the marker that tells whether a snapshot is stale."""
    return int(session.scalar(select(func.count()).select_from(Vote).where(Vote.study_id == study_id)))


def snapshot_age(snapshot: ScaleSnapshot) -> float:
    return (utcnow() - as_utc(snapshot.computed_at)).total_seconds()


class _ProcessState:
    """Per app: a lock per study (one computing thread per process) and the background thread."""

    def __init__(self):
        self.guard = threading.Lock()
        self.locks: dict[int, threading.Lock] = {}
        self.thread: threading.Thread | None = None
        self.pid: int | None = None
        self.stop = threading.Event()
        self.hooked = False
        self.workers: list[threading.Thread] = []  # on-demand refresh threads, for wait_for_refreshes

    def lock_for(self, study_id: int) -> threading.Lock:
        with self.guard:
            return self.locks.setdefault(study_id, threading.Lock())

    def busy(self, study_id: int) -> bool:
        return self.lock_for(study_id).locked()


def _state(app) -> _ProcessState:
    return app.extensions.setdefault("perceptlab.live_scales", _ProcessState())


def is_computing(app, study_id: int) -> bool:
    """True while a thread of this process computes the study's snapshot."""
    return _state(app).busy(study_id)


@contextmanager
def _cross_process_lock(engine, study_id: int) -> Iterator[bool]:
    """Yield whether this process may compute the study now (PostgreSQL advisory lock; always on SQLite)."""
    if engine.dialect.name != "postgresql":
        yield True
        return
    from sqlalchemy import text

    key = ADVISORY_KEY_BASE + study_id
    with engine.connect() as connection:
        got = bool(connection.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": key}).scalar())
        connection.commit()  # the lock is held by the session, not the transaction: end the transaction
        try:
            yield got
        finally:
            if got:
                connection.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": key})
                connection.commit()


def _stale(session: Session, study_id: int, min_age: float) -> bool:
    snapshot = session.get(ScaleSnapshot, study_id)
    if snapshot is not None and snapshot.n_votes == vote_count(session, study_id):
        return False
    return snapshot is None or snapshot_age(snapshot) >= min_age


def refresh_if_stale(app, study_id: int, *, min_age: float = 0.0) -> bool:
    """Recompute a study's snapshot if its vote count changed; return True when this call computed it.

    Returns False at once when another thread of this process or (on
    PostgreSQL) another process is computing the same study, when the
    snapshot is up to date, or when it is younger than ``min_age`` seconds.
    """
    state = _state(app)
    lock = state.lock_for(study_id)
    if not lock.acquire(blocking=False):
        return False
    try:
        sessions = app.extensions["perceptlab.sessions"]
        with sessions() as session:
            if not _stale(session, study_id, min_age):
                return False
        with _cross_process_lock(app.extensions["perceptlab.engine"], study_id) as got:
            if not got:
                return False
            with sessions() as session:
                # Checked again under the lock: another process may have finished this very update.
                if not _stale(session, study_id, min_age):
                    return False
                session.rollback()
                compute_snapshot(session, study_id, bootstrap=_bootstrap(app))
        return True
    finally:
        lock.release()


def _bootstrap(app) -> int:
    return int(app.config.get("SERVER", {}).get("live_scales_bootstrap", DEFAULT_BOOTSTRAP))


def refresh_in_background(app, study_id: int, *, min_age: float = 0.0) -> bool:
    """Start :func:`refresh_if_stale` in a daemon thread unless this process is computing the study already."""
    if is_computing(app, study_id):
        return False
    state = _state(app)
    thread = threading.Thread(target=_logged, args=(app, study_id, min_age), daemon=True,
                              name=f"perceptlab-scales-{study_id}")
    with state.guard:
        state.workers = [t for t in state.workers if t.is_alive()] + [thread]
    thread.start()
    return True


def wait_for_refreshes(app, timeout: float = 30.0) -> None:
    """Wait until the on-demand refresh threads of this process have finished (tests, shutdown)."""
    state = _state(app)
    deadline = time.monotonic() + timeout
    with state.guard:
        threads = list(state.workers)
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))


def _logged(app, study_id: int, min_age: float) -> None:
    try:
        refresh_if_stale(app, study_id, min_age=min_age)
    except Exception:  # noqa: BLE001 - a failed refresh must not take anything else down
        log.exception("running scale estimate of study %s failed", study_id)


# ---------------------------------------------------------------- the background thread

def refresh_all(app) -> list[int]:
    """One pass of the background thread: recompute every study whose vote count changed.

    Paused studies are included: workers already in them may still be voting.
    A failure in one study is logged and the others still run. Returns the IDs computed.
    """
    sessions = app.extensions["perceptlab.sessions"]
    with sessions() as session:
        counts = dict(session.execute(select(Vote.study_id, func.count()).group_by(Vote.study_id)).all())
        stored = dict(session.execute(select(ScaleSnapshot.study_id, ScaleSnapshot.n_votes)).all())
    computed = []
    for study_id, n in sorted(counts.items()):
        if stored.get(study_id) == n:
            continue
        try:
            if refresh_if_stale(app, study_id):
                computed.append(study_id)
        except Exception:  # noqa: BLE001
            log.exception("running scale estimate of study %s failed", study_id)
    return computed


def _loop(app, state: _ProcessState, interval: float) -> None:
    while not state.stop.wait(interval):
        try:
            refresh_all(app)
        except Exception:  # noqa: BLE001 - e.g. the database is briefly unreachable: try again next time
            log.exception("running scale estimates: refresh pass failed")


def start_background_refresh(app) -> threading.Thread | None:
    """Start this process's refresh thread (every ``[server] live_scales_interval`` seconds).

    Safe to call more than once. Server processes forked after this call
    (gunicorn ``--preload``) do not inherit the thread: the first request each
    of them serves starts its own.
    """
    interval = float(app.config.get("SERVER", {}).get("live_scales_interval", 0) or 0)
    if interval <= 0:
        return None
    state = _state(app)
    thread = _ensure_thread(app, state, interval)
    if not state.hooked:
        try:
            app.before_request(lambda: _ensure_thread(app, state, interval) and None)
            state.hooked = True
        except AssertionError:  # the app serves requests already (Flask forbids new hooks then): no fork to follow
            pass
    return thread


def _ensure_thread(app, state: _ProcessState, interval: float) -> threading.Thread:
    if state.pid == os.getpid() and state.thread is not None and state.thread.is_alive():
        return state.thread
    with state.guard:
        if state.pid != os.getpid() or state.thread is None or not state.thread.is_alive():
            state.pid = os.getpid()
            state.stop = threading.Event()
            state.thread = threading.Thread(target=_loop, args=(app, state, interval), daemon=True,
                                            name="perceptlab-live-scales")
            state.thread.start()
    return state.thread


def stop_background_refresh(app, timeout: float = 5.0) -> None:
    """Stop the refresh thread (tests, orderly shutdown)."""
    state = _state(app)
    state.stop.set()
    if state.thread is not None:
        state.thread.join(timeout)
