"""Backups of a deployment and their restore on a fresh instance (``perceptlab backup`` / ``restore``).

A backup is one folder:

``backup.json``
    What it holds: perceptlab's version, when it was made, the database kind, its Alembic revision, the
    row count of every table (the restore checks them) and the stimulus folders.
``database.sqlite`` or ``database.pgdump``
    A consistent snapshot of the database. SQLite: its online backup API (pages copied under a read
    transaction while the server keeps writing). PostgreSQL: ``pg_dump --format=custom`` (one
    repeatable-read transaction), read back with ``pg_restore``.
``stimuli/<k>/``
    A copy of each distinct stimulus folder of the studies (local files: an S3 bucket's objects are
    copies of these, :mod:`server.storage`).
``stimuli.json``
    Every copied file with its size and SHA-256: the restore refuses a backup whose files differ.
``config.json``
    The effective configuration without secrets (no secret key, no passwords in URLs, no keys named
    like a secret). Secrets never enter a backup: a restored instance needs the old secret key (its
    ``secret_key`` file or ``PERCEPTLAB_SECRET_KEY``), or worker links, completion codes and the
    pseudonyms of exports change.

Nothing is written to the backup's final folder until every part is complete (a staging folder is
renamed), and a restore fills only an empty database.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import sqlite3
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import func, inspect, select, update
from sqlalchemy.engine import make_url

from .storage import file_sha256

FORMAT = 1
MANIFEST = "backup.json"
STIMULI_MANIFEST = "stimuli.json"
CONFIG_FILE = "config.json"
SQLITE_FILE = "database.sqlite"
PGDUMP_FILE = "database.pgdump"
STIMULI_FOLDER = "stimuli"
RESTORED_STIMULI = "restored_stimuli"   # inside the new instance folder
SECRET_WORDS = ("secret", "password", "passwd", "token", "api_key", "access_key", "private")


class BackupError(Exception):
    """A backup or restore that cannot go on, explained in one line."""


@dataclass
class BackupReport:
    folder: Path
    database: str          # "sqlite" or "postgresql"
    tables: dict[str, int]
    stimulus_files: int
    stimulus_bytes: int


@dataclass
class RestoreReport:
    database: str
    tables: dict[str, int]
    studies: int
    stimulus_files: int
    warnings: list[str]


def _kind(url: str) -> str:
    backend = make_url(url).get_backend_name()
    if backend not in ("sqlite", "postgresql"):
        raise BackupError(f"backups cover SQLite and PostgreSQL databases, not {backend}")
    return backend


def _libpq_url(url: str) -> str:
    """The URL as pg_dump and pg_restore take it (no SQLAlchemy driver suffix)."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def _run(command: list[str], what: str) -> None:
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise BackupError(f"{command[0]} is not installed: PostgreSQL backups need the PostgreSQL client tools "
                          "(Debian: apt-get install postgresql-client, the server's major version)") from None
    if done.returncode != 0:
        message = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        raise BackupError(f"{what} failed: {message}")


def table_counts(session) -> dict[str, int]:
    """Rows of every perceptlab table (the migrations' own table left out), by name."""
    from server.models import Base
    from server.paradigms import load_models

    load_models()
    present = set(inspect(session.connection()).get_table_names())
    return {name: int(session.scalar(select(func.count()).select_from(table)))
            for name, table in sorted(Base.metadata.tables.items()) if name in present}


def _revision(session) -> str | None:
    from sqlalchemy import text
    try:
        return session.execute(text("SELECT version_num FROM alembic_version")).scalar()
    except Exception:  # noqa: BLE001 - a database without migrations has no revision to report
        return None


def public_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` without its secrets: keys named like a secret are dropped, passwords cut from URLs."""
    def clean(value: Any, key: str = "") -> Any:
        if isinstance(value, Mapping):
            return {k: clean(v, k) for k, v in value.items() if not any(w in k.lower() for w in SECRET_WORDS)}
        if isinstance(value, str) and "://" in value and "@" in value:
            try:
                return make_url(value).render_as_string(hide_password=True)
            except Exception:  # noqa: BLE001 - not a database URL: keep nothing that may hold a credential
                return ""
        return value
    return clean(dict(config))


def backup(url: str, out: str | os.PathLike, config: Mapping[str, Any], *,
           progress: Callable[[Iterable, int, str], Iterable] | None = None,
           clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.timezone.utc)) -> BackupReport:
    """Write a consistent snapshot of the deployment whose database is ``url`` into the new folder ``out``.

    Parameters
    ----------
    url : str
        The deployment's database (SQLAlchemy URL).
    out : path-like
        A folder that does not exist yet, or is empty.
    config : mapping
        The deployment's configuration (its secrets are left out of the backup).
    progress : callable, optional
        ``progress(iterable, total, description)`` wraps the file copies (a progress bar on a terminal).

    Returns
    -------
    BackupReport
    """
    from server.db import session_scope
    from server.models import Study

    kind = _kind(url)
    out = Path(out).absolute()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise BackupError(f"{out} exists and is not an empty folder: a backup goes into a new folder")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        if kind == "sqlite":
            from server.db import sqlite_path
            source = sqlite_path(url)
            if source is None or not source.is_file():
                raise BackupError(f"no SQLite database file at {source}")
            with sqlite3.connect(source) as src, sqlite3.connect(staging / SQLITE_FILE) as dst:
                src.backup(dst)      # a consistent copy, page by page, while the server goes on writing
            snapshot_url = f"sqlite:///{staging / SQLITE_FILE}"
        else:
            _run(["pg_dump", "--format=custom", "--no-owner", "--no-privileges", "--file",
                  str(staging / PGDUMP_FILE), _libpq_url(url)], "pg_dump")
            snapshot_url = url
        # Counts and stimulus folders are read from the snapshot itself where there is one (SQLite), so
        # they describe exactly what was saved; pg_dump's snapshot is read back by the restore's check.
        with session_scope(snapshot_url, migrate=False) as session:
            tables = table_counts(session)
            revision = _revision(session)
            roots = sorted({str(r) for r in session.scalars(select(Study.stimulus_root)) if r})
        files, total_bytes, folders = [], 0, []
        for k, root in enumerate(roots):
            source = Path(root)
            if not source.is_dir():
                raise BackupError(f"the stimulus folder {source} of a study is missing: nothing can restore its "
                                  "files")
            paths = sorted(p for p in source.rglob("*") if p.is_file() and not p.is_symlink())
            target = staging / STIMULI_FOLDER / str(k)
            folders.append({"index": k, "original": root, "files": len(paths)})
            iterable = progress(paths, len(paths), f"stimuli {k + 1}/{len(roots)}") if progress else paths
            for path in iterable:
                relative = path.relative_to(source)
                (target / relative).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target / relative)
                size = path.stat().st_size
                total_bytes += size
                files.append({"folder": k, "path": relative.as_posix(), "bytes": size,
                              "sha256": file_sha256(target / relative)})
        (staging / STIMULI_MANIFEST).write_text(json.dumps({"folders": folders, "files": files}, indent=1) + "\n")
        (staging / CONFIG_FILE).write_text(json.dumps(public_config(config), indent=1, default=str) + "\n")
        from analysis import __version__
        manifest = {"format": FORMAT, "perceptlab": __version__, "created_at": clock().isoformat(),
                    "database": kind, "revision": revision, "tables": tables,
                    "database_file": SQLITE_FILE if kind == "sqlite" else PGDUMP_FILE,
                    "stimulus_folders": len(folders), "stimulus_files": len(files), "stimulus_bytes": total_bytes}
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
        if out.exists():
            out.rmdir()
        os.replace(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return BackupReport(out, kind, tables, len(files), total_bytes)


def read_manifest(folder: str | os.PathLike) -> dict[str, Any]:
    """``backup.json`` of a backup folder, checked for its format."""
    path = Path(folder) / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise BackupError(f"{folder} is not a perceptlab backup (no {MANIFEST})") from None
    except (OSError, ValueError) as exc:
        raise BackupError(f"{path}: unreadable ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BackupError(f"{path}: not a backup of format {FORMAT}")
    return manifest


def verify_stimuli(folder: str | os.PathLike) -> list[dict]:
    """Check every stimulus file of a backup against its size and SHA-256; return the file list."""
    folder = Path(folder)
    try:
        listing = json.loads((folder / STIMULI_MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise BackupError(f"{folder / STIMULI_MANIFEST}: unreadable ({exc})") from None
    for entry in listing["files"]:
        path = folder / STIMULI_FOLDER / str(entry["folder"]) / entry["path"]
        if not path.is_file() or path.stat().st_size != entry["bytes"] or file_sha256(path) != entry["sha256"]:
            raise BackupError(f"{path}: missing or changed since the backup (size or SHA-256 differs)")
    return listing["folders"]


def _database_is_empty(url: str) -> bool:
    from server.db import make_engine
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            return not inspect(connection).get_table_names()
    finally:
        engine.dispose()


def restore(folder: str | os.PathLike, url: str, instance: str | os.PathLike) -> RestoreReport:
    """Bring the backup in ``folder`` up in an instance whose database ``url`` is empty.

    The stimulus folders are copied into ``instance/restored_stimuli/<k>/`` and every study is pointed at
    its copy; the database is then migrated to this version's head; the row counts are compared with the
    backup's.

    Raises
    ------
    BackupError
        The backup is incomplete or changed, the database is not empty, or the kinds differ.
    """
    from server.db import session_scope, sqlite_path, upgrade
    from server.models import Study

    folder = Path(folder).absolute()
    manifest = read_manifest(folder)
    folders = verify_stimuli(folder)
    kind = _kind(url)
    if kind != manifest["database"]:
        raise BackupError(f"the backup holds a {manifest['database']} database; restore it into a "
                          f"{manifest['database']} database, not {kind}")
    if kind == "sqlite":
        target = sqlite_path(url)
        if target is None:
            raise BackupError("restore needs a SQLite file, not an in-memory database")
        if target.exists() and target.stat().st_size and not _database_is_empty(url):
            raise BackupError(f"{target} already holds a database: restore fills only a new, empty one")
    elif not _database_is_empty(url):
        raise BackupError(f"{make_url(url).render_as_string(hide_password=True)} is not empty: restore fills "
                          "only a new, empty database")
    instance = Path(instance).absolute()
    stimuli_target = instance / RESTORED_STIMULI
    if stimuli_target.exists() and any(stimuli_target.iterdir()):
        raise BackupError(f"{stimuli_target} is not empty: restore into a fresh instance folder")
    instance.mkdir(parents=True, exist_ok=True)
    if kind == "sqlite":
        target.parent.mkdir(parents=True, exist_ok=True)
        with sqlite3.connect(f"file:{folder / SQLITE_FILE}?mode=ro", uri=True) as src, \
                sqlite3.connect(target) as dst:
            src.backup(dst)
    else:
        _run(["pg_restore", "--no-owner", "--no-privileges", "--exit-on-error", "--single-transaction",
              "--dbname", _libpq_url(url), str(folder / PGDUMP_FILE)], "pg_restore")
    moved = {}
    for entry in folders:
        source = folder / STIMULI_FOLDER / str(entry["index"])
        destination = stimuli_target / str(entry["index"])
        shutil.copytree(source, destination) if source.is_dir() else destination.mkdir(parents=True)
        moved[entry["original"]] = str(destination)
    warnings: list[str] = []
    with session_scope(url, migrate=False) as session:
        tables = table_counts(session)
        if tables != manifest["tables"]:
            differ = sorted(k for k in set(tables) | set(manifest["tables"])
                            if tables.get(k) != manifest["tables"].get(k))
            raise BackupError(f"the restored database's row counts differ from the backup's in {', '.join(differ)}")
        for old, new in moved.items():
            session.execute(update(Study).where(Study.stimulus_root == old).values(stimulus_root=new))
        studies = int(session.scalar(select(func.count()).select_from(Study)))
    upgrade(url)    # a backup of an older version comes up at this version's schema
    return RestoreReport(kind, tables, studies, sum(e["files"] for e in folders), warnings)
