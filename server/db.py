"""Database engine and sessions: SQLite in WAL mode by default, PostgreSQL (psycopg 3) by URL.

``upgrade(url)`` brings a database to the newest Alembic revision; the app
factory, ``perceptlab study create`` and the demo call it, so a fresh
database never needs a separate step.
"""
from __future__ import annotations

from pathlib import Path

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

MIGRATIONS = Path(__file__).resolve().parent / "migrations"


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
