"""Time on task, measured from what the server logged, and the time estimates workers are shown.

Events
    The logged moments of a worker's work (:meth:`~server.paradigms.core.Paradigm.time_events`):
    every response (a vote, a motion adjustment) and, where a paradigm logs more, other steps
    (motion: the display calibration). The assignment's ``created_at`` is when the worker entered
    (the consent page).
Measures per assignment (seconds)
    ``total``   entering -> last event: wall-clock time, breaks included.
    ``span``    first -> last event.
    ``active``  the lead-in (entering -> first event: consent, instructions, the first trial), at most
                ``lead_in_cap_s``, plus every gap between consecutive events, each at most
                ``idle_cap_s``: a worker who left for lunch between two votes is counted for a minute,
                not for an hour. This is the time pay is judged by.
    An assignment without events counts 0 s.

The events are aggregated in SQL (a window function over the study's events, one row per assignment
back), so the dashboard never loops over a study's votes in Python; :func:`time_on_task` is the same
computation for one assignment in numpy (the reference the tests hold the SQL to).

Estimates (:func:`time_estimate`) start from the paradigm's documented pace
(:meth:`~server.paradigms.core.Paradigm.time_prior`: paired comparison 15 s per comparison, motion
the trial's cycles + 2 s) and switch to the median measured active time per unit of pay once
``estimate_min_finished`` assignments were completed.

Settings (``[server]`` in the configuration, see ``server/default_config.toml``): ``idle_cap_seconds``
(60), ``lead_in_cap_seconds`` (300), ``wage_floor_usd_per_hour`` (12; :mod:`server.wages`),
``estimate_min_finished`` (5).
"""
from __future__ import annotations

import math
import threading
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import Float, case, cast, extract, func, select, true
from sqlalchemy.orm import Session

from .i18n import gettext, ngettext
from .models import Assignment, Study
from .paradigms import paradigm_for, spec_from_config
from .paradigms.stages import Stage

ESTIMATE_CACHE_SECONDS = 60.0  # worker pages (a HIT preview may be opened by thousands) reuse an estimate this long


@dataclass(frozen=True)
class PaySettings:
    """How time on task is measured and pay judged; from the ``[server]`` configuration.

    Attributes
    ----------
    idle_cap_s : float
        A gap between two events counts at most this long in active time.
    lead_in_cap_s : float
        The time from entering to the first event (consent, instructions) counts at most this long.
    wage_floor_usd_per_h : float
        The dashboard warns when a study's median effective wage is below this (0 = never).
    estimate_min_finished : int
        Completed assignments needed before worker-facing estimates use the measured median.
    """
    idle_cap_s: float = 60.0
    lead_in_cap_s: float = 300.0
    wage_floor_usd_per_h: float = 12.0
    estimate_min_finished: int = 5

    KEYS = {"idle_cap_seconds": "idle_cap_s", "lead_in_cap_seconds": "lead_in_cap_s",
            "wage_floor_usd_per_hour": "wage_floor_usd_per_h", "estimate_min_finished": "estimate_min_finished"}

    @classmethod
    def from_config(cls, server: Mapping[str, Any] | None) -> PaySettings:
        """The settings of a ``[server]`` section (defaults for missing keys).

        Raises
        ------
        ValueError
            A value that is not a number, or negative (the caps must be positive).
        """
        values = {}
        for key, name in cls.KEYS.items():
            if server is None or key not in server:
                continue
            value = server[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"[server] {key} must be a number >= 0, got {value!r}")
            if key.endswith("_cap_seconds") and value <= 0:
                raise ValueError(f"[server] {key} must be positive, got {value!r}")
            values[name] = int(value) if name == "estimate_min_finished" else float(value)
        return cls(**values)


@dataclass(frozen=True)
class AssignmentTime:
    """Time on task of one assignment (seconds; see the module docstring)."""
    assignment_id: int
    worker_id: int
    stage: str
    units: int            # completed units of pay (pages; a motion session counts as one)
    n_events: int
    total_s: float
    span_s: float
    active_s: float


def time_on_task(entered_s: float, event_s: np.ndarray, *, idle_cap_s: float = 60.0,
                 lead_in_cap_s: float = 300.0) -> tuple[float, float, float]:
    """Total, span and active time of one assignment from its event times.

    Parameters
    ----------
    entered_s : float
        When the worker entered (seconds on any clock shared with ``event_s``).
    event_s : ndarray
        Times of the assignment's events, in any order.
    idle_cap_s, lead_in_cap_s : float
        Caps of a gap between events and of the lead-in (entering -> first event).

    Returns
    -------
    tuple of float
        ``(total, span, active)`` in seconds; ``(0, 0, 0)`` without events. A lead-in below zero (an
        event logged before the entry on another clock) counts 0.
    """
    t = np.sort(np.asarray(event_s, dtype=float))
    if t.size == 0:
        return 0.0, 0.0, 0.0
    span = float(t[-1] - t[0])
    lead_in = float(np.clip(t[0] - entered_s, 0.0, lead_in_cap_s))
    active = lead_in + float(np.minimum(np.diff(t), idle_cap_s).sum())
    return max(span, float(t[-1] - entered_s)), span, active


def _epoch(column, dialect: str):
    """Seconds since 1970 of a timestamp column, as a float, in the database's own SQL."""
    if dialect == "postgresql":
        return cast(extract("epoch", column), Float)
    return (func.julianday(column) - 2440587.5) * 86400.0  # SQLite stores UTC text; julianday keeps the fraction


def assignment_times(session: Session, study: Study, settings: PaySettings | None = None, *,
                     include_pilot: bool = False) -> dict[int, AssignmentTime]:
    """Time on task of every assignment of a study, by assignment ID (one SQL query).

    Parameters
    ----------
    session : Session
    study : Study
    settings : PaySettings, optional
        The caps (default: :class:`PaySettings` defaults).
    include_pilot : bool
        Also the assignments of pilot and simulated participants (:mod:`server.pilot`), which no
        estimate, wage or payment counts.

    Returns
    -------
    dict
        Assignment ID -> :class:`AssignmentTime`, every assignment of the study (0 s without events).
    """
    settings = settings or PaySettings()
    dialect = session.get_bind().dialect.name
    events = paradigm_for(study).time_events(study.id).subquery("events")
    timeline = select(events.c.assignment_id, _epoch(events.c.at, dialect).label("t")).subquery("timeline")
    previous = func.lag(timeline.c.t).over(partition_by=timeline.c.assignment_id, order_by=timeline.c.t)
    gaps = select(timeline.c.assignment_id, timeline.c.t, (timeline.c.t - previous).label("gap")).subquery("gaps")
    capped = case((gaps.c.gap > settings.idle_cap_s, settings.idle_cap_s), else_=gaps.c.gap)  # NULL: first event
    per_assignment = (select(gaps.c.assignment_id, func.count().label("n"), func.min(gaps.c.t).label("first"),
                             func.max(gaps.c.t).label("last"), func.coalesce(func.sum(capped), 0.0).label("gaps_s"))
                      .group_by(gaps.c.assignment_id).subquery("per_assignment"))
    query = (select(Assignment.id, Assignment.worker_id, Assignment.stage, Assignment.pages_completed,
                    _epoch(Assignment.created_at, dialect), per_assignment.c.n, per_assignment.c.first,
                    per_assignment.c.last, per_assignment.c.gaps_s)
             .outerjoin(per_assignment, per_assignment.c.assignment_id == Assignment.id)
             .where(Assignment.study_id == study.id, true() if include_pilot else ~Assignment.pilot)
             .order_by(Assignment.id))
    out = {}
    for assignment_id, worker_id, stage, units, entered, n, first, last, gaps_s in session.execute(query):
        if not n:
            total = span = active = 0.0
        else:
            first, last, entered = float(first), float(last), float(entered)
            span = last - first
            total = max(span, last - entered)
            active = min(max(first - entered, 0.0), settings.lead_in_cap_s) + float(gaps_s)
        out[assignment_id] = AssignmentTime(assignment_id, worker_id, str(stage), int(units or 0), int(n or 0),
                                            total, span, active)
    return out


# ---------------------------------------------------------------- estimates for workers

@dataclass(frozen=True)
class TimeEstimate:
    """How long a unit of pay takes, for the worker pages, the CLI and the dashboard.

    Attributes
    ----------
    unit : str
        The unit of pay ("page", "session").
    unit_s : float
        Seconds per unit: the paradigm's prior, or the median measured active time per unit.
    setup_s : float
        Seconds once before the first unit (prior only; measured times include it).
    what : str
        What a unit holds ("20 comparisons").
    source : str
        "prior" or "measured".
    n_finished : int
        Completed assignments measured (the median's sample; counted also while the prior is shown).
    """
    unit: str
    unit_s: float
    setup_s: float
    what: str
    source: str
    n_finished: int

    @staticmethod
    def minutes(seconds: float) -> int:
        """Whole minutes, rounded up (an estimate a worker relies on errs long), at least 1."""
        return max(1, math.ceil(seconds / 60 - 1e-9))

    @staticmethod
    def about(seconds: float) -> str:
        return ngettext("about %(num)s minute", "about %(num)s minutes", TimeEstimate.minutes(seconds))

    @property
    def per_unit(self) -> str:
        """"about 5 minutes"."""
        return self.about(self.unit_s)

    @property
    def setup(self) -> str:
        """"about 2 minutes" for the setup, or "" when there is none (or it is part of the measured time)."""
        return self.about(self.setup_s) if self.setup_s > 0 else ""

    @property
    def basis(self) -> str:
        """Where the figure comes from, for people."""
        if self.source == "measured":
            return ngettext("the median of %(num)s participant so far", "the median of %(num)s participants so far",
                            self.n_finished)
        return gettext("an estimate before any measurement")

    @property
    def phrase(self) -> str:
        """"about 5 minutes per page of 20 comparisons, plus about 3 minutes at the start" (the consent text's
        ``{time}``)."""
        unit = {"page": gettext("%(time)s per page of %(what)s"),
                 "session": gettext("%(time)s per session of %(what)s")}.get(self.unit, "%(time)s per "
                                                                            + self.unit + " of %(what)s")
        text = unit % {"time": self.per_unit, "what": self.what}
        if self.setup:
            text = gettext("%(time)s, plus %(setup)s at the start", time=text, setup=self.setup)
        return text

    def hit_seconds(self, units: int) -> float:
        """Seconds for ``units`` units including the setup (the work a HIT's reward covers)."""
        return self.setup_s + units * self.unit_s


def measured_unit_seconds(times: Mapping[int, AssignmentTime]) -> np.ndarray:
    """Active seconds per completed unit of every completed assignment that completed a unit."""
    done = [t for t in times.values() if t.stage == Stage.COMPLETED and t.units > 0 and t.active_s > 0]
    return np.array([t.active_s / t.units for t in done], dtype=float)


def time_estimate(session: Session, study: Study, settings: PaySettings | None = None,
                  times: Mapping[int, AssignmentTime] | None = None) -> TimeEstimate:
    """The study's time per unit of pay: the paradigm's prior, or the measured median once
    ``settings.estimate_min_finished`` assignments were completed.

    Parameters
    ----------
    session : Session
    study : Study
    settings : PaySettings, optional
    times : mapping, optional
        :func:`assignment_times` of the study when the caller has them already.

    Returns
    -------
    TimeEstimate
    """
    settings = settings or PaySettings()
    paradigm = paradigm_for(study)
    spec = spec_from_config(study.config)
    prior = paradigm.time_prior(spec)
    unit = paradigm.pay_unit(spec).name
    per_unit = measured_unit_seconds(assignment_times(session, study, settings) if times is None else times)
    if per_unit.size and per_unit.size >= max(1, settings.estimate_min_finished):
        return TimeEstimate(unit, float(np.median(per_unit)), 0.0, prior.what, "measured", int(per_unit.size))
    return TimeEstimate(unit, prior.unit_s, prior.setup_s, prior.what, "prior", int(per_unit.size))


_CACHE: weakref.WeakKeyDictionary[Any, dict[int, tuple[float, TimeEstimate]]] = weakref.WeakKeyDictionary()
_CACHE_LOCK = threading.Lock()


def cached_time_estimate(session: Session, study: Study, settings: PaySettings | None = None,
                         max_age: float = ESTIMATE_CACHE_SECONDS) -> TimeEstimate:
    """:func:`time_estimate`, reused for ``max_age`` seconds per database engine and study: the worker
    pages (previews, consent) show it without aggregating the study's responses on every request."""
    bind = session.get_bind()
    stamp = time.monotonic()
    with _CACHE_LOCK:
        found = _CACHE.get(bind, {}).get(study.id)
    if found is not None and stamp - found[0] < max_age:
        return found[1]
    estimate = time_estimate(session, study, settings)
    with _CACHE_LOCK:
        _CACHE.setdefault(bind, {})[study.id] = (stamp, estimate)
    return estimate


def clear_estimate_cache() -> None:
    """Forget every cached estimate (tests; a changed configuration)."""
    with _CACHE_LOCK:
        _CACHE.clear()


def fill_time(text: str, estimate: TimeEstimate) -> str:
    """A worker text (consent) with its ``{time}`` placeholder filled in: "about 5 minutes per page of 20
    comparisons, ...". Only that placeholder is touched; other braces stay as written."""
    return text.replace("{time}", estimate.phrase)
