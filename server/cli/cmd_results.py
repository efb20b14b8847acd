"""``perceptlab results SLUG --out DIR``: MTurk reconciled, the study exported and analysed, in one go.

It chains what ``perceptlab mturk review``, ``export`` and ``analyze`` (or ``analyze-motion``) do, by
calling their functions: nothing here has its own rules. The analysis is chosen by the files the
study's paradigm exports (``votes.csv``: paired comparison; ``motion.csv``: motion matching), so this
command never asks which kind of study it has.
"""
from __future__ import annotations

import csv
from pathlib import Path

import click

from stimuli.csv_safety import dict_rows

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
    from analysis.formats import atomic_write_text, table_csv
    from server.cli.base import cli_session
    from server.cli.cmd_export import export_files
    from server.machine_errors import MACHINE_ERRORS_COLUMNS, machine_error_rows

    out = out.absolute()
    with cli_session(database_url) as session:
        study = _find(session, slug)
        click.echo(f"1/3 MTurk: {_reconcile(session, study) if reconcile else 'skipped (--no-mturk)'}")
        export = export_files(session, slug, out, include_pilot=include_pilot)
        # What a script comparing each image with the reference answers: the analysis flags workers who agree with it.
        errors, problem = machine_error_rows(session, study) if "votes.csv" in export.files else ([], None)
        clips, clips_note = _study_clips(session, study) if "motion.csv" in export.files else (None, None)
    click.echo(f"2/3 export -> {out}")
    for name, description in export.report:
        click.echo(f"    {name}: {description}")
    machine_errors = None
    if errors:
        machine_errors = out / "machine_errors.csv"
        atomic_write_text(machine_errors, table_csv(MACHINE_ERRORS_COLUMNS, errors))
        click.echo(f"    machine_errors.csv: {len(errors)} images' errors against their reference")
    elif problem:
        click.echo(f"    machine_errors.csv: not written, {problem}; the machine-agreement test is skipped")
    if clips_note:
        click.echo(f"    clips for the plots and image gradients: {clips_note}")
    analysed = next((name for name in ANALYSES if name in export.files), None)
    if analysed is None or export.warning:
        click.echo(f"3/3 analysis: skipped ({export.warning or 'the export holds nothing to analyse'})")
        return
    analysis = out / "analysis"
    click.echo(f"3/3 analysis of {analysed} -> {analysis}")
    ANALYSES[analysed](ctx, out / analysed, analysis, n_boot=n_boot, allow_disconnected=allow_disconnected,
                       plots=not no_plots, top=top, machine_errors=machine_errors, clips=clips, units=units)
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


def _study_clips(session, study):
    """The motion study's stored clips for the analysis (frames under its stimulus root) and a note saying
    where they are, or why there are none: :func:`server.paradigms.motion.export.study_clip_manifest`."""
    from server.paradigms.motion.export import study_clip_manifest

    return study_clip_manifest(session, study.id)


def _analyse_votes(ctx: click.Context, votes_csv: Path, out: Path, *, n_boot: int | None, allow_disconnected: bool,
                   plots: bool, top: int, machine_errors: Path | None = None, clips=None,
                   units: str | None = None) -> None:
    from .cmd_analysis import analyze_command

    options = ({"n_boot": n_boot} if n_boot is not None else {}) | ({"units": units} if units else {})
    ctx.invoke(analyze_command, votes_csv=votes_csv, out=out, allow_disconnected=allow_disconnected,
               no_plots=not plots, machine_errors=machine_errors, **options)
    if top:
        _print_ranking(out, top)


def _print_ranking(out: Path, top: int) -> None:
    """The best ``top`` items of overall.csv, with the spread of their per-set scales (scales.csv)."""
    with (out / "overall.csv").open(newline="", encoding="utf-8") as f:
        overall = sorted(dict_rows(csv.DictReader(f)), key=lambda row: float(row["rank"]))
    by_item: dict[str, list[tuple[float, float]]] = {}
    with (out / "scales.csv").open(newline="", encoding="utf-8") as f:
        for row in dict_rows(csv.DictReader(f)):
            scale, low, high = (_float(row[k]) for k in ("scale", "ci_low", "ci_high"))
            by_item.setdefault(row["item_id"], []).append((scale, (high - low) / 2))
    click.echo(f"top {min(top, len(overall))} of {len(overall)} items by mean scale over the sets "
               f"(every set, with 95% intervals: {out / 'scales.csv'}):")
    width = max([len(row["item_id"]) for row in overall[:top]] + [4])
    click.echo(f"  {'rank':>4}  {'item':<{width}}  {'mean':>5}  {'per set':>10}  {'95% CI ±':>8}  sets")
    for row in overall[:top]:
        cells = by_item.get(row["item_id"], [])
        scales = [scale for scale, _ in cells]
        spread = f"{min(scales):.2f}..{max(scales):.2f}" if scales else "-"
        half = sum(h for _, h in cells) / len(cells) if cells else float("nan")
        click.echo(f"  {float(row['rank']):>4.0f}  {row['item_id']:<{width}}  {float(row['mean_scale']):>5.2f}  "
                   f"{spread:>10}  {half:>8.2f}  {len(cells)}")


def _float(text: str) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return float("nan")


def _analyse_motion(ctx: click.Context, motion_csv: Path, out: Path, *, n_boot: int | None, allow_disconnected: bool,
                    plots: bool, top: int, machine_errors: Path | None = None, clips=None,
                    units: str | None = None) -> None:
    from .cmd_analysis import run_motion_analysis

    frames = motion_csv.with_name("frames.csv")
    run_motion_analysis(motion_csv, out, clips=clips, frames_csv=frames if frames.is_file() else None, plots=plots)


#: Export file -> how to analyse it (the first one an export holds is used).
ANALYSES = {"votes.csv": _analyse_votes, "motion.csv": _analyse_motion}
