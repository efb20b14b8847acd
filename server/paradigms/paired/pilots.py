"""Paired comparison's counts under pilot participants (:mod:`server.pilot`): a pilot's votes fill no pair's
target and their pages hold no pair.

A pilot's token names no study, so that its votes take the regular path, which leaves the pair's count
alone (the one-statement path of PostgreSQL counts every vote). A participant marked while answering a
page may have had votes counted by that path: the pairs' counts are recounted when they are marked
(:func:`change_pilots`), when they complete a page on the regular path and at each of their page starts
(:func:`recount_assignment_pairs`).
"""
from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from ...models import Assignment, Page, Study
from ...pilot import REAL_ASSIGNMENT
from ..core import allocation_lock
from .allocation import PAIR_ALLOCATION_LOCKS
from .models import Pair, ScaleSnapshot, StudySet, Trial, Vote

_assignment, _page, _pair, _trial, _vote = (Assignment.__table__, Page.__table__, Pair.__table__, Trial.__table__,
                                            Vote.__table__)

_COUNTED_VOTES = (select(func.count()).select_from(_vote)
                  .join(_assignment, _assignment.c.id == _vote.c.assignment_id)
                  .where(_vote.c.pair_id == _pair.c.id, REAL_ASSIGNMENT).scalar_subquery())


def recount_pair_votes(session: Session, study_id: int, pair_ids: list[int] | None = None) -> None:
    """Set the pairs' ``n_votes`` to their votes by participants who are not pilots.

    Parameters
    ----------
    session : Session
    study_id : int
    pair_ids : list of int, optional
        Only these pairs (default: every real pair of the study).
    """
    statement = update(_pair).where(~_pair.c.is_gold).values(n_votes=_COUNTED_VOTES)
    if pair_ids is None:
        statement = statement.where(_pair.c.set_id.in_(select(StudySet.id).where(StudySet.study_id == study_id)))
    elif pair_ids:
        statement = statement.where(_pair.c.id.in_(sorted(set(pair_ids))))
    else:
        return
    session.execute(statement)


def recount_assignment_pairs(session: Session, study_id: int, assignment_id: int) -> None:
    """Recount the pairs the assignment's trials showed (a pilot's page start: see the module docstring)."""
    pair_ids = session.scalars(select(_trial.c.pair_id).where(_trial.c.assignment_id == assignment_id,
                                                              _trial.c.pair_id.is_not(None))
                               .distinct()).all()
    recount_pair_votes(session, study_id, list(pair_ids))


def _release_held_pages(session: Session, worker_ids: list[int]) -> None:
    """The workers' open held pages stop holding their pairs (and stop being reserved)."""
    page_ids = session.scalars(select(_page.c.id).join(_assignment, _assignment.c.id == _page.c.assignment_id)
                               .where(_assignment.c.worker_id.in_(worker_ids), _page.c.held,
                                      _page.c.completed_at.is_(None))).all()
    if not page_ids:
        return
    open_per_pair = session.execute(select(_trial.c.pair_id, func.count())
                                    .where(_trial.c.page_id.in_(page_ids), ~_trial.c.answered)
                                    .group_by(_trial.c.pair_id)).all()
    session.execute(update(_page).where(_page.c.id.in_(page_ids)).values(held=False, reserved_until=None))
    for pair_id, n in open_per_pair:  # real pairs' trials (gold ones too) were held, gold-only pairs' never
        session.execute(update(_pair).where(_pair.c.id == pair_id, ~_pair.c.is_gold)
                        .values(n_held=_pair.c.n_held - n))


def change_pilots(session: Session, study: Study, worker_ids: list[int], pilot: bool,
                  mark: Callable[[], None]) -> None:
    """Mark the workers (``mark()``) under the study's allocation lock (no page starts while pairs are
    recounted); new pilots' held pages stop holding their pairs; the pairs are recounted from the votes
    that count and the running estimate is dropped (it is recomputed without the pilots)."""
    allocation_lock(session, study, PAIR_ALLOCATION_LOCKS)
    mark()
    if pilot:
        _release_held_pages(session, worker_ids)
    recount_pair_votes(session, study.id)
    session.execute(delete(ScaleSnapshot).where(ScaleSnapshot.study_id == study.id))


def reset_counts(session: Session, study: Study) -> None:
    """After a reset (its participants deleted): no running estimate, and every pair's counts at zero."""
    session.execute(delete(ScaleSnapshot).where(ScaleSnapshot.study_id == study.id))
    session.execute(update(_pair).where(_pair.c.set_id.in_(select(StudySet.id).where(StudySet.study_id == study.id)))
                    .values(n_votes=0, n_held=0))
