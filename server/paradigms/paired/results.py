"""``perceptlab results`` of a paired-comparison study (:meth:`PairedComparison.analyse_results`): the
machine observer's errors beside the export, ``perceptlab analyze`` of votes.csv, and the top of the ranking.
"""
from __future__ import annotations

import csv
import json
import math
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

    from .machine_errors import MACHINE_ERRORS_COLUMNS, machine_error_rows

    from ...stopping import stopping_spec

    if "votes.csv" not in export.files:
        return None
    from .live_scales import candidate_items

    spec = stopping_spec(study)
    items = candidate_items(session, study) if spec is not None and spec.halfwidth > 0 else {}
    errors, problem = machine_error_rows(session, study)
    machine_errors, notes = None, []
    if errors:
        machine_errors = out / "machine_errors.csv"
        atomic_write_text(machine_errors, table_csv(MACHINE_ERRORS_COLUMNS, errors))
        notes.append(f"machine_errors.csv: {len(errors)} images' errors against their reference")
    elif problem:
        notes.append(f"machine_errors.csv: not written, {problem}; the machine-agreement test is skipped")

    # The export's workers: their entry fingerprints are the sock-puppet test's evidence.
    workers = out / "workers_meta.csv" if "workers_meta.csv" in export.files else None

    def run(analysis: Path) -> None:
        from .cli import analyze_command

        extra = ({"n_boot": options.n_boot} if options.n_boot is not None else {}) | (
            {"units": options.units} if options.units else {})
        click.get_current_context().invoke(analyze_command, votes_csv=out / "votes.csv", out=analysis,
                                           allow_disconnected=options.allow_disconnected, no_plots=not options.plots,
                                           machine_errors=machine_errors, workers_csv=workers, **extra)
        if options.top:
            _print_ranking(analysis, options.top)
        if items:
            for line in target_report(spec, items, out / "votes.csv", analysis):
                click.echo(line)
    return ResultsAnalysis("votes.csv", run, notes)


def target_report(spec, items: dict[str, list[str]], votes_csv: Path, analysis: Path) -> list[str]:
    """The study's ``[stopping]`` half-width target judged on this analysis (scales.csv's intervals, workers.csv's
    kept workers): the rule of server/stopping.py on the numbers the running estimate gives ``[stopping]``
    (server/paradigms/paired/precision.py). Only in the target's unit: another is one line saying how to get it."""
    import math

    from analysis.formats import read_table, read_votes

    from ...stopping import target_lines
    from ..core import Precision, SetPrecision
    from .live_scales import kept_workers_per_item
    from .precision import UNITS

    scales = read_table(analysis / "scales.csv", ("set_id", "item_id", "ci_low", "ci_high", "unit"),
                        numeric=("ci_low", "ci_high"))
    unit = scales[0]["unit"] if scales else ""
    if unit != spec.units:
        return [f"[stopping] target: its half-width is in {spec.units}, this analysis in {unit}; "
                f"`perceptlab results --units {spec.units}` judges it here"]
    kept = {row["worker_id"] for row in read_table(analysis / "workers.csv", ("worker_id", "kept"))
            if row["kept"] == "1"}
    workers = kept_workers_per_item(kept, read_votes(votes_csv))
    widths = {(r["set_id"], r["item_id"]): (r["ci_high"] - r["ci_low"]) / 2 for r in scales}
    sets = tuple(SetPrecision(name, tuple(ids), tuple(widths.get((name, i), math.nan) for i in ids), 0,
                              workers=tuple(workers.get((name, i), 0) for i in ids)) for name, ids in items.items())
    return target_lines(spec, Precision(UNITS[spec.units].label, sets, 0))


def _print_ranking(out: Path, top: int) -> None:
    """The best ``top`` items of overall.csv, with the spread of their per-set scales (scales.csv)."""
    with (out / "overall.csv").open(newline="", encoding="utf-8") as f:
        overall = sorted(dict_rows(csv.DictReader(f)), key=lambda row: float(row["rank"]))
    by_item: dict[str, list[tuple[float, float]]] = {}
    with (out / "scales.csv").open(newline="", encoding="utf-8") as f:
        for row in dict_rows(csv.DictReader(f)):
            scale, low, high = (_float(row[k]) for k in ("scale", "ci_low", "ci_high"))
            # an item without an interval (ci_reason: fewer than 2 kept workers, ...) adds no half-width
            by_item.setdefault(row["item_id"], []).append((scale, (high - low) / 2))
    from ...stopping import ZERO_WIDTH

    click.echo(f"top {min(top, len(overall))} of {len(overall)} items by mean scale over the sets "
               f"(every set, with 95% intervals: {out / 'scales.csv'}):")
    width = max([len(row["item_id"]) for row in overall[:top]] + [4])
    click.echo(f"  {'rank':>4}  {'item':<{width}}  {'mean':>5}  {'per set':>10}  {'95% CI ±':>8}  sets")
    missing = False
    for row in overall[:top]:
        cells = by_item.get(row["item_id"], [])
        scales = [scale for scale, _ in cells]
        spread = f"{min(scales):.2f}..{max(scales):.2f}" if scales else "-"
        # An interval of zero width (one kept worker: every resample is that worker) or none at all is no
        # measure of precision: shown as n/a, never as "± 0.00".
        measured = bool(cells) and all(math.isfinite(h) and h > ZERO_WIDTH for _, h in cells)
        half = f"{sum(h for _, h in cells) / len(cells):.2f}" if measured else "n/a"
        missing = missing or not measured
        click.echo(f"  {float(row['rank']):>4.0f}  {row['item_id']:<{width}}  {float(row['mean_scale']):>5.2f}  "
                   f"{spread:>10}  {half:>8}  {len(cells)}")
    if missing:
        kept = json.loads((out / "summary.json").read_text(encoding="utf-8")).get("workers", {}).get("kept")
        click.echo(f"  n/a: no interval of positive width ({kept} kept worker{'' if kept == 1 else 's'}; the worker "
                   "bootstrap needs several, or --bootstrap was 0)")


def _float(text: str) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return float("nan")
