"""Held work per pair: how paired comparison counts the pairs its open pages reserve (on the shared
page reservations of :mod:`server.allocation`).

A page of paired-comparison trials is *held* from its start (Page.held) and each real pair counts its
unanswered trials on held pages (Pair.n_held), a design pair's gold trials too (a vote of that pair on its
way); gold-only pairs (Pair.is_gold) count nothing. The page start adds them, each vote on a held
page takes one off. The pairs' reserved trials at a moment are then n_held minus the unanswered
trials of held pages whose reservation has lapsed; those pages are few (abandoned or released
ones) and a page start retires them (retire_lapsed_pages), so choosing a page's pairs reads the
pair table and a handful of lapsed pages instead of every open trial of the study.

A retired page no longer counts, even if its worker comes back and renews it: its trials count
when answered, like those of any lapsed page whose pairs were handed out again (server/allocation.py).
"""
from __future__ import annotations

from sqlalchemy import Boolean, bindparam, func, select, update
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import Session
from sqlalchemy.sql.expression import ColumnElement
from sqlalchemy.sql.visitors import InternalTraversal

from ...allocation import NOW, now
from ...models import Assignment, Page
from .models import Pair, Trial

PAIR_ALLOCATION_LOCKS = 7_000_000  # advisory lock namespace of pair allocation (core.allocation_lock)

_page = Page.__table__
_trial, _assignment, _pair = Trial.__table__, Assignment.__table__, Pair.__table__


class _InPages(ColumnElement[bool]):
    """``trial.page_id IN (pages)`` for a subquery of page IDs, written ``= ANY(ARRAY(pages))`` on PostgreSQL.

    As a join or an ``IN`` the planner may hash the pages and scan every trial of the database for
    them (it did: a page start read all trials of all studies); an array computed first is looked up
    in the trial index, however many trials there are.
    """

    type = Boolean()
    _is_implicitly_boolean = True  # a comparison already: SQLite gets no "= 1" after it
    inherit_cache = True
    _traverse_internals = [("column", InternalTraversal.dp_clauseelement),
                           ("pages", InternalTraversal.dp_clauseelement)]

    def __init__(self, column, pages):
        self.column, self.pages = column, pages.scalar_subquery()


@compiles(_InPages)
def _in_pages(element: _InPages, compiler, **kw) -> str:
    return f"{compiler.process(element.column, **kw)} IN {compiler.process(element.pages, **kw)}"


@compiles(_InPages, "postgresql")
def _in_pages_array(element: _InPages, compiler, **kw) -> str:
    return f"{compiler.process(element.column, **kw)} = ANY(ARRAY{compiler.process(element.pages, **kw)})"


# A held page that is complete holds nothing (every trial is answered, each vote took its trial off
# n_held): the lapsed-page queries, and the partial index ix_page_held they use, leave it out.
_OPEN_HELD = (_page.c.held, _page.c.completed_at.is_(None))
_LAPSED_PAGE_IDS = select(_page.c.id).where(*_OPEN_HELD, _page.c.reserved_until <= NOW)
LAPSED_PER_PAIR = (select(_trial.c.pair_id, func.count().label("n"))
                   .where(_InPages(_trial.c.page_id, _LAPSED_PAGE_IDS), ~_trial.c.answered)
                   .group_by(_trial.c.pair_id).subquery())
"""Unanswered trials per pair (columns ``pair_id``, ``n``) on held pages whose reservation has lapsed at
``now`` and that are not retired yet (joined to real pairs only: a gold-only pair's row here counts nothing)."""
RESERVED = _pair.c.n_held - func.coalesce(LAPSED_PER_PAIR.c.n, 0)
"""A pair's votes on their way (outer-join :data:`LAPSED_PER_PAIR` on ``pair_id``): its unanswered
real trials on pages whose reservation holds at ``now``. Pair allocation counts them as votes."""

# The lapsed held pages of a study whose assignments no request is busy with (their rows locked
# here, SKIP LOCKED: a page start never waits for a vote, and a vote in flight on a page keeps it).
_LAPSED_HELD_PAGES = (select(_page.c.id).join(_assignment, _page.c.assignment_id == _assignment.c.id)
                      .where(*_OPEN_HELD, _page.c.reserved_until <= NOW,
                             _assignment.c.study_id == bindparam("study_id"))
                      .order_by(_page.c.id).with_for_update(of=_assignment, skip_locked=True))
_OPEN_ON_PAGES = (select(_trial.c.pair_id, func.count())
                  .where(_trial.c.page_id.in_(bindparam("page_ids", expanding=True)), ~_trial.c.answered)
                  .group_by(_trial.c.pair_id).order_by(_trial.c.pair_id))
_RETIRE = update(_page).where(_page.c.id.in_(bindparam("page_ids", expanding=True))).values(held=False)
# Real pairs only: a gold-only pair's trials were never held.
_UNHOLD = (update(_pair).where(_pair.c.id == bindparam("pair"), ~_pair.c.is_gold)
           .values(n_held=_pair.c.n_held - bindparam("n")))
_HOLD = (update(_pair).where(_pair.c.id.in_(bindparam("pair_ids", expanding=True)))
         .values(n_held=_pair.c.n_held + 1))


def retire_lapsed_pages(session: Session, study_id: int) -> None:
    """Stop counting the study's held pages whose reservation has lapsed in their pairs' ``n_held``.

    The caller holds the study's allocation lock. The pages' assignments are locked first (pages of
    an assignment that a request is busy with are left for the next page start), and the open
    trials are counted in a statement of their own after that, so that its snapshot holds every
    vote stored on those pages: a vote takes its trial off ``n_held`` exactly when its page is held.
    """
    connection = session.connection()
    page_ids = connection.execute(_LAPSED_HELD_PAGES, {"study_id": study_id, "now": now(session)}).scalars().all()
    if not page_ids:
        return
    open_per_pair = connection.execute(_OPEN_ON_PAGES, {"page_ids": page_ids}).all()
    connection.execute(_RETIRE, {"page_ids": page_ids})
    if open_per_pair:
        connection.execute(_UNHOLD, [{"pair": pair_id, "n": n} for pair_id, n in open_per_pair])


def hold_pairs(session: Session, pair_ids: list[int]) -> None:
    """Count a new held page's real pairs (one trial each, a real or a gold one) in their ``n_held``."""
    if pair_ids:
        session.connection().execute(_HOLD, {"pair_ids": sorted(pair_ids)})
