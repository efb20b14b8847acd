"""The display during trials, for every paradigm: changes that pause a trial, the limit past which they turn a
worker away, and the remote-desktop hint.

The browser's half is ``experiment_ui/static/js/display_monitor.js``, which the assignment driver starts on
every page it runs: a change of zoom or devicePixelRatio, of screen (the window moved to another monitor), or
a window below the study's requirement pauses the trial (its input blocked, an overlay asking for the display
back) until the display is restored. Each pause and each resumption is posted to
``POST /api/v1/assignments/<id>/display-events`` (:func:`record_display_event`): a pause counts one change
against the worker (``worker.display_changes``, summed over the worker's assignments of the study), a
resumption adds its length (``worker.paused_ms``); every event is kept (``display_event``). Past
``[viewing] max_display_changes`` the worker is turned away (stage ``stopped``, reason code
:data:`DISPLAY_CHANGED`).

The remote-desktop hint (:mod:`server.paradigms.remote_hint`) is exported beside the counters in workers.csv
(:func:`display_columns`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar

from sqlalchemy import bindparam, func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from .. import validation as check
from ..errors import invalid, reject_unknown
from ..models import Assignment, DisplayEvent, Worker, utcnow
from .core import ended_error, stop
from .display import WindowRequirement
from .params import param
from .remote_hint import remote_desktop_cues
from .stages import TERMINAL_STAGES, Stage

# The reason code of a worker turned away for changing the display too often (server/reasons.py, once it lands,
# registers it; it is passed through core.stop's message today).
DISPLAY_CHANGED = "display_changed"
# What changed, as the browser classifies it: the zoom (or devicePixelRatio: the page cannot tell a browser zoom
# from a monitor with another scale when the screen keeps its device pixels), the screen (size or available
# area: the window moved to another monitor), or the window fell below the study's requirement.
CHANGE_KINDS = ("zoom", "screen", "window")
EVENTS = ("paused", "resumed")
# The longest pause one resumption may report: a day (a worker who left the page open overnight).
MAX_PAUSE_MS = 86_400_000
EVENT_ID = re.compile(r"[0-9A-Za-z-]{8,64}")
DISPLAY_COLUMNS = ("display_changes", "paused_seconds", "remote_desktop_hint")


@dataclass(frozen=True, kw_only=True)
class DisplayMonitorParams:
    """``[viewing]`` keys of the display monitor (the section's entry checks are declared beside it)."""
    SHARED_SECTION: ClassVar[str] = "viewing"
    max_display_changes: int = param(
        3, section="viewing", low=-1, high=1000,
        doc="changes of zoom, screen or a window below the requirement during trials that a worker may make "
            "(each pauses the trial until restored); one more turns the worker away (reason display_changed); "
            "-1 = never turned away, the changes only recorded")


def limit_of(spec) -> int:
    """The study's ``max_display_changes``: its spec's, or the declared default for a paradigm whose spec does
    not inherit :class:`DisplayMonitorParams` (a plugin's)."""
    return int(getattr(spec, "max_display_changes", DisplayMonitorParams.max_display_changes))


# ---------------------------------------------------------------- the browser's side

def monitor_config(requirement: WindowRequirement, spec) -> dict[str, Any]:
    """What the assignment page's display monitor needs (display_monitor.js): the study's window requirement
    (as the entry pages get it) and the limit."""
    return {"requirement": requirement.to_page(), "max_changes": limit_of(spec)}


# ---------------------------------------------------------------- the events

@dataclass(frozen=True)
class DisplayEventBody:
    """A validated ``POST /display-events`` body."""
    event_id: str
    event: str
    change: str | None
    paused_ms: int
    window: dict[str, Any]
    screen: dict[str, Any]


def parse_display_event(payload: Any) -> DisplayEventBody:
    """Validate a display event: ``event_id`` (the browser's, for retries), ``event`` (paused | resumed),
    ``change`` (a pause's :data:`CHANGE_KINDS`), ``paused_ms`` (a resumption's pause), ``window``, ``screen``.

    Raises
    ------
    ApiError
        400 naming the member.
    """
    if not isinstance(payload, dict):
        raise invalid("the body must be a JSON object")
    reject_unknown(payload, ("event_id", "event", "change", "paused_ms", "window", "screen"))
    event_id = check.text(payload.get("event_id"), "event_id", max_length=64, required=True, pattern=EVENT_ID,
                          what="8-64 letters, digits or '-'")
    event = payload.get("event")
    if event not in EVENTS:
        raise invalid(f"event must be one of {', '.join(EVENTS)}")
    change = payload.get("change")
    if event == "paused" and change not in CHANGE_KINDS:
        raise invalid(f"a pause's change must be one of {', '.join(CHANGE_KINDS)}")
    if event == "resumed" and change is not None:
        raise invalid("a resumption names no change")
    paused_ms = check.integer(payload.get("paused_ms"), "paused_ms", 0, MAX_PAUSE_MS, required=event == "resumed")
    if event == "paused" and paused_ms:
        raise invalid("a pause reports no paused_ms (its resumption does)")
    return DisplayEventBody(event_id, event, change, paused_ms or 0,
                            check.size_object(payload.get("window"), "window", with_dpr=True),
                            check.size_object(payload.get("screen"), "screen", with_dpr=False))


_worker = Worker.__table__
_COUNT = (update(_worker).where(_worker.c.id == bindparam("worker_id"))
          .values(display_changes=_worker.c.display_changes + bindparam("changes"),
                  paused_ms=_worker.c.paused_ms + bindparam("paused"))
          .returning(_worker.c.display_changes, _worker.c.paused_ms))
_TOTALS = select(_worker.c.display_changes, _worker.c.paused_ms).where(_worker.c.id == bindparam("worker_id"))


def record_display_event(session: Session, assignment, payload: Any, spec) -> tuple[int, dict[str, Any]]:
    """Store one display event of a locked assignment row and count it against its worker; turn the worker away
    past ``spec.max_display_changes``.

    Returns
    -------
    (int, dict)
        201 and the worker's totals (``display_changes``, ``max_display_changes``, ``paused_seconds``, ``stage``:
        ``stopped`` when this change turned the worker away); 200 and the same for a replay (an ``event_id``
        already stored: counted once).

    Raises
    ------
    ApiError
        400 for a malformed event; 409 ``assignment_ended`` for a new event once the assignment ended.
    """
    body = parse_display_event(payload)
    replay = session.scalar(select(DisplayEvent.id).where(DisplayEvent.assignment_id == assignment.id,
                                                          DisplayEvent.event_id == body.event_id))
    if replay is not None:
        changes, paused = session.execute(_TOTALS, {"worker_id": assignment.worker_id}).one()
        return 200, _answer(changes, paused, spec, assignment.stage)
    if assignment.stage in TERMINAL_STAGES:
        raise ended_error(assignment.stage)
    try:
        with session.begin_nested():
            session.execute(insert(DisplayEvent).values(
                assignment_id=assignment.id, event_id=body.event_id, event=body.event, change=body.change,
                paused_ms=body.paused_ms, window=body.window, screen=body.screen, created_at=utcnow()))
    except IntegrityError:  # the same event_id raced in from a retry: counted by the first
        changes, paused = session.execute(_TOTALS, {"worker_id": assignment.worker_id}).one()
        return 200, _answer(changes, paused, spec, assignment.stage)
    changes, paused = session.execute(_COUNT, {"worker_id": assignment.worker_id,
                                               "changes": int(body.event == "paused"),
                                               "paused": body.paused_ms}).one()
    stage = assignment.stage
    if body.event == "paused" and past_limit(changes, limit_of(spec)):
        stop(session.get(Assignment, assignment.id), DISPLAY_CHANGED)
        stage = Stage.STOPPED
    return 201, _answer(changes, paused, spec, stage)


def past_limit(changes: int, limit: int) -> bool:
    """Whether ``changes`` display changes exceed the study's ``limit`` (-1: never)."""
    return limit >= 0 and changes > limit


def _answer(changes: int, paused_ms: int, spec, stage: str) -> dict[str, Any]:
    return {"display_changes": int(changes), "max_display_changes": limit_of(spec),
            "paused_seconds": round(int(paused_ms) / 1000, 3), "stage": str(stage)}


# ---------------------------------------------------------------- workers.csv

def display_columns(session: Session, study_id: int) -> dict[str, dict[str, Any]]:
    """workers.csv's :data:`DISPLAY_COLUMNS` by raw worker ID: changes counted, seconds paused, and the
    remote-desktop cues of the latest environment that reported any (``;``-joined; empty: none)."""
    raw_ids, out = {}, {}
    for worker_id, raw_id, changes, paused in session.execute(
            select(Worker.id, Worker.external_id, Worker.display_changes, Worker.paused_ms)
            .where(Worker.study_id == study_id)):
        raw_ids[worker_id] = raw_id
        out[raw_id] = {"display_changes": changes, "paused_seconds": round(paused / 1000, 3),
                       "remote_desktop_hint": ""}
    for worker_id, environment in session.execute(
            select(Assignment.worker_id, Assignment.environment)
            .where(Assignment.study_id == study_id, Assignment.environment.is_not(None)).order_by(Assignment.id)):
        if worker_id in raw_ids and (environment or {}).get("display") is not None:
            out[raw_ids[worker_id]]["remote_desktop_hint"] = ";".join(remote_desktop_cues(environment))
    return out


def event_count(session: Session, assignment_id: int) -> int:
    """Display events stored for an assignment (tests, the dashboard)."""
    return int(session.scalar(select(func.count()).select_from(DisplayEvent)
                              .where(DisplayEvent.assignment_id == assignment_id)))
