"""Counting turn-aways per reason code (server/reasons.py) for the dashboard, ``study show`` and the API.

Two sources: the assignments that ended for a reason (``assignment.reason_code``: each worker's turn-away,
stop, failed check or full study, counted once per worker and code), and the entries refused before any
participant existed (``entry_refusal``: one counter row per study and code, so a flood of refused entries
adds to a number and grows no table).
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from .errors import ApiError
from .models import Assignment, EntryRefusal, Worker, utcnow
from .reasons import entry_code


def add_entry_refusal(session: Session, study_id: int, code: str) -> None:
    """Count one refused entry of the study under ``code`` (in the session's transaction; the caller commits)."""
    bump = (update(EntryRefusal).where(EntryRefusal.study_id == study_id, EntryRefusal.code == code)
            .values(count=EntryRefusal.count + 1, last_at=utcnow()))
    if session.execute(bump).rowcount:
        return
    try:
        with session.begin_nested():
            session.add(EntryRefusal(study_id=study_id, code=code, count=1, last_at=utcnow()))
    except IntegrityError:  # a concurrent refusal inserted the row first
        session.execute(bump)


@contextmanager
def counted_entry_refusals(session: Session, study_id: int) -> Iterator[None]:
    """Run an entry; an :class:`~server.errors.ApiError` that refuses it for a reason of server/reasons.py is
    counted for the study (the entry's own writes rolled back, the count committed) and raised on."""
    try:
        yield
    except ApiError as exc:
        code = entry_code(exc.code)
        if code is not None:
            session.rollback()
            add_entry_refusal(session, study_id, code)
            session.commit()
        raise


def reason_counts(session: Session, study_id: int, *, include_pilot: bool = False) -> dict[str, dict[str, int]]:
    """Per reason code: ``workers`` (distinct workers with an assignment that ended for it) and ``entries``
    (refused entries), ``{code: {"workers": n, "entries": m}}``, codes in alphabetical order. Pilot
    participants count only with ``include_pilot``."""
    rows = select(Assignment.reason_code, func.count(func.distinct(Assignment.worker_id))).join(
        Worker, Worker.id == Assignment.worker_id).where(
        Assignment.study_id == study_id, Assignment.reason_code.is_not(None))
    if not include_pilot:
        rows = rows.where(Worker.pilot.is_(False))
    counts: dict[str, dict[str, int]] = {}
    for code, n in session.execute(rows.group_by(Assignment.reason_code)):
        counts.setdefault(code, {"workers": 0, "entries": 0})["workers"] = n
    for code, n in session.execute(select(EntryRefusal.code, EntryRefusal.count).where(EntryRefusal.study_id == study_id)):
        counts.setdefault(code, {"workers": 0, "entries": 0})["entries"] = n
    return dict(sorted(counts.items()))
