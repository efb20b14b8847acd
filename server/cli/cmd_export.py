"""``perceptlab export STUDY --out DIR``: a study's files, as its paradigm exports them, and workers_meta.csv
(paired comparison: votes.csv; motion matching: motion.csv, rdk.csv, frames.csv, calibration.csv)."""
from __future__ import annotations

from pathlib import Path

import click

from .base import cli, cli_secret_key
from .cmd_study import DATABASE_OPTION

INCLUDE_PILOT_HELP = ("Also export pilot and simulated participants (the preview, perceptlab simulate, perceptlab "
                      "study pilot); left out by default.")


@cli.command("export")
@click.argument("study")
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder for the export files (votes.csv or the motion files, and workers_meta.csv; made if "
                   "missing).")
@click.option("--raw-worker-ids", is_flag=True,
              help="Write the platforms' raw worker IDs (personal data) instead of pseudonyms.")
@click.option("--no-gold", is_flag=True,
              help="Leave out quiz and hidden gold votes (a paired study's gold trial of a design pair stays, as a "
                   "vote of that pair without its known answer).")
@click.option("--include-pilot", is_flag=True, help=INCLUDE_PILOT_HELP)
@DATABASE_OPTION
def export_command(study: str, out: Path, raw_worker_ids: bool, no_gold: bool, include_pilot: bool,
                   database_url: str | None) -> None:
    """Export the votes of STUDY (its slug) for `perceptlab analyze`, with pseudonymised worker IDs.

    Pilot and simulated participants (previews, `perceptlab simulate`, `perceptlab study pilot`) are left
    out unless --include-pilot."""
    from server.cli.base import cli_session

    with cli_session(database_url) as session:
        export = export_files(session, study, out, raw_worker_ids=raw_worker_ids, include_gold=not no_gold,
                              include_pilot=include_pilot)
    for name, description in export.report:
        click.echo(f"{out / name}: {description}")
    click.echo(f"worker IDs: {'RAW (personal data: do not publish)' if raw_worker_ids else 'pseudonymised'}")
    if export.warning:
        click.echo(export.warning, err=True)


def export_files(session, slug: str, out: Path, *, raw_worker_ids: bool = False, include_gold: bool = True,
                 include_pilot: bool = False):
    """Write every export file of study ``slug`` into ``out`` (made if missing); return the
    :class:`~server.paradigms.core.StudyExport`. Pseudonyms come from the instance's secret key, as the
    dashboard's do (:func:`server.cli.base.cli_secret_key`: never a new key). Pilot and simulated
    participants only with ``include_pilot``; the report says how many were left out or kept."""
    from analysis.formats import atomic_write_text
    from server import exports
    from server.cli.cmd_study import _find
    from server.cli.pay import cli_pay_settings
    from server.pilot import participants

    found = _find(session, slug)
    salt = None if raw_worker_ids else exports.study_salt(cli_secret_key(), slug)
    export = exports.export_study(session, found, salt=salt, include_gold=include_gold,
                                  pay_settings=cli_pay_settings(), include_pilot=include_pilot)
    pilots = participants(session, found).pilots
    if pilots:
        export.report.append(("pilots", f"{pilots} pilot or simulated participant(s) "
                                        + ("included (--include-pilot)" if include_pilot
                                           else "left out (--include-pilot keeps them)")))
        if export.warning and not include_pilot:
            export.warning += f" ({pilots} pilot or simulated participant(s) left out: --include-pilot keeps them)"
    out.mkdir(parents=True, exist_ok=True)
    for name, text in export.files.items():
        atomic_write_text(out / name, text)
    return export
