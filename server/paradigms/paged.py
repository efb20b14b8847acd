"""The lifecycle of a paradigm that works in pages of trials after a quiz (paired comparison, ratings):
consent -> instructions -> quiz -> trials <-> page_done -> completed, the buttons that move it and
the end of a page.

Each such paradigm supplies how it starts a page of trials and allocates its quiz page
(:class:`PageSteps`); the order of the stages, which buttons a stage takes, what a repeated click does,
who skips the quiz, the page limits and what the last answer of a page does are the same for all of
them and live here once.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from sqlalchemy import bindparam, func, select, update
from sqlalchemy.orm import Session

from ..errors import ApiError, invalid
from ..models import Assignment, Page, utcnow
from .core import AssignmentRow, as_object, complete, move_to
from .stages import TURNED_AWAY, Stage

# The button -> the stage it is pressed at.
ACTION_STAGES = {"consent": Stage.CONSENT, "instructions_done": Stage.INSTRUCTIONS, "continue": Stage.PAGE_DONE,
                 "finish": Stage.PAGE_DONE}
ORDER = (Stage.CONSENT, Stage.INSTRUCTIONS, Stage.QUIZ, Stage.TRIALS, Stage.PAGE_DONE, Stage.COMPLETED)
# The button -> the first stage at which it was already pressed (a repeated click or a retried request).
FIRST_AFTER = {"consent": Stage.INSTRUCTIONS, "instructions_done": Stage.QUIZ, "finish": Stage.COMPLETED,
               "continue": Stage.TRIALS}

_page, _assignment = Page.__table__, Assignment.__table__
WORKER_TRIAL_PAGES = (select(func.count())
                      .select_from(_page.join(_assignment, _page.c.assignment_id == _assignment.c.id))
                      .where(_assignment.c.worker_id == bindparam("worker_id"), _page.c.kind == Stage.TRIALS.value))

_PAGE_DONE = (update(_page).where(_page.c.id == bindparam("page_id"))
              .values(completed_at=bindparam("now", type_=_page.c.completed_at.type)))
_NEXT_PAGE_STAGE = (update(_assignment).where(_assignment.c.id == bindparam("assignment_id"))
                    .values(pages_completed=_assignment.c.pages_completed + 1, stage=Stage.PAGE_DONE.value))

AnyAssignment = Assignment | AssignmentRow


class PageSteps(NamedTuple):
    """What a paged paradigm does at the two steps that differ between paradigms.

    Attributes
    ----------
    start_page : callable
        ``(session, assignment, spec) -> assignment``: give the worker a page of trials (or complete the
        assignment, or move it to ``full``) and return the assignment as it is after that.
    allocate_quiz : callable
        ``(session, assignment, spec) -> None``: store the quiz page.
    """
    start_page: Callable[[Session, AnyAssignment, Any], AnyAssignment]
    allocate_quiz: Callable[[Session, AnyAssignment, Any], None]


def worker_trial_pages(session: Session, worker_id: int) -> int:
    """Pages of trials the worker was given in any assignment of the study (only quiz passers get one)."""
    return int(session.connection().execute(WORKER_TRIAL_PAGES, {"worker_id": worker_id}).scalar_one())


def already_done(stage: str, action: str) -> bool:
    """Whether ``action`` was already done at ``stage`` (or the assignment has ended): then it is a no-op."""
    if stage in (*TURNED_AWAY, Stage.FULL):
        return True
    return stage in ORDER and ORDER.index(stage) >= ORDER.index(FIRST_AFTER[action])


def paged_action(session: Session, assignment: AnyAssignment, action: str, spec, steps: PageSteps) -> AnyAssignment:
    """Move the (locked) assignment on after a button: consent, instructions_done (the quiz, or the first
    page for a worker who passed it in an earlier assignment of the study), continue (another page, within
    ``spec.max_pages``), finish (after ``spec.min_pages``). Returns the assignment after the action.

    Raises
    ------
    ApiError
        400 for an unknown action, 409 ``wrong_stage`` for one the stage does not take.
    """
    if action not in ACTION_STAGES:
        raise invalid(f"unknown action {action!r}")
    if assignment.stage != ACTION_STAGES[action]:
        if already_done(assignment.stage, action):
            return assignment  # a repeated click or a retried request: the first one did it
        raise ApiError(409, "wrong_stage", f"cannot {action.replace('_', ' ')} at stage {assignment.stage}")
    if action == "consent":
        return move_to(session, assignment, Stage.INSTRUCTIONS)
    if action == "instructions_done":
        # A worker who passed the quiz in an earlier assignment of the study does not take it again.
        # (Without a quiz nothing is asked here: the page start counts the worker's pages itself.)
        if spec.quiz_size == 0 or worker_trial_pages(session, assignment.worker_id):
            return steps.start_page(session, assignment, spec)
        steps.allocate_quiz(session, assignment, spec)
        return move_to(session, assignment, Stage.QUIZ)
    if action == "continue":
        if assignment.pages_completed >= spec.max_pages:
            raise ApiError(409, "wrong_stage", "the page limit of this study is reached")
        return steps.start_page(session, assignment, spec)
    if assignment.pages_completed < spec.min_pages:
        raise ApiError(409, "wrong_stage", f"complete at least {spec.min_pages} page(s) before finishing")
    assignment = as_object(session, assignment)
    complete(assignment)
    return assignment


def mark_page_done(session: Session, page_id: int) -> None:
    """Record that the page (of trials or of the quiz) has no open trial left."""
    session.connection().execute(_PAGE_DONE, {"page_id": page_id, "now": utcnow()})


def end_page(session: Session, assignment: AssignmentRow, spec) -> str:
    """Count the (locked) assignment's finished page of trials: the page that reaches ``spec.max_pages``
    completes the assignment, any other moves it to ``page_done``. Returns the assignment's stage.

    The common case is one statement on the row; only the last page loads the ORM object, whose
    completion (:func:`~.core.complete`: its code, or the worker's turning away) is written at commit.
    The page itself is marked done before (:func:`mark_page_done`): a paradigm may check the finished
    page before it counts.
    """
    if assignment.pages_completed + 1 >= spec.max_pages:
        worker_assignment = assignment.load(session)
        worker_assignment.pages_completed += 1
        complete(worker_assignment)
        return worker_assignment.stage
    session.connection().execute(_NEXT_PAGE_STAGE, {"assignment_id": assignment.id})
    return Stage.PAGE_DONE
