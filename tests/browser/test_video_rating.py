"""Video rating studies in Debian's chromium at 1366x657, against the real app over HTTP (SQLite): a DCR
study walked from consent to the completion code with clips that really play (each whole file preloaded,
then the reference and the test played once), each stored rating carrying its playback log; and a study of
clips chromium cannot decode (HEVC kept as encoded) refused before consent with a message naming the codec;
and a connection too slow for the clips refused before consent (its test file held by page.route while the
page's clock moves on), with the reason on the worker's record, while a fast one is admitted.
A clip download held past clip_timeout_ms is named (timeout), recorded on its trial and retried, and never
stalls a playback (whole files only), while clean playbacks are logged clean.

Debian's chromium plays H.264 (the delivery format; measured: canPlayType "probably" and
MediaCapabilities supported for avc1), VP9 and AV1 in MP4, but not HEVC.
"""
from __future__ import annotations

import csv
import io
import shutil

import pytest
from playwright.sync_api import expect
from sqlalchemy import select

from tests.browser._media_support import REFUSE_FIRST_PLAY, enter_and_start, strings_naming_images
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
    expect(page.locator("main#consent")).to_contain_text("You will look at videos and rate their quality")
    assert strings_naming_images(page) == []
    page.check("#agree")
    page.click("#btn-consent")
    expect(page.locator("main#instructions")).to_contain_text("Compare the test video (right) with the reference")
    assert strings_naming_images(page) == []
    page.click("#btn-start")
    seen = {}
    while status(page, seen) == "trial":
        trial = page.locator("#trial")
        expect(trial).to_have_attribute("data-played", "true")
        # The question, the clips' names, the notices: every word for the stimulus says "video".
        expect(page.locator("#rating-question")).to_have_text("How does the second video compare with the reference?")
        expect(trial).to_have_attribute("aria-label", "Videos to rate")
        assert [v.get_attribute("aria-label") for v in page.locator("#trial video").all()] == \
            ["Reference video", "Test video"]
        assert strings_naming_images(page) == []
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
    """HEVC kept as encoded (--keep-encoding): the consent form stays hidden, the page names the codec, and the
    refusal is on the worker's record (POST /unable, as for a slow connection) in the words the page shows."""
    from server.models import Worker
    from server.paradigms.media import CODEC_MIME
    from server.services import app_services

    scenes = video_scenes(tmp_path / "scenes", contents=1, candidates=3, n_frames=10, codec="libx265",
                          options={"x265-params": "log-level=none:info=0"}, reference=("libx265", ".mp4"))
    manifest = prepare_videos(scenes, tmp_path / "prepared", keep_encoding=True)
    slug = create_rating_study(app, manifest, tmp_path, "hevc", **STUDY)
    page = worker_page
    page.goto(f"{live_server}/s/{slug}?participant=V2")
    expect(page.locator("#device-check")).to_have_attribute("data-device", "cannot_decode")
    problem = page.locator("#device-check .device-problem")
    expect(problem).to_be_visible()
    message = (f"Your browser cannot play this study's videos: it cannot decode HEVC ({CODEC_MIME['hevc']}). "
               "Try another browser, such as a current Chrome, Edge or Safari.")
    expect(problem).to_contain_text(message)
    expect(page.locator("#agree")).to_be_hidden()
    with app_services(app).sessions() as session:
        worker = session.scalar(select(Worker).where(Worker.external_id == "V2"))
    assert (assignment_of(app, "V2").stage, worker.status, worker.status_reason) == \
        ("disqualified", "disqualified", message)


def test_a_clip_download_held_past_its_timeout_is_named_recorded_and_retried_and_never_stalls_playback(
        worker_page, app, live_server, video_clips, tmp_path):
    """Throttling a clip's download cannot stall its playback: the whole file is loaded before the trial
    starts. The first clip request is held by page.route while the page's clock (page.clock) moves past
    clip_timeout_ms (120 s): the worker is told the cause ("did not finish loading within 120 s"), the
    trial is loaded again, and its rating carries the failure (playback_error "timeout: 120 s") beside a
    playback judged on its own counts; the other trials' playbacks are logged clean (no error, faithful).
    (A stall during playback, and the rule repeating it, is the unfaithful-playback test above.)"""
    from playwright.sync_api import Error as PlaywrightError

    from server.paradigms.rating import PARADIGM
    from server.services import app_services

    shutil.copytree(video_clips, tmp_path / "prepared")
    slug = create_rating_study(app, tmp_path / "prepared" / "manifest.json", tmp_path, "vheld", **STUDY)
    page = worker_page
    page.clock.install()
    held = []

    def hold_the_first(route):
        if held:
            route.continue_()
        else:
            held.append(route)

    page.route("**/stimuli/**/*.mp4", hold_the_first)
    page.goto(f"{live_server}/s/{slug}?participant=V5")
    page.check("#agree")
    page.click("#btn-consent")
    page.click("#btn-start")
    for _ in range(400):
        if held:
            break
        page.wait_for_timeout(50)
    page.clock.fast_forward(121_000)  # the held download passes clip_timeout_ms
    expect(page.locator("body")).to_contain_text("did not finish loading within 120 s")
    try:
        held[0].continue_()
    except PlaywrightError:
        pass  # the page gave up on it
    page.clock.fast_forward(10_000)  # past the driver's wait before it loads the trial again
    answered = []
    while status(page, answered) == "trial":
        expect(page.locator("#trial")).to_have_attribute("data-played", "true")
        answered.append(rate(page, 4))
    expect(page.locator("main#done")).to_be_visible()
    logs = {trial_id: response.playback for trial_id, response in stored_ratings(app, assignment_of(app, "V5").id).items()}
    assert len(logs) == 3 and set(logs) == set(answered)
    failed = [log for log in logs.values() if log.get("error")]
    assert [log["error"] for log in failed] == ["timeout: 120 s"]
    with app_services(app).sessions() as session:
        from server.models import Study

        study_id = session.scalar(select(Study.id).where(Study.slug == slug))
        export = PARADIGM.export(session, study_id, salt=None).files["ratings.csv"]
    rows = list(csv.DictReader(io.StringIO(export)))
    assert sorted(row["playback_error"] for row in rows) == ["", "", "timeout: 120 s"]
    for row in rows:  # every playback, the retried trial's too, started on a whole file: faithful by the rule
        # (a busy machine may still count a few ms of waiting at a start; the rule allows 500 ms in all)
        assert row["playback_faithful"] == "1" and int(row["stall_ms"]) <= 500, row
        assert int(row["presented_frames"]) >= 25, row


def test_a_slow_connection_is_refused_before_consent_with_its_cause_and_a_fast_one_admitted(browser, app, live_server,
                                                                                          video_clips, tmp_path):
    """The consent page downloads the connection test file before anything else can be done. Its download
    is held by page.route while the page's clock (page.clock, paused) moves on: 60 s for the slow worker (a
    connection at the study's 8 Mbit/s needs 3 s for the 2 MB file), 0.1 s for the fast one. The slow one is
    told at once why, and the reason is on their record; the fast one may consent. No real time is measured."""
    from playwright.sync_api import Error as PlaywrightError

    from server.models import Worker
    from server.services import app_services

    shutil.copytree(video_clips, tmp_path / "prepared")
    slug = create_rating_study(app, tmp_path / "prepared" / "manifest.json", tmp_path, "vnet",
                               **{**STUDY, "media": {"min_mbps": 8.0}})
    seen = []
    for participant, held_ms, verdict in (("N1", 60_000, "slow_connection"), ("N2", 100, "ok")):
        context = browser.new_context(viewport=LAPTOP)
        page = context.new_page()
        page.set_default_timeout(20_000)
        page.clock.install()
        page.clock.pause_at(1_900_000_000)  # seconds

        held = []
        page.route("**/media/connection-probe", lambda route: held.append(route))  # the download waits here...
        page.goto(f"{live_server}/s/{slug}?participant={participant}")
        for _ in range(400):
            if held:
                break
            page.wait_for_timeout(50)
        seen.append(held[0].request.url)
        page.clock.fast_forward(held_ms)  # ...while the page's clock moves on...
        try:
            held[0].continue_()  # ...then the server's bytes come
        except PlaywrightError:
            pass  # the page gave up on the download meanwhile (the slow worker)
        check = page.locator("#device-check")
        expect(check).to_have_attribute("data-device", verdict)
        stage = assignment_of(app, participant).stage
        with app_services(app).sessions() as session:
            worker = session.scalar(select(Worker).where(Worker.external_id == participant))
        if verdict == "slow_connection":
            message = ("Your internet connection is too slow for this study's videos: it loaded a test file at less "
                       "than 8.0 Mbit/s, and the videos need at least 8.0 Mbit/s to load in time.")
            expect(check.locator(".device-problem")).to_contain_text(message)
            expect(page.locator("#agree")).to_be_hidden()
            assert (stage, worker.status, worker.status_reason) == ("disqualified", "disqualified", message)
            page.reload()  # and the study's own page says so from now on
            expect(page.locator("body")).to_contain_text("too slow for this study's videos")
            expect(page.locator("#agree")).to_have_count(0)
        else:
            expect(page.locator("#agree")).to_be_visible()
            assert (stage, worker.status, worker.status_reason) == ("consent", "active", None)
            page.check("#agree")
            page.click("#btn-consent")
            expect(page.locator("#btn-start")).to_be_visible()
        context.close()
    # One test file per worker, at the same neutral address (no study, no stimulus in it).
    assert len(seen) == 2 and seen[0] == seen[1] == f"{live_server}/media/connection-probe"


def _playback(app, response_id: int) -> dict:
    from server.paradigms.rating.models import RatingResponse
    from server.services import app_services

    with app_services(app).sessions() as session:
        return session.scalar(select(RatingResponse.playback).where(RatingResponse.id == response_id))
