"""The experimenter's preview link in chromium (server/pilot.py): it shows exactly what a worker sees (consent,
instructions, quiz, a page of trials, the page-done panel, the end) and records nothing that counts: no pair's
vote count or reservation, no time estimate, no payment, no exported vote.

The study is nearly full when the preview starts (the other workers' votes are set on the pairs): the page-done
panel then offers no further page, only to finish (the page used to offer "Continue with another page (bonus
$0.40)" whatever was left).
"""
from __future__ import annotations

import pytest
from playwright.sync_api import expect
from sqlalchemy import func, select, update

from server import exports
from server.models import Assignment, Study, Worker
from server.paradigms.paired.models import Pair, StudySet, Vote
from server.payments import payment_plan
from server.pilot import pilot_signature
from server.services import app_services
from server.worker_time import time_estimate
from tests.server.conftest import gold_side

pytestmark = pytest.mark.timeout(180)

SECRET = "test-secret"  # make_test_app's secret key
LEFT_OPEN = 4  # pairs still needing a vote when the preview starts: fewer than a page's 5 real pairs


def _fill_all_but(app, slug: str, left_open: int) -> list[int]:
    """Every real pair of the study but ``left_open`` at its target (the votes of earlier workers); returns
    the open pairs. The design pairs that are gold pairs get a target of 0 instead, full with no vote: a pilot's
    page start recounts the pairs its trials showed from the votes that count (none here), and their gold
    trials are votes of them."""
    with app_services(app).sessions() as session:
        study_id = session.scalar(select(Study.id).where(Study.slug == slug))
        real = select(Pair.id).join(StudySet).where(StudySet.study_id == study_id, ~Pair.is_gold).order_by(Pair.id)
        gold = session.scalars(real.where(Pair.gold_winner_id.is_not(None))).all()
        pairs = session.scalars(real.where(Pair.gold_winner_id.is_(None))).all()
        open_pairs = list(pairs[:left_open])
        session.execute(update(Pair).where(Pair.id.in_(pairs[left_open:])).values(n_votes=Pair.target_votes))
        session.execute(update(Pair).where(Pair.id.in_(gold)).values(target_votes=0))
        session.commit()
    return open_pairs


def _pair_counts(app, slug: str) -> dict[int, tuple[int, int]]:
    with app_services(app).sessions() as session:
        return {pid: (n, held) for pid, n, held in session.execute(
            select(Pair.id, Pair.n_votes, Pair.n_held).join(StudySet).join(Study).where(Study.slug == slug))}


def _answer_until_not_a_trial(app, page) -> str:
    """Click every trial shown (gold: the right side) until the page shows something else; return what."""
    for _ in range(40):
        state = page.wait_for_function("""() => {
          if (document.querySelector('main#done')) return 'done';
          const panel = document.querySelector('#page-done');
          if (panel && !panel.hidden) return 'page_done';
          const trial = document.querySelector('#trial');
          if (trial && !trial.hidden && trial.dataset.accepting === 'true') return 'trial:' + trial.dataset.trialId;
          return '';
        }""").json_value()
        if not state.startswith("trial:"):
            return state
        side = gold_side(app, {"trial_id": state.split(":", 1)[1]}) or "left"
        page.click(f"#trial [data-side={side}]")
        page.wait_for_function("""(id) => document.querySelector('main#done')
          || !document.querySelector('#page-done')?.hidden
          || document.querySelector('#trial')?.dataset.trialId !== id""",
                               arg=state.split(":", 1)[1])
    raise AssertionError("the trials never ended")


def test_the_preview_link_walks_through_what_a_worker_sees_and_records_nothing_that_counts(
        app, study, live_server, page, screenshot):
    _fill_all_but(app, study, LEFT_OPEN)
    before = _pair_counts(app, study)
    page.goto(f"{live_server}/s/{study}?pilot={pilot_signature(SECRET, study)}")

    expect(page.locator("main#consent")).to_be_visible()
    screenshot(page, "consent")
    page.check("#agree")
    page.click("#btn-consent")
    expect(page.locator("main#instructions")).to_be_visible()
    page.click("#btn-start")
    # The quiz, then the page of trials: the worker's own trial page.
    assert _answer_until_not_a_trial(app, page) == "page_done"
    panel = page.locator("#page-done")
    screenshot(page, "page-done")
    # No pair is left for this participant: finishing is the only offer, and the page says why.
    expect(panel).to_contain_text("No further page is left for you in this study")
    expect(page.locator("#btn-continue")).to_be_hidden()
    expect(page.locator("#btn-finish")).to_be_visible()
    page.click("#btn-finish")
    expect(page.locator("main#done")).to_be_visible()
    screenshot(page, "done")

    with app_services(app).sessions() as session:
        s = session.scalar(select(Study).where(Study.slug == study))
        worker = session.scalar(select(Worker).where(Worker.study_id == s.id))
        assert worker.pilot and worker.platform == "pilot"
        assignment = session.scalar(select(Assignment).where(Assignment.worker_id == worker.id))
        assert assignment.stage == "completed" and assignment.pilot
        # The preview answered the open pairs (and the quiz), yet no pair counts a vote or holds a trial more.
        assert session.scalar(select(func.count()).select_from(Vote).where(Vote.assignment_id == assignment.id)) \
            == 3 + LEFT_OPEN + 1
        assert time_estimate(session, s).n_finished == 0
        assert payment_plan(session, s).rows == []
        export = exports.export_study(session, s, salt=exports.study_salt(SECRET, study))
        assert export.files["votes.csv"].count("\n") == 1  # the header only
    assert _pair_counts(app, study) == before


def test_the_experimenter_marks_a_participant_as_pilot_on_the_dashboard(app, study, live_server, page, screenshot):
    from server import auth
    from tests.server.conftest import WorkerClient

    password = "correct horse battery staple"
    with app_services(app).sessions() as session:
        auth.create_user(session, "alice", password)
        session.commit()
    colleague = WorkerClient(app.test_client(), study, worker_id="WCOLLEAGUE")
    colleague.start()
    colleague.answer_page(colleague.correct_side)  # quiz
    colleague.answer_page(colleague.correct_side)  # a page: 5 real trials and a hidden gold one
    page.goto(f"{live_server}/admin/login?next=/admin/studies/{study}")
    page.fill("#username", "alice")
    page.fill("#password", password)
    page.click("button[type=submit]")
    expect(page.locator("#n-workers")).to_have_text("1")
    expect(page.locator("#preview-link")).to_have_attribute("href", f"/s/{study}?pilot={pilot_signature(SECRET, study)}")
    page.click("#participants-link")
    row = page.locator("#participants-table tbody tr").first
    expect(row).to_have_attribute("data-pilot", "0")
    row.get_by_role("button", name="Mark as pilot").click()
    row = page.locator("#participants-table tbody tr").first
    expect(row).to_have_attribute("data-pilot", "1")
    expect(row).to_contain_text("pilot")
    screenshot(page, "participants")
    with app_services(app).sessions() as session:
        assert session.scalar(select(Worker.pilot).where(Worker.external_id == "WCOLLEAGUE"))
        assert session.scalar(select(func.sum(Pair.n_votes))) == 0
    page.goto(f"{live_server}/admin/studies/{study}")
    expect(page.locator("#n-workers")).to_have_text("0")
    expect(page.locator("#n-votes")).to_have_text("0")
    page.goto(f"{live_server}/admin/studies/{study}/participants")
    page.locator("#participants-table tbody tr").first.get_by_role("button", name="Count as real").click()
    expect(page.locator("#participants-table tbody tr").first).to_have_attribute("data-pilot", "0")
    with app_services(app).sessions() as session:
        # The quiz's 3 and the page's 6 votes, all of design pairs (the demo's gold pairs are design pairs).
        assert session.scalar(select(func.sum(Pair.n_votes))) == 3 + 5 + 1
