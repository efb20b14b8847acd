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
retired the lapsed page in the meantime (paired comparison counts held work per pair:
server/paradigms/paired/allocation.py).
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

from sqlalchemy import bindparam, select, update
from sqlalchemy.orm import Session

from .models import Assignment, Page, utcnow

Clock = Callable[[], dt.datetime]


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
_assignment = Assignment.__table__

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
    without ever answering cannot hold work for longer than that. A paradigm that reserves no pages
    declares no ``reservation_minutes`` (``[quality]``, server/paradigms/sections.py): nothing to renew.
    """
    if getattr(spec, "reservation_minutes", None) is None:
        return
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
