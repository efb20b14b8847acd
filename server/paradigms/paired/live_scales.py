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
every ``[server] live_scales_interval`` seconds looks for studies whose vote
count changed since their snapshot; :func:`refresh_if_stale` does the same for
one study on demand (the dashboard's summary endpoint). Within a process a
lock per study lets one thread compute while the others return at once;
across processes a PostgreSQL advisory lock (``pg_try_advisory_lock``) does
the same, and the vote count is checked again once the lock is held, so a
study that another process (another gunicorn worker, another app instance) has
just computed is not computed again. On SQLite (one machine, normally one
process) the vote-count check is enough.

Where the computation runs
--------------------------
Not in the server process: the analysis takes seconds of CPU, and the server's
threads must answer votes meanwhile. With ``[server] live_scales_process = true``
(the default) each server process hands the computation to a child process of
its own (:class:`ScaleProcess`, ``server/paradigms/paired/live_scales_child.py``), started when
first needed, at a lower priority (``os.nice``) and with one BLAS thread, and let
go after :data:`CHILD_IDLE_SECONDS` without work; the thread that asked waits for
it (the locks above stay in the server process). ``false`` computes in the asking
thread (tests, which replace parts of the computation in-process).

Database transactions are kept short: the votes are read in one transaction,
the (seconds-long) computation runs outside any transaction, and the snapshot
is written in another. On SQLite every transaction holds the write lock, so a
long one would stall the workers' votes.
"""
from __future__ import annotations

import atexit
import json
import logging
import math
import os
import subprocess
import sys
import threading
import time
import weakref
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from analysis.screening import DEFAULT_GOLD_ACCURACY

from ...models import Assignment, Study, as_utc, utcnow
from .export import export_votes
from .models import ScaleSnapshot, Stimulus, StudySet, Vote
from ...metrics import job as background_job
from ...outages import log_failure
from ...services import app_services

log = logging.getLogger("perceptlab.live_scales")
ADVISORY_KEY_BASE = 8_100_000  # + study id; paradigms use 7_000_000 (pairs) and 7_100_000 (clips) + study id
DEFAULT_BOOTSTRAP = 200
# Units each item carries besides the anchored scale: JOD for [stopping] (server/paradigms/paired/precision.py),
# bootstrapped from the same resamples; the fields ``scale_jod``, ``ci_low_jod``, ``ci_high_jod``.
ALSO_UNITS = ("jod",)
SCALE_FIELDS = ("scale", "ci_low", "ci_high",
                *(f"{key}_{unit}" for unit in ALSO_UNITS for key in ("scale", "ci_low", "ci_high")))
CHILD_NICE = 10  # niceness added to the computing process (``[server] live_scales_nice``): votes come first
CHILD_IDLE_SECONDS = 600.0  # a computing process idle this long is let go (the next snapshot starts another)


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
    return StudyVotes(study_id, study.seed, rows, candidate_items(session, study))


def candidate_items(session: Session, study: Study) -> dict[str, list[str]]:
    """Set name -> its candidate item IDs (also those without votes yet), in the study's order."""
    items: dict[str, list[str]] = {s.name: [] for s in study.sets}
    for set_name, item_id in session.execute(
            select(StudySet.name, Stimulus.item_id).join(Stimulus, Stimulus.set_id == StudySet.id)
            .where(StudySet.study_id == study.id, Stimulus.kind == "candidate").order_by(Stimulus.id)):
        items[set_name].append(item_id)
    return items


def snapshot_payload(data: StudyVotes, *, bootstrap: int = DEFAULT_BOOTSTRAP, seed: int = 0,
                     gold_threshold: float | None = DEFAULT_GOLD_ACCURACY,
                     interval_method: str | None = None) -> dict[str, Any]:
    """Screen, scale and bootstrap the votes of ``data``; never raises for sparse data.

    ``interval_method`` is the bootstrap interval method (None: the analysis's default, "t").

    Returns
    -------
    dict
        JSON-ready: ``computed_at``, ``n_votes`` (all rows read), ``n_scaling_votes``,
        ``bootstrap``, ``intervals`` (``method``, ``confidence``, ``n_boot``, ``unit``: how
        ``ci_low``/``ci_high`` were made; None without bootstrap), ``error`` (None, or why
        there are no scales at all), ``notes``, ``screening``, ``sets`` (per set ``set_id``, ``status`` "ok" | "disconnected" |
        "no_votes", ``connected``, ``message``, ``n_votes``, ``items``: ``item_id``,
        ``scale``, ``ci_low``, ``ci_high`` (anchored), ``scale_jod``, ``ci_low_jod``, ``ci_high_jod`` (JOD,
        the same resamples reported in JOD: :data:`ALSO_UNITS`), ``rank``, ``n_votes``, ``n_workers`` (different
        kept workers who voted on the item's real pairs); items without votes have null scales) and ``workers`` (by worker database ID: ``tpr``, ``kept``, ``n_votes``, ``flags``: why the
        analysis flags them, as in workers.csv, e.g. ``favours:ITEM`` for a targeted bias).
    """
    started = time.perf_counter()
    real = [r for r in data.rows if r["is_gold"] == "0"]
    from analysis.bootstrap import DEFAULT_INTERVAL_METHOD
    from analysis.pipeline import AnalysisOptions, interval_description

    interval_method = interval_method or DEFAULT_INTERVAL_METHOD
    payload: dict[str, Any] = {"computed_at": utcnow().isoformat(), "n_votes": data.n_votes,
                               "n_scaling_votes": len(real), "bootstrap": bootstrap,
                               "intervals": interval_description(AnalysisOptions(
                                   n_boot=bootstrap, interval_method=interval_method)),
                               "error": None, "notes": [], "screening": None, "workers": {}, "sets": []}
    voted_sets = {r["set_id"] for r in real}
    if not voted_sets:
        payload["error"] = "not enough votes yet: no comparison of real pairs has been answered"
        payload["sets"] = [_empty_set(name, ids) for name, ids in data.items.items()]
        return _finish(payload, started)
    # Sets with gold votes only cannot be scaled (the analysis needs real votes in every set): leave them out.
    result = _analyze([r for r in data.rows if r["set_id"] in voted_sets], bootstrap, seed, gold_threshold, payload,
                      interval_method)
    if result is None:
        payload["sets"] = [_empty_set(name, ids) for name, ids in data.items.items()]
        return _finish(payload, started)
    analysis, votes = result
    by_set = _set_records(analysis, votes)
    for name, ids in data.items.items():
        payload["sets"].append(by_set.get(name) or _empty_set(name, ids))
        _add_unvoted(payload["sets"][-1], ids)
    payload["screening"] = _screening(analysis)
    # Workers with gold answers only (e.g. still at the quiz) are not screened: "kept" is null for them.
    payload["workers"] = {str(w["worker_id"]): {"tpr": _num(w["tpr"]), "n_votes": int(w["n_votes"]),
                                                "kept": bool(w["kept"]) if w["n_votes"] else None,
                                                "flags": w["flags"]}
                          for w in analysis.workers}
    return _finish(payload, started)


def _analyze(rows, bootstrap, seed, gold_threshold, payload, interval_method):
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
                                  else None, n_boot=bootstrap, interval_method=interval_method, seed=seed,
                                  progress=False, also_units=ALSO_UNITS)
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
    workers = kept_workers_per_item({str(w["worker_id"]) for w in result.workers if w["kept"]}, votes)
    for r in result.scales:
        records[r["set_id"]]["items"].append({"item_id": r["item_id"], **{key: _num(r[key]) for key in SCALE_FIELDS},
                                              "rank": int(r["rank"]), "n_votes": int(r["n_votes"]),
                                              "n_workers": workers.get((r["set_id"], r["item_id"]), 0)})
    return records


def kept_workers_per_item(kept_ids: set[str], votes) -> dict[tuple[str, str], int]:
    """``{(set_id, item_id): different workers of ``kept_ids`` (those the analysis kept) who voted on a real pair of
    the item}``: what ``[stopping] min_workers`` compares (server/paradigms/paired/precision.py), for the running
    estimate and for ``perceptlab results``' report of the target (server/paradigms/paired/results.py)."""
    import numpy as np

    kept = np.array([str(w) in kept_ids for w in votes.worker_ids], dtype=bool)
    rows = ~votes.is_gold & kept[votes.worker] if len(votes) else np.zeros(0, dtype=bool)
    items = np.concatenate([votes.item_a[rows], votes.item_b[rows]])
    voters = np.concatenate([votes.worker[rows], votes.worker[rows]])
    distinct = np.unique(items * max(len(votes.worker_ids), 1) + voters) // max(len(votes.worker_ids), 1)
    counts = np.bincount(distinct, minlength=len(votes.item_ids))
    return {(str(votes.set_ids[votes.item_set[g]]), str(votes.item_ids[g])): int(counts[g])
            for g in range(len(votes.item_ids))}


def _add_unvoted(record: dict[str, Any], ids: list[str]) -> None:
    seen = {item["item_id"] for item in record["items"]}
    record["items"].extend(_unvoted(i) for i in ids if i not in seen)


def _unvoted(item_id: str) -> dict[str, Any]:
    return {"item_id": item_id, **dict.fromkeys(SCALE_FIELDS), "rank": None, "n_votes": 0, "n_workers": 0}


def _empty_set(name: str, ids: list[str]) -> dict[str, Any]:
    return {"set_id": name, "status": "no_votes", "connected": False, "message": "no votes yet",
            "n_votes": 0, "items": [_unvoted(i) for i in ids]}


def _screening(analysis) -> dict[str, Any]:
    """Who the analysis kept (screening, then the targeted-bias test), as summary.json's ``workers`` counts them."""
    s, w = analysis.summary["screening"], analysis.summary["workers"]
    return {"rule": s["rule"], "kept_workers": w["kept"], "workers": w["workers"],
            "kept_votes": w["kept_votes"], "votes": s["votes"], "kept_vote_fraction": _num(w["kept_vote_fraction"]),
            "threshold_tpr": _num(s["threshold_tpr"]), "gold_failed_workers": s["gold_failed_workers"],
            "targeted_bias_workers": w["flagged"]["targeted_bias"]}


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
                     seed: int | None = None, interval_method: str | None = None) -> dict[str, Any]:
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
    interval_method : str, optional
        Bootstrap interval method (``[analysis] interval_method``, as ``perceptlab analyze``;
        None: the analysis's default).
    """
    data = load_study_votes(session, study_id)
    session.commit()
    payload = snapshot_payload(data, bootstrap=bootstrap, seed=data.seed if seed is None else seed,
                               interval_method=interval_method)
    store_snapshot(session, study_id, data.n_votes, payload)
    session.commit()
    return payload


# ---------------------------------------------------------------- staleness and locking

def vote_count(session: Session, study_id: int) -> int:
    """All votes of a study (real and gold) by participants who are not pilots (the votes the scales are
    computed from, server/pilot.py): the marker that tells whether a snapshot is stale."""
    return int(session.scalar(select(func.count()).select_from(Vote)
                              .join(Assignment, Assignment.id == Vote.assignment_id)
                              .where(Vote.study_id == study_id, ~Assignment.pilot)))


def snapshot_age(snapshot: ScaleSnapshot) -> float:
    return (utcnow() - as_utc(snapshot.computed_at)).total_seconds()


class _ProcessState:
    """Per app: a lock per study (one computing thread per process), the background thread and the
    computing child process."""

    def __init__(self):
        self.guard = threading.Lock()
        self.locks: dict[int, threading.Lock] = {}
        self.thread: threading.Thread | None = None
        self.pid: int | None = None
        self.stop = threading.Event()
        self.workers: list[threading.Thread] = []  # on-demand refresh threads, for wait_for_refreshes
        self.child: ScaleProcess | None = None

    def lock_for(self, study_id: int) -> threading.Lock:
        with self.guard:
            return self.locks.setdefault(study_id, threading.Lock())

    def busy(self, study_id: int) -> bool:
        return self.lock_for(study_id).locked()

    def child_process(self, nice: int = CHILD_NICE) -> ScaleProcess:
        """This server process's computing child (the handle, not yet the process: it starts on first use).

        A process forked from the one that made the handle (gunicorn ``--preload``) makes its own: the
        pipes it inherited belong to its parent's child.
        """
        with self.guard:
            if self.child is None or not self.child.owned_here():
                self.child = ScaleProcess(nice)
            return self.child

    def close_child(self, timeout: float = 5.0) -> None:
        with self.guard:
            child, self.child = self.child, None
        if child is not None and child.owned_here():
            child.close(timeout)


class ScaleProcessError(RuntimeError):
    """The computing process could not compute a snapshot (its message says why)."""


class ScaleProcess:
    """A child process that computes snapshots for one server process (``server/paradigms/paired/live_scales_child.py``).

    Started on the first :meth:`compute`, at :data:`CHILD_NICE` lower priority and with every BLAS
    thread pool limited to one thread, so the analysis never takes a core from the requests of the
    server process that owns it. One computation at a time: threads that ask while it computes wait
    their turn. The child ends when :meth:`close` is called, when its owner exits (an ``atexit``
    hook), or, if the owner dies without exiting, when it reads the end of its request pipe.

    Parameters
    ----------
    nice : int
        Niceness the child adds to its own (0: same priority as the server).
    """

    def __init__(self, nice: int = CHILD_NICE):
        self.nice = int(nice)
        self.owner_pid = os.getpid()
        self.last_used = time.monotonic()
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None

    @property
    def pid(self) -> int | None:
        """The running child's process ID, or None when none runs."""
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    def owned_here(self) -> bool:
        """Whether this handle was made by the current process (not inherited through a fork)."""
        return self.owner_pid == os.getpid()

    def compute(self, database_url: str, study_id: int, *, bootstrap: int = DEFAULT_BOOTSTRAP,
                seed: int | None = None, interval_method: str | None = None) -> dict[str, Any]:
        """Compute and store the study's snapshot in the child; return its reply (``n_votes``, ``seconds``).

        Raises
        ------
        ScaleProcessError
            The computation failed (the child's traceback is in the server's log) or the child died.
        """
        return self._ask({"op": "compute", "database_url": database_url, "study_id": int(study_id),
                          "bootstrap": int(bootstrap), "seed": seed, "interval_method": interval_method})

    def describe(self) -> dict[str, Any]:
        """The child's ``pid``, ``niceness`` and ``blas_threads`` (starts it if needed)."""
        return self._ask({"op": "info"})

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        line = json.dumps(request) + "\n"
        with self._lock:
            if not self.owned_here():
                raise ScaleProcessError("this computing process belongs to another server process")
            self.last_used = time.monotonic()
            try:
                process = self._running()
                try:
                    process.stdin.write(line)
                    process.stdin.flush()
                except BrokenPipeError:  # it ended since the last request (killed?): nothing was sent, start anew
                    self._reap()
                    process = self._running()
                    process.stdin.write(line)
                    process.stdin.flush()
                answer = process.stdout.readline()
            finally:
                self.last_used = time.monotonic()
            if not answer:
                code = self._reap()
                raise ScaleProcessError(f"the computing process ended unexpectedly (exit status {code})")
        reply = json.loads(answer)
        if not reply.pop("ok", False):
            raise ScaleProcessError(reply.get("error") or "unknown error")
        return reply

    def _running(self) -> subprocess.Popen:
        """The child, started now if none runs (called with the lock held)."""
        if self._process is not None and self._process.poll() is None:
            return self._process
        self._reap()
        env = dict(os.environ)
        # One BLAS thread: read by each BLAS library when numpy and scipy load it, i.e. before any
        # code of the child could limit it. The analysis would limit it too (analysis/threads.py).
        env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PERCEPTLAB_BLAS_THREADS="1")
        # The child imports the same ``server`` package as this process, installed or not.
        package_root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
        self._process = subprocess.Popen(
            [sys.executable, "-m", "server.paradigms.paired.live_scales_child", str(self.nice)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True, encoding="utf-8", bufsize=1,
            close_fds=True)
        _open_children.add(self)
        log.info("started the running-scale process (pid %s, nice +%s)", self._process.pid, self.nice)
        return self._process

    def _reap(self) -> int | None:
        """Forget a child that has ended (collecting its exit status); return that status."""
        process, self._process = self._process, None
        if process is None:
            return None
        for stream in (process.stdin, process.stdout):
            try:
                stream.close()
            except OSError:  # a broken pipe on close: it is closed all the same
                pass
        try:
            return process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            return process.wait()

    def close(self, timeout: float = 5.0) -> None:
        """End the child, if one runs: close its request pipe, wait ``timeout`` seconds, then kill it.

        A computation in progress is not waited for beyond ``timeout``: its asker gets a
        :class:`ScaleProcessError` (at shutdown nobody would use the snapshot anyway).
        """
        acquired = self._lock.acquire(timeout=max(timeout, 0.0))
        try:
            process, self._process = self._process, None
        finally:
            if acquired:
                self._lock.release()
        _open_children.discard(self)
        if process is None or not self.owned_here():
            return
        try:
            process.stdin.close()  # the child's loop ends at the end of its input
        except OSError:
            pass
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:  # in the middle of a computation: it would only be thrown away
            process.kill()
            process.wait()
        process.stdout.close()

    def close_if_idle(self, idle_seconds: float = CHILD_IDLE_SECONDS) -> bool:
        """End the child if it has had no request for ``idle_seconds``; return whether it was ended."""
        if not self._lock.acquire(blocking=False):  # computing right now
            return False
        try:
            idle = self._process is not None and time.monotonic() - self.last_used >= idle_seconds
        finally:
            self._lock.release()
        if idle:
            self.close()
        return idle


_open_children: "weakref.WeakSet[ScaleProcess]" = weakref.WeakSet()


@atexit.register
def _close_children() -> None:
    """At interpreter exit (a gunicorn worker stopping), end the computing children this process started."""
    for child in list(_open_children):
        if child.owned_here():
            child.close(timeout=2.0)


def _state(app) -> _ProcessState:
    return app_services(app).state_of(__name__, _ProcessState)


def is_computing(app, study_id: int) -> bool:
    """True while a thread of this process computes the study's snapshot."""
    return _state(app).busy(study_id)


@contextmanager
def _cross_process_lock(engine, study_id: int) -> Iterator[bool]:
    """Yield whether this process may compute the study now (PostgreSQL advisory lock; always on SQLite)."""
    if engine.dialect.name != "postgresql":
        yield True
        return
    from ...db import advisory_try_lock

    with advisory_try_lock(engine, ADVISORY_KEY_BASE + study_id) as got:
        yield got


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
        sessions = app_services(app).sessions
        with sessions() as session:
            if not _stale(session, study_id, min_age):
                return False
        with _cross_process_lock(app_services(app).engine, study_id) as got:
            if not got:
                return False
            with sessions() as session:
                # Checked again under the lock: another process may have finished this very update.
                if not _stale(session, study_id, min_age):
                    return False
                session.rollback()
            _compute(app, study_id)
        from ...stopping import check_in_app

        check_in_app(app, study_id)  # the new estimate may meet the study's [stopping] target
        return True
    finally:
        lock.release()


def _compute(app, study_id: int) -> None:
    """Compute and store a snapshot: in this process's computing child, or here when that is switched off."""
    if _uses_child_process(app):
        nice = int(app.config.get("SERVER", {}).get("live_scales_nice", CHILD_NICE))
        _state(app).child_process(nice).compute(app.config["DATABASE_URL"], study_id, bootstrap=_bootstrap(app),
                                                interval_method=_interval_method(app))
        return
    with app_services(app).sessions() as session:
        compute_snapshot(session, study_id, bootstrap=_bootstrap(app), interval_method=_interval_method(app))


def _uses_child_process(app) -> bool:
    return bool(app.config.get("SERVER", {}).get("live_scales_process", True))


def _bootstrap(app) -> int:
    return int(app.config.get("SERVER", {}).get("live_scales_bootstrap", DEFAULT_BOOTSTRAP))


def _interval_method(app) -> str | None:
    """The running estimates use the analysis's interval method (``[analysis] interval_method``)."""
    return (app.config.get("PERCEPTLAB") or {}).get("analysis", {}).get("interval_method")


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
        with background_job("live_scales") as job:
            job.set("done" if refresh_if_stale(app, study_id, min_age=min_age) else "skipped")
    except Exception as exc:  # noqa: BLE001 - a failed refresh must not take anything else down
        log_failure(app, log, exc, "running scale estimate of study %s failed", study_id)


# ---------------------------------------------------------------- the background thread

def refresh_all(app) -> list[int]:
    """One pass of the background thread: recompute every study whose vote count changed.

    Paused studies are included: workers already in them may still be voting.
    A failure in one study is logged and the others still run. Returns the IDs computed.
    """
    sessions = app_services(app).sessions
    with sessions() as session:
        counts = dict(session.execute(select(Vote.study_id, func.count())
                                      .join(Assignment, Assignment.id == Vote.assignment_id)
                                      .where(~Assignment.pilot).group_by(Vote.study_id)).all())
        stored = dict(session.execute(select(ScaleSnapshot.study_id, ScaleSnapshot.n_votes)).all())
    computed = []
    for study_id, n in sorted(counts.items()):
        if stored.get(study_id) == n:
            continue
        try:
            with background_job("live_scales") as job:
                if refresh_if_stale(app, study_id):
                    computed.append(study_id)
                else:
                    job.set("skipped")
        except Exception as exc:  # noqa: BLE001
            log_failure(app, log, exc, "running scale estimate of study %s failed", study_id)
    return computed


def _loop(app, state: _ProcessState, interval: float) -> None:
    while not state.stop.wait(interval):
        try:
            refresh_all(app)
        except Exception as exc:  # noqa: BLE001 - e.g. the database is briefly unreachable: try again next time
            log_failure(app, log, exc, "running scale estimates: refresh pass failed")
        child = state.child
        if child is not None and child.owned_here():
            child.close_if_idle(CHILD_IDLE_SECONDS)  # votes stopped coming: give its memory back


def init_app(app) -> None:
    """Refresh the running estimates in the background of a serving app (``[server] live_scales_interval``
    above 0; never under tests, which call :func:`refresh_if_stale` themselves)."""
    if not app.config["SERVER"].get("live_scales_interval", 0) or app.config["TESTING"]:
        return
    start_background_refresh(app)

    @app.before_request
    def _live_scales_thread_of_this_process():
        # A process forked after start-up (gunicorn --preload) has no refresh thread: its first request starts it.
        start_background_refresh(app)


def start_background_refresh(app) -> threading.Thread | None:
    """Start this process's refresh thread (every ``[server] live_scales_interval`` seconds); return it.

    Safe to call more than once, and cheap when the thread runs: server processes forked after
    start-up (gunicorn ``--preload``) do not inherit the thread, so the app factory also calls this
    before every request, and the first request each of them serves starts its own. Returns None
    when the interval is 0 (no background refresh).
    """
    interval = float(app.config.get("SERVER", {}).get("live_scales_interval", 0) or 0)
    if interval <= 0:
        return None
    return _ensure_thread(app, _state(app), interval)


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
    """Stop the refresh thread and end the computing process (tests, orderly shutdown)."""
    state = _state(app)
    state.stop.set()
    if state.thread is not None:
        state.thread.join(timeout)
    state.close_child(timeout)
