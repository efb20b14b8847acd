"""Which stimuli a page of ratings shows: at most once per worker and study, the least-rated first,
quality checks the worker has seen least, in a random order seeded per page.

ACR with hidden references (P.910's ACR-HR): a page of an ACR study also holds the hidden reference of every
scene (content) among its real stimuli that the worker has not had yet (:func:`hidden_references_for`), so each
worker rates the reference of every content they rate, on the page where they first meet the content, in the
page's random order: the DMOS (``analyze-ratings --dmos``) then uses every test rating. They take the places of
the page's quality checks (a hidden reference is one), and a page whose scenes need more references than it has
checks grows by the difference.

A page of real trials reserves its stimuli while its reservation holds (``Page.reserved_until``,
renewed by every rating and state request: :mod:`server.allocation`, whose reservation rules every
paradigm shares): a stimulus's filled count is its stored ratings by participants who are not pilots
(:data:`COUNTED`, counted from the responses: a reset, a participant marked as a pilot later or deleted
changes it with no counter to keep) plus its unanswered real trials on open pages whose reservation
has not lapsed, so concurrent workers share out the remaining ratings and a page abandoned for a few
minutes gives its stimuli back. Pilots' pages reserve nothing and their ratings fill no target
(server/pilot.py). The caller holds the
study's allocation lock (:func:`server.paradigms.core.allocation_lock`).
"""
from __future__ import annotations

import numpy as np
from sqlalchemy import bindparam, func, select
from sqlalchemy.orm import Session

from ...allocation import NOW, now
from ...models import Assignment, Page
from .models import HIDDEN_REFERENCE, RatingResponse, RatingStimulus, RatingTrial

RATING_ALLOCATION_LOCKS = 7_200_000  # advisory lock namespace (paired 7_000_000, motion 7_100_000)

_stimulus, _trial, _page, _assignment, _response = (RatingStimulus.__table__, RatingTrial.__table__, Page.__table__,
                                                    Assignment.__table__, RatingResponse.__table__)

COUNTED = (select(_response.c.stimulus_id, func.count().label("n"))
           .join(_assignment, _response.c.assignment_id == _assignment.c.id)
           .where(_response.c.study_id == bindparam("study_id"), ~_assignment.c.pilot)
           .group_by(_response.c.stimulus_id).subquery())
"""Ratings per stimulus of a study (columns ``stimulus_id``, ``n``) by participants who are not pilots."""

# The study's open pages whose reservation holds at ``now``: about one per active worker. Found through the
# study's assignments (each page by its assignment index), never by scanning the trials of the study.
_RESERVING_PAGES = (select(_page.c.id).join(_assignment, _page.c.assignment_id == _assignment.c.id)
                    .where(_assignment.c.study_id == bindparam("study_id"), _page.c.completed_at.is_(None),
                           _page.c.reserved_until > NOW))
_RESERVED = (select(_trial.c.stimulus_id, func.count().label("n"))
             .where(_trial.c.page_id.in_(_RESERVING_PAGES.scalar_subquery()), ~_trial.c.answered, ~_trial.c.is_gold)
             .group_by(_trial.c.stimulus_id).subquery())
_SEEN_BY_WORKER = select(_trial.c.stimulus_id).where(_trial.c.worker_id == bindparam("worker_id"))
_DEFICIT = _stimulus.c.target_ratings - func.coalesce(COUNTED.c.n, 0) - func.coalesce(_RESERVED.c.n, 0)
_NEEDY = (select(_stimulus.c.id, _DEFICIT)
          .outerjoin(COUNTED, COUNTED.c.stimulus_id == _stimulus.c.id)
          .outerjoin(_RESERVED, _RESERVED.c.stimulus_id == _stimulus.c.id)
          .where(_stimulus.c.study_id == bindparam("study_id"), ~_stimulus.c.is_gold,
                 _stimulus.c.id.not_in(_SEEN_BY_WORKER), _DEFICIT > 0))
_ANY_LEFT = _NEEDY.with_only_columns(_stimulus.c.id).limit(1)
_CHECKS = (select(_stimulus.c.id, _stimulus.c.scene, _stimulus.c.role)
           .where(_stimulus.c.study_id == bindparam("study_id"), _stimulus.c.is_gold).order_by(_stimulus.c.id))
_CHECKS_SEEN = (select(_trial.c.stimulus_id, func.count()).where(_trial.c.worker_id == bindparam("worker_id"),
                                                                 _trial.c.is_gold)
                .group_by(_trial.c.stimulus_id))


_REFERENCES_OF = (select(_stimulus.c.id, _stimulus.c.scene)
                  .where(_stimulus.c.study_id == bindparam("study_id"), _stimulus.c.role == HIDDEN_REFERENCE)
                  .order_by(_stimulus.c.id))
_SCENES_OF = select(_stimulus.c.scene).where(_stimulus.c.id.in_(bindparam("ids", expanding=True)))
# A training (quiz) answer is gold, never data: a reference met only there is met again on a page.
_SEEN_ON_PAGES = select(_trial.c.stimulus_id).where(_trial.c.worker_id == bindparam("worker_id"), ~_trial.c.is_quiz)


def hidden_references_for(session: Session, study_id: int, worker_id: int, real: list[int]) -> list[int]:
    """The hidden reference of each scene of the stimuli ``real`` that this worker has had on no page yet (ACR-HR:
    the module docstring; the training does not count), one per scene, in scene order."""
    if not real:
        return []
    connection = session.connection()
    scenes = {row[0] for row in connection.execute(_SCENES_OF, {"ids": list(real)})}
    seen = {row[0] for row in connection.execute(_SEEN_ON_PAGES, {"worker_id": worker_id})}
    picked: dict[str, int] = {}
    for stimulus_id, scene in connection.execute(_REFERENCES_OF, {"study_id": study_id}):
        if scene in scenes and scene not in picked and stimulus_id not in seen:
            picked[scene] = int(stimulus_id)
    return [picked[scene] for scene in sorted(picked)]


def choose_stimuli(session: Session, study_id: int, worker_id: int, n: int, rng: np.random.Generator) -> list[int]:
    """Up to ``n`` real stimuli that still need ratings and that this worker never had, neediest first
    (the fewest ratings stored and reserved: with equal targets, the least-rated), ties at random.

    The database returns rows in no fixed order, so the tie-breaking draws go to the stimuli in ID
    order: the same seed and the same ratings give the same page.
    """
    rows = session.connection().execute(_NEEDY, {"study_id": study_id, "worker_id": worker_id,
                                                 "now": now(session)}).all()
    if not rows or n <= 0:
        return []
    ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    deficit = np.fromiter((r[1] for r in rows), dtype=np.int64, count=len(rows))
    by_id = np.argsort(ids)
    ids, deficit = ids[by_id], deficit[by_id]
    order = np.lexsort((rng.random(len(ids)), -deficit))
    return [int(i) for i in ids[order[:n]]]


def any_stimulus_left(session: Session, study_id: int, worker_id: int) -> bool:
    """Whether :func:`choose_stimuli` would find one stimulus for this worker now."""
    return session.connection().execute(_ANY_LEFT, {"study_id": study_id, "worker_id": worker_id,
                                                    "now": now(session)}).first() is not None


def pick_checks(session: Session, study_id: int, worker_id: int, n: int, rng: np.random.Generator) -> list[int]:
    """``n`` quality checks (hidden references, degraded images) for one of the worker's pages.

    Real stimuli never repeat for a worker, so a check that comes back marks itself: every pick is
    one this worker has seen least often (unseen ones while any remain), then of the role and the
    scene the worker has seen fewest checks of (both kinds of check, spread over the scenes), then at
    random.
    """
    checks = session.connection().execute(_CHECKS, {"study_id": study_id}).all()
    if not checks or n <= 0:
        return []
    seen = dict(session.connection().execute(_CHECKS_SEEN, {"worker_id": worker_id}).all())
    times = {c.id: int(seen.get(c.id, 0)) for c in checks}
    per_role: dict[str, int] = {}
    per_scene: dict[str, int] = {}
    for c in checks:
        per_role[c.role] = per_role.get(c.role, 0) + times[c.id]
        per_scene[c.scene] = per_scene.get(c.scene, 0) + times[c.id]
    tie_break = dict(zip((c.id for c in checks), rng.random(len(checks))))
    picks: list[int] = []
    for _ in range(n):
        pick = min(checks, key=lambda c: (times[c.id], per_role[c.role], per_scene[c.scene], tie_break[c.id]))
        picks.append(int(pick.id))
        times[pick.id] += 1
        per_role[pick.role] += 1
        per_scene[pick.scene] += 1
    return picks


def page_rows(method: str, real: list[int], checks: list[int], rng: np.random.Generator,
              is_quiz: bool = False) -> list[dict]:
    """A page's trial rows (without page, assignment and position): real stimuli and checks in a random
    order; CCR draws per trial whether the reference is the first image (DCR shows it first always)."""
    entries = [(sid, False) for sid in real] + [(sid, True) for sid in checks]
    order = rng.permutation(len(entries))
    first = rng.random(len(entries)) < 0.5
    rows = []
    for k, index in enumerate(order):
        stimulus_id, is_check = entries[index]
        rows.append({"stimulus_id": int(stimulus_id), "reference_first": bool(first[k]) if method == "ccr" else True,
                     "is_gold": is_check or is_quiz, "is_quiz": is_quiz, "answered": False})
    return rows
