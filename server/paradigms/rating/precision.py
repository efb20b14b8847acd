"""How precise a rating study's mean opinion scores are now, for ``[stopping]`` (server/stopping.py).

Per scene (the study's sets) and stimulus, the t interval of the mean of its stored ratings by participants who
are not pilots, leaving out gold stimuli (vectorised over every stimulus at once; one query). A named pair
``"itemA|itemB"`` is resolved when the Welch t interval of the difference of their means excludes 0."""
from __future__ import annotations

import numpy as np
from scipy import stats
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from analysis.ratings import mos_intervals

from ...models import Assignment, Study
from ..core import Precision, SetPrecision
from .models import RatingResponse, RatingStimulus

UNIT = "MOS points"
CONFIDENCE = 0.95  # mos_intervals' default too (analysis/ratings.py)


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
    mean, sd, half = mos_intervals(n, total, squares, CONFIDENCE)
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


FORECAST_REPLICATES = 20  # simulated studies of the dashboard's forecast (milliseconds each: ratings need no bootstrap)


def simulation_forecast(session: Session, study: Study, spec) -> dict | None:
    """What the study still needs to reach ``[stopping] halfwidth`` by analysis/rating_forecast.py, with the study's
    own ratings (non-pilot, test stimuli: those :func:`study_precision` counts) as its pilot and every test stimulus
    of the study, rated yet or not: the ratings, participants, dollars and hours still needed (median of the
    simulated studies, band their 10th to 90th percentile). Commits ``session`` before computing (no transaction
    stays open). None without a half-width target, or with too few ratings to fit (two workers, a stimulus rated
    twice)."""
    from analysis.forecast import ForecastInputError, StudyPlan, remaining, report
    from analysis.rating_forecast import fit_rating_pilot, forecast_ratings
    from analysis.ratings import build_ratings

    if spec.halfwidth <= 0:
        return None
    stimuli = [f"{scene}/{item}" for scene, item in session.execute(
        select(RatingStimulus.scene, RatingStimulus.item_id)
        .where(RatingStimulus.study_id == study.id, ~RatingStimulus.is_gold, RatingStimulus.role != "gold_low")
        .order_by(RatingStimulus.id))]
    rows = session.execute(
        select(RatingResponse.worker_id, RatingStimulus.scene, RatingStimulus.item_id, RatingResponse.rating,
               RatingResponse.created_at, RatingResponse.rt_ms)
        .join(RatingStimulus, RatingStimulus.id == RatingResponse.stimulus_id)
        .join(Assignment, Assignment.id == RatingResponse.assignment_id)
        .where(RatingResponse.study_id == study.id, ~Assignment.pilot, ~RatingStimulus.is_gold,
               RatingStimulus.role != "gold_low")
        .order_by(RatingResponse.id)).all()
    session.commit()
    if not rows:
        return None
    ratings = build_ratings([str(r.worker_id) for r in rows], [f"{r.scene}/{r.item_id}" for r in rows],
                            [repr(float(r.rating)) for r in rows], scale=spec.method,
                            extra={"created_at": [r.created_at.isoformat() for r in rows]}, path=f"study {study.slug}")
    plan = StudyPlan(pairs_per_page=spec.ratings_per_page, gold_per_page=spec.gold_per_page, min_pages=spec.min_pages,
                     max_pages=spec.max_pages, reward=float(spec.reward_per_page),
                     bonus_per_page=float(spec.bonus_per_page))
    try:
        fit = fit_rating_pilot(ratings, stimuli=stimuli, rt_ms=[r.rt_ms for r in rows], confidence=CONFIDENCE)
    except ForecastInputError:
        return None
    result = forecast_ratings(fit, spec.halfwidth, quantiles=[spec.quantile], replicates=FORECAST_REPLICATES,
                              seed=study.seed, confidence=CONFIDENCE)
    return {**remaining(report(result, plan), fit.n_votes), "sampling": result.sampling, "unit": "ratings"}
