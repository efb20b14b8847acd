"""Database engine, URL and sessions: SQLite in WAL mode by default, PostgreSQL (psycopg 3) by URL.

Everything that opens the database goes through here: :func:`database_url` is the one rule
that picks the database (server and CLI alike), :func:`db_session` is a web request's session
and :func:`session_scope` a command's. ``upgrade(url)`` brings a database to the newest
Alembic revision; the app factory, the CLI's database commands and the demo call it, so a
fresh database never needs a separate step.
"""
from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from flask import current_app, g
from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
URL_ENVIRONMENT_VARIABLE = "PERCEPTLAB_DATABASE_URL"


def database_url(server: Mapping[str, Any], explicit: str | None = None,
                 environ: Mapping[str, str] | None = None) -> str:
    """The database to use: the one rule for the server and every command.

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
    str
        ``explicit``, else ``[server] database_url``, else ``PERCEPTLAB_DATABASE_URL``, else a
        SQLite file ``perceptlab.db`` in ``[server] instance_path`` (the folder is made if missing).
    """
    environ = os.environ if environ is None else environ
    return (explicit or server.get("database_url") or environ.get(URL_ENVIRONMENT_VARIABLE)
            or default_database_url(server.get("instance_path", "instance")))


def default_database_url(instance_path: str | Path) -> str:
    """The embedded default: a SQLite file in the instance folder."""
    path = Path(instance_path).resolve()
    path.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path / 'perceptlab.db'}"


def normalise_url(url: str) -> str:
    """``postgresql://`` means psycopg 3 here (SQLAlchemy alone would pick psycopg2)."""
    if url.startswith("postgresql://"):
        return "postgresql+psycopg://" + url[len("postgresql://"):]
    return url


def make_engine(url: str) -> Engine:
    """Create an engine; SQLite connections get WAL, a busy timeout and foreign keys."""
    if url.startswith("sqlite"):
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
    return create_engine(normalise_url(url), pool_size=10, max_overflow=20, pool_recycle=1800)


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    dbapi_connection.isolation_level = None  # autocommit at the driver level: SQLAlchemy issues BEGIN
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


def make_session_factory(engine: Engine, info: dict | None = None) -> sessionmaker[Session]:
    """Sessions on ``engine``; ``info`` is copied into each session's ``info`` (e.g. an injected clock)."""
    return sessionmaker(engine, expire_on_commit=False, info=info)


def alembic_config(url: str):
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(url: str) -> None:
    """Apply every Alembic migration the database lacks."""
    from alembic import command

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

    The app factory keeps the session factory in ``app.extensions["perceptlab.sessions"]`` and
    registers :func:`close_request_session` as a teardown.
    """
    session = g.get("db_session")
    if session is None:
        session = g.db_session = current_app.extensions["perceptlab.sessions"]()
    return session


def close_request_session(_exc: BaseException | None = None) -> None:
    """Close the request's session, if it opened one (an app-context teardown)."""
    session = g.pop("db_session", None)
    if session is not None:
        session.close()
