"""Claims: how a payment path makes sure that of two runs (threads, processes, a retry) only one calls out.

A run that is about to make a call that moves money (a Prolific bulk bonus set-up or pay call, a bulk approval,
MTurk's ``send_bonus`` or ``approve_assignment``) first *claims* the rows it will act on: one conditional UPDATE
that moves them from the state it read (``WHERE status = ...``) and writes a fresh token into their ``claim``
column, committed before the call. Only the rows carrying the run's own token are acted on.

Why this is enough on both databases:

* PostgreSQL (READ COMMITTED): the second UPDATE waits on the first one's row locks and, once that commits,
  evaluates its ``WHERE`` again on the new row versions, which no longer match: it claims nothing.
* SQLite: every transaction begins with ``BEGIN IMMEDIATE`` (server/db.py), so the two UPDATEs run one after
  the other; the second sees the first one's committed state.

The read transaction is ended (committed) before claiming, so the UPDATE runs in a transaction of its own. A
step after the call is finished with :func:`finish`, conditioned on the run's token, so that a run whose claim
was taken over (a stale claim recovered by the reconcile path) changes nothing.
"""
from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, func, select, update
from sqlalchemy.orm import Session

# A claim older than this, whose run never finished its step, may be taken over by the reconcile path (each path
# decides what taking over means: never a second payment without checking the platform's record first).
LEASE = dt.timedelta(minutes=10)


def new_token() -> str:
    return uuid.uuid4().hex


def claim(session: Session, model: Any, where: Sequence[ColumnElement[bool]], now: dt.datetime,
          **values: Any) -> tuple[str, list[Any]]:
    """Claim the rows of ``model`` matching ``where`` (which must include the state they are claimed from): set
    ``values`` and a fresh ``claim`` token, commit, and return ``(token, the claimed rows)``, freshly loaded.

    Commits the session first (the read before a claim must not share its transaction)."""
    session.commit()
    token = new_token()
    session.execute(update(model).where(*where).values(claim=token, claimed_at=now, **values)
                    .execution_options(synchronize_session=False))
    session.commit()
    return token, claimed(session, model, token)


def claim_all(session: Session, model: Any, group: Sequence[ColumnElement[bool]],
              state: Sequence[ColumnElement[bool]], now: dt.datetime, **values: Any) -> tuple[str, list[Any]]:
    """Claim every row of ``group`` (``group`` and ``state`` both match), or none: when some row of the group is
    in another state (another run holds part of it), nothing changes and no rows are returned. For a call that
    acts on a whole group at once (a bulk bonus pays every line it was set up with)."""
    session.commit()
    token = new_token()
    result = session.execute(update(model).where(*group, *state).values(claim=token, claimed_at=now, **values)
                             .execution_options(synchronize_session=False))
    total = session.scalar(select(func.count()).select_from(model).where(*group))
    if result.rowcount == 0 or result.rowcount != total:
        session.rollback()
        return token, []
    session.commit()
    return token, claimed(session, model, token)


def claimed(session: Session, model: Any, token: str) -> list[Any]:
    """The rows carrying ``token``, loaded again from the database. Ends the read's transaction: no transaction
    stays open across the call that follows (on SQLite every transaction holds the write lock)."""
    rows = list(session.scalars(select(model).where(model.claim == token).order_by(model.id)
                                .execution_options(populate_existing=True)))
    session.commit()
    return rows


def finish(session: Session, model: Any, token: str | None, where: Sequence[ColumnElement[bool]], *,
           expected: int | None = None, **values: Any) -> int:
    """Set ``values`` on the rows that still carry ``token`` and match ``where``; commit and return how many. With
    ``expected``, a different count rolls back and changes nothing (returns the count it saw). A ``token`` of None
    stands for rows never claimed (written before claims existed)."""
    holder = model.claim.is_(None) if token is None else model.claim == token
    result = session.execute(update(model).where(holder, *where).values(**values)
                             .execution_options(synchronize_session=False))
    if expected is not None and result.rowcount != expected:
        session.rollback()
        return result.rowcount
    session.commit()
    return result.rowcount
