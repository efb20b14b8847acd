"""The stages of an assignment: one enum for every paradigm.

``Stage`` is a :class:`~enum.StrEnum`, so a member *is* its string: the database column
``assignment.stage``, the JSON State (``"stage": "trials"``), the templates and comparisons with
plain strings (``assignment.stage == "trials"`` after a reload) all see the same values as before
the enum existed. Paradigms use the stages they need::

    paired comparison   consent -> instructions -> quiz -> trials <-> page_done -> completed
    motion matching     consent -> instructions -> calibration -> rdk -> main -> completed

and every paradigm may end an assignment at ``disqualified`` (for good), ``stopped`` (by a quality
rule, after some work) or ``full`` (no work left for the worker; never paid).

Page kinds are named after the stage whose work they hold (``quiz``, ``trials``, ``rdk``,
``main``), so they are written with the same members.
"""
from __future__ import annotations

from enum import StrEnum


class Stage(StrEnum):
    """Where an assignment is; the value is what the database and the browser see."""

    CONSENT = "consent"
    INSTRUCTIONS = "instructions"
    # paired comparison
    QUIZ = "quiz"
    TRIALS = "trials"
    PAGE_DONE = "page_done"
    # motion matching
    CALIBRATION = "calibration"
    RDK = "rdk"
    MAIN = "main"
    # endings
    COMPLETED = "completed"
    STOPPED = "stopped"
    DISQUALIFIED = "disqualified"
    FULL = "full"


# Assignments at these stages are over: no action, page or payment changes them any more
# (``full`` may be reopened when work is free again, see Paradigm.reopen_if_room).
TERMINAL_STAGES = (Stage.COMPLETED, Stage.DISQUALIFIED, Stage.STOPPED, Stage.FULL)
# The worker was turned away: by a quality rule (stopped) or for good (disqualified). Worker.status
# takes these values too. A worker turned away in one assignment is turned away in every other
# assignment of the study at its next response or completion (server/paradigms/core.py).
TURNED_AWAY = (Stage.DISQUALIFIED, Stage.STOPPED)


def earns_code(stage: str, units: int) -> bool:
    """Whether an assignment at ``stage`` with ``units`` completed units of pay earned its completion code:
    completed, or stopped by a quality rule after paid units (the experimenter decides at review).

    The one rule for who has a code: the end page shows one only then
    (:func:`server.paradigms.core.completion_info`), ``perceptlab codes check`` and the participants page
    know one only then (:mod:`server.codes`), and the payment plan pays exactly these
    (:func:`server.payments.earns_pay`). Quiz failures (disqualified), full and unfinished or abandoned
    assignments never have one, whatever is stored.
    """
    return stage == Stage.COMPLETED or (stage == Stage.STOPPED and units > 0)
