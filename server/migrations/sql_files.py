"""What the migrations that install SQL files of the server package share (ARCHITECTURE.md, "The response
pipeline": a one-statement function's text has one home, a SQL file that migrations read and pin): reading
a file, installing files on PostgreSQL, and reaching another migration's module for a text it keeps.
"""
from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

from alembic import op

SERVER = Path(__file__).resolve().parents[1]
VERSIONS = Path(__file__).with_name('versions')


def sql_text(relative: str) -> str:
    """A SQL file of the server package, as text (its bytes are what a migration's ``SQL_FILES`` pins)."""
    return (SERVER / relative).read_bytes().decode('utf-8')


def install(files: Iterable[str]) -> None:
    """Run each SQL file (relative to the server package), in order, on PostgreSQL; other databases have none."""
    bind = op.get_bind()
    if bind.dialect.name == 'postgresql':
        for relative in files:
            # The driver's own execute: the text is SQL as written (no bind parameters are parsed in it).
            bind.exec_driver_sql(sql_text(relative))


def migration(file_name: str) -> ModuleType:
    """The module of the migration ``versions/<file_name>`` (migration files are not importable by name)."""
    path = VERSIONS / file_name
    spec = importlib.util.spec_from_file_location(f'perceptlab_migration_{path.stem}', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
