"""How precise a rating study's scores are now, for ``[stopping]`` (server/stopping.py): by the analysis that
``perceptlab results`` runs on the same ratings.

The study's ratings (non-pilot, exactly the rows of its ratings.csv export) go through
:func:`analysis.rating_report.analyze_ratings` with the options ``perceptlab results`` uses (:data:`RESULTS_OPTIONS`):
the same screening (every rule, gold checks included) and the same interval. Per scene (the study's sets) and test
stimulus the half-width is half its scores.csv interval, and ``workers`` its scores.csv ``n_workers`` (different
kept workers), so a rating from a worker the screening drops, or a gold answer, moves no target. A named pair
``"itemA|itemB"`` is resolved when the Welch t interval of the difference of their kept means excludes 0.

The analysis took 0.04 s for 1,920 ratings (80 workers) and 0.7 s for 100,000 (4,000 workers) on a 2-core machine,
besides reading the rows; the checks of a running study are throttled (server/stopping.py ``check_soon``)."""
from __future__ import annotations

import numpy as np
from scipy import stats
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from analysis.rating_report import RatingOptions, analyze_ratings
from analysis.ratings import (OPTIONAL_RATING_COLUMNS, REQUIRED_RATING_COLUMNS, RatingsFormatError, build_ratings,
                              mos_intervals)

from ...models import Assignment, Study
from ..core import Precision, SetPrecision
from .export import rating_rows, stimulus_id
from .models import RatingResponse, RatingStimulus

UNIT = "MOS points"
CONFIDENCE = 0.95  # mos_intervals' default too (analysis/ratings.py)
# What `perceptlab results` runs on a rating study (server/paradigms/rating/results.py: `analyze-ratings` with its
# defaults and the study's scale): the analysis's own defaults. tests/server/test_stopping_guards.py compares the two.
RESULTS_OPTIONS = RatingOptions()


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


def test_stimuli(session: Session, study: Study) -> list[tuple[str, str]]:
    """``(scene, item)`` of each test stimulus a target measures (no quality check), in creation order."""
    return [tuple(row) for row in session.execute(
        select(RatingStimulus.scene, RatingStimulus.item_id)
        .where(RatingStimulus.study_id == study.id, ~RatingStimulus.is_gold, RatingStimulus.role != "gold_low")
        .order_by(RatingStimulus.id))]


def score_widths(ids: list[str], scores: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """(half-widths, kept workers) of the stimuli ``ids`` from scores.csv records (``stimulus_id``, ``ci_low``,
    ``ci_high``, ``n_workers``): NaN and 0 for a stimulus without a score. One reading of scores for ``[stopping]``
    and for ``perceptlab results``' report of the target (server/paradigms/rating/results.py)."""
    position = {sid: j for j, sid in enumerate(ids)}
    half, workers = np.full(len(ids), np.nan), np.zeros(len(ids), dtype=np.int64)
    for row in scores:
        j = position.get(str(row["stimulus_id"]))
        if j is not None:
            half[j] = (float(row["ci_high"]) - float(row["ci_low"])) / 2
            workers[j] = int(float(row["n_workers"]))
    return half, workers


def scene_precision(stimuli: list[tuple[str, str]], half: np.ndarray, workers: np.ndarray, *,
                    responses: np.ndarray | None = None, spreads: np.ndarray | None = None,
                    pairs: dict[str, dict[str, bool]] | None = None) -> tuple[SetPrecision, ...]:
    """The stimuli's numbers grouped by scene (the study's sets), in the order of ``stimuli``."""
    scenes = np.array([scene for scene, _ in stimuli])
    items = np.array([item for _, item in stimuli])
    sets = []
    for scene in dict.fromkeys(scenes.tolist()):
        at = np.flatnonzero(scenes == scene)
        sets.append(SetPrecision(scene, tuple(items[at].tolist()), tuple(half[at].tolist()),
                                 int(responses[at].sum()) if responses is not None else 0,
                                 (pairs or {}).get(scene, {}),
                                 tuple(spreads[at].tolist()) if spreads is not None else (),
                                 tuple(int(w) for w in workers[at])))
    return tuple(sets)


def study_ratings(session: Session, study: Study):
    """The study's ratings as ``perceptlab results`` reads them: its ratings.csv rows (non-pilot, raw worker IDs),
    indexed by :func:`analysis.ratings.build_ratings` (what :func:`analysis.ratings.read_ratings` does with the file's
    columns) with the study's scale, without writing the file; None without ratings."""
    rows = rating_rows(session, study.id, salt=None)
    if not rows:
        return None
    column = {name: [r[name] for r in rows] for name in (*REQUIRED_RATING_COLUMNS, *OPTIONAL_RATING_COLUMNS)}
    return build_ratings(column["worker_id"], column["stimulus_id"], column["rating"],
                         reference_id=column["reference_id"], is_gold=column["is_gold"], gold_low=column["gold_low"],
                         gold_high=column["gold_high"], scale=study.config.get("method", "dcr"),
                         scale_column=column["scale"],
                         extra={name: [str(v) for v in column[name]] for name in ("trial_id", "created_at")},
                         path=f"study {study.slug}")


def study_precision(session: Session, study: Study, resolve: tuple[str, ...]) -> Precision:
    """Per scene: each test stimulus's half-width and kept workers by :data:`RESULTS_OPTIONS`' analysis, the SD of
    one kept rating, and the named pairs it holds; ``responses`` counts every non-pilot, non-gold rating (the
    response cap's count)."""
    stimuli = test_stimuli(session, study)
    responses = int(session.scalar(
        select(func.count()).select_from(RatingResponse)
        .join(RatingStimulus, RatingStimulus.id == RatingResponse.stimulus_id)
        .join(Assignment, Assignment.id == RatingResponse.assignment_id)
        .where(RatingResponse.study_id == study.id, ~Assignment.pilot, ~RatingStimulus.is_gold,
               RatingStimulus.role != "gold_low")) or 0)
    ids = [stimulus_id(scene, item) for scene, item in stimuli]
    J = len(ids)
    half, workers = np.full(J, np.nan), np.zeros(J, dtype=np.int64)
    mean, sd, n = np.full(J, np.nan), np.full(J, np.nan), np.zeros(J)
    note = ""
    ratings = study_ratings(session, study)
    if ratings is None:
        note = "no ratings yet"
    else:
        try:
            result = analyze_ratings(ratings, RESULTS_OPTIONS)
        except (RatingsFormatError, ValueError) as exc:
            note = f"no scores yet: {exc}"
        else:
            half, workers = score_widths(ids, result.scores)
            position = {sid: j for j, sid in enumerate(ids)}
            kept = ~ratings.is_gold & result.screening.kept[ratings.worker]
            index = np.array([position.get(str(sid), -1) for sid in ratings.stimulus_ids], dtype=np.int64)
            j = index[ratings.stimulus[kept]]
            x = ratings.rating[kept][j >= 0]
            j = j[j >= 0]
            mean, sd, _ = mos_intervals(np.bincount(j, minlength=J), np.bincount(j, x, J), np.bincount(j, x * x, J),
                                        CONFIDENCE)
            n = np.bincount(j, minlength=J).astype(float)
            c = result.summary["counts"]
            note = f"{c['kept_workers']} of {c['workers']} workers kept by the screening of perceptlab results"
    pairs: dict[str, dict[str, bool]] = {}
    for j, (scene, item) in enumerate(stimuli):
        pairs.setdefault(scene, {})
        for pair in resolve:
            a, b = pair.split("|")
            other = next((k for k, (s, i) in enumerate(stimuli) if s == scene and i == b), None)
            if item == a and other is not None:
                pairs[scene][pair] = welch_resolved(mean, sd, n, j, other)
    return Precision(UNIT, scene_precision(stimuli, half, workers, responses=n, spreads=sd, pairs=pairs), responses,
                     note=note)


def simulation_forecast(session: Session, study: Study, spec, seconds_prior: float | None = None) -> dict | None:
    """What the study still needs to reach ``[stopping] halfwidth`` by analysis/rating_forecast.py, with the study's
    own ratings (non-pilot, test stimuli: those :func:`study_precision` counts) as its pilot and every test stimulus
    of the study, rated yet or not: the ratings, participants, dollars and hours still needed (median of the
    simulated studies, band their 10th to 90th percentile). Commits ``session`` before computing (no transaction
    stays open). None without a half-width target, or with too few ratings to fit (two workers, a stimulus rated
    twice). ``seconds_prior``: the study's own time estimate per trial, for hours when its ratings have no usable
    times."""
    from analysis.forecast import ForecastInputError, StudyPlan, remaining, report, with_study_time
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
    result = forecast_ratings(fit, spec.halfwidth, quantiles=[spec.quantile], seed=study.seed, confidence=CONFIDENCE)
    plan = with_study_time(plan, fit, seconds_prior)  # no usable times (none, or a bot's)
    return {**remaining(report(result, plan), fit.n_votes), "sampling": result.sampling, "unit": "ratings"}
