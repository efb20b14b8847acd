"""What MTurk workers are owed, and what a launch costs, computed from the database (nothing is paid here).

Each paradigm declares its unit of pay (:meth:`~server.paradigms.core.Paradigm.pay_unit`: a page of
paired comparison, a session of motion matching) and what it earns:

* every completed MTurk assignment earns the HIT reward, which covers the units the HIT requires
  (paired comparison: ``reward_per_page x min_pages``; see :func:`pay_unit`);
* every unit after those (up to the most that count) earns the unit's bonus (paired comparison:
  ``bonus_per_page`` for every page after ``min_pages``, up to ``max_pages``).

MTurk's commission: 20% of rewards on HITs with fewer than 10 assignments, 40% on HITs with
10 or more (so HITs are posted in batches of 9), 20% of bonuses; at least $0.01 per
assignment or bonus. All amounts are :class:`~decimal.Decimal`, shown as strings like "1.20".
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from decimal import ROUND_HALF_UP, Decimal

from sqlalchemy import select
from sqlalchemy.orm import Session

from .models import Assignment, Bonus, MTurkAssignment, Study, Worker
from .paradigms import paradigm_for, spec_from_config
from .paradigms.core import PayUnit
from .paradigms.stages import Stage, earns_code
from .worker_time import PaySettings, assignment_times

CENT = Decimal("0.01")
FEE_SMALL = Decimal("0.20")   # HITs with fewer than 10 assignments
FEE_LARGE = Decimal("0.40")   # HITs with 10 or more
FEE_BONUS = Decimal("0.20")
LARGE_HIT = 10
BONUS_REASON = "Bonus for {extra} extra page(s) of the image comparison study {slug}. Thank you!"


def pay_unit(study: Study) -> PayUnit:
    """The study's unit of pay (page, session, ...) with its reward and bonus, from its paradigm."""
    return paradigm_for(study).pay_unit(spec_from_config(study.config))


@dataclass(frozen=True)
class Earnings:
    """What one completed assignment earns by the study's pay rules (the worker's completion page)."""
    unit: str        # "page", "session"
    units: int       # units the reward covers
    reward: Decimal  # the HIT reward (or, off MTurk, the same amount for the same work)
    extra: int       # units past those, each earning the bonus
    bonus: Decimal

    @property
    def total(self) -> Decimal:
        return money(self.reward + self.bonus)


def assignment_earnings(study: Study, assignment: Assignment) -> Earnings:
    """The reward and bonus a completed ``assignment`` earns, computed like :func:`payment_plan`'s rows."""
    pay = pay_unit(study)
    extra = pay.extra_units(assignment.pages_completed)
    return Earnings(pay.name, pay.required, pay.hit_reward, extra, money(pay.bonus * extra))


def money(value) -> Decimal:
    return Decimal(str(value)).quantize(CENT, rounding=ROUND_HALF_UP)


def earns_pay(stage: str, units: int) -> bool:
    """Whether an assignment earns pay: completed, or stopped by a quality rule after some units
    (the experimenter decides at review), as :func:`payment_plan` lists them. The same rule as who has a
    completion code (:func:`~server.paradigms.stages.earns_code`): pay and codes always agree."""
    return earns_code(stage, units)


def earned(pay: PayUnit, stage: str, units: int) -> Decimal:
    """Reward + bonus of an assignment at ``stage`` with ``units`` completed units (0 when it earns
    nothing; a rejection on MTurk is the caller's to apply). Used for effective wages (server/wages.py)."""
    if not earns_pay(stage, units):
        return Decimal("0.00")
    return money(pay.hit_reward + money(pay.bonus) * pay.extra_units(units))


def fee(amount: Decimal, rate: Decimal) -> Decimal:
    """MTurk's commission on one payment: ``rate`` of it, at least one cent."""
    return max(CENT, money(amount * rate)) if amount > 0 else Decimal("0.00")


def reward_fee_rate(assignments_in_hit: int, fee_small: Decimal = FEE_SMALL, fee_large: Decimal = FEE_LARGE) -> Decimal:
    return fee_large if assignments_in_hit >= LARGE_HIT else fee_small


def launch_cost(reward, assignments: int, per_hit: int = 9, *, expected_bonus_per_assignment=0,
                fee_small: Decimal = FEE_SMALL, fee_large: Decimal = FEE_LARGE,
                fee_bonus: Decimal = FEE_BONUS) -> dict[str, Decimal]:
    """The cost of posting ``assignments`` in HITs of ``per_hit``: rewards, bonuses and MTurk's fees."""
    reward = money(reward)
    bonus = money(expected_bonus_per_assignment)
    sizes = [min(per_hit, assignments - i * per_hit) for i in range(math.ceil(assignments / per_hit))]
    rewards = money(reward * assignments)
    reward_fees = sum((fee(reward, reward_fee_rate(n, fee_small, fee_large)) * n for n in sizes), Decimal("0.00"))
    bonuses = money(bonus * assignments)
    bonus_fees = fee(bonus, fee_bonus) * assignments
    return {"hits": Decimal(len(sizes)), "rewards": rewards, "reward_fees": money(reward_fees), "bonuses": bonuses,
            "bonus_fees": money(bonus_fees), "total": money(rewards + reward_fees + bonuses + bonus_fees)}


@dataclass
class PaymentRow:
    assignment_id: str          # MTurk AssignmentId
    worker_id: str              # MTurk WorkerId
    pages_completed: int        # completed units of pay (pages; a motion session counts as one)
    reward: Decimal
    bonus: Decimal
    mturk_status: str | None    # Submitted | Approved | Rejected | None (not reconciled yet)
    bonus_status: str | None    # pending | sent | None (not started)
    bonus_reason: str = ""
    stage: str = Stage.COMPLETED  # or stopped: by a quality rule after some paid units (the experimenter decides)
    # Measured time on task (server/worker_time.py) and the effective wage (reward + bonus) per active hour.
    time_total_s: float | None = None
    time_active_s: float | None = None
    wage_usd_per_h: float | None = None

    @property
    def bonus_unpaid(self) -> bool:
        return self.bonus > 0 and self.bonus_status != "sent"

    def as_strings(self) -> dict:
        row = asdict(self)
        row["reward"], row["bonus"] = str(self.reward), str(self.bonus)
        return row


@dataclass
class PaymentPlan:
    rows: list[PaymentRow] = field(default_factory=list)
    rewards: Decimal = Decimal("0.00")
    bonuses: Decimal = Decimal("0.00")
    bonuses_unpaid: Decimal = Decimal("0.00")
    bonus_fees: Decimal = Decimal("0.00")
    total: Decimal = Decimal("0.00")       # rewards + bonuses, to workers
    due_now: Decimal = Decimal("0.00")     # unpaid bonuses + their fees (rewards were funded at launch)

    @property
    def median_wage(self) -> float | None:
        """Median effective wage (USD per active hour) of the listed assignments; None without any."""
        wages = sorted(row.wage_usd_per_h for row in self.rows if row.wage_usd_per_h is not None)
        if not wages:
            return None
        middle = len(wages) // 2
        return wages[middle] if len(wages) % 2 else (wages[middle - 1] + wages[middle]) / 2

    def unpaid_bonuses(self) -> list[PaymentRow]:
        """Rows whose bonus is still to be sent (payable once MTurk shows the assignment Approved)."""
        return [row for row in self.rows if row.bonus_unpaid]

    def totals(self) -> dict[str, str]:
        return {k: str(getattr(self, k))
                for k in ("rewards", "bonuses", "bonuses_unpaid", "bonus_fees", "total", "due_now")}


def payment_plan(session: Session, study: Study, *, fee_bonus: Decimal = FEE_BONUS,
                 settings: PaySettings | None = None) -> PaymentPlan:
    """What each completed MTurk assignment of the study earns: reward + bonus for extra units of pay.

    Assignments stopped by a quality rule (hidden gold) after completing units are listed too (``stage``
    "stopped"): their workers may submit, and the experimenter decides at review.

    Rejected assignments earn nothing; pilot and simulated participants (:mod:`server.pilot`) are not
    listed, so no approval or bonus goes to them from here. Rewards are paid by approving; bonuses with
    ``MTurkService.grant_bonus`` (see ``perceptlab mturk bonus``). Each row carries the assignment's
    measured time on task and effective wage (``settings``: the caps of :mod:`server.worker_time`).
    """
    pay = pay_unit(study)
    reward = pay.hit_reward
    per_unit = money(pay.bonus)
    statuses = dict(session.execute(select(MTurkAssignment.assignment_id, MTurkAssignment.status)
                                    .where(MTurkAssignment.study_id == study.id)).all())
    paid = {(b.assignment_id, b.reason): b.status for b in session.scalars(select(Bonus).where(Bonus.study_id == study.id))}
    plan = PaymentPlan()
    times = assignment_times(session, study, settings)
    query = (select(Assignment, Worker.external_id).join(Worker, Worker.id == Assignment.worker_id)
             .where(Assignment.study_id == study.id, Assignment.platform == "mturk", ~Assignment.pilot,
                    ((Assignment.stage == Stage.COMPLETED)
                     | ((Assignment.stage == Stage.STOPPED) & (Assignment.pages_completed > 0))))
             .order_by(Assignment.id))
    for assignment, worker_external in session.execute(query):
        status = statuses.get(assignment.external_id)
        if status == "Rejected":
            continue
        extra = pay.extra_units(assignment.pages_completed)
        bonus = money(per_unit * extra)
        reason = BONUS_REASON.format(extra=extra, slug=study.slug) if bonus > 0 else ""
        row = PaymentRow(assignment.external_id, worker_external, assignment.pages_completed, reward, bonus, status,
                         paid.get((assignment.external_id, reason)) if bonus > 0 else None, reason,
                         assignment.stage)
        measured = times.get(assignment.id)
        if measured is not None:
            row.time_total_s, row.time_active_s = round(measured.total_s, 1), round(measured.active_s, 1)
            row.wage_usd_per_h = (round(float(reward + bonus) * 3600 / measured.active_s, 2)
                                  if measured.active_s > 0 else None)
        plan.rows.append(row)
        plan.rewards += reward
        plan.bonuses += bonus
        if row.bonus_unpaid:
            plan.bonuses_unpaid += bonus
            plan.bonus_fees += fee(bonus, fee_bonus)
    plan.total = money(plan.rewards + plan.bonuses)
    plan.due_now = money(plan.bonuses_unpaid + plan.bonus_fees)
    return plan


def submitted_for_approval(session: Session, study: Study) -> tuple[list[str], list[str]]:
    """Split the study's Submitted MTurk assignments into ``(earned, unearned)`` AssignmentIds.

    Earned: the payment plan lists them (completed, or stopped by hidden gold after some pages).
    Unearned: anything else a worker managed to submit -- a study that was full for them, no
    page completed, or no record here at all (a hand-made externalSubmit). "Approve all" must
    never pay those; the experimenter rejects them (or approves one by one after a look).
    """
    submitted = list(session.scalars(select(MTurkAssignment.assignment_id).where(
        MTurkAssignment.study_id == study.id, MTurkAssignment.status == "Submitted")
        .order_by(MTurkAssignment.assignment_id)))
    earning = {row.assignment_id for row in payment_plan(session, study).rows}
    return [a for a in submitted if a in earning], [a for a in submitted if a not in earning]

