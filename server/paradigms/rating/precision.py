"""How precise a rating study's mean opinion scores are now, for ``[stopping]`` (server/stopping.py).

Per scene (the study's sets) and stimulus, the t interval of the mean of its stored ratings by participants who
are not pilots, leaving out gold stimuli (vectorised over every stimulus at once; one query). A named pair
``"itemA|itemB"`` is resolved when the Welch t interval of the difference of their means excludes 0."""
from __future__ import annotations

import numpy as np
from scipy import stats
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ...models import Assignment, Study
from ..core import Precision, SetPrecision
from .models import RatingResponse, RatingStimulus

UNIT = "MOS points"
CONFIDENCE = 0.95


def mos_intervals(n: np.ndarray, total: np.ndarray, squares: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(means, SDs of one rating, t half-widths) from per-stimulus counts, sums and sums of squares.

    Stimuli with fewer than two ratings have NaN SD and half-width."""
    n = n.astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = total / n
        var = np.maximum(squares - n * mean ** 2, 0.0) / (n - 1)
        sd = np.where(n >= 2, np.sqrt(var), np.nan)
        t = stats.t.ppf(0.5 + CONFIDENCE / 2, np.maximum(n - 1, 1))
        half = np.where(n >= 2, t * sd / np.sqrt(n), np.nan)
    return mean, sd, half


def welch_resolved(mean: np.ndarray, sd: np.ndarray, n: np.ndarray, a: int, b: int) -> bool:
    """Whether the Welch t interval of ``mean[a] - mean[b]`` excludes 0."""
    if n[a] < 2 or n[b] < 2:
        return False
    va, vb = sd[a] ** 2 / n[a], sd[b] ** 2 / n[b]
    se = np.sqrt(va + vb)
    if se == 0:
        return bool(mean[a] != mean[b])
    df = (va + vb) ** 2 / (va ** 2 / (n[a] - 1) + vb ** 2 / (n[b] - 1)) if va + vb > 0 else 1.0
    return bool(abs(mean[a] - mean[b]) > stats.t.ppf(0.5 + CONFIDENCE / 2, df) * se)


def study_precision(session: Session, study: Study, resolve: tuple[str, ...]) -> Precision:
    """Per scene: each non-gold stimulus's MOS half-width, SD of one rating, and the named pairs it holds."""
    stimuli = session.execute(select(RatingStimulus.id, RatingStimulus.scene, RatingStimulus.item_id)
                              .where(RatingStimulus.study_id == study.id, ~RatingStimulus.is_gold,
                                     RatingStimulus.role != "gold_low")
                              .order_by(RatingStimulus.id)).all()
    sums = {row.stimulus_id: row for row in session.execute(
        select(RatingResponse.stimulus_id, func.count().label("n"), func.sum(RatingResponse.rating).label("total"),
               func.sum(RatingResponse.rating * RatingResponse.rating).label("squares"))
        .join(Assignment, Assignment.id == RatingResponse.assignment_id)
        .where(RatingResponse.study_id == study.id, ~Assignment.pilot)
        .group_by(RatingResponse.stimulus_id))}
    n = np.array([sums[s.id].n if s.id in sums else 0 for s in stimuli], dtype=float)
    total = np.array([float(sums[s.id].total) if s.id in sums else 0.0 for s in stimuli])
    squares = np.array([float(sums[s.id].squares) if s.id in sums else 0.0 for s in stimuli])
    mean, sd, half = mos_intervals(n, total, squares)
    scenes = np.array([s.scene for s in stimuli])
    items = np.array([s.item_id for s in stimuli])
    sets = []
    for scene in dict.fromkeys(scenes.tolist()):
        at = np.flatnonzero(scenes == scene)
        index = {items[i]: i for i in at}
        pairs = {pair: welch_resolved(mean, sd, n, index[a], index[b])
                 for pair in resolve if (a := pair.split("|")[0]) in index and (b := pair.split("|")[1]) in index}
        sets.append(SetPrecision(scene, tuple(items[at].tolist()), tuple(half[at].tolist()), int(n[at].sum()),
                                 pairs, tuple(sd[at].tolist())))
    return Precision(UNIT, tuple(sets), int(n.sum()))
