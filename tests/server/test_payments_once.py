"""Money paid once (issue 38 item 2): every payment path claims its rows before it calls out, so two runs at
once, each with its own database session and a slow platform, pay once; and a run that died between its claim
and its call is settled by the reconcile path, never by a second payment. On SQLite and PostgreSQL (``app``).

Prolific runs against tests/server/prolific_fake.py with ``latency`` (the answer of every call takes that long,
so the two runs' calls overlap); MTurk against a slow fake client that, unlike MTurk, does not deduplicate
``UniqueRequestToken`` (so only the claim can keep the second run from calling)."""
from __future__ import annotations

import datetime as dt
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from sqlalchemy import select

from server import claims
from server.models import Bonus, MTurkAssignment, ProlificBonus, Study
from server.mturk import MTurkService
from server.prolific import SETTLE, ProlificClient, ProlificService
from server.services import app_services

from .conftest import SMALL_STUDY, create_test_study
from .prolific_fake import (BASE_URL, COMPLETION_CODE, HOST, PROLIFIC_ENTRY, TOKEN, Clock, FaultyTransport,
                            completed_participant, make_fake, pay_bonuses_in_a_process, publish_and_approve_all)

PIDS = [f"{i:024x}" for i in range(1, 4)]
LATENCY = 0.1  # seconds per Prolific answer in the races (the run used 0.2)



@pytest.fixture
def fake():
    app, state = make_fake()
    yield state, FaultyTransport(app)
    assert state.violations == []


@pytest.fixture
def service_clock():
    return Clock()


def _service(app, session, transport, clock) -> ProlificService:
    client = ProlificClient(TOKEN, base_url=BASE_URL, transport=transport, sleep=lambda s: None, clock=clock)
    return ProlificService(client, session, clock=clock)


def _study(session, slug: str) -> Study:
    return session.scalar(select(Study).where(Study.slug == slug))


@pytest.fixture
def approved(app, demo_stimuli, tmp_path, fake, service_clock) -> str:
    """A Prolific study whose participants PIDS[0] and PIDS[1] did 3 pages (a bonus of 0.80 each is due) and
    PIDS[2] 1 page (none), all approved on Prolific and read back."""
    state, transport = fake
    slug = create_test_study(app, demo_stimuli, tmp_path, slug="pro", entry=PROLIFIC_ENTRY, **SMALL_STUDY)
    for pid, pages in [(PIDS[0], 3), (PIDS[1], 3), (PIDS[2], 1)]:
        completed_participant(app, slug, pid, pages)
    with app_services(app).sessions() as session:
        service = _service(app, session, transport, service_clock)
        publish_and_approve_all(service, state, _study(session, slug), PIDS, places=5)
    return slug


def _race(app, n: int, work) -> list[Any]:
    """``work(session)`` on ``n`` threads at once, each with its own database session."""
    go = threading.Barrier(n)

    def one(_):
        with app_services(app).sessions() as session:
            go.wait()
            return work(session)

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(one, range(n)))


# ---------------------------------------------------------------- Prolific

def test_two_prolific_bonus_runs_at_once_pay_once(app, approved, fake, service_clock):
    """The issue's run: two `prolific bonus` at once with a slow API paid 160 cents for 80 due on PostgreSQL."""
    state, transport = fake
    state.latency = LATENCY

    runs = _race(app, 2, lambda session: _service(app, session, transport, service_clock).pay_bonuses(
        _study(session, approved)))
    assert (state.paid_to(PIDS[0]), state.paid_to(PIDS[1]), state.paid_to(PIDS[2])) == (80, 80, 0)
    assert sum(b["pay_calls"] for b in state.bulks.values()) == 1
    assert sorted(len(run.paid) for run in runs) == [0, 2]
    with app_services(app).sessions() as session:
        assert [b.status for b in session.scalars(select(ProlificBonus))] == ["paid", "paid"]


def test_two_processes_paying_at_once_pay_once(app, database_url, approved, fake, service_clock):
    """Two `prolific bonus` processes, each with its own engine, session and HTTP client, against the fake served
    over HTTP with the same latency. PostgreSQL only: SQLite runs one writer at a time (the thread race above
    covers it), and spawning two interpreters is the slow part of this file."""
    import multiprocessing

    if database_url.startswith("sqlite"):
        pytest.skip("PostgreSQL only (see the docstring)")

    from werkzeug.serving import make_server

    state, transport = fake
    state.latency = LATENCY
    server = make_server("127.0.0.1", 0, transport.inner.app, threaded=True)
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    try:
        context = multiprocessing.get_context("spawn")
        barrier = context.Barrier(2)
        processes = [context.Process(target=pay_bonuses_in_a_process, args=(
            database_url, f"http://127.0.0.1:{server.server_port}/api/v1/", approved,
            service_clock.now.isoformat(), barrier)) for _ in range(2)]
        for process in processes:
            process.start()
        for process in processes:
            process.join(120)
        assert [p.exitcode for p in processes] == [0, 0]
    finally:
        server.shutdown()
    assert (state.paid_to(PIDS[0]), state.paid_to(PIDS[1])) == (80, 80)
    assert sum(b["pay_calls"] for b in state.bulks.values()) == 1


def test_three_runs_and_a_retry_still_pay_once(app, approved, fake, service_clock):
    state, transport = fake
    state.latency = LATENCY / 2
    _race(app, 3, lambda session: _service(app, session, transport, service_clock).pay_bonuses(
        _study(session, approved)))
    with app_services(app).sessions() as session:  # a retry afterwards finds nothing to do
        assert _service(app, session, transport, service_clock).pay_bonuses(_study(session, approved)).paid == []
    assert (state.paid_to(PIDS[0]), state.paid_to(PIDS[1])) == (80, 80)
    assert sum(b["pay_calls"] for b in state.bulks.values()) == 1


def test_two_approval_runs_at_once_ask_once(app, demo_stimuli, tmp_path, fake, service_clock):
    state, transport = fake
    slug = create_test_study(app, demo_stimuli, tmp_path, slug="pro", entry=PROLIFIC_ENTRY, **SMALL_STUDY)
    completed_participant(app, slug, PIDS[0], 3)
    with app_services(app).sessions() as session:
        service = _service(app, session, transport, service_clock)
        row = service.create(_study(session, slug), host=HOST, places=5)
        state.add_submission(row.prolific_id, PIDS[0], code=COMPLETION_CODE)
        service.reconcile(_study(session, slug))
    state.latency = LATENCY
    asked = _race(app, 2, lambda session: len(_service(app, session, transport, service_clock).approve_checked(
        _study(session, slug))[0]))
    assert sorted(asked) == [0, 1] and state.served("POST", "/bulk-approve/") == 1


class Died(BaseException):
    """The process is killed (not an error any handler catches)."""


def _crash_on(service: ProlificService, method: str, *, after: bool) -> None:
    """Make ``service.client.METHOD`` kill the run before its request is sent, or after it was carried out."""
    real = getattr(service.client, method)

    def dying(*args, **kwargs):
        if after:
            real(*args, **kwargs)
        raise Died(method)

    setattr(service.client, method, dying)


def _run_dies_paying(app, transport, clock, slug: str, step: str, *, after: bool) -> None:
    """A bonus run of study ``slug`` killed at its Prolific call ``step`` (before or ``after`` it went out)."""
    with app_services(app).sessions() as session:
        dying = _service(app, session, transport, clock)
        _crash_on(dying, step, after=after)
        with pytest.raises(Died):
            dying.pay_bonuses(_study(session, slug))


@pytest.mark.parametrize("after", [False, True], ids=["before the pay call", "after the pay call"])
def test_a_run_killed_between_claim_and_outcome_is_settled_by_reconcile_never_paid_twice(
        app, approved, fake, service_clock, after):
    state, transport = fake
    _run_dies_paying(app, transport, service_clock, approved, "pay_bonuses", after=after)
    with app_services(app).sessions() as session:
        assert {b.status for b in session.scalars(select(ProlificBonus))} == {"paying"}  # claimed, outcome unknown
        service = _service(app, session, transport, service_clock)
        run = service.pay_bonuses(_study(session, approved))
        if after:  # Prolific shows the bonuses: confirmed, not paid again
            assert len(run.confirmed) == 2 and run.paid == []
        else:  # not on Prolific yet: it may still come, so nothing is paid before the settling time
            assert run.paid == [] and len(run.unconfirmed) == 2 and state.payments == []
            service_clock.now += SETTLE
            assert len(service.pay_bonuses(_study(session, approved)).paid) == 2
        assert {b.status for b in service.ledger(_study(session, approved))} == {"paid"}
    assert (state.paid_to(PIDS[0]), state.paid_to(PIDS[1])) == (80, 80)


def test_a_run_killed_before_its_set_up_call_is_taken_back_after_the_lease(app, approved, fake, service_clock):
    state, transport = fake
    _run_dies_paying(app, transport, service_clock, approved, "set_up_bonuses", after=False)
    with app_services(app).sessions() as session:
        service = _service(app, session, transport, service_clock)
        assert service.pay_bonuses(_study(session, approved)).paid == [] and state.bulks == {}  # held by the claim
        service_clock.now += claims.LEASE
        assert len(service.pay_bonuses(_study(session, approved)).paid) == 2
    assert (state.paid_to(PIDS[0]), state.paid_to(PIDS[1])) == (80, 80)


def test_a_slow_run_whose_set_up_claim_was_taken_over_pays_nothing(app, approved, fake, service_clock):
    """Run A claims the bonuses and its set-up call outlasts the lease; run B takes them over and pays them. A's
    set-up answer then comes back: its claim is gone, so it leaves its bulk unpaid."""
    state, transport = fake
    with app_services(app).sessions() as a_session, app_services(app).sessions() as b_session:
        a = _service(app, a_session, transport, service_clock)
        b = _service(app, b_session, transport, service_clock)
        real = a.client.set_up_bonuses

        def slow_set_up(*args, **kwargs):
            service_clock.now += claims.LEASE  # meanwhile, B runs
            assert len(b.pay_bonuses(_study(b_session, approved)).paid) == 2
            return real(*args, **kwargs)

        a.client.set_up_bonuses = slow_set_up
        assert a.pay_bonuses(_study(a_session, approved)).paid == []
    assert len(state.bulks) == 2 and sum(b["pay_calls"] for b in state.bulks.values()) == 1
    assert (state.paid_to(PIDS[0]), state.paid_to(PIDS[1])) == (80, 80)


# ---------------------------------------------------------------- MTurk

class SlowMTurk:
    """A thread-safe fake MTurk client: ``send_bonus`` pays on every call (no deduplication by token, so only
    perceptlab's claim stands between two runs and two payments); each call takes ``latency`` seconds."""

    class meta:  # noqa: N801 - boto3's attribute name
        endpoint_url = "https://mturk-requester-sandbox.us-east-1.amazonaws.com"

    def __init__(self, latency: float = LATENCY):
        self.latency, self.lock = latency, threading.Lock()
        self.bonuses: list[dict] = []
        self.approvals: list[str] = []
        self.status: dict[str, str] = {}

    def _wait(self) -> None:
        threading.Event().wait(self.latency)

    def send_bonus(self, **params):
        self._wait()
        with self.lock:
            self.bonuses.append(params)
        return {}

    def list_bonus_payments(self, AssignmentId, MaxResults, **_):  # noqa: N803 - boto3's names
        with self.lock:
            return {"BonusPayments": [{"WorkerId": b["WorkerId"], "BonusAmount": b["BonusAmount"],
                                       "AssignmentId": b["AssignmentId"], "Reason": b["Reason"]}
                                      for b in self.bonuses if b["AssignmentId"] == AssignmentId]}

    def get_assignment(self, AssignmentId):  # noqa: N803
        with self.lock:
            return {"Assignment": {"AssignmentId": AssignmentId,
                                   "AssignmentStatus": self.status.get(AssignmentId, "Submitted")}}

    def approve_assignment(self, AssignmentId, **_):  # noqa: N803
        self._wait()
        with self.lock:
            self.approvals.append(AssignmentId)
            self.status[AssignmentId] = "Approved"
        return {}


def test_two_mturk_bonus_runs_at_once_send_once(app, study):
    mturk = SlowMTurk()
    results = _race(app, 2, lambda session: MTurkService(mturk, session, sleep=lambda s: None).grant_bonus(
        "W1", "A1", "0.80", "2 extra pages"))
    assert len(mturk.bonuses) == 1
    assert sorted(results) in (["already sent", "sent"], ["being sent by another run", "sent"])
    with app_services(app).sessions() as session:
        assert session.scalar(select(Bonus.status)) == "sent"


def test_two_mturk_approval_runs_at_once_approve_once(app, study):
    with app_services(app).sessions() as session:
        session.add(MTurkAssignment(study_id=session.scalar(select(Study.id)), assignment_id="A1", hit_id="H1",
                                    worker_id="W1", status="Submitted"))
        session.commit()
    mturk = SlowMTurk()
    results = _race(app, 2, lambda session: MTurkService(mturk, session, sleep=lambda s: None).approve("A1"))
    assert mturk.approvals == ["A1"]
    assert sorted(results) in (["already approved", "approved"], ["approval being sent by another run", "approved"])


@pytest.mark.parametrize("paid_before", [True, False])
def test_an_mturk_bonus_claimed_by_a_run_that_died_is_checked_on_mturk_first(app, study, paid_before):
    mturk = SlowMTurk(latency=0)
    with app_services(app).sessions() as session:
        service = MTurkService(mturk, session, sleep=lambda s: None)
        if paid_before:  # the dead run's call went through
            mturk.send_bonus(WorkerId="W1", BonusAmount="0.80", AssignmentId="A1", Reason="bonus",
                             UniqueRequestToken=service.bonus_token("A1", "bonus"))
        session.add(Bonus(assignment_id="A1", worker_id="W1", amount="0.80", reason="bonus", status="pending",
                          unique_request_token=service.bonus_token("A1", "bonus"), sandbox=True, claim="dead" * 8,
                          claimed_at=dt.datetime.now(dt.UTC) - claims.LEASE / 2))
        session.commit()
        assert service.grant_bonus("W1", "A1", "0.80", "bonus") == "being sent by another run"  # within the lease
        bonus = session.scalar(select(Bonus))
        bonus.claimed_at = dt.datetime.now(dt.UTC) - 2 * claims.LEASE
        session.commit()
        assert service.grant_bonus("W1", "A1", "0.80", "bonus") == "sent"
        assert service.grant_bonus("W1", "A1", "0.80", "bonus") == "already sent"
    assert len(mturk.bonuses) == 1
