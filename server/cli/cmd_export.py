"""``perceptlab export STUDY --out DIR``: a study's files, as its paradigm exports them, and workers_meta.csv
(paired comparison: votes.csv; motion matching: motion.csv, rdk.csv, frames.csv, calibration.csv)."""
from __future__ import annotations

import os
from pathlib import Path

import click

from .base import UserError, cli
from .cmd_study import DATABASE_OPTION


def server_secret_key() -> tuple[str, bool]:
    """The server's secret key, found the way the server finds it, and whether it existed already.

    Order as in ``server.app.build_app``: ``[server] secret_key``, then ``PERCEPTLAB_SECRET_KEY``,
    then the ``secret_key`` file of the instance folder (made when missing).
    """
    from server.app import secret_key
    from server.cli.base import cli_config

    server = cli_config().get("server", {})
    existed = bool(server.get("secret_key") or os.environ.get("PERCEPTLAB_SECRET_KEY")) or \
        (Path(server.get("instance_path", "instance")).resolve() / "secret_key").exists()
    return secret_key(server), existed


@cli.command("export")
@click.argument("study")
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder for the export files (votes.csv or the motion files, and workers_meta.csv; made if "
                   "missing).")
@click.option("--raw-worker-ids", is_flag=True,
              help="Write the platforms' raw worker IDs (personal data) instead of pseudonyms.")
@click.option("--no-gold", is_flag=True, help="Leave out quiz and hidden gold votes.")
@DATABASE_OPTION
def export_command(study: str, out: Path, raw_worker_ids: bool, no_gold: bool, database_url: str | None) -> None:
    """Export the votes of STUDY (its slug) for `perceptlab analyze`, with pseudonymised worker IDs."""
    from analysis.formats import atomic_write_text
    from server import exports
    from server.cli.base import cli_session

    salt = None
    if not raw_worker_ids:
        key, existed = server_secret_key()
        if not existed:
            click.echo("warning: no server secret key found (PERCEPTLAB_SECRET_KEY or instance/secret_key); "
                       "made a new one, so these pseudonyms differ from the dashboard's", err=True)
        salt = exports.study_salt(key, study)
    with cli_session(database_url) as session:
        found = exports.find_study(session, study)
        if found is None:
            from sqlalchemy import select

            from server.models import Study
            known = ", ".join(session.scalars(select(Study.slug))) or "none"
            raise UserError(f"no study {study!r} (known: {known})")
        export = exports.export_study(session, found, salt=salt, include_gold=not no_gold)
    out.mkdir(parents=True, exist_ok=True)
    for name, text in export.files.items():
        atomic_write_text(out / name, text)
    for name, description in export.report:
        click.echo(f"{out / name}: {description}")
    click.echo(f"worker IDs: {'RAW (personal data: do not publish)' if raw_worker_ids else 'pseudonymised'}")
    if export.warning:
        click.echo(export.warning, err=True)
