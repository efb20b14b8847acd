"""The demo's active-sampling study ("demo-active", as `perceptlab demo` creates it) in chromium: after
its warm-up, a worker walks consent, instructions, the quiz and a page of chosen pairs to the end page,
and every click is one vote on a pair the selector may choose (most of them outside the warm-up design).
"""
from __future__ import annotations

import pytest
from playwright.sync_api import expect
from sqlalchemy import select

from server.cli.cmd_server import ACTIVE_DEMO_SLUG, active_demo_study
from server.models import Pair, Study, Trial
from server.paradigms import create_study, paradigm_for, read_study_file
from server.services import app_services
from tests.server.conftest import WorkerClient
from tests.server.allocation_support import work

from ._worker_support import Walker, _any_side, _assignment, _mouse_start, _page_action, _votes, correct_side

pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("gold_answer_key")]


def _session(app):
    return app_services(app).sessions()


def _design(app) -> dict:
    with _session(app) as session:
        study = session.scalar(select(Study).where(Study.slug == ACTIVE_DEMO_SLUG))
        return paradigm_for(study).progress(session, study.id)["design"]


@pytest.fixture
def demo_active(app, demo_stimuli, tmp_path) -> str:
    """The demo's active study on the test database, from the file `perceptlab demo` writes."""
    out = tmp_path / "demo"
    out.mkdir()
    (out / "stimuli").symlink_to(demo_stimuli)
    path = out / "demo_active_study.toml"
    path.write_text(active_demo_study(seed=0))
    with _session(app) as session:
        create_study(session, read_study_file(path))
        session.commit()
    return ACTIVE_DEMO_SLUG


def test_a_worker_walks_the_active_demo_study_to_the_end(page, app, live_server, demo_active, screenshot):
    assert _design(app)["phase"] == "warm-up"
    # The warm-up (one vote for each of the 44 design pairs): one worker's quiz and 4 pages of 11, over the API.
    assert work(WorkerClient(app.test_client(), demo_active, platform="link"), pages=4)["stage"] == "completed"
    assert _design(app)["phase"] == "active"

    page.goto(f"{live_server}/s/{demo_active}?participant=ACTIVE1")
    _mouse_start(page)
    walker = Walker(page)
    for _ in range(4):  # the quiz
        assert walker.status() == "trial"
        expect(page.locator("#trial")).to_have_attribute("data-page-kind", "quiz")
        walker.answer(correct_side)
    assert walker.status() == "trial"
    expect(page.locator("#progress")).to_have_text("Pair 1 of 12 · page 1")
    screenshot(page, "active-trial")
    assert walker.run(_any_side, kind="trials") == "page_done"
    _page_action(page, "btn-finish")
    expect(page.locator("main#done")).to_be_visible()
    expect(page.locator("#completion-code")).to_be_visible()
    screenshot(page, "active-done")

    assignment = _assignment(app, "ACTIVE1")
    assert assignment.stage == "completed" and assignment.pages_completed == 1
    votes = _votes(app, assignment.id)
    assert set(votes) == set(walker.choices) and len(votes) == 4 + 12
    for trial_id, vote in votes.items():
        assert vote.chose_left == (walker.choices[trial_id] == "left")
    with _session(app) as session:
        real = session.execute(select(Pair.id, Pair.target_votes).join(Trial, Trial.pair_id == Pair.id)
                               .where(Trial.assignment_id == assignment.id, ~Pair.is_gold)).all()
    # 11 distinct chosen pairs; the design's pairs have had their warm-up vote, so most are others.
    assert len(real) == len({pair_id for pair_id, _ in real}) == 11
    assert sum(target == 0 for _, target in real) >= 6, real
