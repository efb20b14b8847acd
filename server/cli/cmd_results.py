"""``perceptlab results SLUG --out DIR``: MTurk reconciled, the study exported and analysed, in one go.

It chains what ``perceptlab mturk review``, ``export`` and the study's analysis do, by calling their
functions: nothing here has its own rules. The analysis is the study's paradigm's
(:meth:`server.paradigms.core.Paradigm.analyse_results`: ``analyze`` of votes.csv for paired comparison,
``analyze-motion`` of motion.csv for motion matching), so this command never asks which kind of study it has.
"""
from __future__ import annotations

from pathlib import Path

import click

from .base import UserError, cli
from .cmd_export import INCLUDE_PILOT_HELP
from .cmd_study import DATABASE_OPTION, _find


@cli.command("results")
@click.argument("slug")
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder for the export (votes.csv or motion.csv, workers_meta.csv...) and, in OUT/analysis, "
                   "the analysis (scales.csv, overall.csv, workers.csv, summary.json, plots); made if missing.")
@click.option("--mturk/--no-mturk", "reconcile", default=True, show_default=True,
              help="First fetch the study's submitted MTurk assignments (only when it has HITs; needs AWS "
                   "credentials). --no-mturk works offline from the database alone.")
@click.option("--bootstrap", "n_boot", type=click.IntRange(min=0), default=None,
              help="Bootstrap resamples of the confidence intervals [default: [analysis] bootstrap, 1000].")
@click.option("--units", type=click.Choice(["anchored", "jod", "z"]), default=None,
              help="Unit of the scales (as `perceptlab analyze --units`; default anchored).")
@click.option("--allow-disconnected", is_flag=True,
              help="Scale sets whose comparisons do not connect every item yet (early in a study).")
@click.option("--no-plots", is_flag=True, help="Skip the plots (PNG at 200 dpi, each with a vector PDF beside it).")
@click.option("--top", type=click.IntRange(min=0), default=10, show_default=True,
              help="Rows of the ranking to print.")
@click.option("--include-pilot", is_flag=True, help=INCLUDE_PILOT_HELP.replace("export", "export and analyse", 1))
@DATABASE_OPTION
@click.pass_context
def results_command(ctx: click.Context, slug: str, out: Path, reconcile: bool, n_boot: int | None,
                    units: str | None, allow_disconnected: bool, no_plots: bool, top: int, include_pilot: bool,
                    database_url: str | None) -> None:
    """Reconcile MTurk, export and analyse study SLUG; print the top of the ranking and where files went.

    \b
    1. MTurk: when the study has HITs, fetch their submitted assignments (as `perceptlab mturk review`)
       and show what is owed; approving and paying stay separate commands.
    2. Export: as `perceptlab export SLUG --out OUT` (worker IDs pseudonymised as on the dashboard; pilot
       and simulated participants left out unless --include-pilot).
    3. Analysis: `perceptlab analyze` of votes.csv (or `analyze-motion` of motion.csv) into OUT/analysis.

    Read-only on a deployment: it never creates a database or a secret key (see --instance).
    """
    from server.cli.base import cli_session
    from server.cli.cmd_export import export_files
    from server.paradigms import paradigm_for
    from server.paradigms.core import ResultsOptions

    out = out.absolute()
    options = ResultsOptions(n_boot=n_boot, units=units, allow_disconnected=allow_disconnected, plots=not no_plots,
                             top=top)
    with cli_session(database_url) as session:
        study = _find(session, slug)
        click.echo(f"1/3 MTurk: {_reconcile(session, study) if reconcile else 'skipped (--no-mturk)'}")
        export = export_files(session, slug, out, include_pilot=include_pilot)
        # The study's paradigm reads what its analysis needs from the database now (Paradigm.analyse_results).
        planned = paradigm_for(study).analyse_results(session, study, export, out, options)
    click.echo(f"2/3 export -> {out}")
    for name, description in export.report:
        click.echo(f"    {name}: {description}")
    for note in planned.notes if planned is not None else ():
        click.echo(f"    {note}")
    if planned is None or export.warning:
        click.echo(f"3/3 analysis: skipped ({export.warning or 'the export holds nothing to analyse'})")
        return
    analysis = out / "analysis"
    click.echo(f"3/3 analysis of {planned.source} -> {analysis}")
    planned.run(analysis)
    plots = sorted(p for p in analysis.rglob("*.png"))
    if plots:
        click.echo(f"plots ({len(plots)}): " + ", ".join(str(p.relative_to(out)) for p in plots[:8])
                   + (" ..." if len(plots) > 8 else ""))
    click.echo(f"files: {out}")


def _reconcile(session, study) -> str:
    """Reconcile every marketplace the study has HITs on; a line saying what was found and what is owed."""
    from sqlalchemy import select

    from server.cli.cmd_mturk import client_factory, mturk_errors
    from server.models import MTurkHit
    from server.mturk import MTurkService
    from server.payments import payment_plan

    marketplaces = sorted(set(session.scalars(select(MTurkHit.sandbox).where(
        MTurkHit.study_id == study.id, MTurkHit.hit_id.is_not(None)))), reverse=True)  # sandbox first
    if not marketplaces:
        return "no HITs (plain links only): nothing to reconcile"
    parts = []
    for sandbox in marketplaces:
        where = "sandbox" if sandbox else "LIVE"
        try:
            with mturk_errors():
                service = MTurkService(client_factory(not sandbox), session, sandbox=sandbox)
                counts = service.reconcile(study, qualify=True)
        except UserError as exc:
            raise UserError(f"MTurk ({where}): {exc.message}; run with --no-mturk to export and analyse what "
                            "the database holds") from None
        session.commit()
        parts.append(f"{where}: {counts['hits']} HIT(s), {counts['assignments']} submitted assignment(s) "
                     f"({counts['new']} new)")
    totals = payment_plan(session, study).totals()
    return (f"{'; '.join(parts)}; owed: rewards ${totals['rewards']}, bonuses ${totals['bonuses']} "
            f"(approve and pay: perceptlab mturk approve {study.slug} --all-submitted, then mturk bonus)")
