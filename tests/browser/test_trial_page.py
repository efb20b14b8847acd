"""The paired-comparison trial page cannot mislead: only the documented inputs vote, focus never
rests on a candidate, one highlight at a time, the whole pair fits a laptop's browser window,
and a second tab of the same assignment shows a notice instead of the task.

Each test opens a worker's first trials page (consent, instructions and quiz over the API) in
chromium against the live server, acts like a worker -- mouse, keys, held keys, window sizes,
a second tab -- and then reads the server's votes. The sizes are the inner windows of common
laptops: a 1366x768 screen leaves about 1366x657 inside the browser, 1280x720 about 1280x600.
"""
from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import expect
from sqlalchemy import func, select

from server.models import Page, Trial, Vote
from server.services import app_services
from tests.browser.conftest import pause_page_clock, tick_until
from tests.server.conftest import SMALL_STUDY, WorkerClient, create_test_study
from tests.server.motion_support import SMALL as SMALL_MOTION
from tests.server.motion_support import create_motion_study

pytestmark = pytest.mark.timeout(180)

LAPTOP_WINDOWS = [(1366, 657), (1280, 600)]

# Where every image of the view on screen is, against the window; and whether the page scrolls.
# A view's three panels are one size (the trial's `views` from the server, at scale 1).
GEOMETRY_JS = """() => {
  const inside = (b) => b.width > 0 && b.height > 0 && b.left >= 0 && b.top >= 0
    && b.right <= innerWidth && b.bottom <= innerHeight;
  const trial = document.querySelector('#trial');
  const images = [...trial.querySelectorAll('img')].filter((img) => !img.hidden);
  const [panelWidth, panelHeight] = window.assignmentDriver.plugin.trial.views[Number(trial.dataset.view)];
  const bar = document.querySelector('.pc-bar').getBoundingClientRect();
  return {
    images: images.map((img) => {
      const b = img.getBoundingClientRect();
      return {alt: img.alt, inside: inside(b), loaded: img.complete && img.naturalWidth > 0,
              aspect: b.width / b.height, displayAspect: panelWidth / panelHeight,
              width: b.width, displayWidth: panelWidth, top: b.top};
    }),
    nViews: window.assignmentDriver.plugin.trial.views.length,
    view: Number(trial.dataset.view),
    barInside: inside(bar),
    scrollHeight: document.documentElement.scrollHeight,
    scrollWidth: document.documentElement.scrollWidth,
    innerHeight, innerWidth,
    scale: Number(document.querySelector('#trial').dataset.scale),
  };
}"""

# Candidate columns that show a ring (hover, focus, chosen) right now.
HIGHLIGHTED_JS = """() => [...document.querySelectorAll('#trial .pc-choice')].filter((col) => {
  const style = getComputedStyle(col);
  const ring = style.outlineStyle !== 'none' && parseFloat(style.outlineWidth) > 0
    && !/rgba\\(.*,\\s*0\\)$/.test(style.outlineColor) && style.outlineColor !== 'transparent';
  return ring || style.boxShadow !== 'none';
}).map((col) => col.dataset.side)"""


# ---------------------------------------------------------------- helpers

def _trial_votes(app, assignment_id):
    """Votes of the assignment on its trials pages (not the quiz, which the API answered)."""
    return (select(Vote).join(Trial, Trial.id == Vote.trial_id).join(Page, Page.id == Trial.page_id)
            .where(Vote.assignment_id == int(assignment_id), Page.kind == "trials"))


def _vote_count(app, assignment_id) -> int:
    with app_services(app).sessions() as session:
        return session.scalar(select(func.count()).select_from(_trial_votes(app, assignment_id).subquery()))


def _votes(app, assignment_id) -> list[Vote]:
    with app_services(app).sessions() as session:
        votes = session.scalars(_trial_votes(app, assignment_id).order_by(Vote.id)).all()
        session.expunge_all()
        return list(votes)


def _worker_at_trials(app, study: str, participant: str) -> WorkerClient:
    """A worker past consent, instructions and the quiz (over the API), at the first trials page."""
    worker = WorkerClient(app.test_client(), study, worker_id=participant, platform="link")
    worker.start()
    assert worker.answer_page(worker.correct_side)["stage"] == "trials"
    return worker


def _open(page, live_server: str, worker: WorkerClient) -> str:
    page.goto(live_server + worker.entry["worker_url"])
    return _wait_pair(page)


def _wait_pair(page, after: str | None = None) -> str:
    """Wait until a pair (other than `after`) is on screen and takes a choice; return its trial ID."""
    page.wait_for_function("""(after) => {
      const t = document.querySelector('#trial');
      return t && !t.hidden && t.dataset.accepting === 'true' && t.dataset.trialId !== after;
    }""", arg=after)
    return page.locator("#trial").get_attribute("data-trial-id")


def _wait_saved(page) -> None:
    expect(page.locator("#pending")).to_have_attribute("data-pending", "0")


def _assert_nothing_chosen(page, trial_id: str) -> None:
    """The pair on screen is still `trial_id`, unanswered, and the page holds no vote."""
    trial = page.locator("#trial")
    expect(trial).to_have_attribute("data-trial-id", trial_id)
    assert trial.get_attribute("data-chosen") is None
    assert trial.get_attribute("data-accepting") == "true"
    expect(page.locator("#pending")).to_have_attribute("data-pending", "0")


def _focus_in_trial(page) -> bool:
    return page.evaluate("document.querySelector('#trial').contains(document.activeElement)")


def _views_of_state(route, views: dict[str, int], three: bool) -> None:
    """Pass /state through, noting each trial's number of views (whole images and one per zoom region:
    a scene whose only region would cover over half the image has none); with ``three``, as for a study
    whose sets have three zoom regions of different sizes: the extra crops of a trial that has one reuse
    its file, shown at other display sizes."""
    response = route.fetch()
    state = response.json()
    for trial in ((state.get("page") or {}).get("trials") or []):
        if three and trial["reference"]["crops"]:
            for side in ("reference", "left", "right"):
                crops = trial[side]["crops"]
                first = crops[0]
                crops[1:] = [{**first, "rank": 2, "display_width": 240, "display_height": 180},
                             {**first, "rank": 3, "display_width": 320, "display_height": 240}]
            trial["views"][2:] = [[240, 180], [320, 240]]
        views[str(trial["trial_id"])] = 1 + len(trial["reference"]["crops"])
    route.fulfill(response=response, body=json.dumps(state))


def _assert_fits(page, min_scale: float = 0.5) -> dict:
    geometry = page.evaluate(GEOMETRY_JS)
    assert geometry["images"], "no images on the page"
    outside = [image["alt"] for image in geometry["images"] if not image["inside"]]
    assert not outside, f"cut off at {geometry['innerWidth']}x{geometry['innerHeight']}: {outside}"
    assert all(image["loaded"] for image in geometry["images"])
    assert geometry["barInside"]
    assert geometry["scrollHeight"] <= geometry["innerHeight"], geometry
    assert geometry["scrollWidth"] <= geometry["innerWidth"], geometry
    assert min_scale <= geometry["scale"] <= 1
    for image in geometry["images"]:
        assert image["aspect"] == pytest.approx(image["displayAspect"], rel=0.02), image  # never distorted
        assert image["width"] == pytest.approx(image["displayWidth"] * geometry["scale"], abs=0.6)  # one scale
    return geometry


# ---------------------------------------------------------------- inputs

def test_only_arrow_keys_and_real_clicks_vote(page, app, live_server, study):
    page.set_viewport_size({"width": 1366, "height": 657})
    worker = _worker_at_trials(app, study, "K1")
    first = _open(page, live_server, worker)

    page.click("#trial [data-side=left]")
    second = _wait_pair(page, after=first)
    _wait_saved(page)
    assert _vote_count(app, worker.assignment_id) == 1
    assert not _focus_in_trial(page), "focus stayed on the clicked candidate"

    # What a focused button would have turned into a vote, and other keys: nothing.
    for key in ("Space", "Enter", "NumpadEnter", "a", "l", "r", "1", "ArrowUp", "ArrowDown", "Shift+ArrowLeft",
                "Control+ArrowRight", "Tab", "Space", "Enter"):
        page.keyboard.press(key)
        assert not _focus_in_trial(page), f"{key} put the focus on a candidate"
    # Clicks made by script (detail 0, as a key on a focused element makes them) do not vote either.
    page.evaluate("document.querySelector('#trial [data-side=right]').click()")
    _assert_nothing_chosen(page, second)
    assert _vote_count(app, worker.assignment_id) == 1

    # The documented keys do.
    page.keyboard.press("ArrowRight")
    expect(page.locator("#trial")).to_have_attribute("data-chosen", "right")
    third = _wait_pair(page, after=second)
    page.keyboard.press("ArrowLeft")
    _wait_pair(page, after=third)
    _wait_saved(page)
    votes = _votes(app, worker.assignment_id)
    assert [(str(v.trial_id), v.chose_left, v.input) for v in votes] == [
        (first, True, "mouse"), (second, False, "keyboard"), (third, True, "keyboard")]


def test_held_key_and_early_press_vote_once(page, app, live_server, study):
    page.set_viewport_size({"width": 1366, "height": 657})
    page.clock.install()
    worker = _worker_at_trials(app, study, "K2")
    first = _open(page, live_server, worker)
    # From here the page's time moves only when the test says so (the chosen pair stays highlighted).
    pause_page_clock(page)

    # 1. Held down: the first keydown votes; auto-repeat (repeat=true) never votes again, not even
    #    for the next pair.
    page.keyboard.down("ArrowRight")
    expect(page.locator("#trial")).to_have_attribute("data-chosen", "right")
    for _ in range(3):
        page.keyboard.down("ArrowRight")  # Playwright sends these with event.repeat = true
    page.clock.run_for(500)  # the highlight ends; the next pair is decoded and shown
    second = _wait_pair_ticking(page, after=first)
    for _ in range(3):
        page.keyboard.down("ArrowRight")
    _assert_nothing_chosen(page, second)
    page.keyboard.up("ArrowRight")

    # 2. Pressed while the previous pair was still highlighted, and still held when the new pair
    #    appears: even a keydown without the repeat flag (some systems send those) does not vote.
    page.keyboard.press("ArrowLeft")
    expect(page.locator("#trial")).to_have_attribute("data-chosen", "left")
    page.keyboard.down("ArrowRight")  # too early: the pair it was meant for is gone
    page.clock.run_for(500)
    third = _wait_pair_ticking(page, after=second)
    page.evaluate("document.dispatchEvent(new KeyboardEvent('keydown', {key: 'ArrowRight', bubbles: true}))")
    page.keyboard.down("ArrowRight")
    _assert_nothing_chosen(page, third)

    # 3. Released and pressed afresh: that is a vote.
    page.keyboard.up("ArrowRight")
    page.keyboard.down("ArrowRight")
    expect(page.locator("#trial")).to_have_attribute("data-chosen", "right")
    page.keyboard.up("ArrowRight")
    page.clock.run_for(100)
    _wait_saved(page)
    votes = _votes(app, worker.assignment_id)
    assert [(str(v.trial_id), v.chose_left) for v in votes] == [(first, False), (second, True), (third, False)]
    assert {v.input for v in votes} == {"keyboard"}


PAIR_READY_JS = """(after) => {
  const t = document.querySelector('#trial');
  return !t.hidden && t.dataset.trialId !== after && t.dataset.accepting === 'true' ? t.dataset.trialId : null;
}"""


def _wait_pair_ticking(page, after: str) -> str:
    """_wait_pair under a paused clock, which also stops Playwright's own animation-frame polling:
    poll from here, and let fake time pass for the frame that arms the new pair."""
    trial_id = tick_until(page, lambda: page.evaluate(PAIR_READY_JS, after), step_ms=20)
    if trial_id:
        return trial_id
    raise AssertionError(f"no new pair after {after}: " + page.evaluate("""() => JSON.stringify({
      t: {...document.querySelector('#trial').dataset}, hidden: document.querySelector('#trial').hidden,
      status: document.querySelector('#pc-status').textContent, now: performance.now(), date: Date.now()})"""))


def test_one_highlight_at_a_time(page, app, live_server, study):
    page.set_viewport_size({"width": 1366, "height": 657})
    page.clock.install()
    worker = _worker_at_trials(app, study, "H1")
    first = _open(page, live_server, worker)
    pause_page_clock(page)
    hover_works = page.evaluate("matchMedia('(hover: hover)').matches")

    # The tester's case: click the left candidate (the mouse stays over it), then answer the
    # next pair with the right arrow.
    page.click("#trial [data-side=left]")
    assert page.evaluate(HIGHLIGHTED_JS) == ["left"]  # chosen (no hover ring while it is chosen)
    page.clock.run_for(500)
    second = _wait_pair_ticking(page, after=first)
    assert page.evaluate(HIGHLIGHTED_JS) == (["left"] if hover_works else [])  # hover only
    page.keyboard.press("ArrowRight")
    assert page.evaluate(HIGHLIGHTED_JS) == ["right"]  # chosen; the hover ring is gone
    assert not _focus_in_trial(page)
    page.clock.run_for(500)
    third = _wait_pair_ticking(page, after=second)
    page.mouse.move(5, 5)  # off the pair: nothing is highlighted
    assert page.evaluate(HIGHLIGHTED_JS) == []
    page.click("#trial [data-side=right]")
    assert page.evaluate(HIGHLIGHTED_JS) == ["right"]
    page.clock.run_for(500)
    _wait_pair_ticking(page, after=third)
    assert page.evaluate(HIGHLIGHTED_JS) == (["right"] if hover_works else [])
    page.clock.run_for(100)
    _wait_saved(page)
    assert _vote_count(app, worker.assignment_id) == 3


# ---------------------------------------------------------------- window sizes

@pytest.mark.parametrize("crops", ["demo", "three"])
@pytest.mark.parametrize("size", LAPTOP_WINDOWS, ids=lambda s: f"{s[0]}x{s[1]}")
def test_whole_trial_fits_laptop_windows(page, app, live_server, study, screenshot, size, crops):
    width, height = size
    page.set_viewport_size({"width": width, "height": height})
    views: dict[str, int] = {}
    page.route("**/api/v1/assignments/*/state", lambda route: _views_of_state(route, views, crops == "three"))
    worker = _worker_at_trials(app, study, f"F{width}{crops}")
    trial_id = _open(page, live_server, worker)
    expect(page.locator("#window-too-small")).to_be_hidden()
    # Every pair of the page (the demo's sets differ in size) in every view (keys 1, 2, ...; no
    # vote), and a screenshot of the first.
    shown_views = []
    for n in range(6):
        n_views = views[trial_id]
        shown_views.append(n_views)
        for view in range(n_views):
            page.keyboard.press(str(view + 1))
            expect(page.locator("#trial")).to_have_attribute("data-view", str(view))
            geometry = _assert_fits(page)
            assert geometry["nViews"] == n_views
            assert len(geometry["images"]) == 3
            assert len({round(image["top"]) for image in geometry["images"]}) == 1  # side by side
            if n == 0:
                screenshot(page, f"{width}x{height}-{crops}-view{view + 1}")
        page.keyboard.press("1")
        page.keyboard.press("ArrowLeft" if n % 2 else "ArrowRight")
        if n < 5:
            trial_id = _wait_pair(page, after=trial_id)
    expect(page.locator("#page-done")).to_be_visible()
    _wait_saved(page)
    assert _vote_count(app, worker.assignment_id) == 6
    assert max(shown_views) == (4 if crops == "three" else 2)  # zoom regions were shown too


@pytest.mark.parametrize("size", LAPTOP_WINDOWS, ids=lambda s: f"{s[0]}x{s[1]}")
def test_quiz_feedback_keeps_the_pair_in_the_window(page, app, live_server, study, screenshot, size):
    """The longest line of the bar (the "Not quite ..." feedback) does not push the pair down."""
    width, height = size
    page.set_viewport_size({"width": width, "height": height})
    page.clock.install()
    worker = WorkerClient(app.test_client(), study, worker_id=f"Q{width}", platform="link")
    worker.start()
    _open(page, live_server, worker)
    pause_page_clock(page)
    trial_id = page.locator("#trial").get_attribute("data-trial-id")
    wrong = worker.wrong_side({"trial_id": trial_id})
    page.keyboard.press("ArrowLeft" if wrong == "left" else "ArrowRight")
    # The server's verdict comes back over the network; fake time for the rest.
    tick_until(page, lambda: page.locator("#feedback").get_attribute("data-kind") == "wrong", step_ms=20)
    expect(page.locator("#feedback")).to_have_attribute("data-kind", "wrong")
    expect(page.locator("#feedback")).to_contain_text("Not quite")
    _assert_fits(page)
    screenshot(page, f"{width}x{height}-quiz-wrong")


def test_window_too_small_for_the_images(page, app, live_server, demo_stimuli, tmp_path, screenshot):
    """A study that allows no shrinking: the message names the window it needs, and that window works."""
    slug = create_test_study(app, demo_stimuli, tmp_path, slug="full-size", display={"min_image_scale": 1.0},
                             **SMALL_STUDY)
    page.set_viewport_size({"width": 1000, "height": 600})  # the default floor: only the images' need refuses it
    worker = _worker_at_trials(app, slug, "T1")
    page.goto(live_server + worker.entry["worker_url"])
    too_small = page.locator("#window-too-small")
    expect(too_small).to_be_visible()
    expect(page.locator("#trial")).to_be_hidden()
    expect(too_small).to_contain_text("Window now 1000 × 600 pixels")
    screenshot(page, "too-small")
    needed = re.search(r"needed at least (\d+) × (\d+)", too_small.inner_text())
    need_w, need_h = int(needed[1]), int(needed[2])
    assert need_w > 1000 or need_h > 600, "the message should name the images' need, not the floor"
    page.keyboard.press("ArrowLeft")
    page.evaluate("document.querySelector('#trial [data-side=left]').click()")
    expect(page.locator("#pending")).to_have_attribute("data-pending", "0")
    assert _vote_count(app, worker.assignment_id) == 0

    # Exactly the size named: the pair shows at full size and fits.
    page.set_viewport_size({"width": need_w, "height": need_h})
    trial_id = _wait_pair(page)
    expect(too_small).to_be_hidden()
    assert _assert_fits(page, min_scale=1.0)["scale"] == 1.0
    # One pixel less: hidden again.
    page.set_viewport_size({"width": need_w - 1, "height": need_h})
    expect(too_small).to_be_visible()
    expect(page.locator("#trial")).to_be_hidden()
    page.set_viewport_size({"width": need_w, "height": need_h})
    _wait_pair(page)
    page.keyboard.press("ArrowRight")
    _wait_saved(page)
    assert [(str(v.trial_id), v.chose_left) for v in _votes(app, worker.assignment_id)] == [(trial_id, False)]


def test_default_limits_accept_laptop_windows(page, app, live_server, study):
    """The defaults (1000x600 floor, images down to half size) take both laptop windows, and the
    too-small check is the inner window's: 1280x599 is refused."""
    worker = _worker_at_trials(app, study, "L1")
    page.set_viewport_size({"width": 1280, "height": 600})
    _open(page, live_server, worker)
    expect(page.locator("#window-too-small")).to_be_hidden()
    page.set_viewport_size({"width": 1280, "height": 599})
    expect(page.locator("#window-too-small")).to_be_visible()
    expect(page.locator("#window-too-small")).to_contain_text("needed at least 1000 × 600")
    page.set_viewport_size({"width": 1366, "height": 657})
    _wait_pair(page)


# ---------------------------------------------------------------- a second tab

def test_second_tab_shows_a_notice_and_votes_nothing(page, app, live_server, study, screenshot):
    page.set_viewport_size({"width": 1280, "height": 600})
    worker = _worker_at_trials(app, study, "D1")
    first_pair = _open(page, live_server, worker)

    second = page.context.new_page()
    second.set_viewport_size({"width": 1280, "height": 600})
    second.goto(live_server + worker.entry["worker_url"])
    notice = second.locator("#other-tab")
    expect(notice).to_be_visible()
    expect(notice).to_contain_text("open in another tab")
    expect(second.locator("#trial")).to_have_count(0)
    screenshot(second, "other-tab")
    for key in ("ArrowLeft", "ArrowRight", "Space", "Enter"):
        second.keyboard.press(key)
    # The first tab goes on as before.
    page.keyboard.press("ArrowLeft")
    _wait_pair(page, after=first_pair)
    _wait_saved(page)
    assert [(str(v.trial_id), v.chose_left) for v in _votes(app, worker.assignment_id)] == [(first_pair, True)]
    expect(notice).to_be_visible()

    # The first tab is closed: the second one takes over when reloaded.
    page.close()
    second.reload()
    pair = _wait_pair(second)
    assert pair != first_pair
    second.keyboard.press("ArrowRight")
    expect(second.locator("#trial")).to_have_attribute("data-chosen", "right")
    _wait_saved(second)
    assert [(str(v.trial_id), v.chose_left) for v in _votes(app, worker.assignment_id)] == [
        (first_pair, True), (pair, False)]


def test_second_tab_of_a_motion_study(page, app, live_server, motion_clips, tmp_path):
    """The same guard on the motion app: the second tab says so and shows no calibration or trial;
    with the first tab closed, its "continue here" button takes over."""
    slug = create_motion_study(app, motion_clips, tmp_path, **SMALL_MOTION)
    worker = WorkerClient(app.test_client(), slug, worker_id="DM1", platform="link")
    worker.start()
    page.goto(live_server + worker.entry["worker_url"])
    expect(page.locator("#motion-stage")).to_be_attached()
    expect(page.locator("#other-tab")).to_have_count(0)

    second = page.context.new_page()
    second.set_viewport_size({"width": 1280, "height": 600})
    second.goto(live_server + worker.entry["worker_url"])
    expect(second.locator("#other-tab")).to_be_visible()
    expect(second.locator("#motion-stage")).to_have_count(0)
    expect(second.locator("#calibration")).to_have_count(0)

    page.close()
    second.click("#btn-other-tab-reload")
    expect(second.locator("#motion-stage")).to_be_attached()
    expect(second.locator("#other-tab")).to_have_count(0)


# ---------------------------------------------------------------- the other worker pages

# The page's main action and whether it is in the window as the page opens (no scrolling needed).
ACTION_IN_VIEW_JS = """(selector) => {
  const b = document.querySelector(selector).getBoundingClientRect();
  return {inView: b.width > 0 && b.top >= 0 && b.left >= 0 && b.bottom <= innerHeight && b.right <= innerWidth,
          scrollWidth: document.documentElement.scrollWidth, innerWidth};
}"""


@pytest.mark.parametrize("size", LAPTOP_WINDOWS, ids=lambda s: f"{s[0]}x{s[1]}")
def test_text_pages_fit_laptop_windows(page, app, live_server, study, screenshot, size):
    """Consent, instructions, the end page and the stop page: nothing is wider than the window,
    and the button (or the completion code) is in view without scrolling."""
    width, height = size
    page.set_viewport_size({"width": width, "height": height})

    def check(selector: str, name: str) -> None:
        expect(page.locator(selector)).to_be_visible()
        for image in page.locator("main img").all():
            expect(image).to_have_js_property("complete", True)
        where = page.evaluate(ACTION_IN_VIEW_JS, selector)
        screenshot(page, f"{width}x{height}-{name}")
        assert where["scrollWidth"] <= where["innerWidth"], name
        assert where["inView"], f"{name}: {selector} is below the fold at {width}x{height}"

    worker = WorkerClient(app.test_client(), study, worker_id=f"P{width}", platform="link")
    page.goto(live_server + worker.entry["worker_url"])
    check("#btn-consent", "consent")
    page.check("#agree")
    page.click("#btn-consent")
    check("#btn-start", "instructions")

    # Through the quiz and a page over the API, then the end page in the browser.
    worker.action("instructions_done")
    worker.answer_page(worker.correct_side)
    worker.answer_page(worker.correct_side)
    assert worker.action("finish").status_code == 200
    page.goto(live_server + worker.entry["worker_url"])
    check("#completion-code", "done")

    failing = WorkerClient(app.test_client(), study, worker_id=f"S{width}", platform="mturk")
    failing.start()
    failing.answer_page(failing.wrong_side)
    page.goto(live_server + failing.entry["worker_url"])
    check("#stop-message", "stopped")
