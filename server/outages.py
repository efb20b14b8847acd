"""The database out of reach: every request answered 503 with ``Retry-After``, and one log line per outage.

While PostgreSQL restarts (or SQLite stays locked past its busy timeout, or the connection pool is
exhausted), the request in hand cannot be served, but nothing about it is wrong: the client should come
back. :func:`is_unavailable` recognises the errors that mean this (the driver's and SQLAlchemy's
operational and interface errors, a pool timeout), wherever in the chain of causes they sit; the app's
error handler (server/app.py) and the fast lane (server/views/fast_lane.py) answer them with
:func:`unavailable_error`: 503, ``Retry-After`` and the API's JSON error ``{"error": "unavailable", ...}``
(an HTML page for pages). Nothing was stored: every client may send the same request again (the worker
API's responses are idempotent by their IDs).

One log line per outage, per process: :class:`Outages` logs a warning the first time a request meets the
database out of reach, counts the requests refused meanwhile, and logs once more when the database answers
again (a new connection made, or a request that used the database answered below 500): ``database reachable
again after 12.3 s (41 requests answered 503)``. Never a traceback per request: with 30 workers and 4
processes a restart of a few seconds used to write over a thousand of them.
"""
from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable

from .errors import ApiError

log = logging.getLogger("perceptlab.outages")

RETRY_AFTER_S = 5
"""What ``Retry-After`` says during an outage: a PostgreSQL restart takes a few seconds, and clients add
their own jitter (the browser's queue, ``perceptlab simulate``)."""
CODE = "unavailable"
MESSAGE = "the study's database is briefly out of reach; nothing was stored: send the same request again"


def _driver_errors() -> tuple[type[BaseException], ...]:
    """The exception types that mean "the database is out of reach", of the drivers installed."""
    from sqlalchemy import exc

    found: list[type[BaseException]] = [exc.OperationalError, exc.InterfaceError, exc.TimeoutError,
                                        sqlite3.OperationalError]
    try:  # the raw driver connections of the one-statement paths (server/db.py's DriverPool) raise psycopg's own
        import psycopg
    except ImportError:  # pragma: no cover - psycopg is a dependency; SQLite alone needs none
        pass
    else:
        found += [psycopg.OperationalError, psycopg.InterfaceError]
    return tuple(found)


UNAVAILABLE_ERRORS = _driver_errors()


def is_unavailable(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or an exception it was raised from or during) means the database is out of reach."""
    seen = 0
    while exc is not None and seen < 10:  # a short chain: an error handler's own error, a wrapped driver error
        if isinstance(exc, UNAVAILABLE_ERRORS):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


def unavailable_error() -> ApiError:
    """The 503 every route answers while the database is out of reach (the API's JSON error, or a page)."""
    return ApiError(503, CODE, MESSAGE, headers={"Retry-After": str(RETRY_AFTER_S)},
                    retry_after_s=float(RETRY_AFTER_S))


class Outages:
    """One process's record of the database being out of reach: one warning when an outage starts, one line
    when it ends, and the count of requests refused in between (thread-safe; one per app).

    Parameters
    ----------
    seconds : callable
        A monotonic clock in seconds (tests inject one).
    logger : logging.Logger
        Where the two lines go.
    """

    def __init__(self, seconds: Callable[[], float] = time.monotonic, logger: logging.Logger = log,
                 on_start: Callable[[BaseException], None] | None = None):
        self._seconds = seconds
        self._log = logger
        self._on_start = on_start  # the app's: drop every pooled connection (see app_outages)
        self._lock = threading.Lock()
        self.since: float | None = None  # when the current outage began, else None
        self.refused = 0                 # requests answered 503 in the current outage
        self.outages = 0                 # outages seen by this process (metrics)

    @property
    def down(self) -> bool:
        return self.since is not None

    def noticed(self, exc: BaseException, counted: bool = True) -> None:
        """Something met the database out of reach (``exc``): the outage's first line, or nothing more. A
        request answered 503 is ``counted``; background work and a request's teardown are not."""
        with self._lock:
            self.refused += counted
            if self.since is not None:
                return
            self.since = self._seconds()
            self.outages += 1
        from .metrics import OUTAGES

        OUTAGES.inc()
        if self._on_start is not None:
            self._on_start(exc)
        self._log.warning("database out of reach (%s: %s); answering 503 with Retry-After %d s until it is back",
                          type(exc).__name__, _first_line(exc), RETRY_AFTER_S)

    def recovered(self) -> None:
        """The database answered: the outage's closing line (nothing when there is none)."""
        if self.since is None:  # the common case, without the lock
            return
        with self._lock:
            if self.since is None:
                return
            lasted, refused = self._seconds() - self.since, self.refused
            self.since, self.refused = None, 0
        self._log.warning("database reachable again after %.1f s (%d requests answered 503)", lasted, refused)


def _drop_connections(engine, exc: BaseException) -> None:
    """Empty the pools when the database went away, not when the pool was only exhausted (a timeout waiting for a
    free connection: those connections are fine, and reopening them all would only add to the load)."""
    from sqlalchemy.exc import TimeoutError as PoolTimeout

    if not isinstance(exc, PoolTimeout):
        engine.dispose()


def _first_line(exc: BaseException) -> str:
    """The driver's message without SQLAlchemy's statement and link lines, for the one log line."""
    text = str(getattr(exc, "orig", None) or exc).strip()
    return (text.splitlines() or [""])[0][:200]


def app_outages(app) -> Outages:
    """The app's :class:`Outages` (one per app, made on first use), with a hook on the engine's pool: a new
    connection made means the database answers again."""
    from .services import app_services

    services = app_services(app)

    def make() -> Outages:
        from sqlalchemy import event

        # When an outage begins every pooled connection is dropped (engine.dispose(): the ORM pool's and, by its
        # listener, the fast lane's driver pool's): after a restart each of them would fail once more ("terminating
        # connection due to administrator command") and start the outage again after the first new connection.
        outages = Outages(on_start=lambda exc: _drop_connections(services.engine, exc))
        event.listen(services.engine, "connect", lambda *_: outages.recovered())
        return outages

    return services.state_of(__name__, make)


def log_failure(app, logger: logging.Logger, exc: BaseException, message: str, *args) -> None:
    """Log a failed piece of background work (a stopping check, a live scale, a forecast): with its traceback,
    unless the database is out of reach: then it is part of the app's outage (one line for all of it)."""
    if app is not None and is_unavailable(exc):
        app_outages(app).noticed(exc, counted=False)
    else:
        logger.error(message, *args, exc_info=exc)
