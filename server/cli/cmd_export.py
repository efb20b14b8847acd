"""``perceptlab export STUDY --out DIR``: votes.csv and workers_meta.csv of a study; for a motion-matching
study motion.csv, rdk.csv, frames.csv, calibration.csv and workers_meta.csv."""
from __future__ import annotations

import os
from pathlib import Path

import click

from . import UserError, cli
from .cmd_study import DATABASE_OPTION


def server_secret_key() -> tuple[str, bool]:
    """The server's secret key, found the way the server finds it, and whether it existed already.

    Order as in ``server.app.build_app``: ``[server] secret_key``, then ``PERCEPTLAB_SECRET_KEY``,
    then the ``secret_key`` file of the instance folder (made when missing).
    """
    from server.app import secret_key
    from server.config import load_config

    server = load_config().get("server", {})
    existed = bool(server.get("secret_key") or os.environ.get("PERCEPTLAB_SECRET_KEY")) or \
        (Path(server.get("instance_path", "instance")).resolve() / "secret_key").exists()
    return secret_key(server), existed


@cli.command("export")
@click.argument("study")
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder for votes.csv and workers_meta.csv (made if missing).")
@click.option("--raw-worker-ids", is_flag=True,
              help="Write the platforms' raw worker IDs (personal data) instead of pseudonyms.")
@click.option("--no-gold", is_flag=True, help="Leave out quiz and hidden gold votes.")
@DATABASE_OPTION
def export_command(study: str, out: Path, raw_worker_ids: bool, no_gold: bool, database_url: str | None) -> None:
    """Export the votes of STUDY (its slug) for `perceptlab analyze`, with pseudonymised worker IDs."""
    from analysis.formats import atomic_write_text
    from server import exports
    from server.cli._db import cli_session

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
        if found.is_motion:
            tables = exports.export_motion(session, found.id, salt=salt)
            tables["frames.csv"] = exports.export_frames(session, found.id, salt=salt)
            workers = exports.workers_meta(session, found.id, salt=salt)
            _write_motion(out, tables, workers, raw_worker_ids)
            return
        rows = exports.export_votes(session, found.id, pseudonymise=not raw_worker_ids,
                                    include_gold=not no_gold, salt=salt)
        workers = exports.workers_meta(session, found.id, salt=salt)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "votes.csv", exports.votes_csv_text(rows))
    atomic_write_text(out / "workers_meta.csv", exports.workers_meta_csv_text(workers))
    counts = exports.vote_counts(rows)
    click.echo(f"{out / 'votes.csv'}: {counts['votes']} votes ({counts['gold']} gold) by {counts['workers']} "
               f"workers in {counts['sets']} sets")
    click.echo(f"{out / 'workers_meta.csv'}: {len(workers)} workers; worker IDs "
               f"{'RAW (personal data: do not publish)' if raw_worker_ids else 'pseudonymised'}")
    if not rows:
        click.echo("no votes yet: perceptlab analyze needs at least one", err=True)


def _write_motion(out: Path, tables: dict, workers: list, raw_worker_ids: bool) -> None:
    from analysis.formats import atomic_write_text
    from server import exports

    out.mkdir(parents=True, exist_ok=True)
    for name, text in exports.motion_csv_texts(tables).items():
        atomic_write_text(out / name, text)
    atomic_write_text(out / "workers_meta.csv", exports.workers_meta_csv_text(workers))
    motion = tables["motion.csv"]
    click.echo(f"{out / 'motion.csv'}: {len(motion)} main trials by {len({r['worker_id'] for r in motion})} workers "
               f"({sum(r['timing_flagged'] == '1' for r in motion)} with frame drops)")
    click.echo(f"{out / 'rdk.csv'}: {len(tables['rdk.csv'])} RDK trials; {out / 'frames.csv'}: "
               f"{len(tables['frames.csv'])} frames; {out / 'calibration.csv'}: {len(tables['calibration.csv'])} "
               "calibrations")
    click.echo(f"{out / 'workers_meta.csv'}: {len(workers)} workers; worker IDs "
               f"{'RAW (personal data: do not publish)' if raw_worker_ids else 'pseudonymised'}")
    if not motion:
        click.echo("no main trials yet: perceptlab analyze-motion needs at least one", err=True)
