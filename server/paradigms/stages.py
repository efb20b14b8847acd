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
# takes these values too.
TURNED_AWAY = (Stage.DISQUALIFIED, Stage.STOPPED)
