"""Video paired comparison in Debian's chromium at 1366x657, against the real app over HTTP (SQLite): a study
walked from consent to the completion code with clips that really play (each whole file preloaded, the two
candidates and the reference started together on the same frame, or the reference first), no choice counted
before they have played, and each stored vote carrying its playback log with the drift between the clips.

The clips are tiny (128x96, 1 s at 25 fps, tests/server/video_support.py). The page's timers run on
``page.clock`` (installed before the page loads, running): playback itself runs on the media clock, and
the test asserts no duration, only what was played and logged.
"""
from __future__ import annotations

import shutil

import pytest
from playwright.sync_api import expect

from tests.browser._media_support import REFUSE_FIRST_PLAY, enter_and_start, strings_naming_images
from tests.browser._worker_support import _assignment, _page_action, _status, _votes
from tests.server.video_support import create_paired_study

pytestmark = pytest.mark.timeout(180)

LAPTOP = {"width": 1366, "height": 657}
TEXTS = {"texts": {"researcher": "Dr T. Est, Test University", "contact": "test@example.org"}}
# Frames seen by requestVideoFrameCallback in the page, per clip, as presented (the browser's own count).
PRESENTED_JS = """(() => {
  window.__presented = new Map();
  const watch = (video) => {
    if (window.__presented.has(video)) return;
    window.__presented.set(video, 0);
    const onFrame = (now, metadata) => {
      window.__presented.set(video, metadata.presentedFrames);
      video.requestVideoFrameCallback(onFrame);
    };
    video.requestVideoFrameCallback(onFrame);
  };
  new MutationObserver(() => document.querySelectorAll('#trial video').forEach(watch))
    .observe(document, { childList: true, subtree: true });
})();"""
CLIPS_JS = """(videos) => videos.map((v) => ({
  side: v.closest('.pc-col').dataset.side || 'reference', ended: v.ended, time: v.currentTime,
  controls: v.controls, src: v.src, state: v.dataset.state, presented: window.__presented.get(v) || 0}))"""


@pytest.fixture
def worker_page(browser):
    context = browser.new_context(viewport=LAPTOP)
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.clock.install()
    yield page
    context.close()


@pytest.mark.parametrize("position", ["between", "before"])
def test_a_video_paired_study_from_consent_to_the_code_plays_both_clips_and_logs_them(worker_page, app, live_server,
                                                                                      video_clips, tmp_path, position):
    shutil.copytree(video_clips, tmp_path / "prepared")
    slug = create_paired_study(app, tmp_path / "prepared" / "manifest.json", tmp_path, f"vpc-{position}",
                               media={"reference_position": position}, **TEXTS)
    page = worker_page
    page.add_init_script(PRESENTED_JS)
    page.goto(f"{live_server}/s/{slug}?participant=P-{position}")
    expect(page.locator("#device-check")).to_have_attribute("data-device", "ok")
    expect(page.locator("main#consent")).to_contain_text("You will compare videos and click the one")
    assert strings_naming_images(page) == []
    page.check("#agree")
    page.click("#btn-consent")
    expect(page.locator("main#instructions")).to_contain_text("Watch the videos")
    assert strings_naming_images(page) == []
    page.click("#btn-start")
    seen: dict[str, list[dict]] = {}
    while _status(page, set(seen)) == "trial":
        trial = page.locator("#trial")
        expect(trial).to_have_attribute("data-played", "true")
        # The question, the candidates' names, the notices: every word for the stimulus says "video".
        expect(page.locator("#instruction")).to_have_text("Which video is closer to the reference? Click it or press ← / →.")
        expect(page.locator("#trial [data-side=left]")).to_have_attribute(
            "aria-label", "Left video is closer to the reference (Left arrow key)")
        assert strings_naming_images(page) == []
        trial_id = trial.get_attribute("data-trial-id")
        seen[trial_id] = page.eval_on_selector_all("#trial video", CLIPS_JS)
        page.click("#trial [data-side=left]")
    assert _status(page, set(seen)) == "page_done"  # the study's only page: no further one is left
    _page_action(page, "btn-finish")
    expect(page.locator("main#done")).to_be_visible()
    assignment = _assignment(app, f"P-{position}")
    assert assignment.stage == "completed"
    assert page.locator("#completion-code").inner_text().strip() == assignment.completion_code
    assert len(seen) == 3
    for videos in seen.values():
        assert sorted(v["side"] for v in videos) == ["left", "reference", "right"]
        for video in videos:
            # Every clip played to its end from a whole preloaded file, with frames presented, nothing to seek with.
            assert video["ended"] and video["time"] >= 0.9 and video["state"] == "played", video
            assert not video["controls"] and video["src"].startswith("blob:")
            assert video["presented"] > 0, video
    votes = _votes(app, assignment.id)
    assert set(votes) == set(seen)
    # Between: three clips of 25 frames played together (1 s); before: the reference, then the pair (2 s).
    duration = 1000.0 if position == "between" else 2000.0
    for vote in votes.values():
        log = vote.playback
        # requestVideoFrameCallback may miss a frame's callback on a busy machine, and chromium's
        # droppedVideoFrames may count frames already presented to the compositor: only the presented count is
        # bounded by the clips' frames.
        assert 50 <= log["presented_frames"] <= 78 and log["presented_frames"] + log["dropped_frames"] >= 60, log
        assert log["duration_ms"] == duration and log["replays"] == 0 and "error" not in log
        assert log["playing_ms"] >= duration - 100 and 0 <= log["start_delay_ms"] and log["stall_ms"] >= 0
        assert log["max_drift_ms"] >= 0  # measured: the clips played together




def test_an_autoplay_refusal_becomes_a_click_and_a_replay_is_logged(worker_page, app, live_server, video_clips,
                                                                    tmp_path):
    shutil.copytree(video_clips, tmp_path / "prepared")
    slug = create_paired_study(app, tmp_path / "prepared" / "manifest.json", tmp_path, "vpcclick",
                               media={"replays": 1}, **TEXTS)
    page = worker_page
    page.add_init_script(REFUSE_FIRST_PLAY)
    enter_and_start(page, f"{live_server}/s/{slug}?participant=PCLICK")
    play = page.locator("#pc-play")
    expect(play).to_be_visible()  # not a stuck page: a button says what to do
    trial = page.locator("#trial")
    expect(trial).not_to_have_attribute("data-played", "true")
    # No choice counts before the clips have played.
    page.click("#trial [data-side=right]")
    play.click()
    expect(trial).to_have_attribute("data-played", "true")
    expect(trial).to_have_attribute("data-accepting", "true")
    replay = page.locator("#pc-replay")
    expect(replay).to_have_text("Play again (1)")
    replay.click()
    expect(replay).to_be_hidden()
    expect(trial).to_have_attribute("data-accepting", "true")
    trial_id = trial.get_attribute("data-trial-id")
    page.click("#trial [data-side=left]")
    page.wait_for_function("window.assignmentDriver.queue.pending === 0")
    vote = _votes(app, _assignment(app, "PCLICK").id)[trial_id]
    assert vote.chose_left  # the click on the right before playback did not count
    log = vote.playback
    assert log["replays"] == 1 and log["presented_frames"] >= 50 and log["duration_ms"] == 1000.0


def test_an_unfaithful_playback_is_played_again_and_flagged(worker_page, app, live_server, video_clips, tmp_path):
    """A rule no playback can meet (no time beyond the clips': every start takes some) plays the trial's clips
    again max_repeats times; the vote is stored with its last playback, flagged unfaithful in votes.csv."""
    from sqlalchemy import select

    from server.models import Study
    from server.paradigms.paired import PARADIGM
    from server.services import app_services

    shutil.copytree(video_clips, tmp_path / "prepared")
    slug = create_paired_study(app, tmp_path / "prepared" / "manifest.json", tmp_path, "vpcrule",
                               media={"max_extra_playing_ms": 0.0, "max_repeats": 1}, **TEXTS)
    page = worker_page
    enter_and_start(page, f"{live_server}/s/{slug}?participant=PRULE")
    trial = page.locator("#trial")
    expect(trial).to_have_attribute("data-played", "true")
    assert trial.get_attribute("data-repeats") == "1"
    trial_id = trial.get_attribute("data-trial-id")
    page.click("#trial [data-side=left]")
    page.wait_for_function("window.assignmentDriver.queue.pending === 0")
    log = _votes(app, _assignment(app, "PRULE").id)[trial_id].playback
    # The last of the two playbacks: three clips of 25 frames (see above for the bounds).
    assert log["replays"] == 0 and 50 <= log["presented_frames"] <= 78 and log["playing_ms"] > log["duration_ms"]
    with app_services(app).sessions() as session:
        study_id = session.scalar(select(Study.id).where(Study.slug == slug))
        export = PARADIGM.export(session, study_id, salt=None).files["votes.csv"]
    header, row = export.splitlines()[:2]
    assert dict(zip(header.split(","), row.split(",")))["playback_faithful"] == "0"


@pytest.mark.parametrize("dpr", [1, 1.25])
def test_pixel_exact_shows_one_video_pixel_per_device_pixel(browser, app, live_server, video_clips, tmp_path, dpr):
    """Issue 36: clips are laid out as images under the [display] policy; with pixel_exact each video pixel
    falls on one device pixel at devicePixelRatio 1 and 1.25 (CSS width x ratio = the clip's width), on the
    reference and on both candidates. ``fit`` at the laptop window is the walk above."""
    shutil.copytree(video_clips, tmp_path / "prepared")
    slug = create_paired_study(app, tmp_path / "prepared" / "manifest.json", tmp_path, f"vexact-{int(dpr * 100)}",
                               display={"policy": "pixel_exact"}, **TEXTS)
    context = browser.new_context(viewport=LAPTOP, device_scale_factor=dpr)
    try:
        page = context.new_page()
        page.set_default_timeout(30_000)
        page.clock.install()
        enter_and_start(page, f"{live_server}/s/{slug}?participant=X-{dpr}")
        trial = page.locator("#trial")
        expect(trial).to_have_attribute("data-played", "true")
        assert trial.get_attribute("data-policy") == "pixel_exact"
        clips = page.eval_on_selector_all("#trial video:not([hidden])", """(videos) => videos.map((v) => ({
          css: v.getBoundingClientRect().width, cssHeight: v.getBoundingClientRect().height,
          natural: v.videoWidth, naturalHeight: v.videoHeight}))""")
        assert len(clips) == 3, clips
        # Chromium lays boxes out in 1/64 CSS px (LayoutUnit): 128 / 1.25 = 102.4 CSS px is drawn 102.390625.
        layout_unit = dpr / 64
        for clip in clips:
            assert clip["natural"] == 128 and clip["naturalHeight"] == 96, clip
            assert clip["css"] * dpr == pytest.approx(clip["natural"], abs=layout_unit), clip
            assert clip["cssHeight"] * dpr == pytest.approx(clip["naturalHeight"], abs=layout_unit), clip
    finally:
        context.close()
