"""Alembic environment: the URL comes from the config object built by ``server.db.alembic_config``."""
from __future__ import annotations

from contextlib import contextmanager

from alembic import context

from server.db import make_engine
from server.models import Base
from server.paradigms import load_models

load_models()  # every paradigm package's tables (its models.py) join Base.metadata
config = context.config
target_metadata = Base.metadata


def run_migrations_offline() -> None:
    context.configure(url=config.get_main_option("sqlalchemy.url"), target_metadata=target_metadata,
                      literal_binds=True, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connectable = config.attributes.get("connection")
    if connectable is not None:
        _run(connectable)
        return
    engine = make_engine(config.get_main_option("sqlalchemy.url"))
    try:
        with engine.connect() as connection:
            _run(connection)
    finally:
        engine.dispose()


def _run(connection) -> None:
    # render_as_batch: SQLite cannot ALTER most things; batch mode copies tables instead.
    context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True,
                      compare_type=True)
    with _sqlite_foreign_keys_off(connection):
        with context.begin_transaction():
            context.run_migrations()


@contextmanager
def _sqlite_foreign_keys_off(connection):
    """SQLite: foreign keys off while batch mode copies tables, checked once the migrations are done.

    Batch mode drops the old table after copying it, and with foreign keys on, SQLite's DROP TABLE
    first deletes every row, which cascades: copying ``trial`` deleted every vote, copying ``page``
    every trial. The pragma is a no-op inside a transaction, so it is set on the driver's connection
    before the migrations' transaction begins.
    """
    if connection.dialect.name != "sqlite" or connection.in_transaction():
        yield
        return
    driver = connection.connection.driver_connection
    driver.execute("PRAGMA foreign_keys=OFF")
    try:
        yield
        problems = driver.execute("PRAGMA foreign_key_check").fetchall()
        if problems:
            raise RuntimeError(f"the migrations left rows with broken foreign keys (table, rowid, parent): "
                               f"{problems[:5]}")
    finally:
        driver.execute("PRAGMA foreign_keys=ON")


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
