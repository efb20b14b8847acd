"""Video rating studies in Debian's chromium at 1366x657, against the real app over HTTP (SQLite): a DCR
study walked from consent to the completion code with clips that really play (each whole file preloaded,
then the reference and the test played once), each stored rating carrying its playback log; and a study of
clips chromium cannot decode (HEVC kept as encoded) refused before consent with a message naming the codec.

Debian's chromium plays H.264 (the delivery format; measured: canPlayType "probably" and
MediaCapabilities supported for avc1), VP9 and AV1 in MP4, but not HEVC.
"""
from __future__ import annotations

import shutil

import pytest
from playwright.sync_api import expect
from sqlalchemy import select

from tests.browser._media_support import REFUSE_FIRST_PLAY, enter_and_start
from tests.browser._rating_support import assignment_of, rate, status, stored_ratings
from tests.server.rating_support import create_rating_study
from tests.server.video_support import prepare_videos, video_scenes

pytestmark = pytest.mark.timeout(180)

LAPTOP = {"width": 1366, "height": 657}
STUDY = {"rating": {"ratings_per_stimulus": 1, "method": "dcr"},
         "pages": {"ratings_per_page": 3, "min_pages": 1, "max_pages": 1, "reward_per_page": "0.50",
                   "bonus_per_page": "0.40"},
         "quality": {"quiz_size": 0, "gold_rate": 0.0},
         "texts": {"researcher": "Dr T. Est, Test University", "contact": "test@example.org"}}


@pytest.fixture
def worker_page(browser):
    context = browser.new_context(viewport=LAPTOP)
    page = context.new_page()
    page.set_default_timeout(20_000)
    yield page
    context.close()


def test_a_video_dcr_study_from_consent_to_the_code_plays_and_logs_every_clip(worker_page, app, live_server,
                                                                              video_clips, tmp_path):
    shutil.copytree(video_clips, tmp_path / "prepared")
    slug = create_rating_study(app, tmp_path / "prepared" / "manifest.json", tmp_path, "vdcr", **STUDY)
    page = worker_page
    page.goto(f"{live_server}/s/{slug}?participant=V1")
    expect(page.locator("#device-check")).to_have_attribute("data-device", "ok")
    page.check("#agree")
    page.click("#btn-consent")
    page.click("#btn-start")
    seen = {}
    while status(page, seen) == "trial":
        trial = page.locator("#trial")
        expect(trial).to_have_attribute("data-played", "true")
        trial_id = trial.get_attribute("data-trial-id")
        # Both clips played to their end: their clocks advanced, frames were presented, nothing to seek with.
        seen[trial_id] = page.eval_on_selector_all("#trial video", """(videos) => videos.map((v) => ({
            time: v.currentTime, ended: v.ended, controls: v.controls, src: v.src,
            presented: v.getVideoPlaybackQuality().totalVideoFrames, state: v.dataset.state,
            role: v.closest('figure').dataset.role}))""")
        rate(page, 4)
    expect(page.locator("main#done")).to_be_visible()
    assignment = assignment_of(app, "V1")
    assert assignment.stage == "completed"
    assert page.locator("#completion-code").inner_text().strip() == assignment.completion_code
    assert len(seen) == 3
    for videos in seen.values():
        assert [v["role"] for v in videos] == ["reference", "test"]
        for video in videos:
            assert video["ended"] and video["time"] >= 0.9 and video["state"] == "played"
            assert not video["controls"] and video["src"].startswith("blob:")  # the whole file, preloaded
            assert video["presented"] > 0
    stored = stored_ratings(app, assignment.id)
    assert set(stored) == set(seen)
    for response in stored.values():
        log = _playback(app, response.id)
        # Two clips of 25 frames: frames were presented (requestVideoFrameCallback) and nearly all of them.
        # requestVideoFrameCallback may miss a frame's callback on a busy machine, and chromium's
        # droppedVideoFrames may count frames the compositor dropped after they were presented to it:
        # only the presented count is bounded by the clips' frames.
        assert 20 <= log["presented_frames"] + log["dropped_frames"] and log["presented_frames"] <= 52, log
        assert log["presented_frames"] >= 25 and log["duration_ms"] == 2000.0
        assert log["playing_ms"] >= 1900 and log["replays"] == 0 and "error" not in log
        assert 0 <= log["start_delay_ms"] < 2000 and log["stall_ms"] >= 0




def test_an_autoplay_refusal_becomes_a_click_and_replays_are_logged(worker_page, app, live_server, video_clips,
                                                                   tmp_path):
    shutil.copytree(video_clips, tmp_path / "prepared")
    slug = create_rating_study(app, tmp_path / "prepared" / "manifest.json", tmp_path, "vclick",
                               **{**STUDY, "rating": {**STUDY["rating"], "method": "acr"}, "media": {"replays": 1}})
    page = worker_page
    page.add_init_script(REFUSE_FIRST_PLAY)
    enter_and_start(page, f"{live_server}/s/{slug}?participant=V3")
    play = page.locator("#rating-play")
    expect(play).to_be_visible()  # not a stuck page: a button says what to do
    expect(page.locator("#trial")).not_to_have_attribute("data-played", "true")
    play.click()
    expect(page.locator("#trial")).to_have_attribute("data-played", "true")
    expect(page.locator("#trial")).to_have_attribute("data-accepting", "true")
    replay = page.locator("#rating-replay")
    expect(replay).to_have_text("Play again (1)")
    replay.click()
    expect(replay).to_be_hidden()
    expect(page.locator("#trial")).to_have_attribute("data-accepting", "true")
    expect(page.locator("#trial video")).to_have_attribute("data-state", "played")
    trial_id = rate(page, 4)
    page.wait_for_function("window.assignmentDriver.queue.pending === 0")
    stored = stored_ratings(app, assignment_of(app, "V3").id)
    log = stored[trial_id].playback
    assert log["replays"] == 1 and log["presented_frames"] >= 25 and log["duration_ms"] == 1000.0
    assert log["playing_ms"] >= 1900  # two playbacks of a 1 s clip


def test_an_unfaithful_playback_is_played_again_and_flagged(worker_page, app, live_server, video_clips, tmp_path):
    """A rule no playback can meet (no time beyond the clip's: every start takes some) repeats the clip
    max_repeats times, and the rating is stored with its last playback, flagged unfaithful in the export."""
    from server.paradigms.rating import PARADIGM
    from server.services import app_services

    shutil.copytree(video_clips, tmp_path / "prepared")
    slug = create_rating_study(app, tmp_path / "prepared" / "manifest.json", tmp_path, "vrule",
                               **{**STUDY, "rating": {**STUDY["rating"], "method": "acr"},
                                  "media": {"max_extra_playing_ms": 0.0, "max_repeats": 1}})
    page = worker_page
    enter_and_start(page, f"{live_server}/s/{slug}?participant=V4")
    trial = page.locator("#trial")
    expect(trial).to_have_attribute("data-played", "true")
    assert trial.get_attribute("data-repeats") == "1"
    trial_id = rate(page, 3)
    page.wait_for_function("window.assignmentDriver.queue.pending === 0")
    log = stored_ratings(app, assignment_of(app, "V4").id)[trial_id].playback
    # a 1 s clip at 25 fps; requestVideoFrameCallback may miss a frame's callback on a busy machine, and
    # droppedVideoFrames may also count frames already presented to the compositor (see above)
    assert log["replays"] == 0 and 20 <= log["presented_frames"] + log["dropped_frames"]
    assert log["presented_frames"] <= 26, log
    assert log["playing_ms"] > log["duration_ms"] == 1000.0
    with app_services(app).sessions() as session:
        from server.models import Study

        study_id = session.scalar(select(Study.id).where(Study.slug == slug))
        export = PARADIGM.export(session, study_id, salt=None).files["ratings.csv"]
    header, row = export.splitlines()[:2]
    assert dict(zip(header.split(","), row.split(",")))["playback_faithful"] == "0"


def test_clips_chromium_cannot_decode_are_refused_before_consent(worker_page, app, live_server, tmp_path):
    """HEVC kept as encoded (--keep-encoding): the consent form stays hidden and the page names the codec."""
    scenes = video_scenes(tmp_path / "scenes", contents=1, candidates=3, n_frames=10, codec="libx265",
                          options={"x265-params": "log-level=none:info=0"}, reference=("libx265", ".mp4"))
    manifest = prepare_videos(scenes, tmp_path / "prepared", keep_encoding=True)
    slug = create_rating_study(app, manifest, tmp_path, "hevc", **STUDY)
    page = worker_page
    page.goto(f"{live_server}/s/{slug}?participant=V2")
    expect(page.locator("#device-check")).to_have_attribute("data-device", "cannot_decode")
    problem = page.locator("#device-check .device-problem")
    expect(problem).to_be_visible()
    expect(problem).to_contain_text("cannot decode HEVC (H.265) video")
    expect(page.locator("#agree")).to_be_hidden()


def _playback(app, response_id: int) -> dict:
    from server.paradigms.rating.models import RatingResponse
    from server.services import app_services

    with app_services(app).sessions() as session:
        return session.scalar(select(RatingResponse.playback).where(RatingResponse.id == response_id))
