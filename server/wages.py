"""Effective hourly wages: what each worker earned (the study's pay per unit, :mod:`server.payments`)
divided by their measured time on task (:mod:`server.worker_time`), per worker and per study.

A worker's pay is what their assignments earn by the payment plan's rule, whatever the platform: the
HIT reward for a completed assignment (or one stopped by a quality rule after some paid units), plus the
bonus of every further unit; nothing for an assignment rejected on MTurk, abandoned, or turned away
before a unit. Plain-link and Prolific participants are judged by the same configured reward (pay them
at least that on the recruiter's side).

Two wages per worker: pay ÷ active time (``wage_usd_per_h``; idle gaps capped, see
:mod:`server.worker_time`) and pay ÷ total time (entering to the last response, breaks included). The
study's figures are the medians over paid workers, and the total: all pay ÷ all active time, unpaid
workers' time included. The dashboard warns when the median (or, before anyone is paid, the estimated
wage at the time estimate) falls below ``[server] wage_floor_usd_per_hour`` (default 12).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from .models import Assignment, MTurkAssignment, Study, Worker
from .paradigms.core import PayUnit
from .payments import earned, money, pay_unit
from .worker_time import AssignmentTime, PaySettings, TimeEstimate, assignment_times, time_estimate

ZERO = Decimal("0.00")
#: workers.csv columns added by :func:`worker_columns` (server.exports.workers_csv_text ends every table with them).
WORKER_COLUMNS = ("time_total_s", "time_active_s", "pay_usd", "wage_usd_per_h", "wage_total_usd_per_h")


def hourly(pay: Decimal, seconds: float) -> float | None:
    """USD per hour of ``pay`` for ``seconds`` of work; None without time (no wage to speak of)."""
    return float(pay) * 3600.0 / seconds if seconds > 0 else None


@dataclass
class WorkerPay:
    """One worker's pay and time in a study (all their assignments)."""
    worker_db_id: int
    raw_id: str
    platform: str
    assignments: int = 0
    units: int = 0
    pay: Decimal = ZERO
    total_s: float = 0.0
    active_s: float = 0.0

    @property
    def wage(self) -> float | None:
        """USD per active hour."""
        return hourly(self.pay, self.active_s)

    @property
    def wage_total(self) -> float | None:
        """USD per hour of total time."""
        return hourly(self.pay, self.total_s)


@dataclass
class StudyPay:
    """A study's pay and time: per worker, medians, totals, the time estimate and the floor."""
    workers: list[WorkerPay] = field(default_factory=list)
    unit: PayUnit | None = None
    estimate: TimeEstimate | None = None
    settings: PaySettings = field(default_factory=PaySettings)

    @property
    def floor(self) -> float:
        """USD per hour below which the dashboard warns (0 = never)."""
        return self.settings.wage_floor_usd_per_h

    @property
    def paid(self) -> list[WorkerPay]:
        return [w for w in self.workers if w.pay > 0 and w.active_s > 0]

    @property
    def n_paid(self) -> int:
        return len(self.paid)

    @property
    def median_wage(self) -> float | None:
        """Median USD per active hour over paid workers."""
        values = [w.wage for w in self.paid]
        return float(np.median(values)) if values else None

    @property
    def median_wage_total(self) -> float | None:
        values = [w.wage_total for w in self.paid if w.wage_total is not None]
        return float(np.median(values)) if values else None

    @property
    def median_active_s(self) -> float | None:
        values = [w.active_s for w in self.paid]
        return float(np.median(values)) if values else None

    @property
    def pay_total(self) -> Decimal:
        return money(sum((w.pay for w in self.workers), ZERO))

    @property
    def active_total_s(self) -> float:
        return float(sum(w.active_s for w in self.workers))

    @property
    def total_total_s(self) -> float:
        return float(sum(w.total_s for w in self.workers))

    @property
    def overall_wage(self) -> float | None:
        """All pay ÷ all active time (unpaid workers' time included)."""
        return hourly(self.pay_total, self.active_total_s)

    @property
    def unpaid(self) -> list[WorkerPay]:
        """Workers who spent time and earned nothing (turned away, abandoned, rejected)."""
        return [w for w in self.workers if w.pay == 0 and w.active_s > 0]

    @property
    def unpaid_active_s(self) -> float:
        return float(sum(w.active_s for w in self.unpaid))

    @property
    def estimated_wage(self) -> float | None:
        """The HIT reward ÷ the estimated time of the units it requires (before anyone is paid)."""
        if self.unit is None or self.estimate is None:
            return None
        return hourly(self.unit.hit_reward, self.estimate.hit_seconds(self.unit.required))

    @property
    def wage_basis(self) -> str:
        """"measured" once a worker is paid, else "estimate"."""
        return "measured" if self.median_wage is not None else "estimate"

    @property
    def judged_wage(self) -> float | None:
        """The wage compared with the floor: the measured median, else the estimate."""
        return self.median_wage if self.median_wage is not None else self.estimated_wage

    @property
    def below_floor(self) -> bool:
        wage = self.judged_wage
        return bool(self.floor > 0 and wage is not None and wage < self.floor)


def earnings_by_assignment(session: Session, study: Study, times: Mapping[int, AssignmentTime],
                        unit: PayUnit) -> dict[int, Decimal]:
    """What each assignment earns (reward + bonus, :func:`server.payments.earned`), by assignment ID."""
    rejected = set(session.scalars(select(Assignment.id).join(
        MTurkAssignment, MTurkAssignment.assignment_id == Assignment.external_id)
        .where(Assignment.study_id == study.id, Assignment.platform == "mturk", MTurkAssignment.status == "Rejected")))
    return {assignment_id: ZERO if assignment_id in rejected else earned(unit, t.stage, t.units)
            for assignment_id, t in times.items()}


def study_pay(session: Session, study: Study, settings: PaySettings | None = None) -> StudyPay:
    """Every worker's pay and time in a study, with the study's medians and the floor check.

    Parameters
    ----------
    session : Session
    study : Study
    settings : PaySettings, optional
        Caps, floor and estimate threshold (default: :class:`PaySettings` defaults).

    Returns
    -------
    StudyPay
        Workers in order of first appearance; pilot and simulated participants are left out
        (:mod:`server.pilot`): their time and pay say nothing of the study's wage.
    """
    settings = settings or PaySettings()
    times = assignment_times(session, study, settings)
    unit = pay_unit(study)
    earnings = earnings_by_assignment(session, study, times, unit)
    workers = {db_id: WorkerPay(db_id, raw, platform) for db_id, raw, platform in session.execute(
        select(Worker.id, Worker.external_id, Worker.platform).where(Worker.study_id == study.id, ~Worker.pilot)
        .order_by(Worker.id))}
    for assignment_id, t in times.items():
        w = workers[t.worker_id]
        w.assignments += 1
        w.units += t.units
        w.pay += earnings[assignment_id]
        w.total_s += t.total_s
        w.active_s += t.active_s
    return StudyPay(list(workers.values()), unit, time_estimate(session, study, settings, times), settings)


def _number(value: float | None, digits: int) -> float | str:
    return "" if value is None else round(value, digits)


def worker_columns(pay: StudyPay) -> dict[str, dict[str, object]]:
    """workers.csv's time and pay columns (:data:`WORKER_COLUMNS`) by raw worker ID; wages blank without time."""
    return {w.raw_id: {"time_total_s": round(w.total_s, 1), "time_active_s": round(w.active_s, 1),
                             "pay_usd": str(w.pay), "wage_usd_per_h": _number(w.wage, 2),
                             "wage_total_usd_per_h": _number(w.wage_total, 2)} for w in pay.workers}
