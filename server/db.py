"""Database engine, URL and sessions: SQLite in WAL mode by default, PostgreSQL (psycopg 3) by URL.

Everything that opens the database goes through here: :func:`database_url` is the one rule
that picks the database (server and CLI alike; :func:`resolve_database` also says why),
:func:`db_session` is a web request's session and :func:`session_scope` a command's.
``upgrade(url)`` brings a database to the newest Alembic revision; the app factory, the CLI's
database commands and the demo call it, so a fresh database never needs a separate step. Naming a
database makes nothing: read-only commands check :func:`database_exists` first.
"""
from __future__ import annotations

import functools
import os
import threading
import time
import weakref
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from flask import g
from sqlalchemy import create_engine, event, exc
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import NullPool

from .services import app_services

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
URL_ENVIRONMENT_VARIABLE = "PERCEPTLAB_DATABASE_URL"
CONNECT_TIMEOUT_S = 10  # PostgreSQL: a new connection's longest wait
INSTANCE_DATABASE = "the instance folder's perceptlab.db"  # how resolve_database says it chose the default
POOL_SIZE, MAX_OVERFLOW = 10, 20  # PostgreSQL connections per process: kept open, and opened at most beyond them


def database_url(server: Mapping[str, Any], explicit: str | None = None,
                 environ: Mapping[str, str] | None = None) -> str:
    """The database to use: the one rule for the server and every command (see :func:`resolve_database`)."""
    return resolve_database(server, explicit, environ)[0]


def resolve_database(server: Mapping[str, Any], explicit: str | None = None,
                     environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """The database URL and how it was chosen (for messages); nothing is made.

    Parameters
    ----------
    server : mapping
        The ``[server]`` section of the configuration (with any overrides of the caller).
    explicit : str, optional
        A URL the user gave for this run (a command's ``--database-url``); wins over everything.
    environ : mapping, optional
        Where ``PERCEPTLAB_DATABASE_URL`` is looked up (default: ``os.environ``).

    Returns
    -------
    (str, str)
        ``explicit``, else ``PERCEPTLAB_DATABASE_URL``, else ``[server] database_url`` (configuration
        files, the instance's ``config.toml``, ``PERCEPTLAB_SERVER_DATABASE_URL``), else a SQLite file
        ``perceptlab.db`` in the instance folder ``[server] instance_path``; and which of these it was.
    """
    environ = os.environ if environ is None else environ
    if explicit:
        return explicit, "--database-url"
    if environ.get(URL_ENVIRONMENT_VARIABLE):
        return environ[URL_ENVIRONMENT_VARIABLE], URL_ENVIRONMENT_VARIABLE
    if server.get("database_url"):
        return server["database_url"], "[server] database_url"
    return default_database_url(server.get("instance_path", "instance")), INSTANCE_DATABASE


def default_database_url(instance_path: str | Path) -> str:
    """The embedded default: a SQLite file in the instance folder (made by the first migration)."""
    return f"sqlite:///{Path(instance_path).absolute() / 'perceptlab.db'}"


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite URL (None for other databases and in-memory SQLite)."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if not parsed.drivername.startswith("sqlite") or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database).absolute()


def safe_url(url: str) -> str:
    """The URL without its password, for messages."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - a malformed URL is shown as given (it has no parsable password)
        return url


def database_exists(url: str) -> bool:
    """Whether ``url`` names a perceptlab database that exists: a SQLite file that is there, or a server
    database holding the migrations table. Makes nothing (a SQLite URL's file is only looked at).

    Raises
    ------
    sqlalchemy.exc.OperationalError
        The database server cannot be reached.
    """
    path = sqlite_path(url)
    if path is not None:
        return path.is_file()
    if url.startswith("sqlite"):
        return True  # in memory
    from sqlalchemy import inspect

    with _one_connection(url) as connection:
        return inspect(connection).has_table("alembic_version")


@contextmanager
def _one_connection(url: str) -> Iterator[Any]:
    """One connection on an engine of its own, disposed of after the block: for the checks made before (or
    without) the app's engine. A server out of reach fails after CONNECT_TIMEOUT_S."""
    connect_args = {} if url.startswith("sqlite") else {"connect_timeout": CONNECT_TIMEOUT_S}
    engine = create_engine(normalise_url(url), poolclass=NullPool, connect_args=connect_args)
    try:
        with engine.connect() as connection:
            yield connection
    finally:
        engine.dispose()


def _make_sqlite_folder(url: str) -> None:
    """A new SQLite database's folder (the instance folder), made when a database is about to be."""
    path = sqlite_path(url)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)


def normalise_url(url: str) -> str:
    """``postgresql://`` means psycopg 3 here (SQLAlchemy alone would pick psycopg2)."""
    if url.startswith("postgresql://"):
        return "postgresql+psycopg://" + url[len("postgresql://"):]
    return url


def make_engine(url: str) -> Engine:
    """Create an engine; SQLite connections get WAL, a busy timeout and foreign keys."""
    if url.startswith("sqlite"):
        _make_sqlite_folder(url)
        # One connection per thread; WAL lets readers run beside the single writer and the
        # busy timeout makes concurrent writers wait instead of failing with "database is locked".
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})
        event.listen(engine, "connect", _sqlite_pragmas)
        # Let SQLAlchemy, not pysqlite, open transactions, so that BEGIN IMMEDIATE takes the write lock
        # up front (no lock upgrade deadlocks between two writers).
        event.listen(engine, "begin", lambda conn: conn.exec_driver_sql("BEGIN IMMEDIATE"))
        return engine
    # No pre-ping: it would cost a round trip per request; recycled connections and the
    # pool's invalidation on a failed statement cover server restarts.
    # A server out of reach (not refusing: silent) fails a connection after CONNECT_TIMEOUT_S, not the system's
    # minutes: the request is answered 503 (server/outages.py) while the client still waits.
    return create_engine(normalise_url(url), pool_size=POOL_SIZE, max_overflow=MAX_OVERFLOW, pool_recycle=1800,
                         connect_args={"connect_timeout": CONNECT_TIMEOUT_S})


def pool_counts(engine: Engine) -> dict[tuple[str, str], int]:
    """This process's database connections, for the metrics (server/metrics.py): the engine's pool (``orm``)
    and the one-statement paths' :class:`DriverPool` (``driver``), each ``in_use`` and ``open``."""
    pool = engine.pool
    counts: dict[tuple[str, str], int] = {}
    if hasattr(pool, "checkedout"):
        counts[("orm", "in_use")] = pool.checkedout()
        counts[("orm", "open")] = pool.checkedout() + pool.checkedin()
    driver = _DRIVER_POOLS.get(engine)
    if driver is not None:
        counts[("driver", "open")], idle = driver.counts()
        counts[("driver", "in_use")] = counts[("driver", "open")] - idle
    return counts


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    dbapi_connection.isolation_level = None  # autocommit at the driver level: SQLAlchemy issues BEGIN
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


@contextmanager
def autocommit_driver_connection(engine: Engine) -> Iterator[Any]:
    """A driver connection (psycopg's, on PostgreSQL) in autocommit mode, from the engine's
    :class:`DriverPool`.

    For a hot path that is a single statement, its own transaction: no BEGIN and COMMIT round
    trips and none of SQLAlchemy's per-statement work. The connection goes back to the pool when
    the block ends; one that broke (the server went away) is closed instead.
    """
    pool = _DRIVER_POOLS.get(engine)
    if pool is None:
        with _DRIVER_POOLS_LOCK:  # one pool per engine, even when its first requests arrive together
            pool = _DRIVER_POOLS.get(engine) or _DRIVER_POOLS.setdefault(engine, DriverPool(engine))
    connection = pool.take()
    try:
        yield connection
    except BaseException:
        if connection.closed or getattr(connection, "broken", False):
            pool.discard(connection)
        else:  # a failed statement in autocommit mode left no transaction behind
            pool.give_back(connection)
        raise
    pool.give_back(connection)


class DriverPool:
    """Driver connections kept in autocommit mode, beside the engine's own pool, for one-statement paths.

    A checkout from SQLAlchemy's pool, with the switch to autocommit and back, cost about a fifth of
    a vote's CPU; here a checkout is a list pop under a lock. Every connection goes back after each
    use, so a server that starts a thread per request holds no more connections than requests in
    flight: at most ``size`` (a caller beyond that waits up to ``timeout`` seconds, then gets
    :class:`sqlalchemy.exc.TimeoutError`, as from the engine's pool). Connections are made by the
    engine (its connect arguments and events) and detached from its pool. ``engine.dispose()``
    closes the idle ones, and those in use when they come back; a forked process starts afresh.
    """

    def __init__(self, engine: Engine, size: int = POOL_SIZE + MAX_OVERFLOW, timeout: float = 30.0):
        # A weak reference: the engine keeps its pool (the dispose listener), and the pool must not keep
        # the engine, or the engine (a key of _DRIVER_POOLS) would never be freed.
        self._engine = weakref.ref(engine)
        self._size, self._timeout = size, timeout
        self._ready = threading.Condition()
        self._reset()
        event.listen(engine, "engine_disposed", self._on_dispose)

    def _reset(self) -> None:
        self._idle: list[Any] = []
        self._open = 0
        self._generation = object()  # connections of an earlier generation are closed when they come back
        self._pid = os.getpid()

    def take(self) -> Any:
        with self._ready:
            if self._pid != os.getpid():  # forked: the parent's connections are not this process's to use
                self._reset()
            deadline = time.monotonic() + self._timeout
            while not self._idle and self._open >= self._size:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    from sqlalchemy.exc import TimeoutError as PoolTimeout

                    raise PoolTimeout(f"no database connection free for {self._timeout:g} s "
                                      f"({self._size} in use)")
                self._ready.wait(remaining)
            if self._idle:
                return self._idle.pop()
            self._open += 1
            generation = self._generation
        try:
            pooled = self._engine().raw_connection()
            driver = pooled.driver_connection
            pooled.detach()  # ours now: the engine's pool neither counts nor resets it
            driver.autocommit = True
            driver._perceptlab_generation = generation
            return driver
        except BaseException:
            self._closed_one(generation)
            raise

    def counts(self) -> tuple[int, int]:
        """(open, idle) connections of this process (the metrics)."""
        with self._ready:
            return (self._open, len(self._idle)) if self._pid == os.getpid() else (0, 0)

    def give_back(self, connection: Any) -> None:
        with self._ready:
            if connection._perceptlab_generation is self._generation and self._pid == os.getpid():
                self._idle.append(connection)
                self._ready.notify()
                return
        connection.close()  # made before engine.dispose() (or in the parent process)

    def discard(self, connection: Any) -> None:
        try:
            connection.close()
        finally:
            self._closed_one(connection._perceptlab_generation)

    def _closed_one(self, generation: object) -> None:
        with self._ready:
            if generation is self._generation:
                self._open -= 1
                self._ready.notify()

    def _on_dispose(self, _engine: Engine) -> None:
        with self._ready:
            idle = self._idle
            self._reset()
            self._ready.notify_all()
        for connection in idle:
            connection.close()


_DRIVER_POOLS: weakref.WeakKeyDictionary[Engine, DriverPool] = weakref.WeakKeyDictionary()
_DRIVER_POOLS_LOCK = threading.Lock()


def make_session_factory(engine: Engine, info: dict | None = None) -> sessionmaker[Session]:
    """Sessions on ``engine``; ``info`` is copied into each session's ``info`` (e.g. an injected clock).
    Every paradigm's tables are mapped first (:func:`server.paradigms.load_models`)."""
    from sqlalchemy.orm import configure_mappers

    from .paradigms import load_models

    load_models()
    # Every mapper configured now, not by the first ORM query of a request: that took a server process's
    # first entry about 40 ms of CPU (its first requests queue behind it, and a short load run pays it
    # once per gunicorn worker).
    configure_mappers()
    return sessionmaker(engine, expire_on_commit=False, info=info)


def alembic_config(url: str):
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


@functools.cache
def _migration_heads() -> frozenset[str]:
    """The newest revisions of :data:`MIGRATIONS`: read once per process (Alembic imports every migration file
    to find them, 50 ms each time)."""
    from alembic.script import ScriptDirectory

    return frozenset(ScriptDirectory(str(MIGRATIONS)).get_heads())


def at_newest_revision(url: str) -> bool:
    """Whether the database exists and its Alembic revision is already the newest (one query, no import of the
    migrations). Any doubt (no database, no version table, an error) answers False."""
    path = sqlite_path(url)
    if path is not None and not path.is_file():
        return False
    try:
        with _one_connection(url) as connection:
            stored = connection.exec_driver_sql("SELECT version_num FROM alembic_version").scalars().all()
    except exc.DBAPIError:
        return False
    return frozenset(stored) == _migration_heads()


def upgrade(url: str) -> None:
    """Apply every Alembic migration the database lacks.

    A database already at the newest revision costs one query: the app factory calls this in every process it
    starts (each gunicorn worker, each command), and Alembic's own check imports every migration file.
    """
    from alembic import command

    if at_newest_revision(url):
        return
    _make_sqlite_folder(url)
    command.upgrade(alembic_config(normalise_url(url)), "head")


@contextmanager
def session_scope(url: str, *, migrate: bool = True) -> Iterator[Session]:
    """A session of its own engine, for a command: commits on success, rolls back on any error.

    Parameters
    ----------
    url : str
        The database, usually from :func:`database_url`.
    migrate : bool
        Apply missing migrations first (a command may be the first thing to touch a new database).
    """
    if migrate:
        upgrade(url)
    engine = make_engine(url)
    session = make_session_factory(engine)()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()
        engine.dispose()


def db_session() -> Session:
    """The current web request's database session (opened on first use, closed at teardown).

    The app factory keeps the session factory in the app's services
    (:attr:`server.services.Services.sessions`) and registers :func:`close_request_session` as a teardown.
    """
    session = g.get("db_session")
    if session is None:
        session = g.db_session = app_services().sessions()
    return session


def close_request_session(_exc: BaseException | None = None) -> None:
    """Close the request's session, if it opened one (an app-context teardown)."""
    session = g.pop("db_session", None)
    if session is not None:
        session.close()


@contextmanager
def advisory_try_lock(engine: Engine, key: int) -> Iterator[bool]:
    """Hold PostgreSQL's session-level advisory lock ``key`` for the block if no other session has it
    (yields True), else yield False at once; for work that one process of many should do at a time.
    The lock belongs to the connection's session, not a transaction, so no transaction stays open
    while the block runs."""
    from sqlalchemy import text

    with engine.connect() as connection:
        got = bool(connection.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": key}).scalar())
        connection.commit()
        try:
            yield got
        finally:
            if got:
                connection.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": key})
                connection.commit()
