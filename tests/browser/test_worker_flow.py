"""The worker's side of a study in chromium, against the real app over HTTP (SQLite).

Each test walks the pages a crowd worker sees (MTurk HIT or plain link: consent,
instructions, quiz, trial pages, the end) with the mouse or the keyboard, and then
checks what the database holds: every click is exactly one vote, nothing is lost
over a reload or an outage, and the quality rules (quiz, hidden gold) stop the
worker. The study is ``SMALL_STUDY``: quiz of 3, pages of 6 trials (1 hidden
gold), at most 3 pages, hidden gold judged from 2 answers on.

Gold and quiz trials are recognised the way a careful worker would: one candidate
is the reference itself (same full-image URL).
"""
from __future__ import annotations

import json
import re
from urllib.parse import parse_qs

import pytest
from playwright.sync_api import expect
from sqlalchemy import func, select

from server.models import Assignment, GoldResult, Page, Trial, Vote, Worker
from server.services import app_services
from tests.browser._worker_support import (Walker, _any_side, _assignment, _mouse_start, _page_action, _status, _tab_to,
                                            _votes, correct_side)
from tests.server.conftest import WorkerClient

pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("gold_answer_key")]

SANDBOX = "https://workersandbox.mturk.com"
VOTES_URL = "**/api/v1/assignments/*/votes"


# ---------------------------------------------------------------- helpers: database

def _session(app):
    return app_services(app).sessions()


def _count(app, model, *where) -> int:
    with _session(app) as session:
        return session.scalar(select(func.count()).select_from(model).where(*where))


def _trials(app, assignment_id: int, page_index: int | None = None) -> list[Trial]:
    """Trials of one page (default: the latest), in display order."""
    with _session(app) as session:
        pages = select(Page).where(Page.assignment_id == assignment_id).order_by(Page.index.desc())
        if page_index is not None:
            pages = pages.where(Page.index == page_index)
        page = session.scalars(pages.limit(1)).one()
        trials = session.scalars(select(Trial).where(Trial.page_id == page.id).order_by(Trial.position)).all()
        session.expunge_all()
    return list(trials)


def _worker(app, external_id: str) -> Worker:
    with _session(app) as session:
        worker = session.scalar(select(Worker).where(Worker.external_id == external_id))
        session.expunge(worker)
        return worker


# ---------------------------------------------------------------- helpers: the page

def _mturk_url(live_server: str, slug: str, assignment: str = "A1", worker: str = "W1", hit: str = "H1") -> str:
    return (f"{live_server}/s/{slug}?assignmentId={assignment}&hitId={hit}&workerId={worker}"
            f"&turkSubmitTo={SANDBOX}")


def wrong_side(page) -> str | None:
    side = correct_side(page)
    return None if side is None else ("right" if side == "left" else "left")


def _other(side: str) -> str:
    return "right" if side == "left" else "left"


def _at_first_trials_page(app, page, live_server: str, slug: str, participant: str) -> Walker:
    """Consent, instructions and the quiz over the API (the other tests do them in the browser),
    then the worker's page in the browser, at the first trials page."""
    worker = WorkerClient(app.test_client(), slug, worker_id=participant, platform="link")
    worker.start()
    assert worker.answer_page(worker.correct_side)["stage"] == "trials"
    page.goto(live_server + worker.entry["worker_url"])
    walker = Walker(page)
    walker.choices.update((trial_id, "left" if vote.chose_left else "right")
                          for trial_id, vote in _votes(app, int(worker.assignment_id)).items())
    return walker


class VoteOutage:
    """The server side of an outage: while ``down``, vote POSTs are answered 503 (and counted).

    ``page.route`` cannot stop everything: the keep-alive requests that response_queue.js fires when
    the page goes away (pagehide) leave the browser without passing through it.
    """

    def __init__(self, app):
        self.inner = app.wsgi_app
        self.down = False
        self.refused = 0
        app.wsgi_app = self

    def __call__(self, environ, start_response):
        if self.down and environ["REQUEST_METHOD"] == "POST" and environ["PATH_INFO"].endswith("/votes"):
            environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
            self.refused += 1
            start_response("503 SERVICE UNAVAILABLE", [("Content-Type", "application/json")])
            return [b'{"error": "unavailable", "message": "down for the test"}']
        return self.inner(environ, start_response)


def _local_votes(page) -> list[dict]:
    """Votes the page holds in localStorage (not yet acknowledged by the server)."""
    raw = page.evaluate("""() => Object.keys(localStorage).filter((k) => k.startsWith('perceptlab.responses.'))
                                  .map((k) => localStorage.getItem(k))""")
    return [json.loads(entry["body"]) for blob in raw for entry in json.loads(blob)]


def _wait_saved(page) -> None:
    expect(page.locator("#pending")).to_have_attribute("data-pending", "0", timeout=15_000)


# ---------------------------------------------------------------- tests

def test_mturk_hit_by_mouse(page, app, live_server, study, screenshot):
    page.goto(_mturk_url(live_server, study))
    _mouse_start(page, screenshot)

    walker = Walker(page, "mouse")
    # Quiz: gold pairs (one image clearly better); each answer gets feedback from the server.
    for _ in range(3):
        assert walker.status() == "trial"
        expect(page.locator("#trial")).to_have_attribute("data-page-kind", "quiz")
        expect(page.locator("#progress")).to_contain_text("practice")
        side = correct_side(page)
        assert side is not None, "a quiz trial must be a gold pair"
        walker.answer(lambda p: side)
        expect(page.locator("#feedback")).to_have_attribute("data-kind", "correct")
        expect(page.locator("#feedback")).to_be_visible()
        expect(page.locator(f"#trial [data-side={side}]")).to_have_attribute("data-state", "chosen")
        if len(walker.choices) == 1:
            screenshot(page, "quiz-feedback")

    # Page 1: click through, continue; page 2: click through, finish.
    assert walker.status() == "trial"
    expect(page.locator("#trial")).to_have_attribute("data-page-kind", "trials")
    expect(page.locator("#progress")).to_have_text("Pair 1 of 6 · page 1")
    screenshot(page, "trial")
    state_requests = []
    page.on("request", lambda r: state_requests.append(r.url) if r.url.endswith("/state") else None)
    assert walker.run(_any_side, kind="trials") == "page_done"
    expect(page.locator("#btn-continue")).to_be_visible()
    expect(page.locator("#btn-finish")).to_be_visible()
    expect(page.locator("#page-done")).to_contain_text("1 page")
    # The page's trials were known and its last vote's answer brought the page_done State: no GET /state.
    assert state_requests == []
    screenshot(page, "page-done")
    _page_action(page, "btn-continue")
    assert walker.run(_any_side, kind="trials") == "page_done"
    expect(page.locator("#page-done")).to_contain_text("2 pages")
    _page_action(page, "btn-finish")

    expect(page.locator("main#done")).to_be_visible()
    expect(page.locator("main#done")).to_contain_text("You completed 2 pages")
    expect(page.locator("#btn-submit-hit")).to_be_visible()
    screenshot(page, "done")

    # The DB holds exactly the clicks made.
    assignment = _assignment(app, "A1")
    assert assignment.stage == "completed" and assignment.completed_at is not None
    assert assignment.pages_completed == 2 and assignment.completion_code
    assert assignment.environment["window"] == {"width": 1366, "height": 768, "dpr": 1}
    assert "Chrome" in assignment.environment["user_agent"]
    votes = _votes(app, assignment.id)
    assert len(walker.choices) == 3 + 6 + 6
    assert set(votes) == set(walker.choices)
    assert _count(app, Vote) == len(walker.choices)
    for trial_id, vote in votes.items():
        assert vote.chose_left == (walker.choices[trial_id] == "left"), trial_id
        assert vote.rt_ms > 0 and vote.input == "mouse"
        assert (vote.window_width, vote.window_height, vote.device_pixel_ratio) == (1366, 768, 1.0)
        assert vote.client_time
    with _session(app) as session:
        trials = session.scalars(select(Trial).where(Trial.assignment_id == assignment.id)).all()
        assert all(t.answered for t in trials) and len(trials) == len(votes)
        # Sides are randomised per trial; and the gold the page showed is the gold the server knows.
        assert {t.left_is_a for t in trials} == {True, False}
        assert {str(t.id) for t in trials if t.is_gold} == walker.gold
        assert session.scalar(select(func.count()).select_from(GoldResult).where(~GoldResult.correct)) == 0

    # Submitting posts the form to MTurk's sandbox (intercepted here).
    posted = {}

    def mturk(route, request):
        posted.update(url=request.url, method=request.method, form=parse_qs(request.post_data or ""))
        route.fulfill(status=200, content_type="text/html", body="<p>HIT submitted</p>")

    page.route(f"{SANDBOX}/**", mturk)
    page.click("#btn-submit-hit")
    expect(page.locator("body")).to_have_text("HIT submitted")
    assert posted["url"] == f"{SANDBOX}/mturk/externalSubmit" and posted["method"] == "POST"
    assert posted["form"]["assignmentId"] == ["A1"]
    assert len(posted["form"]) >= 2
    assert posted["form"].get("completionCode") == [assignment.completion_code]


def test_plain_link_by_keyboard_only(page, app, live_server, study, screenshot):
    page.goto(f"{live_server}/s/{study}?participant=P1")
    expect(page.locator("main#consent")).to_be_visible()
    _tab_to(page, "agree")
    page.keyboard.press("Space")
    expect(page.locator("#agree")).to_be_checked()
    _tab_to(page, "btn-consent")
    page.keyboard.press("Enter")
    expect(page.locator("main#instructions")).to_be_visible()
    _tab_to(page, "btn-start")
    page.keyboard.press("Enter")

    walker = Walker(page, "keyboard")
    for _ in range(3):  # the quiz
        assert walker.status() == "trial"
        walker.answer(lambda p: correct_side(p))
        expect(page.locator("#feedback")).to_have_attribute("data-kind", "correct")
    # Alternate the keys so that both arrows are used.
    flip = iter(range(100))
    pick = lambda p: correct_side(p) or ("left" if next(flip) % 2 else "right")  # noqa: E731
    assert walker.run(pick, kind="trials") == "page_done"
    _page_action(page, "btn-continue", "keyboard")
    assert walker.run(pick, kind="trials") == "page_done"
    _page_action(page, "btn-finish", "keyboard")

    expect(page.locator("main#done")).to_be_visible()
    code = page.locator("#completion-code")
    expect(code).to_be_visible()
    screenshot(page, "done-code")
    assert page.locator("#mturk-submit").count() == 0

    assignment = _assignment(app, "P1")
    assert assignment.platform == "link" and assignment.stage == "completed"
    assert code.inner_text().strip() == assignment.completion_code
    votes = _votes(app, assignment.id)
    assert set(votes) == set(walker.choices) and len(votes) == 3 + 12
    assert {v.input for v in votes.values()} == {"keyboard"}
    assert {v.chose_left for v in votes.values()} == {True, False}
    for trial_id, vote in votes.items():
        assert vote.chose_left == (walker.choices[trial_id] == "left")
        assert vote.rt_ms > 0


def test_reload_mid_page_loses_and_repeats_nothing(page, app, live_server, study):
    walker = _at_first_trials_page(app, page, live_server, study, "R1")
    assignment = _assignment(app, "R1")

    def check_db_and_screen(expect_answered: set[str]):
        """Every answered trial has exactly its one vote; the page shows the first open trial."""
        _wait_saved(page)
        trials = _trials(app, assignment.id)
        votes = _votes(app, assignment.id)
        answered = {str(t.id) for t in trials if t.answered}
        assert answered == expect_answered
        assert set(votes) == set(walker.choices)  # nothing lost, nothing extra (one vote per trial by schema)
        for trial_id, vote in votes.items():
            assert vote.chose_left == (walker.choices[trial_id] == "left")
        first_open = next(str(t.id) for t in trials if not t.answered)
        assert _status(page, walker.choices) == "trial"
        expect(page.locator("#trial")).to_have_attribute("data-trial-id", first_open)
        assert _local_votes(page) == []

    # 1. Reload at once after three answers (the last one may still be on its way).
    assert _status(page, walker.choices) == "trial"
    on_page = walker.answer_n(3, _any_side)
    page.reload()
    check_db_and_screen(set(on_page))
    expect(page.locator("#progress")).to_have_text("Pair 4 of 6 · page 1")
    assert walker.run(_any_side) == "page_done"
    _page_action(page, "btn-continue")

    # 2. Votes cannot reach the server: they wait in localStorage, over a reload too.
    outage = VoteOutage(app)
    outage.down = True
    aborted = []
    page.route(VOTES_URL, lambda route: (aborted.append(route.request.url), route.abort()))
    on_page = walker.answer_n(3, _any_side)
    expect(page.locator("#pending")).to_have_attribute("data-pending", "3")
    held = _local_votes(page)
    assert sorted(v["trial_id"] for v in held) == sorted(on_page)
    assert aborted, "the vote POSTs were not blocked"
    page.reload()
    assert _status(page, walker.choices) == "trial"
    trials = _trials(app, assignment.id)
    first_not_held = next(str(t.id) for t in trials if str(t.id) not in on_page)
    expect(page.locator("#trial")).to_have_attribute("data-trial-id", first_not_held)
    expect(page.locator("#pending")).to_have_attribute("data-pending", "3")
    expect(page.locator("#progress")).to_have_text("Pair 4 of 6 · page 2")
    assert not any(str(t.id) in on_page for t in trials if t.answered), "blocked votes reached the server"

    # Back online, reloaded: the new page load delivers the votes it found in localStorage, once each.
    # (The server stays down until that page is up, so that the pagehide keep-alive requests of the
    # old page cannot be what delivers them.)
    page.unroute(VOTES_URL)
    refused = outage.refused
    page.reload()
    assert _status(page, walker.choices) == "trial"
    expect(page.locator("#pending")).to_have_attribute("data-pending", "3")
    expect(page.locator("#pending")).to_have_attribute("data-retrying", "true")
    assert outage.refused > refused
    assert _count(app, Vote, Vote.trial_id.in_([int(t) for t in on_page])) == 0
    outage.down = False
    check_db_and_screen(set(on_page))
    assert _count(app, Vote) == len(walker.choices) == 3 + 6 + 3
    expect(page.locator("#notice")).to_be_hidden()


def test_failed_quiz_disqualifies(page, app, live_server, study, screenshot):
    page.goto(_mturk_url(live_server, study, worker="WQUIZ"))
    _mouse_start(page)
    walker = Walker(page)
    for n in range(3):
        assert walker.status() == "trial"
        side = wrong_side(page)
        walker.answer(lambda p: side)
        expect(page.locator("#feedback")).to_have_attribute("data-kind", "wrong")
        expect(page.locator(f"#trial [data-side={side}]")).to_have_attribute("data-state", "wrong")
        expect(page.locator(f"#trial [data-side={_other(side)}]")).to_have_attribute("data-state", "correct")
        if n == 0:
            screenshot(page, "quiz-wrong")
    assert walker.status() == "stopped"
    expect(page.locator("#stop-message")).to_contain_text("quiz")
    expect(page.locator("main#stopped")).to_contain_text("return the HIT")
    screenshot(page, "stopped")

    worker = _worker(app, "WQUIZ")
    assert worker.status == "disqualified"
    first = _assignment(app, "A1")
    assert first.stage == "disqualified"
    assert _count(app, GoldResult, GoldResult.is_quiz, ~GoldResult.correct) == 3
    assert _count(app, Page, Page.kind == "trials") == 0

    # Another HIT of the same study: turned away at once, without consent or quiz.
    page.goto(_mturk_url(live_server, study, assignment="A2", worker="WQUIZ", hit="H2"))
    expect(page.locator("main#stopped")).to_be_visible()
    expect(page.locator("#stop-message")).to_contain_text("quiz")
    assert _assignment(app, "A2").stage == "disqualified"
    assert _count(app, Vote) == 3 and _count(app, Trial) == 3


def test_preview_writes_nothing(page, app, live_server, study, screenshot):
    page.goto(_mturk_url(live_server, study, assignment="ASSIGNMENT_ID_NOT_AVAILABLE", worker="WPREVIEW"))
    preview = page.locator("main#preview")
    expect(preview).to_be_visible()
    expect(preview).to_contain_text("Accept the HIT")
    expect(preview).to_contain_text("6 comparisons")
    # The time it takes, from the page size (6 x 15 s) and the setup (a minute + the 3-comparison quiz).
    expect(preview.locator("#time-estimate")).to_have_text(re.compile(
        r"about 2 minutes, plus about 2 minutes\s+at the start for the instructions and the quiz"))
    image = preview.locator("img")
    expect(image).to_have_js_property("complete", True)
    assert image.evaluate("(img) => img.naturalWidth") > 0
    screenshot(page, "preview")
    # MTurk's preview without any assignmentId is a preview too.
    page.goto(f"{live_server}/s/{study}?hitId=H1")
    expect(page.locator("main#preview")).to_be_visible()
    for model in (Worker, Assignment, Page, Trial, Vote):
        assert _count(app, model) == 0, model.__name__


def test_window_too_small_hides_the_trial(page, app, live_server, study, screenshot):
    page.clock.install()  # the page's clock: the response-time check below advances it, not the wall clock
    page.set_viewport_size({"width": 900, "height": 500})
    page.goto(f"{live_server}/s/{study}?participant=S1")
    # The entry pages say so before consent and hide their forms (tests/browser/test_display.py) ...
    # (window or screen: Playwright's screen follows its viewport)
    expect(page.locator("#device-check")).to_have_attribute("data-device", re.compile(r"^(window|screen)_too_small$"))
    expect(page.locator("#btn-consent")).to_be_hidden()
    # ... a worker whose window shrinks later (here: the forms sent by script) meets the trial page's own check.
    page.evaluate("document.querySelector('#agree').checked = true; document.querySelector('#consent form').submit()")
    expect(page.locator("main#instructions")).to_be_visible()
    page.evaluate("document.querySelector('#instructions form').submit()")
    too_small = page.locator("#window-too-small")
    trial = page.locator("#trial")
    expect(too_small).to_be_visible()
    expect(too_small).to_contain_text("900 × 500")
    expect(trial).to_be_hidden()
    screenshot(page, "too-small")

    def try_to_vote():
        page.keyboard.press("ArrowLeft")
        page.keyboard.press("ArrowRight")
        page.evaluate("document.querySelector('#trial [data-side=left]').click()")  # bypasses visibility
        page.clock.run_for(300)  # the page's timers that would send a vote (not real time: a busy machine is slow)

    try_to_vote()
    assignment = _assignment(app, "S1")
    assert _count(app, Vote) == 0 and _local_votes(page) == []
    expect(page.locator("#pending")).to_have_attribute("data-pending", "0")

    page.set_viewport_size({"width": 1366, "height": 768})
    expect(too_small).to_be_hidden()
    expect(trial).to_be_visible()
    expect(trial).to_have_attribute("data-accepting", "true")
    shown_id = trial.get_attribute("data-trial-id")

    # Made too small again while a trial is shown: hidden, and choices are refused again.
    page.set_viewport_size({"width": 1100, "height": 500})
    expect(too_small).to_be_visible()
    expect(trial).to_be_hidden()
    try_to_vote()
    assert _count(app, Vote) == 0 and _local_votes(page) == []
    accepting_while_hidden = trial.get_attribute("data-accepting")  # checked last (see the end)

    # Enlarged again a minute later (on the page's clock): the same trial, and its response time starts afresh.
    page.clock.run_for(60_000)
    page.set_viewport_size({"width": 1366, "height": 768})
    walker = Walker(page)
    assert walker.status() == "trial"
    assert trial.get_attribute("data-trial-id") == shown_id
    walker.answer(lambda p: correct_side(p))
    expect(page.locator("#feedback")).to_have_attribute("data-kind", "correct")
    vote = _votes(app, assignment.id)[shown_id]
    assert vote.rt_ms < 60_000, "the response time did not restart when the trial was shown again"
    assert (vote.window_width, vote.window_height) == (1366, 768)
    assert _count(app, Vote) == 1
    # The test hook must say what the app does: a hidden trial takes no choice, so it is not "accepting".
    assert accepting_while_hidden != "true", (
        "#trial kept data-accepting=true while hidden by a too-small window "
        "(pc_trial.js updateTrialVisibility clears this.accepting but not trialEl.dataset.accepting)")


def test_hidden_gold_failures_stop_the_worker(page, app, live_server, study, screenshot):
    walker = _at_first_trials_page(app, page, live_server, study, "G1")

    wrong_on_gold = lambda p: wrong_side(p) or "left"  # noqa: E731
    # One wrong gold answer is not enough to judge (gold_min_answered = 2): the page ends normally.
    assert walker.run(wrong_on_gold, kind="trials") == "page_done"
    assignment = _assignment(app, "G1")
    assert assignment.stage == "page_done"
    _page_action(page, "btn-continue")
    # The second wrong one stops the worker (0 of 2 correct < 70%).
    status = walker.run(wrong_on_gold, kind="trials")
    assert status == "stopped"
    expect(page.locator("#stop-message")).to_contain_text("check questions")
    expect(page.locator("#btn-continue")).to_have_count(0)
    screenshot(page, "stopped")

    worker = _worker(app, "G1")
    assert worker.status == "stopped"
    assert _assignment(app, "G1").stage == "stopped"
    assert _count(app, GoldResult, ~GoldResult.is_quiz) == 2
    assert _count(app, GoldResult, ~GoldResult.is_quiz, GoldResult.correct) == 0
    trial_gold = {tid for tid in walker.gold if walker.kinds[tid] == "trials"}
    assert len(trial_gold) == 2
    votes = _votes(app, assignment.id)
    assert set(votes) == set(walker.choices)
    # The failing answer is the gold trial of this page. (Today the page learns of the stop only
    # when the page ends, so the trials after it are still shown, answered and stored.)
    failing = [t for t in _trials(app, assignment.id) if t.is_gold]
    assert len(failing) == 1 and str(failing[0].id) in trial_gold
    # Coming back to the study link later: still stopped.
    page.goto(f"{live_server}/s/{study}?participant=G1")
    expect(page.locator("main#stopped")).to_be_visible()
