"""What the server recorded of why workers were turned away (server/reasons.py, server/refusals.py), for the tests
of each path: the counts the dashboard shows and the codes on the records.

A support module, not a test module: test modules import it (they never import each other).
"""
from __future__ import annotations

from sqlalchemy import select

from server.models import Assignment, Study, Worker
from server.refusals import reason_counts
from server.services import app_services


def counts(app, slug: str, *, include_pilot: bool = False) -> dict[str, dict[str, int]]:
    """The study's counts per reason code, as its dashboard shows them."""
    with app_services(app).sessions() as session:
        study_id = session.scalar(select(Study.id).where(Study.slug == slug))
        return reason_counts(session, study_id, include_pilot=include_pilot)


def recorded(app, assignment_id: int | str) -> tuple[str | None, str | None]:
    """``(the worker's status_reason_code, the assignment's reason_code)`` of an assignment."""
    with app_services(app).sessions() as session:
        assignment = session.get(Assignment, int(assignment_id))
        worker = session.get(Worker, assignment.worker_id)
        return worker.status_reason_code, assignment.reason_code


def one(code: str, workers: int = 1, entries: int = 0) -> dict[str, dict[str, int]]:
    """The counts of a study where only ``code`` happened."""
    return {code: {"workers": workers, "entries": entries}}
