"""``perceptlab results`` of a rating study (:meth:`Rating.analyse_results`): ``perceptlab analyze-ratings``
of ratings.csv (screening, MOS / DMOS / CMOS with intervals, plots)."""
from __future__ import annotations

from pathlib import Path

import click
from sqlalchemy.orm import Session

from ...models import Study
from ..core import ResultsAnalysis, ResultsOptions, StudyExport


def analyse_results(session: Session, study: Study, export: StudyExport, out: Path,
                    options: ResultsOptions) -> ResultsAnalysis | None:
    """The analysis of ratings.csv (written to ``out``), with the study's scale; None without ratings.csv."""
    from ...stopping import stopping_spec
    from .precision import test_stimuli

    if "ratings.csv" not in export.files:
        return None
    method = study.config.get("method", "dcr")
    spec = stopping_spec(study)
    stimuli = test_stimuli(session, study) if spec is not None and spec.halfwidth > 0 else []
    notes = ["ACR with hidden references: `perceptlab analyze-ratings --dmos` gives P.910's ACR-HR scores"
             ] if method == "acr" else []

    def run(analysis: Path) -> None:
        from .cli import analyze_ratings_command

        extra = {"n_boot": options.n_boot, "interval": "bootstrap"} if (options.n_boot or 0) >= 2 else {}
        click.get_current_context().invoke(analyze_ratings_command, ratings_csv=out / "ratings.csv", out=analysis,
                                           scale=method, no_plots=not options.plots, **extra)
        if stimuli:
            for line in target_report(spec, stimuli, analysis / "scores.csv"):
                click.echo(line)
    return ResultsAnalysis("ratings.csv", run, notes)


def target_report(spec, stimuli: list[tuple[str, str]], scores_csv: Path) -> list[str]:
    """The study's ``[stopping]`` half-width target judged on this analysis's scores.csv: the rule of
    server/stopping.py on the numbers ``[stopping]`` measures (server/paradigms/rating/precision.py reads the same
    scores of the same analysis)."""
    from analysis.formats import read_table
    from analysis.rating_report import SCORES_COLUMNS

    from ...stopping import target_lines
    from ..core import Precision
    from .export import stimulus_id
    from .precision import UNIT, scene_precision, score_widths

    scores = read_table(scores_csv, SCORES_COLUMNS, numeric=("ci_low", "ci_high", "n_workers"))
    half, workers = score_widths([stimulus_id(scene, item) for scene, item in stimuli], scores)
    return target_lines(spec, Precision(UNIT, scene_precision(stimuli, half, workers), 0))
