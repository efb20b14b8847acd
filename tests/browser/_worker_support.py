"""Shared helpers of the paired-comparison browser tests: a :class:`Walker` that answers trial pages
in chromium, the right side of gold trials read from the database, and the clicks through consent,
instructions and the page-done panel.

A support module, not a test module: test modules import it (they never import each other). The
``gold_answer_key`` fixture in tests/browser/conftest.py fills :data:`answer_key` for a test.
"""
from __future__ import annotations

from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
from playwright.sync_api import expect
from sqlalchemy import select

from server.models import Assignment, Vote
from server.services import app_services
from tests.server.conftest import gold_side


def _session(app):
    return app_services(app).sessions()


# What the page shows next (or "" while it is busy): a trial ready for a choice that is not
# among `answered`, the page-done panel, or one of the server-rendered end pages.
STATUS_JS = """(answered) => {
  if (document.querySelector('main#done')) return 'done';
  if (document.querySelector('main#stopped')) return 'stopped';
  const panel = document.querySelector('#page-done');
  if (panel && !panel.hidden) return 'page_done';
  const trial = document.querySelector('#trial');
  if (trial && !trial.hidden && trial.dataset.accepting === 'true' && !answered.includes(trial.dataset.trialId))
    return 'trial';
  return '';
}"""


def _assignment(app, external_id: str) -> Assignment:
    with _session(app) as session:
        assignment = session.scalar(select(Assignment).where(Assignment.external_id == external_id))
        assert assignment is not None, f"no assignment {external_id}"
        session.expunge(assignment)
        return assignment


def _votes(app, assignment_id: int) -> dict[str, Vote]:
    """trial ID (as the page shows it) -> vote."""
    with _session(app) as session:
        votes = session.scalars(select(Vote).where(Vote.assignment_id == assignment_id)).all()
        session.expunge_all()
    return {str(v.trial_id): v for v in votes}


def _status(page, answered) -> str:
    """Wait until the page shows something to act on (see STATUS_JS); survives the app's own reloads."""
    for _ in range(5):
        try:
            return page.wait_for_function(STATUS_JS, arg=sorted(answered)).json_value()
        except PlaywrightError as error:
            if "context was destroyed" not in str(error) and "navigat" not in str(error):
                raise
    raise AssertionError("the page kept navigating")


answer_key: dict = {}  # {"app": the running test's app}: gold answers are read from its database


def correct_side(page) -> str | None:
    """The side showing a gold (or quiz) trial's better image, else None."""
    return gold_side(answer_key["app"], {"trial_id": page.locator("#trial").get_attribute("data-trial-id")})


def _choose(page, side: str, how: str) -> None:
    if how == "mouse":
        page.click(f"#trial [data-side={side}]")
    else:
        page.keyboard.press("ArrowLeft" if side == "left" else "ArrowRight")


class Walker:
    """Answers trials in a page and remembers every choice made (trial ID -> side)."""

    def __init__(self, page, how: str = "mouse"):
        self.page = page
        self.how = how
        self.choices: dict[str, str] = {}
        self.gold: set[str] = set()
        self.kinds: dict[str, str] = {}

    def status(self) -> str:
        return _status(self.page, self.choices)

    def answer(self, pick) -> str:
        """Answer the trial on screen with ``pick(page) -> side``; return its trial ID."""
        trial = self.page.locator("#trial")
        trial_id = trial.get_attribute("data-trial-id")
        if correct_side(self.page) is not None:
            self.gold.add(trial_id)
        self.kinds[trial_id] = trial.get_attribute("data-page-kind")
        side = pick(self.page)
        _choose(self.page, side, self.how)
        self.choices[trial_id] = side
        return trial_id

    def answer_n(self, n: int, pick) -> list[str]:
        ids = []
        for _ in range(n):
            assert self.status() == "trial"
            ids.append(self.answer(pick))
        return ids

    def run(self, pick, kind: str | None = None) -> str:
        """Answer trials until something else than a trial shows; return that status."""
        while (status := self.status()) == "trial":
            if kind is not None:
                expect(self.page.locator("#trial")).to_have_attribute("data-page-kind", kind)
            try:
                self.answer(pick)
            except PlaywrightTimeoutError:
                # The next pair shows at once while the last vote is confirmed (a hidden gold trial must not
                # look different by waiting); when that vote ended the page (worker stopped), the page then
                # leaves for the server's stage and the pair is gone: look again.
                continue
        return status


def _any_side(page) -> str:
    """Real pairs: any side; gold: the right one (so the worker is not stopped)."""
    return correct_side(page) or "left"


def _mouse_start(page, screenshot=None) -> None:
    """Consent and instructions with the mouse."""
    expect(page.locator("main#consent")).to_be_visible()
    if screenshot:
        screenshot(page, "consent")
    page.check("#agree")
    page.click("#btn-consent")
    expect(page.locator("main#instructions")).to_be_visible()
    if screenshot:
        expect(page.locator("main#instructions img")).to_have_js_property("complete", True)
        screenshot(page, "instructions")
    page.click("#btn-start")


def _tab_to(page, element_id: str, limit: int = 20) -> None:
    """Move the keyboard focus to #element_id with Tab only."""
    for _ in range(limit):
        if page.evaluate("document.activeElement && document.activeElement.id") == element_id:
            return
        page.keyboard.press("Tab")
    raise AssertionError(f"#{element_id} cannot be reached with Tab")


def _page_action(page, button: str, how: str = "mouse") -> None:
    """Continue or finish on the page-done panel, and wait until the panel is gone."""
    if how == "mouse":
        page.click(f"#{button}")
    else:
        _tab_to(page, button)
        page.keyboard.press("Enter" if button == "btn-finish" else "Space")
    expect(page.locator("#page-done")).to_be_hidden()
