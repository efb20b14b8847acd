"""Video paired comparison on the media layer (server/paradigms/media.py): a study made from prepared video
clips (its media recorded, the State's clips and rule, the reference's place), votes that carry the trial's
playback log stored and exported in votes.csv with the drift between the clips and judged by the [media]
rule, bad logs refused with one 400, zoom crops refused for clips, ``launch --paradigm paired`` on a video
folder, and simulated workers that send playback logs.

The clips are tiny (128x96, 1 s at 25 fps) and prepared once per module (tests/server/video_support.py).
"""
from __future__ import annotations

import csv
import html
import io
import json
import re
import shutil
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from server.cli import cli
from server.models import Study
from server.paradigms.media import PLAYBACK_COLUMNS
from server.paradigms.paired.models import Vote
from server.services import app_services

from .api_support import SpecClient
from .video_support import create_paired_study

# Two clips and the reference played together, 25 frames each.
CLEAN = {"stall_ms": 0, "dropped_frames": 1, "presented_frames": 74, "start_delay_ms": 35.5, "replays": 0,
         "playing_ms": 1040.0, "duration_ms": 1000.0, "max_drift_ms": 4.25}


class PairedWorker:
    """A scripted worker of a paired study over the (spec-checking) test client."""

    def __init__(self, client, slug: str):
        self.client = client
        body = {"platform": "mturk", "worker_id": f"W{uuid.uuid4().hex[:10].upper()}",
                "assignment_id": f"A{uuid.uuid4().hex[:12].upper()}", "hit_id": "HIT1",
                "turk_submit_to": "https://workersandbox.mturk.com"}
        response = client.post(f"/api/v1/studies/{slug}/assignments", json=body)
        assert response.status_code == 201, response.json
        self.assignment_id, self.token = response.json["assignment_id"], response.json["token"]
        self.headers = {"Authorization": f"Bearer {self.token}"}

    def start(self) -> dict:
        for action in ("consent", "instructions_done"):
            response = self.client.post(f"/api/v1/assignments/{self.assignment_id}/actions", headers=self.headers,
                                        json={"action": action})
            assert response.status_code == 200, response.json
        return response.json

    def vote(self, trial_id: str, choice: str = "left", **extra) -> tuple[int, dict]:
        body = {"vote_id": str(uuid.uuid4()), "trial_id": trial_id, "choice": choice, "rt_ms": 1800.0, **extra}
        response = self.client.post(f"/api/v1/assignments/{self.assignment_id}/votes", headers=self.headers,
                                    json=body)
        return response.status_code, response.json


def _copy(video_clips, tmp_path) -> Path:
    shutil.copytree(video_clips, tmp_path / "prepared")
    return tmp_path / "prepared" / "manifest.json"


def _export(app, slug) -> list[dict]:
    from server.paradigms.paired import PARADIGM

    with app_services(app).sessions() as session:
        study_id = session.scalar(select(Study.id).where(Study.slug == slug))
        export = PARADIGM.export(session, study_id, salt=None)
    return list(csv.DictReader(io.StringIO(export.files["votes.csv"])))


@pytest.mark.parametrize("position", ["between", "before"])
def test_a_video_paired_study_records_its_media_and_the_state_describes_the_clips(app, video_clips, tmp_path,
                                                                                   position):
    from server.cli.cmd_study import _show_json

    slug = create_paired_study(app, _copy(video_clips, tmp_path), tmp_path, f"vpc-{position}",
                               media={"reference_position": position, "replays": 1})
    with app_services(app).sessions() as session:
        shown = json.loads(_show_json(session, session.scalar(select(Study).where(Study.slug == slug))))
    media = shown["media"]
    assert media["kind"] == "video" and media["codecs"] == ["h264"] and len(media["stimuli"]) == 1 + 3
    assert all(f == {"duration_s": 1.0, "fps": 25.0, "width": 128, "height": 96, "codec": "h264"}
               for f in media["stimuli"].values())
    state = PairedWorker(SpecClient(app.test_client()), slug).start()
    assert state["media"] == {"kind": "video", "codecs": ["h264"], "decoding_check": False, "replays": 1,
                              "reference_position": position,
                              "rule": {"max_stall_ms": 500.0, "max_extra_playing_ms": 2500.0,
                                       "max_dropped_share": 0.05, "unfaithful": "repeat", "max_repeats": 2}}
    trials = state["page"]["trials"]
    assert len(trials) == 3
    for trial in trials:
        for clip in (trial["left"], trial["reference"], trial["right"]):
            assert clip["kind"] == "video" and clip["duration_s"] == 1.0 and clip["fps"] == 25.0
            assert clip["full"].endswith(".mp4") and "reference" not in clip["full"] and clip["crops"] == []
        assert trial["views"] == [[128, 96]]  # no zoom regions for clips
    # The window and the codec the browser must decode are checked before consent.
    from server.paradigms.core import study_paradigm

    with app_services(app).sessions() as session:
        study = session.scalar(select(Study).where(Study.slug == slug))
        paradigm, _ = study_paradigm(session, study.id)
        requirement = paradigm.window_requirement(session, study)
        instructions = paradigm.instructions(session, study, _spec(study))
    assert requirement.decode == ('video/mp4; codecs="avc1.640028"',)
    # ... and the connection, at the clips' highest bit rate: on the consent page's device-check data too.
    assert requirement.min_mbps == study.config["media"]["max_mbps"] > 0
    fresh = PairedWorker(SpecClient(app.test_client()), slug)
    consent = app.test_client().get(f"/w/{fresh.token}/")  # a page, not the API
    assert consent.status_code == 200
    check = re.search(r"data-requirement='([^']*)'", consent.get_data(as_text=True))
    assert json.loads(html.unescape(check.group(1)))["min_mbps"] == requirement.min_mbps
    assert f'data-unable="/w/{fresh.token}/unable"' in consent.get_data(as_text=True)
    assert ("middle one is the reference" if position == "between" else "reference video (the ground truth) "
            "plays first") in instructions and "amplified" not in instructions and "crops" not in instructions


def _spec(study):
    from server.paradigms import spec_from_config

    return spec_from_config(study.config)


def test_votes_carry_their_playback_logs_stored_exported_and_judged_by_the_rule(app, video_clips, tmp_path):
    slug = create_paired_study(app, _copy(video_clips, tmp_path), tmp_path, "vpclog")
    worker = PairedWorker(SpecClient(app.test_client()), slug)
    trials = worker.start()["page"]["trials"]
    stalled = {**CLEAN, "stall_ms": 900.0, "playing_ms": 1950.0, "error": "http: HTTP 503"}
    alone = {key: value for key, value in CLEAN.items() if key != "max_drift_ms"}
    for trial, log in zip(trials, (CLEAN, stalled, alone)):
        status, body = worker.vote(trial["trial_id"], playback=log)
        assert status == 201, body
    with app_services(app).sessions() as session:
        stored = session.scalars(select(Vote.playback).order_by(Vote.id)).all()
    assert stored[0]["presented_frames"] == 74 and stored[0]["max_drift_ms"] == 4.25
    assert stored[1]["stall_ms"] == 900.0 and stored[1]["error"] == "http: HTTP 503"
    assert "max_drift_ms" not in stored[2]
    rows = _export(app, slug)
    assert set(PLAYBACK_COLUMNS) | {"max_drift_ms"} <= set(rows[0])
    assert [(r["stall_ms"], r["dropped_frames"], r["presented_frames"], r["start_delay_ms"], r["replays"],
             r["max_drift_ms"], r["playback_faithful"], r["playback_error"]) for r in rows] == [
        ("0", "1", "74", "36", "0", "4.2", "1", ""), ("900", "1", "74", "36", "0", "4.2", "0", "http: HTTP 503"),
        ("0", "1", "74", "36", "0", "", "1", "")]


def test_the_exclude_rule_leaves_unfaithful_votes_out_of_votes_csv(app, video_clips, tmp_path):
    slug = create_paired_study(app, _copy(video_clips, tmp_path), tmp_path, "vpcexcl",
                               media={"unfaithful": "exclude"})
    worker = PairedWorker(app.test_client(), slug)
    trials = worker.start()["page"]["trials"]
    late = {**CLEAN, "playing_ms": 1000.0 + 2600.0}  # 2.6 s longer than the clips: late (P.910 toolkit)
    for trial, log in zip(trials, (CLEAN, late)):
        assert worker.vote(trial["trial_id"], playback=log)[0] == 201
    assert [r["trial_id"] for r in _export(app, slug)] == [trials[0]["trial_id"]]
    with app_services(app).sessions() as session:  # the database keeps both
        assert len(session.scalars(select(Vote.playback)).all()) == 2


BAD_LOGS = [
    ("frames", "playback must be an object"),
    ({**CLEAN, "stall_ms": -1}, "playback.stall_ms must be a number in [0, 3600000]"),
    ({**CLEAN, "max_drift_ms": "4"}, "playback.max_drift_ms must be a number in [0, 3600000]"),
    ({**CLEAN, "seek_ms": 3}, "playback: unknown members seek_ms"),
    ({**CLEAN, "error": "slow internet"}, "playback.error must name its cause first"),
]


def test_a_bad_playback_log_is_one_clear_400_and_nothing_is_stored(app, video_clips, tmp_path):
    slug = create_paired_study(app, _copy(video_clips, tmp_path), tmp_path, "vpcbad")
    worker = PairedWorker(app.test_client(), slug)
    trial_id = worker.start()["page"]["trials"][0]["trial_id"]
    for log, words in BAD_LOGS:
        status, body = worker.vote(trial_id, playback=log)
        assert status == 400 and words in body["message"], (log, body)
    with app_services(app).sessions() as session:
        assert session.scalars(select(Vote)).all() == []
    assert worker.vote(trial_id, playback=CLEAN)[0] == 201


def test_a_video_paired_study_has_gold_pairs_of_check_clips_for_its_quiz(app, video_clips, tmp_path):
    """Gold pairs of clips: a hidden reference (the reference through the delivery encoder) against washed-out,
    blurred clips, written at creation, described in the study's media, and nothing in the State tells them from
    the candidates; the quiz is taken with them and passed by the right answers."""
    from server.cli.cmd_study import _show_json

    from .conftest import gold_side

    slug = create_paired_study(app, _copy(video_clips, tmp_path), tmp_path, "vpcquiz",
                               quality={"quiz_size": 2, "gold_rate": 0.25, "gold_min_answered": 1})
    with app_services(app).sessions() as session:
        media = json.loads(_show_json(session, session.scalar(select(Study).where(Study.slug == slug))))["media"]
    checks = sorted(path for path in media["stimuli"] if path.split("/")[0] == "pc")  # the scene's folder is the root
    assert len(checks) == 3 and all(p.endswith(".mp4") for p in checks)  # one hidden reference, two degraded
    assert all(media["stimuli"][p] == {"duration_s": 1.0, "fps": 25.0, "width": 128, "height": 96, "codec": "h264"}
               for p in checks)
    worker = PairedWorker(SpecClient(app.test_client()), slug)
    state = worker.start()
    assert state["stage"] == "quiz" and len(state["page"]["trials"]) == 2
    for trial in state["page"]["trials"]:
        for side in ("left", "right"):  # gold clips described as every clip, under opaque names
            assert set(trial[side]) == {"full", "crops", "width", "height", "kind", "duration_s", "fps"}
            assert "gold" not in trial[side]["full"] and "hidden" not in trial[side]["full"]
        status, body = worker.vote(trial["trial_id"], gold_side(app, trial), playback=CLEAN)
        assert status == 201 and body["feedback"] == {"correct": True}, body
    state = worker.client.get(f"/api/v1/assignments/{worker.assignment_id}/state", headers=worker.headers).json
    assert state["stage"] == "trials" and sum(gold_side(app, t) is not None for t in state["page"]["trials"]) == 1


CONSENT = ("--researcher", "Dr T. Est, Test University", "--contact", "test@example.org")
URL = ("--url", "http://127.0.0.1:5077", "--no-hits")


def test_launch_makes_a_video_paired_study_and_zoom_is_refused(instance, video_clips, tmp_path):
    assert "images and videos alike" in " ".join(CliRunner().invoke(cli, ["launch", "--help"]).output.split())
    folder = tmp_path / "clips"
    shutil.copytree(video_clips, folder)
    result = CliRunner().invoke(cli, ["launch", str(folder), *URL, "--paradigm", "paired", "--pairs-per-page", "3",
                                      *CONSENT])
    assert result.exit_code == 0, result.output
    assert "videos: clips are shown as prepared" in result.output
    shown = CliRunner().invoke(cli, ["study", "show", "clips", "--json"])
    assert shown.exit_code == 0, shown.output
    described = json.loads(shown.output)
    assert described["media"]["kind"] == "video" and described["kind"] == "pc"
    # Zoom crops are for images: asked for clips, one clear line (from the scene folders or a prepared folder).
    for source, option in ((video_clips.parent / "scenes", ("--zoom", "2")),
                           (video_clips.parent / "scenes", ("--top-k", "2")),
                           (folder, ("--stimulus", "amplified"))):
        refused = CliRunner().invoke(cli, ["launch", str(source), *URL, "--paradigm", "paired", "--slug", "zoomed",
                                           *option, *CONSENT])
        assert refused.exit_code == 2 and refused.output.count("\n") == 1, refused.output
        assert refused.output.startswith("error: --") and "for images only" in refused.output, refused.output


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
@pytest.mark.parametrize("position", ["between", "before"])
def test_simulated_workers_vote_on_clips_and_send_playback_logs(app, video_clips, tmp_path, live_server, position):
    """The paired simulated worker on video trials (the clips' middle frames judged), each vote with a simulated
    playback log of the clips as the browser plays them; stored by the regular path (vote.sql has no log)."""
    from server.simulate_client import run_simulation

    # "before" with a quiz of gold clips, which honest simulated workers pass (the degraded clip's middle frame
    # is far from the reference's).
    quiz = {"quality": {"quiz_size": 2, "gold_rate": 0.0}} if position == "before" else {}
    slug = create_paired_study(app, _copy(video_clips, tmp_path), tmp_path, f"vpcsim-{position}",
                               media={"reference_position": position}, **quiz)
    report = run_simulation(live_server, slug, workers=2, spam=0.0, concurrency=2, seed=3, pages=1, progress=False)
    assert report.gave_up_count == 0 and not report.errors, report.to_dict()
    with app_services(app).sessions() as session:
        logs = session.scalars(select(Vote.playback)).all()
    assert len(logs) == 6 + 2 * 2 * bool(quiz) and all(log["presented_frames"] + log["dropped_frames"] == 75
                                                      for log in logs)
    # Between: the three clips play together (1 s); before: the reference, then the two clips (2 s).
    duration = 1000.0 if position == "between" else 2000.0
    assert all(log["duration_ms"] == duration and log["stall_ms"] == 0 and log["max_drift_ms"] >= 0 for log in logs)
    assert {row["playback_faithful"] for row in _export(app, slug)} == {"1"}
