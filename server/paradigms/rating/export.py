"""ratings.csv, the rating paradigm's export (read by ``perceptlab analyze-ratings``), and the tables of
its dashboard page.

**ratings.csv**, one row per rating, oldest first: ``worker_id,stimulus_id,rating,reference_id,is_gold,
trial_id,created_at,method,rt_ms`` and the extra columns ``set_id,item_id,raw_rating,is_quiz,check,in_range``.

* ``stimulus_id`` is ``<set_id>/<item_id>``: ``set_id`` the scene's ID in its manifest and ``item_id``
  the candidate's ID, exactly the ``set_id`` and ``item_a``/``item_b`` of a paired-comparison study's
  votes.csv and the ``set_id`` and ``item_id`` of its scales.csv over the same prepared scenes: a PC and
  a rating study of one stimulus folder join on ``stimulus_id == set_id + "/" + item_id``.
* A scene's hidden reference is ``<set_id>/__reference__``; its strongly degraded images are
  ``<set_id>/__gold_low_<k>__``. ``reference_id`` is the scene's hidden reference ID on every row of the
  scene (ACR-HR subtracts its rating from the others').
* ``rating`` is the stored rating: ACR 1..5, DCR 1..5, CCR -3..3 normalised so that positive means the
  test image is better than the reference (``raw_rating`` is the answer on the scale as shown: CCR asks
  how the second image compares with the first, and the reference was first or second at random). With
  the slider, a number within the scale's range.
* ``is_gold`` 1 for quality checks: the training's (``is_quiz`` 1) and the hidden ones, with their known
  range ``gold_low``..``gold_high`` on the stored scale (server/paradigms/rating/quality.py); ``check``
  names the kind (``hidden_reference``, ``gold_low``) and ``in_range`` whether the answer fell in the
  range; the three are empty for real stimuli. One exception keeps ACR-HR possible: in an ACR study a
  hidden reference shown among the real trials is data as well (P.910's ACR-HR rates it like any test),
  so its rows have ``is_gold`` 0 (``check`` still says ``hidden_reference``, with its range and
  ``in_range``), and ``perceptlab analyze-ratings --dmos`` finds every worker's reference rating.
* Video studies: ``stall_ms``, ``dropped_frames``, ``presented_frames``, ``start_delay_ms``, ``replays`` (the
  trial's playback log, media.js) and ``playback_faithful`` (the ``[media]`` rule, server/paradigms/media.py);
  empty for images. With ``[media] unfaithful = "exclude"`` ratings of unfaithful playbacks are left out.
* ``method`` and ``scale`` both name the method (``acr``, ``dcr``, ``ccr``).
* ``worker_id`` is a pseudonym (:func:`server.exports.worker_label`) unless raw IDs are asked for;
  pilots and simulated participants are left out unless ``include_pilot``.
"""
from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from analysis.formats import table_csv

from ...exports import pilot_filter, worker_label
from ...models import Assignment, Worker, as_utc
from ..core import StudyExport, spec_for
from ..media import PLAYBACK_COLUMNS, faithful, playback_columns
from .allocation import COUNTED
from .models import HIDDEN_REFERENCE, RatingGoldResult, RatingResponse, RatingStimulus, RatingTrial
from .quality import known_range
from .study import REFERENCE_ITEM

RATINGS_COLUMNS = ("worker_id", "stimulus_id", "rating", "reference_id", "is_gold", "trial_id", "created_at",
                   "method", "rt_ms", "scale", "gold_low", "gold_high", "set_id", "item_id", "raw_rating", "is_quiz",
                   "check", "in_range", *PLAYBACK_COLUMNS)


def stimulus_id(set_id: str, item_id: str) -> str:
    """The ratings.csv ID of a stimulus: ``<set_id>/<item_id>`` (joins a PC study's set and item IDs)."""
    return f"{set_id}/{item_id}"


def _iso(value: dt.datetime | None) -> str:
    return "" if value is None else as_utc(value).astimezone(dt.timezone.utc).isoformat()


def _number(value: float) -> int | float:
    """A rating as written: whole numbers without a decimal point (the scales' values), others as floats."""
    return int(value) if float(value).is_integer() else float(value)


def rating_rows(session: Session, study_id: int, *, salt: bytes | None, include_gold: bool = True,
                include_pilot: bool = False) -> list[dict[str, Any]]:
    """Every rating of a study as ratings.csv records (:data:`RATINGS_COLUMNS`)."""
    query = (select(Worker.external_id, RatingStimulus.scene, RatingStimulus.item_id, RatingStimulus.role,
                    RatingResponse.rating, RatingResponse.raw_rating, RatingTrial.is_gold, RatingTrial.is_quiz,
                    RatingResponse.trial_id, RatingResponse.created_at, RatingResponse.rt_ms, RatingGoldResult.correct,
                    RatingResponse.playback)
             .select_from(RatingResponse)
             .join(RatingTrial, RatingResponse.trial_id == RatingTrial.id)
             .join(RatingStimulus, RatingResponse.stimulus_id == RatingStimulus.id)
             .join(Worker, RatingResponse.worker_id == Worker.id)
             .outerjoin(RatingGoldResult, RatingGoldResult.response_id == RatingResponse.id)
             .where(RatingResponse.study_id == study_id, pilot_filter(include_pilot))
             .order_by(RatingResponse.id))
    spec = spec_for(session, study_id)
    method = spec.method
    labels: dict[str, str] = {}
    rows = []
    for (raw, scene, item, role, rating, raw_rating, is_gold, is_quiz, trial_id, created, rt_ms,
         correct, playback) in session.execute(query):
        if spec.unfaithful == "exclude" and faithful(playback, spec) is False:
            continue
        # ACR-HR: a hidden reference among the real trials of an ACR study is data as well (module docstring).
        gold = is_gold and not (method == "acr" and role == HIDDEN_REFERENCE and not is_quiz)
        if gold and not include_gold:
            continue
        if raw not in labels:
            labels[raw] = worker_label(raw, salt)
        low, high = (tuple(_number(v) for v in known_range(method, role, spec.slider)) if is_gold
                     else ("", ""))
        rows.append({"worker_id": labels[raw], "stimulus_id": stimulus_id(scene, item), "rating": _number(rating),
                     "reference_id": stimulus_id(scene, REFERENCE_ITEM), "is_gold": "1" if gold else "0",
                     "trial_id": str(trial_id), "created_at": _iso(created), "method": method,
                     "rt_ms": float(rt_ms), "scale": method, "gold_low": low, "gold_high": high, "set_id": scene,
                     "item_id": item, "raw_rating": _number(raw_rating), "is_quiz": "1" if is_quiz else "0",
                     "check": role if is_gold else "", "in_range": "" if correct is None else ("1" if correct else "0"),
                     **playback_columns(playback, spec)})
    return rows


def export(session: Session, study_id: int, *, salt: bytes | None, include_gold: bool = True,
           include_pilot: bool = False) -> StudyExport:
    """ratings.csv of a study, with a one-line report."""
    rows = rating_rows(session, study_id, salt=salt, include_gold=include_gold, include_pilot=include_pilot)
    n_gold = sum(r["is_gold"] == "1" for r in rows)
    workers = len({r["worker_id"] for r in rows})
    stimuli = len({r["stimulus_id"] for r in rows if r["is_gold"] == "0"})
    return StudyExport(files={"ratings.csv": table_csv(RATINGS_COLUMNS, rows)},
                       report=[("ratings.csv", f"{len(rows)} ratings ({n_gold} quality checks) by {workers} workers "
                                               f"of {stimuli} stimuli")],
                       warning=None if rows else "no ratings yet: perceptlab analyze-ratings needs at least one")


def dashboard_tables(session: Session, study_id: int, *, salt: bytes | None) -> dict[str, Any]:
    """The study page's tables: ``scenes`` (ratings stored / targeted, mean rating per scene) and ``workers``
    (pseudonym, status, pages, ratings, hidden checks and training in range). Pilots left out."""
    scenes = [{"scene": scene, "n_stimuli": int(n), "n_ratings": int(done or 0), "target_ratings": int(target)}
              for scene, n, done, target in session.execute(
                  select(RatingStimulus.scene, func.count(), func.sum(COUNTED.c.n),
                         func.sum(RatingStimulus.target_ratings))
                  .outerjoin(COUNTED, COUNTED.c.stimulus_id == RatingStimulus.id)
                  .where(RatingStimulus.study_id == study_id, ~RatingStimulus.is_gold)
                  .group_by(RatingStimulus.scene).order_by(RatingStimulus.scene), {"study_id": study_id})]
    means = dict(session.execute(
        select(RatingStimulus.scene, func.avg(RatingResponse.rating))
        .join(RatingStimulus, RatingResponse.stimulus_id == RatingStimulus.id)
        .join(Assignment, RatingResponse.assignment_id == Assignment.id)
        .where(RatingResponse.study_id == study_id, ~RatingStimulus.is_gold, ~Assignment.pilot)
        .group_by(RatingStimulus.scene)).all())
    for scene in scenes:
        mean = means.get(scene["scene"])
        scene["mean_rating"] = None if mean is None else round(float(mean), 3)
    workers = {w.id: {"worker_id": worker_label(w.external_id, salt), "status": w.status, "pages": 0, "n_ratings": 0,
                      "checks_correct": 0, "checks_total": 0, "quiz_correct": 0, "quiz_total": 0}
               for w in session.scalars(select(Worker).where(Worker.study_id == study_id, ~Worker.pilot)
                                        .order_by(Worker.id))}
    for worker_id, pages in session.execute(select(Assignment.worker_id, func.sum(Assignment.pages_completed))
                                            .where(Assignment.study_id == study_id).group_by(Assignment.worker_id)):
        if worker_id in workers:
            workers[worker_id]["pages"] = int(pages or 0)
    for worker_id, n in session.execute(select(RatingResponse.worker_id, func.count())
                                        .join(RatingTrial, RatingResponse.trial_id == RatingTrial.id)
                                        .where(RatingResponse.study_id == study_id, ~RatingTrial.is_gold)
                                        .group_by(RatingResponse.worker_id)):
        if worker_id in workers:
            workers[worker_id]["n_ratings"] = int(n)
    for worker_id, is_quiz, correct, total in session.execute(
            select(RatingGoldResult.worker_id, RatingGoldResult.is_quiz,
                   func.sum(case((RatingGoldResult.correct, 1), else_=0)), func.count())
            .where(RatingGoldResult.worker_id.in_(list(workers)))
            .group_by(RatingGoldResult.worker_id, RatingGoldResult.is_quiz)):
        prefix = "quiz" if is_quiz else "checks"
        workers[worker_id][f"{prefix}_correct"], workers[worker_id][f"{prefix}_total"] = int(correct or 0), int(total)
    return {"scenes": scenes, "workers": list(workers.values())}
