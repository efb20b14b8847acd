"""Exports of motion studies (motion.csv, rdk.csv, frames.csv, calibration.csv), `perceptlab export`,
`perceptlab study template --motion` and the experimenter's motion study page, on SQLite and PostgreSQL."""
from __future__ import annotations

import csv
import io
import math

import numpy as np
import pytest
from click.testing import CliRunner
from sqlalchemy import func, select

from server import exports
from server.cli import cli
from server.paradigms.motion import export as motion_export
from server.models import Study
from server.paradigms.motion.models import MotionClip, MotionProbe, MotionResponse
from server.services import app_services

from .motion_support import SECRET, MotionWorker, _finished_worker


def _rows(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text)))


def _tables(app, slug: str, salt: bytes | None) -> dict[str, list[dict]]:
    with app_services(app).sessions() as session:
        study_id = session.scalar(select(Study.id).where(Study.slug == slug))
        tables = motion_export.export_motion(session, study_id, salt=salt)
        tables["frames.csv"] = motion_export.export_frames(session, study_id, salt=salt)
    return {name: _rows(text) for name, text in motion_export.motion_csv_texts(tables).items()}


def test_motion_exports_hold_the_right_rows(app, motion_study, tmp_path):
    worker = _finished_worker(app, motion_study, "WEXPORT1", drops_on_first_main=2)
    tables = _tables(app, motion_study, exports.study_salt(SECRET, motion_study))
    pseudonym = exports.pseudonym(exports.study_salt(SECRET, motion_study), "WEXPORT1")

    motion = tables["motion.csv"]
    assert list(motion[0])[:13] == ["worker_id", "clip_id", "probe_id", "repetition", "gt_u", "gt_v", "resp_u",
                                    "resp_v", "cycles", "rt_ms", "frame_drops", "onset_err_mean_ms",
                                    "onset_err_sd_ms"]
    assert len(motion) == 2 * 3 * 2 and {r["worker_id"] for r in motion} == {pseudonym}
    assert {(r["clip_id"], r["probe_id"]) for r in motion} == {(c, f"p0{k}") for c in ("demo_objects", "demo_camera")
                                                                 for k in range(3)}
    assert sorted(r["repetition"] for r in motion) == ["1"] * 6 + ["2"] * 6
    for r in motion:
        assert (float(r["gt_u"]), float(r["gt_v"])) == pytest.approx(worker.gt(int(r["trial_id"])))
        assert abs(float(r["resp_u"]) - float(r["gt_u"])) < 2 and r["cycles"] == "3" and r["dataset"] == "demo"
        assert r["timing_flagged"] == ("1" if int(r["frame_drops"]) > 0 else "0")
        assert float(r["probe_x"]) >= 0 and r["probe_frame"].isdigit()
    assert sum(int(r["frame_drops"]) for r in motion) == 2

    rdk = tables["rdk.csv"]
    assert len(rdk) == 3 + 8 and sum(r["practice"] == "1" for r in rdk) == 3
    assert {r["clip_id"] for r in rdk} == {"rdk"} and all(r["probe_id"] == f"rdk-{r['trial_id']}" for r in rdk)
    # rdk.csv reads like motion.csv (each RDK trial is its own stimulus), so screening can be recomputed from it.
    from analysis.motion import read_motion_csv, screening_r

    rdk_path = tmp_path / "rdk.csv"
    with rdk_path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rdk[0]))
        writer.writeheader()
        writer.writerows(rdk)
    trials = read_motion_csv(rdk_path)
    test = trials.subset(~trials.practice)
    assert len(trials) == len(rdk) and len(test) == 8
    assert screening_r(test.gt_u, test.gt_v, test.resp_u, test.resp_v) > 0.9
    for r in rdk:
        speed = math.hypot(float(r["gt_u"]), float(r["gt_v"]))
        assert 1 <= speed <= 20 and r["probe_x"] == ""

    frames = tables["frames.csv"]
    with app_services(app).sessions() as session:
        responses = session.scalars(select(MotionResponse)).all()
    # One row per rAF callback of every logged phase; the server's per-trial summary adds up.
    assert len({r["trial_id"] for r in frames}) == len(responses)
    assert sum(r["dropped"] == "1" for r in frames) == sum(x.frame_drops for x in responses)
    assert sum(r["interval_ms"] != "" for r in frames) == sum(x.n_intervals for x in responses)
    first = [r for r in frames if r["trial_id"] == motion[0]["trial_id"] and r["cycle"] == "3"
             and r["phase"] == "movie"]
    assert first[0]["t_ms"] == "0.0" and first[0]["interval_ms"] == "" and first[0]["onset_err_ms"] != ""
    assert [r["raf_index"] for r in first] == [str(i) for i in range(len(first))]
    onsets = [float(r["onset_err_ms"]) for r in first if r["onset_err_ms"] != ""]
    assert len(onsets) == 15 and max(abs(x) for x in onsets) < 1e-6  # the ideal log is on time
    errors = np.array([float(r["onset_err_ms"]) for r in frames
                       if r["trial_id"] == motion[0]["trial_id"] and r["onset_err_ms"] != ""])
    assert float(motion[0]["onset_err_mean_ms"]) == pytest.approx(errors.mean(), abs=1e-9)

    calibration = tables["calibration.csv"]
    assert len(calibration) == 1 and calibration[0]["worker_id"] == pseudonym
    assert float(calibration[0]["refresh_hz"]) == pytest.approx(60, abs=0.1) and calibration[0]["fullscreen"] == "1"
    assert calibration[0]["screening_passed"] == "1" and float(calibration[0]["screening_r"]) > 0.9

    # analysis.motion reads motion.csv as it is.
    from analysis.motion import read_motion_csv

    path = tmp_path / "motion.csv"
    path.write_text(motion_export.motion_csv_texts({"motion.csv": [dict(r) for r in motion]})["motion.csv"])
    trials = read_motion_csv(path)
    assert len(trials.worker_id) == 12 and trials.frame_drops.sum() == 2


def test_raw_ids_and_empty_study(app, motion_study):
    assert all(rows == [] for rows in _tables(app, motion_study, None).values())
    _finished_worker(app, motion_study, "WRAW1")
    tables = _tables(app, motion_study, None)
    assert {r["worker_id"] for r in tables["motion.csv"]} == {"WRAW1"}


def test_export_command_writes_the_motion_files(app, motion_study, tmp_path, monkeypatch):
    _finished_worker(app, motion_study, "WCLI1")
    monkeypatch.setenv("PERCEPTLAB_SECRET_KEY", SECRET)
    out = tmp_path / "export"
    result = CliRunner().invoke(cli, ["export", motion_study, "--out", str(out), "--database-url",
                                      app.config["DATABASE_URL"]])
    assert result.exit_code == 0, result.output
    assert "12 main trials by 1 workers" in result.output
    assert sorted(p.name for p in out.iterdir()) == ["calibration.csv", "frames.csv", "motion.csv", "rdk.csv",
                                                     "workers_meta.csv"]
    motion = _rows((out / "motion.csv").read_text())
    assert {r["worker_id"] for r in motion} == {exports.pseudonym(exports.study_salt(SECRET, motion_study), "WCLI1")}
    shown = CliRunner().invoke(cli, ["study", "list", "--database-url", app.config["DATABASE_URL"]])
    # One session of 2 clips: 1 of 4 sessions (2 clips x 4 observers / 2 clips per session), 2 of 8 clip viewings.
    assert "motion: 2 clips, 20 probes, 1/4 sessions (2/8 clip viewings, 25%)" in shown.output


def test_study_template_motion_is_a_valid_study(motion_clips, tmp_path):
    from server.paradigms import read_study_file

    result = CliRunner().invoke(cli, ["study", "template", "--motion"])
    assert result.exit_code == 0 and 'kind = "motion"' in result.output
    path = tmp_path / "study.toml"
    path.write_text(result.output.replace("clips/manifest.json", motion_clips.as_posix()))
    spec = read_study_file(path)
    assert spec.kind == "motion" and spec.repetitions == 4 and spec.dropped_frames == "exclude"
    plain = CliRunner().invoke(cli, ["study", "template"])
    assert "manifests" in plain.output and "motion" not in plain.output


def test_experimenter_sees_the_motion_study(app, admin, motion_study):
    _finished_worker(app, motion_study, "WADMIN1")
    refused = MotionWorker(app, motion_study, worker_id="WSLOW1")
    refused.start()
    refused.calibrate(interval_ms=1000 / 30)
    page = admin.get(f"/admin/studies/{motion_study}")
    assert page.status_code == 200
    html = page.get_data(as_text=True)
    salt = exports.study_salt(SECRET, motion_study)
    assert 'id="clips-table"' in html and "demo_objects" in html and "demo_camera" in html
    assert exports.pseudonym(salt, "WADMIN1") in html and "WADMIN1" not in html
    assert "(refused)" in html and "passed" in html
    for name in ("motion", "rdk", "frames", "calibration"):
        download = admin.get(f"/admin/studies/{motion_study}/motion/{name}.csv")
        assert download.status_code == 200 and download.mimetype == "text/csv"
        assert download.get_data(as_text=True).splitlines()[0].startswith("worker_id")
    motion = _rows(admin.get(f"/admin/studies/{motion_study}/motion/motion.csv").get_data(as_text=True))
    assert len(motion) == 12
    raw = admin.get(f"/admin/studies/{motion_study}/motion/calibration.csv?raw_worker_ids=1").get_data(as_text=True)
    assert "WADMIN1" in raw and "WSLOW1" in raw
    assert admin.get(f"/admin/studies/{motion_study}/motion/votes.csv").status_code == 404
    index = admin.get("/admin/")
    assert index.status_code == 200 and "Motion test" in index.get_data(as_text=True)
    assert "motion matching" in index.get_data(as_text=True)
    # The study list counts clips, probes and completed sessions for motion studies, not votes.
    row = next(s for s in admin.get("/admin/api/studies").json["studies"] if s["slug"] == motion_study)
    assert row["kind"] == "motion" and row["unit"] == "sessions"
    with app_services(app).sessions() as session:
        n_probes = session.scalar(select(func.count()).select_from(MotionProbe).join(MotionClip).join(Study)
                                  .where(Study.slug == motion_study))
    assert row["n_groups"] == 2 and row["n_units"] == n_probes > 0 and (row["groups"], row["units"]) == ("clips", "probes")
    assert row["n_responses"] == 1 and row["target_responses"] == 4 and row["fill"] == pytest.approx(2 / 8)


@pytest.mark.one_database  # the analysis and plots of the export: the export itself is checked on both above
def test_results_draws_the_vector_fields_on_the_studys_clips(app, motion_study, tmp_path, monkeypatch):
    from PIL import Image

    from analysis.formats import read_table
    from analysis.motion_report import PROBES_COLUMNS

    _finished_worker(app, motion_study, "WRESULTS1")
    monkeypatch.setenv("PERCEPTLAB_SECRET_KEY", SECRET)
    out = tmp_path / "results"
    result = CliRunner().invoke(cli, ["results", motion_study, "--out", str(out), "--no-mturk", "--database-url",
                                      app.config["DATABASE_URL"]])
    assert result.exit_code == 0, result.output
    assert "clips for the plots and image gradients: 2 clips of the study, frames under" in result.output
    analysis = out / "analysis"
    # image gradients need the frames: finite for every probe only when the study's clips reached the analysis
    probes = read_table(analysis / "probes.csv", PROBES_COLUMNS, numeric=("image_gradient",))
    assert probes and all(math.isfinite(p["image_gradient"]) and p["image_gradient"] > 0 for p in probes)
    summary = (analysis / "summary.json").read_text()
    assert '"probes_missing_from_manifest": 0' in summary
    for clip in ("demo_objects", "demo_camera"):
        field = np.asarray(Image.open(analysis / "plots" / f"field_{clip}.png").convert("RGB")).reshape(-1, 3)
        assert (analysis / "plots" / f"field_{clip}.pdf").is_file()
        # a frame behind the arrows, not the flat grey canvas (0.85 grey, half the picture without clips)
        assert (field == 217).all(axis=1).mean() < 0.05
    assert "human vs GT (probe means): r_uv" in result.output
