"""What a machine observer would answer in a paired-comparison study: each shown image's error against its reference.

A script can answer every trial by downloading the three images and picking the candidate closer to
the reference. ``perceptlab results`` writes these errors (``machine_errors.csv``) and hands them to
``perceptlab analyze``, whose machine-agreement test (:mod:`analysis.collusion`) flags workers who
agree with that answer beyond what a person does. The errors are computed from the images the study
shows (amplified or original, as its ``design.stimulus``), with the interpolation error of
:mod:`stimuli.metrics` (the root mean square of the per-pixel colour difference).
"""
from __future__ import annotations

from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from ...models import Study
from .models import Stimulus, StudySet

MACHINE_ERRORS_COLUMNS = ("set_id", "item_id", "error")


def machine_error_rows(session: Session, study: Study) -> tuple[list[dict], str | None]:
    """``(rows, problem)``: one row per candidate (:data:`MACHINE_ERRORS_COLUMNS`), or no rows and why.

    Missing or unreadable image files (an analysis away from the deployment's stimuli) give no rows
    and a one-line reason instead of an error: the analysis runs without the machine test.
    """
    from stimuli.io import StimulusInputError, read_image
    from stimuli.metrics import interpolation_error

    root = Path(study.stimulus_root)
    rows = []
    sets = session.scalars(select(StudySet).where(StudySet.study_id == study.id).order_by(StudySet.id)).all()
    for study_set in sets:
        candidates = session.execute(select(Stimulus.item_id, Stimulus.full).where(
            Stimulus.set_id == study_set.id, Stimulus.kind == "candidate").order_by(Stimulus.id)).all()
        try:
            reference = read_image(root / study_set.reference["full"])
            for item_id, full in candidates:
                rows.append({"set_id": study_set.name, "item_id": item_id,
                             "error": interpolation_error(reference, read_image(root / full))})
        except (StimulusInputError, OSError) as exc:
            return [], f"the study's images cannot be read here ({exc})"
    return rows, None if rows else "the study has no candidate images"
