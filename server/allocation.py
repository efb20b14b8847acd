"""Page reservations: how long a worker's open page holds its share of a study's work.

A page of paired-comparison trials reserves its pairs (each unanswered trial counts towards its
pair's target votes), and a motion main block reserves its clips (each counts as an observer).
The reservation is short (the study's ``reservation_minutes``, default 5) and renewed by every
sign of life from the worker: each vote or motion response, and each ``GET .../state`` (the trial
page asks for the state when it loads and whenever it re-synchronises). When it lapses, the
page's unanswered trials count as free again and other workers are given the same pairs or clips:
a script that opens pages and walks away holds them for minutes, not for the assignment timeout.

A worker who comes back after the lapse keeps the page: the trials can still be answered, and
the first vote (or state request) reserves them again unless another worker's page start has
retired the lapsed page in the meantime (paired comparison, see "held work per pair" below).
No answer is ever refused or lost; the
price is that a pair (clip) may end with one vote (observer) more than its target when both the
returning worker and the one who took over answer it. Polling alone renews a page only while it
is younger than the study's ``assignment_timeout_minutes``; votes renew it at any age.

A worker holds at most one reserved page in a study: starting a page releases the worker's
pages in other assignments (other HITs of the same study).

Time comes from the session's clock (``session.info["clock"]``, set by the app factory; tests
inject one), so that tests move time forward instead of sleeping.
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from sqlalchemy import Boolean, bindparam, func, select, update
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import Session
from sqlalchemy.sql.expression import ColumnElement
from sqlalchemy.sql.visitors import InternalTraversal

from .models import Assignment, Page, utcnow
from .paradigms.paired.models import Pair, Trial

Clock = Callable[[], dt.datetime]
PAIR_ALLOCATION_LOCKS = 7_000_000  # advisory lock namespace of pair allocation (core.allocation_lock)


def now(session: Session) -> dt.datetime:
    """The current time (timezone-aware UTC) by the session's clock, or the real one."""
    clock = session.info.get("clock")
    return clock() if clock is not None else utcnow()


def reservation_end(session: Session, spec) -> dt.datetime:
    """When a reservation made or renewed now lapses."""
    return reservation_end_at(now(session), spec)


def reservation_end_at(moment: dt.datetime, spec) -> dt.datetime:
    """When a reservation made or renewed at ``moment`` lapses (the study's ``reservation_minutes`` later)."""
    return moment + dt.timedelta(minutes=spec.reservation_minutes)


_page = Page.__table__
# Built once (a statement built per call costs more CPU than the database spends on it); Core on the
# session's connection, so Page objects already loaded keep their values (synchronize_session=False).
_RENEW_PAGE = (update(_page).where(_page.c.id == bindparam("page_id"), _page.c.reserved_until.is_not(None))
               .values(reserved_until=bindparam("until", type_=_page.c.reserved_until.type)))


NOW = bindparam("now", type_=_page.c.reserved_until.type)
"""The moment a reservation is judged at (the statement parameter ``now``: :func:`now`)."""
_trial, _assignment, _pair = Trial.__table__, Assignment.__table__, Pair.__table__

# ---------------------------------------------------------------- held work per pair
#
# A page of paired-comparison trials is *held* from its start (Page.held) and each pair counts its
# unanswered real trials on held pages (Pair.n_held): the page start adds them, each vote on a held
# page takes one off. The pairs' reserved trials at a moment are then n_held minus the unanswered
# trials of held pages whose reservation has lapsed; those pages are few (abandoned or released
# ones) and a page start retires them (retire_lapsed_pages), so choosing a page's pairs reads the
# pair table and a handful of lapsed pages instead of every open trial of the study.
#
# A retired page no longer counts, even if its worker comes back and renews it: its trials count
# when answered, like those of any lapsed page whose pairs were handed out again (module docstring).


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
                   .where(_InPages(_trial.c.page_id, _LAPSED_PAGE_IDS), ~_trial.c.answered, ~_trial.c.is_gold)
                   .group_by(_trial.c.pair_id).subquery())
"""Unanswered real trials per pair (columns ``pair_id``, ``n``) on held pages whose reservation has
lapsed at ``now`` and that are not retired yet."""
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
                  .where(_trial.c.page_id.in_(bindparam("page_ids", expanding=True)), ~_trial.c.answered,
                         ~_trial.c.is_gold)
                  .group_by(_trial.c.pair_id).order_by(_trial.c.pair_id))
_RETIRE = update(_page).where(_page.c.id.in_(bindparam("page_ids", expanding=True))).values(held=False)
_UNHOLD = update(_pair).where(_pair.c.id == bindparam("pair")).values(n_held=_pair.c.n_held - bindparam("n"))
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
    """Count a new held page's real pairs (one trial each) in their ``n_held``."""
    if pair_ids:
        session.connection().execute(_HOLD, {"pair_ids": sorted(pair_ids)})


_RENEW_ON_POLL = (update(_page).where(_page.c.assignment_id == bindparam("owner_id"),
                                      _page.c.reserved_until.is_not(None), _page.c.completed_at.is_(None),
                                      _page.c.created_at > bindparam("cutoff", type_=_page.c.created_at.type))
                  .values(reserved_until=bindparam("until", type_=_page.c.reserved_until.type)))


def renew_page(session: Session, page_id: int, spec) -> None:
    """Extend the reservation of a page the worker just answered on (no-op for unreserved pages)."""
    session.connection().execute(_RENEW_PAGE, {"page_id": page_id, "until": reservation_end(session, spec)})


def renew_on_poll(session: Session, assignment_id: int, spec) -> None:
    """Extend the reservation of the assignment's open page when the worker asks for the state.

    Only pages younger than the assignment timeout are renewed this way: a client that polls
    without ever answering cannot hold work for longer than that.
    """
    moment = now(session)
    session.connection().execute(_RENEW_ON_POLL, {
        "owner_id": assignment_id, "until": reservation_end_at(moment, spec),
        "cutoff": moment - dt.timedelta(minutes=spec.assignment_timeout_minutes)})


_RELEASE_OTHER_PAGES = (
    update(_page)
    .where(_page.c.assignment_id.in_(select(_assignment.c.id).where(
               _assignment.c.worker_id == bindparam("worker_id"), _assignment.c.id != bindparam("keep_assignment_id"))),
           _page.c.completed_at.is_(None), _page.c.reserved_until > NOW)
    .values(reserved_until=NOW))


def release_other_pages(session: Session, worker_id: int, assignment_id: int) -> None:
    """End the reservations of the worker's open pages in their other assignments of the study."""
    session.connection().execute(_RELEASE_OTHER_PAGES, {"worker_id": worker_id, "keep_assignment_id": assignment_id,
                                                        "now": now(session)})
