"""The backup drill: `perceptlab backup` of a deployment with a study and its votes, `perceptlab --instance NEW
restore` into a new instance, and every export file of the study compared byte for byte, on SQLite and
PostgreSQL; secrets stay out of backups, and a changed backup or a non-empty database is refused."""
from __future__ import annotations

import itertools
import json
import os

import pytest
from click.testing import CliRunner

from server.cli import cli

from .conftest import _admin_connection, _database_url
from .simulated_votes import add_votes

SECRET = "test-secret"  # make_test_app's secret key
_names = itertools.count()


@pytest.fixture
def empty_target(request, database_url, tmp_path, postgres_template=None):
    """(instance folder, database URL) of a new deployment with an empty database of the same kind."""
    instance = tmp_path / "new-instance"
    if database_url.startswith("sqlite"):
        yield instance, f"sqlite:///{instance / 'perceptlab.db'}"
        return
    template = request.getfixturevalue("postgres_template")
    name = f"perceptlab_restore_{os.getpid()}_{next(_names)}"
    with _admin_connection() as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    url = _database_url(name)
    yield instance, url
    template.release(url)


def _export(runner, slug: str, url: str, out) -> dict[str, bytes]:
    result = runner.invoke(cli, ["export", slug, "--out", str(out), "--database-url", url, "--include-pilot"])
    assert result.exit_code == 0, result.output
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


def test_backup_and_restore_drill_keeps_every_export(app, study, tmp_path, monkeypatch, empty_target):
    add_votes(app, study, honest=3, random=1, pairs_per_worker=6, seed=3)
    monkeypatch.setenv("PERCEPTLAB_SECRET_KEY", SECRET)
    runner, url = CliRunner(), app.config["DATABASE_URL"]
    before = _export(runner, study, url, tmp_path / "before")
    assert b"," in before["votes.csv"] and len(before["votes.csv"].splitlines()) > 10

    backup_dir = tmp_path / "backup"
    result = runner.invoke(cli, ["backup", "--out", str(backup_dir), "--database-url", url])
    assert result.exit_code == 0, result.output
    manifest = json.loads((backup_dir / "backup.json").read_text())
    assert manifest["stimulus_files"] > 0 and manifest["tables"]["study"] == 1
    everything = b"".join(p.read_bytes() for p in backup_dir.rglob("*.json"))
    assert SECRET.encode() not in everything                 # no secret in the manifest or the configuration

    instance, new_url = empty_target
    result = runner.invoke(cli, ["--instance", str(instance), "restore", str(backup_dir), "--database-url", new_url])
    assert result.exit_code == 0, result.output
    assert "restored 1 studies" in result.output
    after = _export(runner, study, new_url, tmp_path / "after")
    assert after == before

    # The restored study shows its files from the new instance's copy.
    from sqlalchemy import select

    from server.db import session_scope
    from server.models import Study
    with session_scope(new_url, migrate=False) as session:
        root = session.scalar(select(Study.stimulus_root))
    assert root.startswith(str(instance)) and any(p.is_file() for p in (instance / "restored_stimuli").rglob("*"))

    # A second restore into the same, now full, database is refused in one line.
    again = runner.invoke(cli, ["--instance", str(tmp_path / "third"), "restore", str(backup_dir),
                                "--database-url", new_url])
    assert again.exit_code == 2 and "restore fills only a new, empty" in again.output
    assert again.output.count("\n") == 1


def test_a_changed_backup_is_refused(app, study, tmp_path, monkeypatch):
    runner, url = CliRunner(), app.config["DATABASE_URL"]
    backup_dir = tmp_path / "backup"
    assert runner.invoke(cli, ["backup", "--out", str(backup_dir), "--database-url", url]).exit_code == 0
    victim = next(p for p in (backup_dir / "stimuli").rglob("*.png"))
    victim.write_bytes(victim.read_bytes()[:-1] + b"x")
    instance = tmp_path / "new"
    result = runner.invoke(cli, ["--instance", str(instance), "restore", str(backup_dir)])
    assert result.exit_code == 2 and "changed since the backup" in result.output
    assert not (instance / "perceptlab.db").exists()


def test_backup_goes_into_a_new_folder_only(app, study, tmp_path):
    runner, url = CliRunner(), app.config["DATABASE_URL"]
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "keep.txt").write_text("mine")
    result = runner.invoke(cli, ["backup", "--out", str(taken), "--database-url", url])
    assert result.exit_code == 2 and "not an empty folder" in result.output
    assert [p.name for p in taken.iterdir()] == ["keep.txt"]


def test_public_config_drops_secrets():
    from server.backup import public_config
    config = {"server": {"secret_key": "s3cr3t", "database_url": "postgresql+psycopg://u:pw@db/x",
                         "instance_path": "/srv/i"},
              "prolific": {"api_token": "tok"}, "storage": {"bucket": "b", "aws_secret_access_key": "k"}}
    clean = public_config(config)
    text = json.dumps(clean)
    assert "s3cr3t" not in text and "pw" not in text and "tok" not in text and '"k"' not in text
    assert clean["server"]["instance_path"] == "/srv/i" and clean["storage"]["bucket"] == "b"
    assert clean["server"]["database_url"].startswith("postgresql+psycopg://u:***@db/x")
