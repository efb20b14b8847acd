"""``perceptlab results`` of a paired-comparison study (:meth:`PairedComparison.analyse_results`): the
machine observer's errors beside the export, ``perceptlab analyze`` of votes.csv, and the top of the ranking.
"""
from __future__ import annotations

import csv
from pathlib import Path

import click
from sqlalchemy.orm import Session

from stimuli.csv_safety import dict_rows

from ...models import Study
from ..core import ResultsAnalysis, ResultsOptions, StudyExport


def analyse_results(session: Session, study: Study, export: StudyExport, out: Path,
                    options: ResultsOptions) -> ResultsAnalysis | None:
    """machine_errors.csv (what a script comparing each image with the reference answers: the analysis flags
    workers who agree with it) written to ``out``, then ``perceptlab analyze`` of votes.csv."""
    from analysis.formats import atomic_write_text, table_csv

    from ...machine_errors import MACHINE_ERRORS_COLUMNS, machine_error_rows

    if "votes.csv" not in export.files:
        return None
    errors, problem = machine_error_rows(session, study)
    machine_errors, notes = None, []
    if errors:
        machine_errors = out / "machine_errors.csv"
        atomic_write_text(machine_errors, table_csv(MACHINE_ERRORS_COLUMNS, errors))
        notes.append(f"machine_errors.csv: {len(errors)} images' errors against their reference")
    elif problem:
        notes.append(f"machine_errors.csv: not written, {problem}; the machine-agreement test is skipped")

    def run(analysis: Path) -> None:
        from ...cli.cmd_analysis import analyze_command

        extra = ({"n_boot": options.n_boot} if options.n_boot is not None else {}) | (
            {"units": options.units} if options.units else {})
        click.get_current_context().invoke(analyze_command, votes_csv=out / "votes.csv", out=analysis,
                                           allow_disconnected=options.allow_disconnected, no_plots=not options.plots,
                                           machine_errors=machine_errors, **extra)
        if options.top:
            _print_ranking(analysis, options.top)
    return ResultsAnalysis("votes.csv", run, notes)


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
