"""server/payments.py: what completed MTurk assignments earn, and what a launch costs (20% / 40% fees)."""
from __future__ import annotations

from decimal import Decimal

from sqlalchemy import select

from server.models import Assignment, Bonus, MTurkAssignment, Study
from server.payments import BONUS_REASON, fee, launch_cost, payment_plan
from server.services import app_services

from .conftest import WorkerClient


def test_launch_cost_uses_20_percent_below_10_assignments_per_hit_and_40_from_10():
    small = launch_cost("0.50", 18, per_hit=9)
    assert small["hits"] == 2
    assert small["rewards"] == Decimal("9.00") and small["reward_fees"] == Decimal("1.80")
    assert small["total"] == Decimal("10.80")
    large = launch_cost("0.50", 18, per_hit=18)
    assert large["reward_fees"] == Decimal("3.60") and large["total"] == Decimal("12.60")
    # A mix: 10 + 5 -> one HIT at 40%, one at 20%.
    mixed = launch_cost("1.00", 15, per_hit=10)
    assert mixed["reward_fees"] == Decimal("4.00") + Decimal("1.00")
    # Expected bonuses pay 20% too; fees are at least one cent.
    with_bonus = launch_cost("0.50", 9, expected_bonus_per_assignment="0.80")
    assert with_bonus["bonuses"] == Decimal("7.20") and with_bonus["bonus_fees"] == Decimal("1.44")
    assert with_bonus["total"] == Decimal("4.50") + Decimal("0.90") + Decimal("7.20") + Decimal("1.44")
    assert fee(Decimal("0.01"), Decimal("0.20")) == Decimal("0.01")
    # Configurable fees.
    assert launch_cost("1.00", 9, fee_small=Decimal("0.25"))["reward_fees"] == Decimal("2.25")


def test_payment_plan_pays_reward_and_extra_pages(app, study):
    # Three MTurk workers reach different stages; set their pages and stages directly.
    with app.test_client() as http:
        workers = [WorkerClient(http, study) for _ in range(4)]
    with app_services(app).sessions() as db:
        s = db.scalar(select(Study).where(Study.slug == study))
        rows = list(db.scalars(select(Assignment).where(Assignment.study_id == s.id).order_by(Assignment.id)))
        for row, (stage, pages) in zip(rows, [("completed", 1), ("completed", 3), ("stopped", 2), ("trials", 1)]):
            row.stage, row.pages_completed = stage, pages
        # The second worker's bonus is paid already; a rejected one earns nothing.
        reason = BONUS_REASON.format(extra=2, slug=study)
        db.add(Bonus(study_id=s.id, assignment_id=rows[1].external_id, worker_id=workers[1].worker_id, amount="0.80",
                     reason=reason, unique_request_token="tok", status="sent", sandbox=True))
        db.commit()
        plan = payment_plan(db, s)
        # SMALL_STUDY: min_pages 1, max_pages 3; defaults reward 0.50/page, bonus 0.40/page.
        got = [(r.pages_completed, str(r.reward), str(r.bonus), r.bonus_status, r.stage) for r in plan.rows]
        assert got == [(1, "0.50", "0.00", None, "completed"), (3, "0.50", "0.80", "sent", "completed"),
                       (2, "0.50", "0.40", None, "stopped")]
        assert plan.totals() == {"rewards": "1.50", "bonuses": "1.20", "bonuses_unpaid": "0.40", "bonus_fees": "0.08",
                                 "total": "2.70", "due_now": "0.48"}
        assert plan.rows[1].as_strings()["bonus"] == "0.80"

        db.add(MTurkAssignment(study_id=s.id, assignment_id=rows[2].external_id, hit_id="H",
                               worker_id=workers[2].worker_id, status="Rejected"))
        db.commit()
        assert len(payment_plan(db, s).rows) == 2


def test_a_motion_session_is_paid_as_one_unit_at_the_session_reward():
    """Motion studies pay one session per assignment: their paradigm's unit of pay is a session at
    ``reward_per_session``, the HIT requires one and no further one earns a bonus, however the spec was made."""
    from server.paradigms import paradigm_of_spec, spec_from_config
    from server.paradigms.motion.study import MotionSpec

    spec = MotionSpec(slug="m", name="m", clips=("clips/manifest.json",), reward_per_session="3.50")
    assert paradigm_of_spec(spec).pay_unit(spec).hit_reward == Decimal("3.50")
    stored = spec_from_config(spec.to_config())
    pay = paradigm_of_spec(stored).pay_unit(stored)
    assert isinstance(stored, MotionSpec) and pay.hit_reward == Decimal("3.50")
    assert (pay.name, pay.required, pay.most, pay.bonus) == ("session", 1, 1, Decimal("0.00"))
    assert pay.extra_units(1) == 0
