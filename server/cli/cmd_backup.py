"""``perceptlab backup --out DIR`` and ``perceptlab --instance NEW restore DIR`` (:mod:`server.backup`)."""
from __future__ import annotations

from pathlib import Path

import click

from .base import UserError, cli, cli_config, cli_database, cli_instance, require_database
from .cmd_study import DATABASE_OPTION


def _progress(iterable, total: int, description: str):
    from tqdm.auto import tqdm
    return tqdm(iterable, total=total, desc=description, unit="file", leave=False, disable=None)


@cli.command("backup")
@click.option("--out", required=True, type=click.Path(path_type=Path),
              help="A new (or empty) folder for the backup.")
@DATABASE_OPTION
def backup_command(out: Path, database_url: str | None) -> None:
    """Write a consistent snapshot of the deployment into a new folder.

    The database (SQLite's online backup, or pg_dump of PostgreSQL), a copy of every study's stimulus
    folder with each file's SHA-256, and the configuration without its secrets. The secret key is not in
    the backup: keep the instance's secret_key file (or PERCEPTLAB_SECRET_KEY) safe beside it, or the
    restored deployment's worker links, codes and pseudonyms change."""
    from server.backup import BackupError, backup

    url = require_database(database_url)
    try:
        report = backup(url, out, cli_config(), progress=_progress)
    except BackupError as exc:
        raise UserError(str(exc)) from None
    rows = sum(report.tables.values())
    click.echo(f"backup written to {report.folder}: {report.database} database ({rows} rows in "
               f"{len(report.tables)} tables), {report.stimulus_files} stimulus files "
               f"({report.stimulus_bytes / 1e6:.1f} MB), configuration without secrets")
    click.echo("the secret key is not in the backup: keep the instance's secret_key file (or "
               "PERCEPTLAB_SECRET_KEY) with it")


@cli.command("restore")
@click.argument("backup_dir", metavar="DIR", type=click.Path(exists=True, file_okay=False, path_type=Path))
@DATABASE_OPTION
def restore_command(backup_dir: Path, database_url: str | None) -> None:
    """Bring the backup in DIR up in this (new) instance: perceptlab --instance NEW restore DIR.

    The instance's database must be new and empty (its SQLite file, or an empty PostgreSQL database from
    --database-url / PERCEPTLAB_DATABASE_URL). Stimulus files are checked against their SHA-256 and copied
    into NEW/restored_stimuli/; the schema is migrated to this version; row counts are compared with the
    backup's."""
    from server.backup import BackupError, restore
    from server.config import find_secret_key

    url, _ = cli_database(database_url)
    try:
        report = restore(backup_dir, url, cli_instance())
    except BackupError as exc:
        raise UserError(str(exc)) from None
    click.echo(f"restored {report.studies} studies ({sum(report.tables.values())} rows, "
               f"{report.stimulus_files} stimulus files) into {cli_instance()}")
    if find_secret_key(cli_config().get("server", {}))[0] is None:
        click.echo("warning: this instance has no secret key: copy the old instance's secret_key file into it "
                   "(or set PERCEPTLAB_SECRET_KEY as before); a new key would change worker links, completion "
                   "codes and export pseudonyms", err=True)
