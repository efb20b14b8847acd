"""The dashboard's simulation forecasts, bounded: one at a time per study across every process, at low
priority, cached on the study's responses.

A forecast (``Paradigm.forecast``: hundreds of simulated studies) takes seconds to minutes of CPU. Each press
of the dashboard's "Forecast by simulation" used to start one in whichever gunicorn process took the request:
24 presses ran forecasts in all 4 processes at once, and the votes' median latency tripled. Now


:func:`forecast_now` computes a forecast and stores it in the study's ``[stopping]`` record; the dashboard starts
it with :func:`start` (its button), shows :func:`running` and reads the stored result. Bounded:

* **one place**: a forecast runs only in the process that holds the study's claim, a PostgreSQL advisory lock
  (``pg_try_advisory_lock(FORECAST_LOCK_BASE + study id)``, held by one connection for the forecast's life and
  released by the server if that process dies) or, on SQLite, an exclusive ``flock`` on a file of the instance
  folder (one machine). A press while another process forecasts the study starts nothing; every process shows
  the stored result (``StudyStopping.forecast``) and, while the claim is held, "Forecast running"
  (:func:`running` asks the claim itself, not this process's threads);
* **cached**: the stored forecast carries the number of responses it started from
  (``forecast["cache_key"]["responses"]``); a press on a study with no new responses since recomputes nothing;
* **low priority**: with ``[server] forecast_process = true`` (the default) the forecast runs in a child process
  (``python -m server.forecast_jobs``) with one BLAS thread, which adds ``[server] forecast_nice`` (default 10)
  to its niceness before it imports anything: neither the GIL nor a core is taken from the votes. ``false``
  computes in a thread of the server process, niced the same way (Linux gives each thread its own niceness; the
  tests, which replace the forecast in-process).

Each job is counted in the metrics (``perceptlab_background_jobs_total{job="forecast", outcome=...}``: done,
cached, busy, failed; server/metrics.py).
"""
from __future__ import annotations

import datetime as dt
import fcntl
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import text

from . import metrics
from .db import advisory_try_lock
from .models import utcnow
from .services import app_services

log = logging.getLogger("perceptlab.forecasts")
FORECAST_LOCK_BASE = 8_200_000  # + study id; the live scales use 8_100_000, paradigms 7_000_000 and 7_100_000
DEFAULT_NICE = 10
CHILD_TIMEOUT_S = 1800.0  # a forecast child running longer than this is ended (and the job counted failed)
URL_VARIABLE = "PERCEPTLAB_DATABASE_URL"  # how the child learns the database (not its command line: ps shows it)


class _Threads:
    def __init__(self):
        self.guard = threading.Lock()
        self.running: dict[int, threading.Thread] = {}


def _threads(app) -> _Threads:
    return app_services(app).state_of(__name__, _Threads)


def _settings(app) -> tuple[bool, int]:
    server = app.config.get("SERVER", {})
    nice = int(server.get("forecast_nice", DEFAULT_NICE))
    return bool(server.get("forecast_process", True)), min(max(nice, 0), 19)


def start(app, study_id: int) -> bool:
    """Start the study's forecast job in a thread unless this process runs one for it; True when started (the
    job may still find the claim held elsewhere, or the cache fresh, and compute nothing)."""
    state = _threads(app)
    with state.guard:
        thread = state.running.get(study_id)
        if thread is not None and thread.is_alive():
            return False
        thread = threading.Thread(target=run_job, args=(app, study_id), daemon=True,
                                  name=f"perceptlab-forecast-{study_id}")
        state.running[study_id] = thread
        thread.start()
    return True


def wait(app, timeout: float = 120.0) -> None:
    """Wait for this process's forecast jobs (tests, shutdown)."""
    state = _threads(app)
    with state.guard:
        threads = list(state.running.values())
    for thread in threads:
        thread.join(timeout)


def running(app, study_id: int) -> bool:
    """Whether the study's forecast runs now, in this process or any other (its claim is held)."""
    thread = _threads(app).running.get(study_id)
    if thread is not None and thread.is_alive():
        return True
    try:
        return _claim_held(app, study_id)
    except Exception:  # noqa: BLE001 - the dashboard then shows no "running" line; nothing else depends on it
        return False


def run_job(app, study_id: int) -> str:
    """One forecast job of the study: claim it, compare the cache, compute (child process or niced thread) and
    store. Returns its outcome (``done``, ``cached``, ``busy``, ``none``: no target or too few responses,
    ``failed``); never raises (failures are logged)."""
    from .outages import log_failure

    try:
        with metrics.job("forecast") as job:
            job.set(_claimed_run(app, study_id))
            return job.outcome
    except Exception as exc:  # noqa: BLE001 - shown as "no forecast"; the log says why
        log_failure(app, log, exc, "stopping forecast of study %s failed", study_id)
        return "failed"


def _claimed_run(app, study_id: int) -> str:
    with claim(app, study_id) as claimed:
        if not claimed:
            return "busy"  # another process (or instance) computes it now: its result will be stored
        services = app_services(app)
        with services.sessions() as session:
            key = cache_key(session, study_id)
            if key is None:
                return "none"
            stored = _stored_key(session, study_id)
        if stored == key:
            return "cached"
        in_child, nice = _settings(app)
        at = services.clock()
        if in_child:
            _in_child(app.config["DATABASE_URL"], study_id, at, nice)
        else:
            _in_thread(app, study_id, at, nice)
        return "done"


def cache_key(session, study_id: int) -> dict | None:
    """What a stored forecast must have started from to be current: the study's responses as ``[stopping]``
    counts them (its paradigm's precision, else its response count); None for a study without ``[stopping]``."""
    from .models import Study
    from .paradigms import paradigm_for
    from .stopping import stopping_spec

    study = session.get(Study, study_id)
    spec = stopping_spec(study) if study is not None else None
    if spec is None:
        return None
    paradigm = paradigm_for(study)
    precision = paradigm.precision(session, study, spec)
    responses = precision.responses if precision is not None else paradigm.responses(session, study)
    session.rollback()  # nothing to keep; SQLite's transactions hold the write lock
    return {"responses": int(responses)}


def _stored_key(session, study_id: int) -> dict | None:
    from .models import StudyStopping

    record = session.get(StudyStopping, study_id)
    forecast = record.forecast if record is not None else None
    return forecast.get("cache_key") if isinstance(forecast, dict) else None


def forecast_now(session, study_id: int, clock: Callable[[], dt.datetime] = utcnow,
                 extra: dict | None = None) -> dict | None:
    """Compute the paradigm's simulation forecast (``Paradigm.forecast``) and store it in the study's ``[stopping]``
    record (``StudyStopping.forecast``, ``forecast_at``) with ``extra`` keys (its cache key). Slow (seconds): the
    dashboard runs it as a job (:func:`start`). None (stored too) when the paradigm has too few responses."""
    from sqlalchemy import update

    from .models import Study, StudyStopping
    from .paradigms import paradigm_for
    from .stopping import _ensure_row, stopping_spec

    study = session.get(Study, study_id)
    spec = stopping_spec(study) if study is not None else None
    if spec is None:
        return None
    result = paradigm_for(study).forecast(session, study, spec)
    if result is not None and extra:
        result = {**result, **extra}
    session.commit()
    _ensure_row(session, study_id)  # the record's one upsert (server/stopping.py)
    session.execute(update(StudyStopping).where(StudyStopping.study_id == study_id)
                    .values(forecast=result, forecast_at=clock()))
    session.commit()
    return result


def compute(session, study_id: int, at: dt.datetime) -> None:
    """Compute and store the forecast (:func:`forecast_now`) with its cache key."""
    key = cache_key(session, study_id)
    forecast_now(session, study_id, lambda: at, extra={"cache_key": key} if key is not None else None)


def _in_thread(app, study_id: int, at: dt.datetime, nice: int) -> None:
    _lower_this_thread(nice)
    with app_services(app).sessions() as session:
        compute(session, study_id, at)


def _lower_this_thread(nice: int) -> None:
    """Add ``nice`` to the calling thread's niceness: on Linux each thread has its own (``setpriority`` on its
    native id); elsewhere the whole process would be lowered, so nothing is done."""
    if nice > 0 and sys.platform.startswith("linux"):
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + nice))


def _in_child(url: str, study_id: int, at: dt.datetime, nice: int) -> None:
    env = dict(os.environ)
    env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PERCEPTLAB_BLAS_THREADS="1")
    env[URL_VARIABLE] = url
    package_root = str(Path(__file__).resolve().parent.parent)  # the same ``server`` package, installed or not
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    done = subprocess.run([sys.executable, "-m", "server.forecast_jobs", str(study_id), at.isoformat(), str(nice)],
                          env=env, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"the forecast process ended with status {done.returncode}: {last}")


# ---------------------------------------------------------------- the claim

@contextmanager
def claim(app, study_id: int) -> Iterator[bool]:
    """Hold the study's forecast claim for the block (True), or say another holder has it (False)."""
    engine = app_services(app).engine
    if engine.dialect.name == "postgresql":
        with advisory_try_lock(engine, FORECAST_LOCK_BASE + study_id) as got:
            yield got
        return
    with _file_try_lock(_lock_file(app, study_id)) as got:
        yield got


def _claim_held(app, study_id: int) -> bool:
    engine = app_services(app).engine
    if engine.dialect.name == "postgresql":
        with engine.connect() as connection:
            return bool(connection.execute(text(
                "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND classid = 0 "
                "AND objid = :k AND objsubid = 1 AND database = (SELECT oid FROM pg_database "
                "WHERE datname = current_database()))"), {"k": FORECAST_LOCK_BASE + study_id}).scalar())
    with _file_try_lock(_lock_file(app, study_id)) as got:
        return not got


@contextmanager
def _file_try_lock(path: Path) -> Iterator[bool]:
    """Hold an exclusive flock on ``path`` for the block if nobody holds it (yields True), else yield False at
    once (SQLite instances: the processes of one machine share the instance folder)."""
    with open(path, "a+b") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _lock_file(app, study_id: int) -> Path:
    folder = Path(app.instance_path) / "locks"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"forecast-{study_id}.lock"


# ---------------------------------------------------------------- the child process

def main(argv: list[str] | None = None) -> int:
    """``python -m server.forecast_jobs STUDY_ID AT NICE``: compute one forecast (database from the environment)."""
    argv = sys.argv[1:] if argv is None else argv
    study_id, at, nice = int(argv[0]), dt.datetime.fromisoformat(argv[1]), int(argv[2])
    if nice > 0:
        os.nice(nice)  # first of all: the imports below already cost a second of CPU
    from .db import session_scope

    with session_scope(os.environ[URL_VARIABLE], migrate=False) as session:
        compute(session, study_id, at)
    return 0


if __name__ == "__main__":
    sys.exit(main())
