"""Video rating studies on the media layer (server/paradigms/media.py): a study made from prepared video
manifests (check clips through the delivery encoder, media in ``study show --json``), the State's media,
clips served with ranges and no identifying headers, playback logs stored with ratings and exported with
the playback rule, bad logs refused, and ``launch --paradigm rating`` on a video folder.

The clips are tiny (128x96, 1 s at 25 fps) and prepared once per module (tests/server/video_support.py).
"""
from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from server.cli import cli
from server.models import Study
from server.paradigms.media import PLAYBACK_COLUMNS, MediaParams, faithful, parse_playback
from server.paradigms.rating.models import RatingResponse
from server.services import app_services

from .api_support import SpecClient
from .rating_support import RatingWorker, create_rating_study
from .reason_support import counts, one

STUDY = {"pages": {"ratings_per_page": 4, "min_pages": 1, "max_pages": 2, "reward_per_page": "0.50",
                   "bonus_per_page": "0.40"},
         "rating": {"ratings_per_stimulus": 2, "method": "dcr"},
         "quality": {"quiz_size": 2, "gold_rate": 0.25, "gold_min_answered": 2, "gold_per_scene": 1}}
# Without quality checks: no check clips to encode (the first test makes them).
PLAIN = {**STUDY, "quality": {"quiz_size": 0, "gold_rate": 0.0}}
CLEAN = {"stall_ms": 0, "dropped_frames": 1, "presented_frames": 49, "start_delay_ms": 35.5, "replays": 0,
         "playing_ms": 2040.0, "duration_ms": 2000.0}


@pytest.fixture
def video_manifest(video_clips, tmp_path) -> Path:
    """A copy per test: creating a study writes its check clips beside the scenes."""
    shutil.copytree(video_clips, tmp_path / "prepared")
    return tmp_path / "prepared" / "manifest.json"


def _study(app, slug):
    with app_services(app).sessions() as session:
        return session.scalar(select(Study).where(Study.slug == slug))


def test_a_video_study_records_its_media_and_the_state_describes_the_clips(app, video_manifest, tmp_path):
    from server.cli.cmd_study import _show_json

    slug = create_rating_study(app, video_manifest, tmp_path, slug="vdcr", **STUDY)
    with app_services(app).sessions() as session:
        shown = json.loads(_show_json(session, session.scalar(select(Study).where(Study.slug == slug))))
    media = shown["media"]
    assert media["kind"] == "video" and media["codecs"] == ["h264"] and media["entry_decoding_check"] is False
    # Every clip the study shows, check clips (hidden reference, degraded gold) included, with its measures.
    paths = sorted(media["stimuli"])
    assert len(paths) == 1 + 3 + 2 and any("rating/hidden_reference-" in p and p.endswith(".mp4") for p in paths)
    for fields in media["stimuli"].values():
        assert fields == {"duration_s": 1.0, "fps": 25.0, "width": 128, "height": 96, "codec": "h264"}
    assert "media" not in shown["settings"]
    # The browser learns how to play and check the clips; images stay as they were.
    worker = RatingWorker(SpecClient(app.test_client()), slug)
    state = worker.start()
    assert state["media"] == {"kind": "video", "codecs": ["h264"], "decoding_check": False, "replays": 0,
                              "rule": {"max_stall_ms": 500.0, "max_extra_playing_ms": 2500.0,
                                       "max_dropped_share": 0.05, "unfaithful": "repeat", "max_repeats": 2}}
    for trial in state["page"]["trials"]:
        assert [clip["role"] for clip in trial["images"]] == ["reference", "test"]
        for clip in trial["images"]:
            assert clip["kind"] == "video" and clip["duration_s"] == 1.0 and clip["fps"] == 25.0
            assert clip["url"].endswith(".mp4") and "reference" not in clip["url"] and "hidden" not in clip["url"]


def test_clips_are_served_with_ranges_and_nothing_that_names_them(app, video_manifest, tmp_path):
    slug = create_rating_study(app, video_manifest, tmp_path, slug="vserve", **PLAIN)
    worker = RatingWorker(app.test_client(), slug)
    url = worker.start()["page"]["trials"][0]["images"][1]["url"]
    client = app.test_client()
    whole = client.get(url)
    assert whole.status_code == 200 and whole.mimetype == "video/mp4" and whole.data[4:8] == b"ftyp"
    assert whole.headers["Accept-Ranges"] == "bytes"
    part = client.get(url, headers={"Range": "bytes=100-199"})
    assert part.status_code == 206 and part.data == whole.data[100:200]
    assert part.headers["Content-Range"] == f"bytes 100-199/{len(whole.data)}"
    for response in (whole, part):
        assert not {"Content-Disposition", "Last-Modified", "Expires"} & set(response.headers.keys())


def test_playback_logs_are_stored_exported_and_judged_by_the_rule(app, video_manifest, tmp_path):
    slug = create_rating_study(app, video_manifest, tmp_path, slug="vlog", **PLAIN)
    worker = RatingWorker(SpecClient(app.test_client()), slug)
    worker.start()
    trials = worker.state()["page"]["trials"]
    stalled = {**CLEAN, "stall_ms": 900.0, "playing_ms": 2950.0, "error": "http: HTTP 503"}
    for trial, log in zip(trials, (CLEAN, stalled)):
        status, body = worker.rate(trial["id"], 5, playback=log)
        assert status == 201, body
    with app_services(app).sessions() as session:
        stored = session.scalars(select(RatingResponse.playback).order_by(RatingResponse.id)).all()
    assert stored[0]["presented_frames"] == 49 and stored[1]["stall_ms"] == 900.0
    assert stored[1]["error"] == "http: HTTP 503"
    rows = _export(app, slug)
    assert [(r["stall_ms"], r["dropped_frames"], r["presented_frames"], r["start_delay_ms"], r["replays"],
             r["playback_faithful"], r["playback_error"]) for r in rows] == [
        ("0", "1", "49", "36", "0", "1", ""), ("900", "1", "49", "36", "0", "0", "http: HTTP 503")]
    assert set(PLAYBACK_COLUMNS) <= set(rows[0])


def test_the_exclude_rule_leaves_unfaithful_ratings_out_of_the_export(app, video_manifest, tmp_path):
    slug = create_rating_study(app, video_manifest, tmp_path, slug="vexcl",
                               **{**PLAIN, "media": {"unfaithful": "exclude"}})
    worker = RatingWorker(app.test_client(), slug)
    worker.start()
    trials = worker.state()["page"]["trials"]
    late = {**CLEAN, "playing_ms": 2000.0 + 2600.0}  # 2.6 s longer than the clips: late (P.910 toolkit)
    for trial, log in zip(trials, (CLEAN, late)):
        assert worker.rate(trial["id"], 5, playback=log)[0] == 201
    rows = _export(app, slug)
    assert [r["trial_id"] for r in rows] == [str(trials[0]["id"])]


BAD_LOGS = [
    ("frames", "playback must be an object"),
    ({**CLEAN, "stall_ms": -1}, "playback.stall_ms must be a number in [0, 3600000]"),
    ({**CLEAN, "seek_ms": 3}, "playback: unknown members seek_ms"),
    ({k: v for k, v in CLEAN.items() if k != "playing_ms"}, "playback.playing_ms must be a number"),
    ({**CLEAN, "error": "slow internet"}, "playback.error must name its cause first"),
]


def test_a_bad_playback_log_is_one_clear_400(app, video_manifest, tmp_path):
    slug = create_rating_study(app, video_manifest, tmp_path, slug="vbad", **PLAIN)
    worker = RatingWorker(app.test_client(), slug)
    worker.start()
    trial_id = worker.state()["page"]["trials"][0]["id"]
    for log, words in BAD_LOGS:
        status, body = worker.rate(trial_id, 5, playback=log)
        assert status == 400 and words in body["message"], (log, body)


def test_the_rule_follows_the_p910_defaults():
    spec = MediaParams()
    log = parse_playback(CLEAN, pytest.fail)
    assert faithful(log, spec) is True and faithful(None, spec) is None
    assert faithful({**log, "stall_ms": 501.0}, spec) is False
    assert faithful({**log, "playing_ms": 2000.0 + 2501.0}, spec) is False
    # A replay the worker asked for is not lateness: the time is per playback.
    assert faithful({**log, "replays": 1.0, "playing_ms": 2 * 2040.0}, spec) is True
    assert faithful({**log, "dropped_frames": 5.0, "presented_frames": 45.0}, spec) is False
    assert faithful({**log, "presented_frames": 0.0, "dropped_frames": 0.0}, spec) is False


def _export(app, slug) -> list[dict]:
    from server.paradigms.rating import PARADIGM

    study = _study(app, slug)
    with app_services(app).sessions() as session:
        export = PARADIGM.export(session, study.id, salt=None)
    return list(csv.DictReader(io.StringIO(export.files["ratings.csv"])))


def test_launch_makes_a_video_acr_study_and_zoom_is_refused(instance, video_clips, tmp_path):
    consent = ("--researcher", "Dr T. Est, Test University", "--contact", "test@example.org")
    url = ("--url", "http://127.0.0.1:5077", "--no-hits")
    folder = tmp_path / "clips"
    shutil.copytree(video_clips, folder)
    result = CliRunner().invoke(cli, ["launch", str(folder), *url, "--paradigm", "rating", "--method", "acr",
                                      "--ratings-per-page", "4", *consent])
    assert result.exit_code == 0, result.output
    shown = CliRunner().invoke(cli, ["study", "show", "clips", "--json"])
    assert shown.exit_code == 0, shown.output
    media = json.loads(shown.output)["media"]
    assert media["kind"] == "video" and all(f["codec"] == "h264" for f in media["stimuli"].values())
    # Zoom crops are for images: asked for clips, one clear line.
    zoomed = CliRunner().invoke(cli, ["launch", str(video_clips.parent / "scenes"), *url, "--paradigm", "rating",
                                      "--slug", "zoomed", "--zoom", "2", *consent])
    assert zoomed.exit_code == 2 and zoomed.output.endswith(
        "error: --zoom: for images only; video folders are not amplified, cropped or given gold pairs\n"), zoomed.output


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_simulated_workers_rate_clips_and_send_playback_logs(app, video_manifest, tmp_path, live_server):
    """The rating paradigm's simulated worker on video trials: judged by the clips' middle frames, each rating
    with a simulated playback log (the regular path stores it: rating.sql has no playback column)."""
    from server.simulate_client import run_simulation

    slug = create_rating_study(app, video_manifest, tmp_path, slug="vsim", **PLAIN)
    report = run_simulation(live_server, slug, workers=2, spam=0.0, concurrency=2, seed=3, pages=1, progress=False)
    assert report.gave_up_count == 0 and not report.errors, report.to_dict()
    with app_services(app).sessions() as session:
        logs = session.scalars(select(RatingResponse.playback)).all()
    assert logs and all(log["presented_frames"] + log["dropped_frames"] == 50 for log in logs)
    assert all(log["duration_ms"] == 2000.0 and log["stall_ms"] == 0 for log in logs)
    rows = _export(app, slug)
    assert {row["playback_faithful"] for row in rows} == {"1"}


def test_the_connection_check_needs_the_clips_bit_rate_and_turns_away_only_before_consent(app, video_manifest,
                                                                                         demo_stimuli, tmp_path):
    """The entry's minimum speed is the study's highest clip bit rate unless [media] min_mbps says otherwise;
    the test file is the same random bytes for everyone; /unable refuses bad bodies (400) and what no honest
    page sends (409: a speed that meets the minimum, after consent, a study without the check)."""
    from server.models import Worker
    from server.paradigms import paradigm_for
    from server.paradigms.media import PROBE_BYTES

    from .conftest import SMALL_STUDY, create_test_study

    def needed_of(slug: str) -> float:
        with app_services(app).sessions() as session:
            study = session.scalar(select(Study).where(Study.slug == slug))
            return paradigm_for(study).window_requirement(session, study).min_mbps

    slug = create_rating_study(app, video_manifest, tmp_path, slug="vnet", **PLAIN)
    study = _study(app, slug)
    root = Path(study.stimulus_root)
    rates = [8 * (root / path).stat().st_size / fields["duration_s"] / 1e6
             for path, fields in study.config["media"]["stimuli"].items()]
    needed = needed_of(slug)
    assert needed == study.config["media"]["max_mbps"] == pytest.approx(max(rates), abs=1e-3) and needed > 0
    copy = tmp_path / "again"
    shutil.copytree(video_manifest.parent, copy)
    set_by_study = create_rating_study(app, copy / "manifest.json", tmp_path, slug="vnet50",
                                       **{**PLAIN, "media": {"min_mbps": 50.0}})
    assert needed_of(set_by_study) == 50.0

    client = app.test_client()
    json_only = {"Accept": "application/json"}
    probe = client.get("/media/connection-probe")
    assert probe.status_code == 200 and len(probe.data) == PROBE_BYTES == 2_000_000
    assert probe.headers["Cache-Control"] == "no-store" and probe.data == client.get("/media/connection-probe").data
    assert probe.mimetype == "application/octet-stream" and "Content-Disposition" not in probe.headers

    def unable_url(participant: str, study_slug: str = slug) -> str:
        return client.get(f"/s/{study_slug}?participant={participant}").headers["Location"].rstrip("/") + "/unable"

    url = unable_url("C1")
    for bad in ({"reason": "too_slow"}, {"reason": "slow_connection", "measured_mbps": -1},
                {"reason": "slow_connection", "measured_mbps": "1"}, {"reason": "slow_connection", "x": 1}, []):
        assert client.post(url, json=bad, headers=json_only).status_code == 400, bad
    fast = client.post(url, json={"reason": "slow_connection", "measured_mbps": needed + 1}, headers=json_only)
    assert fast.status_code == 409 and fast.json["error"] == "fast_enough"
    answer = client.post(url, json={"reason": "slow_connection", "measured_mbps": needed / 4}, headers=json_only)
    assert answer.status_code == 200 and answer.json["stage"] == "disqualified"
    message = answer.json["message"]
    assert f"at {needed / 4:.1f} Mbit/s" in message and f"at least {needed:.1f} Mbit/s" in message
    with app_services(app).sessions() as session:
        worker = session.scalar(select(Worker).where(Worker.external_id == "C1"))
        assert (worker.status, worker.status_reason) == ("disqualified", message)
    assert answer.json["code"] == worker.status_reason_code == "slow_connection"
    timed_out = client.post(unable_url("C3"), json={"reason": "slow_connection", "measured_mbps": None}, headers=json_only)
    assert timed_out.json["code"] == "connection_timeout" and f"less than {needed:.1f}" in timed_out.json["message"]
    assert counts(app, slug) == {**one("connection_timeout"), **one("slow_connection")}
    again = client.post(url, json={"reason": "slow_connection", "measured_mbps": None}, headers=json_only)
    assert again.status_code == 409 and again.json["error"] == "wrong_stage"

    images = create_test_study(app, demo_stimuli, tmp_path, **SMALL_STUDY)
    unchecked = client.post(unable_url("C2", images), json={"reason": "slow_connection", "measured_mbps": None}, headers=json_only)
    assert unchecked.status_code == 409 and unchecked.json["error"] == "no_connection_check"


def test_a_browser_that_cannot_decode_the_clips_is_turned_away_before_consent_with_the_codec_on_its_record(
        app, video_manifest, demo_stimuli, tmp_path):
    """/unable's second body, {"reason": "cannot_decode", "types": [...]}: types the study's page checked
    (WindowRequirement.decode) disqualify with a reason naming the codec; any other body is a 400 that
    stores nothing; a study whose page checks no decoding (images) answers 409."""
    from server.models import Worker
    from server.paradigms.media import CODEC_MIME

    from .conftest import SMALL_STUDY, create_test_study

    slug = create_rating_study(app, video_manifest, tmp_path, slug="vdec", **PLAIN)
    assert _study(app, slug).config["media"]["codecs"] == ["h264"]
    h264 = CODEC_MIME["h264"]
    client = app.test_client()
    json_only = {"Accept": "application/json"}

    def unable_url(participant: str, study_slug: str = slug) -> str:
        return client.get(f"/s/{study_slug}?participant={participant}").headers["Location"].rstrip("/") + "/unable"

    def record(participant: str) -> tuple[str, str | None]:
        with app_services(app).sessions() as session:
            worker = session.scalar(select(Worker).where(Worker.external_id == participant))
            return worker.status, worker.status_reason

    url = unable_url("D1")
    for bad in ({"reason": "cannot_decode"}, {"reason": "cannot_decode", "types": []},
                {"reason": "cannot_decode", "types": h264}, {"reason": "cannot_decode", "types": [h264, h264]},
                {"reason": "cannot_decode", "types": [1]}, {"reason": "cannot_decode", "types": [h264], "x": 1},
                {"reason": "cannot_decode", "types": ['video/mp4; codecs="hvc1.1.6.L120.90"']},
                {"reason": "slow_connection", "types": [h264]}, {"types": [h264]}):
        answer = client.post(url, json=bad, headers=json_only)
        assert answer.status_code == 400 and answer.json["error"] == "invalid_request", bad
        assert record("D1") == ("active", None), bad
    answer = client.post(url, json={"reason": "cannot_decode", "types": [h264]}, headers=json_only)
    assert answer.status_code == 200 and answer.json["stage"] == "disqualified"
    message = answer.json["message"]
    assert message == (f"Your browser cannot play this study's videos: it cannot decode H264 ({h264}). "
                       "Try another browser, such as a current Chrome, Edge or Safari.")
    assert record("D1") == ("disqualified", message)
    assert answer.json["code"] == "cannot_decode" and counts(app, slug) == one("cannot_decode")
    again = client.post(url, json={"reason": "cannot_decode", "types": [h264]}, headers=json_only)
    assert again.status_code == 409 and again.json["error"] == "wrong_stage"

    images = create_test_study(app, demo_stimuli, tmp_path, **SMALL_STUDY)
    unchecked = client.post(unable_url("D2", images), json={"reason": "cannot_decode", "types": [h264]}, headers=json_only)
    assert unchecked.status_code == 409 and unchecked.json["error"] == "no_decoding_check"
    assert record("D2") == ("active", None)
