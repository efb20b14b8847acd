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
    if "ratings.csv" not in export.files:
        return None
    method = study.config.get("method", "dcr")
    notes = ["ACR with hidden references: `perceptlab analyze-ratings --dmos` gives P.910's ACR-HR scores"
             ] if method == "acr" else []

    def run(analysis: Path) -> None:
        from .cli import analyze_ratings_command

        extra = {"n_boot": options.n_boot, "interval": "bootstrap"} if (options.n_boot or 0) >= 2 else {}
        click.get_current_context().invoke(analyze_ratings_command, ratings_csv=out / "ratings.csv", out=analysis,
                                           scale=method, no_plots=not options.plots, **extra)
    return ResultsAnalysis("ratings.csv", run, notes)
