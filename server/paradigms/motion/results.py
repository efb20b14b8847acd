"""``perceptlab results`` of a motion-matching study (:meth:`MotionMatching.analyse_results`):
``perceptlab analyze-motion`` of motion.csv, with the study's stored clips for the plots and image gradients.
"""
from __future__ import annotations

from pathlib import Path

from sqlalchemy.orm import Session

from ...models import Study
from ..core import ResultsAnalysis, ResultsOptions, StudyExport
from .export import study_clip_manifest


def analyse_results(session: Session, study: Study, export: StudyExport, out: Path,
                    options: ResultsOptions) -> ResultsAnalysis | None:
    """The analysis of motion.csv (and frames.csv when exported) with the study's clips, where they are."""
    if "motion.csv" not in export.files:
        return None
    clips, clips_note = study_clip_manifest(session, study.id)
    notes = [f"clips for the plots and image gradients: {clips_note}"] if clips_note else []

    def run(analysis: Path) -> None:
        from .cli import run_motion_analysis

        frames = out / "frames.csv"
        run_motion_analysis(out / "motion.csv", analysis, clips=clips, frames_csv=frames if frames.is_file() else None,
                            plots=options.plots)
    return ResultsAnalysis("motion.csv", run, notes)
